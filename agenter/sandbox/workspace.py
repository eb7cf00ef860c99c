"""Workspace snapshots: which files a turn really changed, however it changed them."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from agenter._types import ModifiedFiles
from agenter.sandbox.paths import open_regular

#: Folders never reported as changes: VCS internals, environments, caches, dependencies.
IGNORED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".cache", ".idea", ".vscode", ".eggs",
})


#: File timestamps tick coarsely (a few ms on Linux): a file written this close to a snapshot
#: could be rewritten with the same size and timestamp, so its content is hashed too (as git
#: does for "racy" index entries).
RACY_WINDOW_NS = 100_000_000
_HASH_LIMIT = 8 * 1024 * 1024
_HASH_CHUNK = 1024 * 1024


def _digest(path: Path) -> str | None:
    """Content digest of a regular file (its first _HASH_LIMIT bytes); None for anything else.

    Only regular files are opened: opening a FIFO would block until a writer comes, and a
    device could be endless. open_regular checks with lstat first and opens non-blocking.
    """
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:  # gone, unreadable, or not a regular file (PathSecurityError is an OSError)
        return None
    hasher = hashlib.blake2b(digest_size=16)
    with os.fdopen(fd, "rb") as handle:
        left = _HASH_LIMIT
        while left > 0:
            try:
                chunk = handle.read(min(_HASH_CHUNK, left))
            except OSError:
                return None
            if not chunk:
                break
            hasher.update(chunk)
            left -= len(chunk)
    return hasher.hexdigest()


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """Path -> (mtime_ns, size, inode) for every file under root, minus IGNORED_DIRS, plus
    content digests of regular files modified just before the snapshot. Special files
    (FIFOs, sockets, devices) are listed by their metadata but never opened."""

    root: Path
    entries: dict[str, tuple[int, int, int]]
    racy_digests: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def take(cls, root: str | Path) -> WorkspaceSnapshot:
        root = Path(root)
        taken_ns = time.time_ns()
        racy_after = taken_ns - RACY_WINDOW_NS
        entries: dict[str, tuple[int, int, int]] = {}
        racy_files: list[str] = []
        stack = [("", str(root))]
        while stack:
            prefix, directory = stack.pop()
            try:
                scanner = os.scandir(directory)
            except OSError:
                continue
            with scanner:
                for entry in scanner:
                    rel = prefix + entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name in IGNORED_DIRS or os.path.exists(
                                os.path.join(entry.path, "pyvenv.cfg")
                            ):
                                continue
                            stack.append((rel + "/", entry.path))
                        else:
                            st = entry.stat(follow_symlinks=False)
                            entries[rel] = (st.st_mtime_ns, st.st_size, st.st_ino)
                            if st.st_mtime_ns >= racy_after and stat.S_ISREG(st.st_mode):
                                racy_files.append(rel)
                    except OSError:
                        continue
        racy = {path: _digest(root / path) for path in racy_files}
        return cls(root, entries, racy)

    def diff(self, after: WorkspaceSnapshot) -> ModifiedFiles:
        before_entries, after_entries = self.entries, after.entries
        written = {path for path, stat in after_entries.items() if before_entries.get(path) != stat}
        for path, digest in self.racy_digests.items():
            if path in after_entries and path not in written:
                now = after.racy_digests.get(path) or _digest(after.root / path)
                if now != digest:
                    written.add(path)
        deleted = {path for path in before_entries if path not in after_entries}
        created = {path for path in written if path not in before_entries}
        return ModifiedFiles(written=written, deleted=deleted, created=created)

    def changes_since(self) -> ModifiedFiles:
        """Diff against the workspace as it is now."""
        return self.diff(WorkspaceSnapshot.take(self.root))
