"""What codex-cli reads of a thread's rollout file: the diffs of its file changes, which `codex
exec --json` leaves out (it names each changed file and its kind only). Only codex-cli needs it:
the app-server backend receives each change's diff in the change itself.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from agenter.backends._programs.codex import change_lines
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
        self._path: Path | None = None
        self._offset = 0
        self._records: list[dict[str, Any]] = []

    def start(self, sessions: Path, thread: str | None) -> None:
        """A new run: records already in a resumed thread's rollout are earlier runs'."""
        self._path, self._offset, self._records = None, 0, []
        if thread is not None and self._locate(sessions, thread) is not None:
            with contextlib.suppress(OSError):
                self._offset = os.path.getsize(str(self._path))

    def take(self, sessions: Path, thread: str | None, paths: list[str]) -> dict[str, Any] | None:
        """The record (path → {type, content | unified_diff}) of the run's next change of exactly
        `paths`; None when the rollout holds none (yet)."""
        if thread is not None and self._locate(sessions, thread) is not None:
            self._read()
        for index, record in enumerate(self._records):
            if sorted(record) == sorted(paths):
                return self._records.pop(index)
        return None

    def _locate(self, sessions: Path, thread: str) -> Path | None:
        if self._path is None:
            found = sorted(sessions.glob(f"*/*/*/rollout-*-{thread}.jsonl"))
            self._path = found[-1] if found else None
        return self._path

    def _read(self) -> None:
        assert self._path is not None
        try:
            with open(self._path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(whole)
        for line in whole.splitlines():
            if b'"FileChange"' not in line or b'"item_completed"' not in line:
                continue
            try:
                item = table(table(table(json.loads(line)).get("payload")).get("item"))
            except ValueError:
                continue
            if item.get("type") == "FileChange":
                self._records.append(table(item.get("changes")))
