"""What codex-cli reads of a thread's rollout file: the diffs of its file changes, which `codex
exec --json` leaves out (it names each changed file and its kind only), and the calls Codex
refused by itself (a command its rules forbid, a patch its sandbox or permission profile
rejects), which make no exec item at all. Only codex-cli needs it: the app-server backend
receives each change's diff in the change itself and is asked before a call runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenter.backends._programs.codex import change_lines
from agenter.backends.cli._base import table

__all__ = ["Refused", "Rollout", "change_counts", "refusal_of"]

#: A command Codex's exec-policy rules forbade: `exec_command failed: CreateProcess { message:
#: "Rejected(\"`<command>` rejected: <justification>\")" }` (Codex 0.169); group 1 the justification.
_COMMAND_REJECTED = re.compile(r'` rejected: (.*?)(?:\\?"\)|$)', re.DOTALL)
#: How Codex answers a patch its sandbox or permission profile does not let it apply.
_PATCH_REJECTED = "patch rejected"
#: The paths a patch names (apply_patch's own format).
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)
#: Lines worth parsing beyond file changes: the model's calls and their outputs.
_CALL_TYPES = ("function_call", "custom_tool_call", "function_call_output", "custom_tool_call_output")


@dataclass(frozen=True)
class Refused:
    """A call Codex refused by itself: `tool` is "shell" or "apply_patch", `targets` the command
    or the patch's paths (as the model wrote them), `reason` Codex's words, `rule` which of its
    mechanisms refused it ("codex:rules", the exec-policy rules; "codex:sandbox", the sandbox or
    permission profile)."""

    tool: str
    targets: tuple[str, ...]
    reason: str
    rule: str


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
        self._calls: dict[str, tuple[str, Any]] = {}
        self._refused: list[Refused] = []

    def start(self, sessions: Path, thread: str | None) -> None:
        """A new run: records already in a resumed thread's rollout are earlier runs'."""
        self._path, self._offset, self._records, self._calls, self._refused = None, 0, [], {}, []
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

    def refused(self, sessions: Path, thread: str | None) -> list[Refused]:
        """The calls Codex refused since the last look (read to the rollout's end)."""
        if thread is not None and self._locate(sessions, thread) is not None:
            self._read()
        refused, self._refused = self._refused, []
        return refused

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
            change = b'"FileChange"' in line and b'"item_completed"' in line
            if not change and b'"response_item"' not in line:
                continue
            try:
                payload = table(table(json.loads(line)).get("payload"))
            except ValueError:
                continue
            item = table(payload.get("item"))
            if change and item.get("type") == "FileChange":
                self._records.append(table(item.get("changes")))
            elif payload.get("type") in _CALL_TYPES:
                self._call(payload)

    def _call(self, payload: dict[str, Any]) -> None:
        """A call of the model, or its output: a refused one is kept for `refused()`."""
        call_id = str(payload.get("call_id"))
        if not str(payload.get("type")).endswith("_output"):
            self._calls[call_id] = (str(payload.get("name")), payload.get("input", payload.get("arguments")))
            return
        name, given = self._calls.pop(call_id, ("", None))
        output = payload.get("output")
        output = output if isinstance(output, str) else json.dumps(output)
        refusal = refusal_of(name, given, output)
        if refusal is not None:
            self._refused.append(refusal)


def refusal_of(name: str, given: Any, output: str) -> Refused | None:
    """The refusal an output tells of (None: the call ran, or failed by itself)."""
    if output.startswith(_PATCH_REJECTED):
        text = given if isinstance(given, str) else ""
        with contextlib.suppress(ValueError):
            text = str(table(json.loads(text)).get("input") or text)  # apply_patch as a function
        paths = tuple(path.strip() for path in _PATCH_FILE.findall(text))
        return Refused("apply_patch", paths or ("apply_patch",), output.strip(), "codex:sandbox")
    found = _COMMAND_REJECTED.search(output) if "Rejected(" in output[:200] else None
    if found is None:
        return None
    arguments: dict[str, Any] = {}
    with contextlib.suppress(ValueError, TypeError):
        arguments = table(json.loads(given)) if isinstance(given, str) else table(given)
    command = arguments.get("cmd", arguments.get("command"))
    command = " ".join(map(str, command)) if isinstance(command, list) else str(command or name or "shell")
    return Refused("shell", (command,), found.group(1).strip() or output.strip(), "codex:rules")
