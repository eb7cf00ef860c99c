"""What codex-cli reads of a thread's rollout file: the diffs of its file changes, which `codex
exec --json` leaves out (it names each changed file and its kind only), and the calls Codex
refused by itself (a command its rules forbid, a patch its sandbox or permission profile
rejects), which make no exec item at all. Only codex-cli needs it: the app-server backend
receives each change's diff in the change itself and is asked before a call runs.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from agenter.backends._programs.codex import Refusals, Refused, RolloutTail, change_lines, response_item
from agenter.backends.cli._base import table

__all__ = ["Rollout", "change_counts"]


def change_counts(recorded: dict[str, Any], change: dict[str, Any], path: Path) -> tuple[int, int]:
    """Lines added and removed by one file of a file_change: from the rollout's record of it (the
    added or deleted text, an update's unified diff); without one, an added file's lines as it is
    now, and for an update or a delete whatever the record lacks counts as none."""
    kind = recorded.get("type") or change.get("kind")
    text = recorded.get("content") if kind in ("add", "delete") else recorded.get("unified_diff")
    if kind == "add" and not isinstance(text, str):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            text = ""
    return change_lines(kind, text)


class Rollout:
    """The file changes Codex records in a thread's rollout (sessions/.../rollout-*-<thread>.jsonl),
    read on from where the last look stopped. `codex exec --json` numbers its items itself
    (item_0, ...), so a record is matched to an item by its files, in order."""

    def __init__(self) -> None:
        self._tail: RolloutTail | None = None
        self._records: list[dict[str, Any]] = []
        self._refusals = Refusals()

    def start(self, sessions: Path, thread: str | None) -> None:
        """A new run: records already in a resumed thread's rollout are earlier runs'."""
        self._tail, self._records, self._refusals = None, [], Refusals()
        if thread is not None:
            self._locate(sessions, thread, from_end=True)

    def take(self, sessions: Path, thread: str | None, paths: list[str]) -> dict[str, Any] | None:
        """The record (path → {type, content | unified_diff}) of the run's next change of exactly
        `paths`; None when the rollout holds none (yet)."""
        self._read(sessions, thread)
        for index, record in enumerate(self._records):
            if sorted(record) == sorted(paths):
                return self._records.pop(index)
        return None

    def refused(self, sessions: Path, thread: str | None) -> list[Refused]:
        """The calls Codex refused since the last look (read to the rollout's end)."""
        self._read(sessions, thread)
        return self._refusals.take()

    def _locate(self, sessions: Path, thread: str, *, from_end: bool = False) -> RolloutTail | None:
        if self._tail is None:
            found = sorted(sessions.glob(f"*/*/*/rollout-*-{thread}.jsonl"))
            self._tail = RolloutTail(found[-1], from_end=from_end) if found else None
        return self._tail

    def _read(self, sessions: Path, thread: str | None) -> None:
        tail = self._locate(sessions, thread) if thread is not None else None
        for line in tail.lines() if tail is not None else []:
            payload = response_item(line)
            if payload is not None:
                self._refusals.feed(payload)
            elif b'"FileChange"' in line and b'"item_completed"' in line:
                with contextlib.suppress(ValueError):
                    item = table(table(table(json.loads(line)).get("payload")).get("item"))
                    if item.get("type") == "FileChange":
                        self._records.append(table(item.get("changes")))
