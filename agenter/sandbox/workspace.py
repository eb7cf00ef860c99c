"""Workspace snapshots: which files a turn really changed, however it changed them."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from agenter.backends._protocol import ModifiedFiles

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


def _digest(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.blake2b(handle.read(_HASH_LIMIT), digest_size=16).hexdigest()
    except OSError:
        return None


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """Path -> (mtime_ns, size, inode) for every file under root, minus IGNORED_DIRS, plus
    content digests of files modified just before the snapshot."""

    root: Path
    entries: dict[str, tuple[int, int, int]]
    racy_digests: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def take(cls, root: str | Path) -> WorkspaceSnapshot:
        root = Path(root)
        taken_ns = time.time_ns()
        entries: dict[str, tuple[int, int, int]] = {}
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
                    except OSError:
                        continue
        racy_after = taken_ns - RACY_WINDOW_NS
        racy = {path: _digest(root / path) for path, (mtime, _, _) in entries.items()
                if mtime >= racy_after}
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
        return ModifiedFiles(written=written, deleted=deleted)

    def changes_since(self) -> ModifiedFiles:
        """Diff against the workspace as it is now."""
        return self.diff(WorkspaceSnapshot.take(self.root))
