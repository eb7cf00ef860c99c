"""Writes outside `allowed_write_paths` that got past a backend's own checks (a shell command, an
agent program writing by itself, a file name the model made up): what the session does with them.

Backends refuse what they can before it happens; this is for what got through. A new file
agenter did not allow is removed at once, recorded in `result.permission_denials`, and the model
is told (a validation problem: the iteration does not pass, and the next one can put the work
where it belongs), so nothing agenter refused stays in the workspace and a made-up file name
costs a retry, not the run. A change to a file that existed before the turn (modified or
deleted) cannot be undone: agenter keeps no copy of the workspace's files (a copy per turn would
cost what change detection was built to avoid), so that run still ends FAILED, naming the files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from agenter._types import ModifiedFiles
from agenter.backends.base import Denial
from agenter.sandbox.paths import PathResolver

__all__ = ["OutsideWrites", "undo_outside"]


@dataclass
class OutsideWrites:
    """What a turn wrote outside the allowed paths: new files removed, and changes kept because
    agenter could not undo them."""

    allowed: list[str]
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def denials(self) -> list[Denial]:
        return [Denial(tool="write", target=path, rule="allowed_write_paths",
                       reason=f"written outside allowed_write_paths ({self._patterns()}); agenter removed the new file")
                for path in self.removed]

    def problem(self) -> str:
        """What the model is told in the next iteration's prompt."""
        return (f"You created {', '.join(self.removed[:20])}, outside the files you may change "
                f"(allowed_write_paths: {self._patterns()}); agenter removed it. Put that work in a file "
                "the allowed paths match (check the file name), and write nowhere else.")

    def _patterns(self) -> str:
        return ", ".join(self.allowed) or "none"


def undo_outside(cwd: Path, allowed: list[str], changes: ModifiedFiles) -> OutsideWrites:
    """Remove the files `changes` created outside `allowed` (blocking: run it in a thread)."""
    resolver = PathResolver(cwd, allowed)
    found = OutsideWrites(allowed=list(allowed))
    root = os.path.realpath(cwd)
    for path in changes.all:
        if resolver.is_allowed_write(path):
            continue
        if path in changes.created and _remove(root, path):
            found.removed.append(path)
        else:
            found.kept.append(path)
    return found


def _remove(root: str, path: str) -> bool:
    """Unlink a file the turn created (a link itself, never its target), only when its folder
    is inside the workspace as the path says (no link on the way leads elsewhere)."""
    full = os.path.join(root, path)
    if os.path.realpath(os.path.dirname(full)) != os.path.dirname(os.path.normpath(full)):
        return False
    try:
        if os.path.isdir(full) and not os.path.islink(full):
            return False
        os.unlink(full)
    except FileNotFoundError:
        return True  # gone already
    except OSError:
        return False
    return True
