"""Line counts of a file edit, from whatever an agent reports of it: a unified diff, the file's
text before and after, or the tool's input. Pure functions, free of I/O, shared by the backends
that report file_edited (the agent CLIs, acp, openhands)."""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["diff_counts", "line_count", "text_counts"]


def line_count(text: Any) -> int:
    """Lines of a text ("a\\nb" and "a\\nb\\n" are both two); 0 for anything but a string."""
    return len(text.splitlines()) if isinstance(text, str) else 0


def diff_counts(diff: str) -> tuple[int, int]:
    """Lines added and removed by a unified diff (its ---/+++ file headers are not changes)."""
    added = removed = 0
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("@@"):
            in_hunk = True
        elif not in_hunk:
            continue  # "Index:", "===", "--- a/x", "+++ b/x" before the first hunk
        elif line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    return added, removed


def text_counts(before: str | None, after: str | None) -> tuple[int, int]:
    """Lines added and removed between two texts of a file (None: the file did not exist).

    Lines the two share at the start and at the end are set aside first (as diff does), so
    an edit in a large file compares only what lies between; difflib matches the rest."""
    old, new = (before or "").splitlines(), (after or "").splitlines()
    start, end_old, end_new = 0, len(old), len(new)
    while start < end_old and start < end_new and old[start] == new[start]:
        start += 1
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    old, new = old[start:end_old], new[start:end_new]
    if not old or not new:
        return len(new), len(old)
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return added, removed
