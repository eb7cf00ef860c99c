"""The workspace's files as the model backends see them: the repository's file list (git's view,
else a walk), the files a task names, and a file's text read through the sandbox's path check.
Shared by the completion path (patch and analysis mode: the map and the files shown) and the
harness (the files a first prompt names, which code blocks may edit).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agenter._errors import PathSecurityError

__all__ = ["MAX_FILE_BYTES", "MAX_LISTED_FILES", "SKIP_DIRS", "list_files", "read_text", "select_named_files"]

#: A file larger than this is never read for the model (it is listed in the map only).
MAX_FILE_BYTES = 512 * 1024

#: Directories never listed in the repository map when the workspace is not a git repository.
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".hypothesis", ".cache", ".idea", ".vscode",
                       ".eggs", "dist", "build", "target", ".next", ".gradle", ".terraform"})
MAX_LISTED_FILES = 20_000


def list_files(root: Path) -> list[str]:
    """The repository's files, relative POSIX paths, sorted: git's view (tracked and untracked,
    ignored files left out) in a git work tree, else a walk that skips SKIP_DIRS."""
    if (root / ".git").exists():
        try:
            result = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                                     "--exclude-standard"], capture_output=True, timeout=15, check=True)
            paths = [p for p in result.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
            found = sorted({p for p in paths if os.path.isfile(root / p) and not os.path.islink(root / p)})
            return found[:MAX_LISTED_FILES]
        except (OSError, subprocess.SubprocessError):
            pass
    found = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        base = Path(directory).relative_to(root)
        for name in names:
            full = os.path.join(directory, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            found.append((base / name).as_posix())
            if len(found) >= MAX_LISTED_FILES:
                return sorted(found)
    return sorted(found)


#: A file name as a word of the prompt (not part of a longer name or path).
_WORD_EDGE = r"(?<![\w/.-]){}(?![\w/-])"


def select_named_files(prompt: str, files: Sequence[str]) -> list[str]:
    """Files the task names: by path, or by a file name that is unique enough (at most 3 files)."""
    named = []
    by_name: dict[str, list[str]] = {}
    for path in files:
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
        if "/" in path and path in prompt:
            named.append(path)
    for name, paths in by_name.items():
        if "." not in name or len(name) < 4 or len(paths) > 3:
            continue
        if name in prompt and re.search(_WORD_EDGE.format(re.escape(name)), prompt):
            named.extend(p for p in paths if p not in named)
    return named


def read_text(resolver: Any, path: str) -> str | None:
    """UTF-8 text of a regular file inside the workspace; None for binary, huge or refused files."""
    try:
        with resolver.open_for_read(path) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except (OSError, PathSecurityError, ValueError):
        return None
    if len(data) > MAX_FILE_BYTES or b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")
