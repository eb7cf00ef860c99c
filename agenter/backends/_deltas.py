"""Streamed text cut into deltas that a redactor can still read whole, shared by the backends
that stream text (pure, no third-party imports).

A key the model writes arrives split over several pieces of the stream, where no piece alone
would match a redaction pattern. Keys hold no whitespace, so a delta is cut only after
whitespace, and never right after a word a key follows ("Bearer <token>", "x-api-key: <key>").
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["DeltaBuffer", "cut_point"]

# A word that a secret may follow after whitespace: a delta is never cut between the two.
_KEY_LEAD = re.compile(r"(?i)(bearer|api-key[\"']?\s*[:=]?[\"']?)\s*$")


def cut_point(text: str) -> int:
    """Where `text` may be cut into a delta: after its last whitespace that does not end a key's
    lead-in word. 0: hold all of it back."""
    end = len(text)
    while True:
        cut = max(text.rfind(" ", 0, end), text.rfind("\n", 0, end), text.rfind("\t", 0, end)) + 1
        if cut == 0 or not _KEY_LEAD.search(text[:cut]):
            return cut
        end = cut - 1


class DeltaBuffer:
    """Pieces of one streamed text, passed on cut only at whitespace (see `cut_point`).

    `redact`, when given, is applied to each delta that goes out (a backend that redacts its own
    deltas); without it the deltas go out as they are, for the session's per-event redaction.
    """

    def __init__(self, redact: Callable[[str], str] | None = None):
        self._redact = redact
        self._pending = ""

    @property
    def pending(self) -> str:
        """What is held back, not yet passed on."""
        return self._pending

    def feed(self, piece: str) -> str:
        """What can go out now (may be empty)."""
        self._pending += piece
        cut = cut_point(self._pending)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return self._out(ready)

    def flush(self) -> str:
        """The rest, at the end of the text."""
        ready, self._pending = self._pending, ""
        return self._out(ready)

    def _out(self, ready: str) -> str:
        if not ready:
            return ""
        return self._redact(ready) if self._redact is not None else ready
