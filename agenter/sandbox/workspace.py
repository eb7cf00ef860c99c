"""Workspace snapshots: which files a turn really changed, however it changed them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agenter.backends._protocol import ModifiedFiles

#: Folders never reported as changes: VCS internals, environments, caches, dependencies.
IGNORED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".cache", ".idea", ".vscode", ".eggs",
})


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """Path -> (mtime_ns, ctime_ns, size) for every file under root, minus IGNORED_DIRS."""

    root: Path
    entries: dict[str, tuple[int, int, int]]

    @classmethod
    def take(cls, root: str | Path) -> WorkspaceSnapshot:
        root = Path(root)
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
                            entries[rel] = (st.st_mtime_ns, st.st_ctime_ns, st.st_size)
                    except OSError:
                        continue
        return cls(root, entries)

    def diff(self, after: WorkspaceSnapshot) -> ModifiedFiles:
        before_entries, after_entries = self.entries, after.entries
        written = {path for path, stat in after_entries.items() if before_entries.get(path) != stat}
        deleted = {path for path in before_entries if path not in after_entries}
        return ModifiedFiles(written=written, deleted=deleted)

    def changes_since(self) -> ModifiedFiles:
        """Diff against the workspace as it is now."""
        return self.diff(WorkspaceSnapshot.take(self.root))
