"""What an ACP agent reports in `session/update`, in agenter's terms: the updates (as their JSON
wire form) become BackendMessages of the one event vocabulary.

Free of I/O, so each rule is testable with payloads recorded from the real agents. The state an
ACP stream needs is in `UpdateMapper`: text and thought chunks are streamed as deltas and closed by
the whole text (which the session does not send again), a tool call is held until its input is
known, and a file written through agenter's fs/write_text_file is not reported a second time by
the diff of the tool call that wrote it.

What the agents send (claude-agent-acp 0.23, codex-acp 0.16, Gemini CLI 0.61, OpenCode 1.18):

- commands are tool calls of kind "execute"; the command is `rawInput.command` (a string, or an
  argv list from codex-acp), else the title (Gemini CLI sends no rawInput);
- the exit code is `rawOutput.exit_code` (codex-acp), `rawOutput.metadata.exit` (OpenCode), or an
  "Exit code N" result of a failed call (claude-agent-acp); Gemini CLI gives none;
- edits carry content items of type "diff" (`path`, `oldText` absent or empty for a new file,
  `newText`); an agent may send several for one call (claude-agent-acp: the request, then the
  result with context): the last one for each path counts.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenter.backends._deltas import DeltaBuffer
from agenter.backends._edits import text_counts
from agenter.backends.base import BackendMessage, MessageType

#: Tool results longer than this are cut (the whole output stays in `raw`).
RESULT_CHARS = 4000

_CHUNKS = {"agent_message_chunk": MessageType.TEXT, "agent_thought_chunk": MessageType.THINKING}
_DELTAS = {MessageType.TEXT: MessageType.TEXT_DELTA, MessageType.THINKING: MessageType.THINKING_DELTA}
_TOOL_UPDATES = ("tool_call", "tool_call_update")
_ENDED = ("completed", "failed")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
_EXIT_TEXT = re.compile(r"^\W*exit code:?\s*(-?\d+)\b", re.IGNORECASE)
_OUTPUT_KEYS = ("formatted_output", "aggregated_output", "output", "stdout")


# ---------------------------------------------------------------------------------- pure rules
def command_of(raw_input: Any, title: str | None = None) -> str:
    """The command line of an execute tool call: rawInput's command (an argv list unwrapped from
    `bash -lc '...'`), else the title (without the backticks some agents put around it)."""
    if isinstance(raw_input, dict):
        for key in ("command", "cmd"):
            value = raw_input.get(key)
            if isinstance(value, str) and value.strip():
                return value
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                if (len(value) == 3 and os.path.basename(value[0]) in _SHELLS
                        and value[1] in ("-c", "-lc")):
                    return value[2]
                return shlex.join(value)
    return (title or "").strip().strip("`").strip()


def exit_code(status: str | None, raw_output: Any, text: str = "") -> int | None:
    """The exit code an ended command reports, None when the agent gives none."""
    if isinstance(raw_output, dict):
        for holder in (raw_output, raw_output.get("metadata")):
            if isinstance(holder, dict):
                for key in ("exit_code", "exitCode", "exit"):
                    value = holder.get(key)
                    if isinstance(value, int) and not isinstance(value, bool):
                        return value
    if status == "failed":
        # claude-agent-acp: "Exit code 3" (in a fence in the content, bare in rawOutput)
        for candidate in (raw_output if isinstance(raw_output, str) else "", text):
            for line in candidate.splitlines():
                if line.strip().strip("`"):
                    found = _EXIT_TEXT.match(line)
                    if found:
                        return int(found.group(1))
                    break
    return None


def block_text(block: Any) -> str:
    """The text of a content block (other blocks by their type and uri)."""
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text":
        return str(block.get("text") or "")
    resource = block.get("resource")
    uri = block.get("uri") or (resource.get("uri") if isinstance(resource, dict) else None)
    return f"[{block.get('type', 'content')}{': ' + uri if uri else ''}]"


def result_text(content: Any, raw_output: Any) -> str:
    """What a tool call answered: its content's text, else its rawOutput's output, cut to size."""
    parts: list[str] = []
    for item in content or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "content":
            parts.append(block_text(item.get("content")))
        elif item.get("type") == "diff":
            parts.append(f"edited {item.get('path')}")
        elif item.get("type") == "terminal":
            parts.append(f"[terminal {item.get('terminalId')}]")
    text = "\n".join(p for p in parts if p)
    if not text and raw_output is not None:
        if isinstance(raw_output, str):
            text = raw_output
        elif isinstance(raw_output, dict) and any(isinstance(raw_output.get(k), str) for k in _OUTPUT_KEYS):
            text = next(raw_output[k] for k in _OUTPUT_KEYS if isinstance(raw_output.get(k), str))
        else:
            text = json.dumps(raw_output, default=str)
    if len(text) > RESULT_CHARS:
        text = text[:RESULT_CHARS] + " [...]"
    return text


def tool_name(data: dict[str, Any]) -> str:
    """The agent's own tool name (from `_meta`, e.g. claudeCode.toolName), else the ACP kind."""
    meta = data.get("_meta") or {}
    if isinstance(meta, dict):
        for value in meta.values():
            if isinstance(value, dict) and isinstance(value.get("toolName"), str):
                return str(value["toolName"])
    return str(data.get("kind") or data.get("title") or "tool")


def diffs(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The diff content items of a tool call update."""
    return [item for item in data.get("content") or []
            if isinstance(item, dict) and item.get("type") == "diff" and item.get("path")]


def plan_message(data: dict[str, Any]) -> BackendMessage:
    lines = [f"[{entry.get('status')}] {entry.get('content')}" for entry in data.get("entries") or []
             if isinstance(entry, dict)]
    return BackendMessage(MessageType.PLAN, "\n".join(lines), raw=data)


def usage_note(data: dict[str, Any]) -> str:
    cost = data.get("cost") if isinstance(data.get("cost"), dict) else None
    money = f", cost {cost.get('amount', 0):.6g} {cost.get('currency')}" if cost else ""
    return f"usage: {data.get('used')} of {data.get('size')} context tokens{money}"


def file_edit(path: str, counts: tuple[int, int] | None, *, tool: str | None = None,
              call_id: str | None = None, raw: Any = None) -> BackendMessage:
    added, removed = counts if counts is not None else (None, None)
    return BackendMessage(MessageType.FILE_EDIT, path, tool_name=tool, tool_call_id=call_id, raw=raw,
                          details={"path": path, "lines_added": added, "lines_removed": removed})


# ---------------------------------------------------------------------------------- the stream
@dataclass
class _Call:
    """A tool call as its updates made it known so far."""

    id: str
    name: str
    title: str = ""
    kind: str | None = None
    raw_input: Any = None
    payload: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    ended: bool = False
    diffs: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> its last diff item
    written: set[str] = field(default_factory=set)  # paths agenter wrote for it (fs/write_text_file)


class UpdateMapper:
    """One ACP session's updates as BackendMessages. `relative(path)` shows a path relative to
    the workspace. Each method returns the messages to emit, in order."""

    def __init__(self, relative: Callable[[str], str] = lambda path: path):
        self._relative = relative
        self._calls: dict[str, _Call] = {}  # every call of the session, by id
        self._open: dict[str, _Call] = {}  # those not ended yet
        self._chunks: list[dict[str, Any]] = []
        self._held = DeltaBuffer()  # streamed text not yet sent as a delta (no whitespace after it yet)
        self._text: list[str] = []
        self._text_type: MessageType | None = None
        self._message_id: str | None = None
        self._segments: list[str] = []

    # ------------------------------------------------------------------ turn
    def start_turn(self) -> None:
        self._segments = []
        self._chunks, self._held, self._text, self._text_type, self._message_id = [], DeltaBuffer(), [], None, None

    def final_text(self) -> str:
        """The agent's last text segment of the turn (after its last tool call)."""
        return self._segments[-1] if self._segments else ""

    def full_text(self) -> str:
        return "\n".join(self._segments)

    def knows(self, call_id: str) -> bool:
        return call_id in self._calls

    def name_of(self, call_id: str) -> str | None:
        call = self._calls.get(call_id)
        return call.name if call is not None else None

    def flush(self) -> list[BackendMessage]:
        """What is still held: the whole text of the deltas so far, then tool calls not yet shown."""
        return [*self._close_text(), *self._start_held()]

    # ------------------------------------------------------------------ session/update
    def update(self, data: dict[str, Any]) -> list[BackendMessage]:
        """The messages one session/update (its JSON form) stands for."""
        kind = data.get("sessionUpdate")
        if kind in _CHUNKS:
            return self._chunk(_CHUNKS[kind], data)
        out = self._close_text()
        if kind in _TOOL_UPDATES:
            out += self._tool(data)
            return out
        if kind == "plan":
            out += self._start_held()
            out.append(plan_message(data))
        # A notice is not the agent's work: a call held for its input stays held. claude-agent-acp
        # sends available_commands_update unawaited after session/new, once Claude Code answers,
        # so it can fall between a Write's tool_call and the update with its input: the likely
        # cause of a Write shown with no input in one clean-clone run of the ACP tests.
        elif kind == "usage_update":
            out.append(BackendMessage(MessageType.STATUS, usage_note(data), raw=data))
        elif kind == "current_mode_update":
            out.append(BackendMessage(MessageType.STATUS, f"agent switched to mode {data.get('currentModeId')!r}",
                                      raw=data))
        # user_message_chunk, available_commands_update, config/session info: not the agent's work
        return out

    def announce(self, data: dict[str, Any]) -> list[BackendMessage]:
        """A tool call first seen in a permission request (before any update announced it)."""
        if data.get("toolCallId") in self._calls:
            return []
        out = self._close_text()
        self._absorb(self._begin(data), data)
        return out

    def file_written(self, path: str, counts: tuple[int, int] | None, raw: Any = None) -> list[BackendMessage]:
        """A file agenter wrote for the agent (fs/write_text_file), `counts` its lines added and
        removed. The diff of the tool call running meanwhile (the one that asked for the write,
        Gemini CLI's write_file) is then not reported again."""
        shown = self._relative(path)
        for call in self._open.values():
            call.written.add(shown)
        return [*self._close_text(), file_edit(shown, counts, tool="fs/write_text_file", raw=raw)]

    # ------------------------------------------------------------------ text
    def _chunk(self, kind: MessageType, data: dict[str, Any]) -> list[BackendMessage]:
        out = self._start_held()
        message_id = data.get("messageId")
        if self._text_type is not kind or (message_id and self._message_id and message_id != self._message_id):
            out += self._close_text()
        self._text_type = kind
        self._message_id = message_id or self._message_id
        text = block_text(data.get("content"))
        self._chunks.append(data)
        self._text.append(text)
        # A key the model writes may arrive split over chunks, where no piece alone would be
        # redacted: a delta goes out only up to whitespace (agenter.backends._deltas).
        ready = self._held.feed(text)
        if ready:
            out.append(self._delta(kind, ready))
        return out

    def _delta(self, kind: MessageType, text: str) -> BackendMessage:
        # raw: the agent's chunk, holding the delta's text (never a piece of a key by itself)
        return BackendMessage(_DELTAS[kind], text, raw=_with_text(self._chunks[-1], text))

    def _close_text(self) -> list[BackendMessage]:
        """The rest of the deltas, then the whole text (or thought) they make: the session does not
        send it again, but the backend and its callers read the turn's text from it."""
        kind, content, chunks, held = self._text_type, "".join(self._text), self._chunks, self._held.flush()
        if kind is None or not content:
            self._chunks, self._held, self._text, self._text_type, self._message_id = [], DeltaBuffer(), [], None, None
            return []
        out = [self._delta(kind, held)] if held else []
        self._chunks, self._held, self._text, self._text_type, self._message_id = [], DeltaBuffer(), [], None, None
        if kind is MessageType.TEXT and content.strip():
            self._segments.append(content)
        return [*out, BackendMessage(kind, content, raw=_with_text(chunks[0], content))]

    # ------------------------------------------------------------------ tool calls
    def _begin(self, data: dict[str, Any]) -> _Call:
        self._segments.append("")  # text before a tool call is not the final answer
        call = _Call(id=str(data.get("toolCallId")), name=tool_name(data))
        self._calls[call.id] = self._open[call.id] = call
        return call

    def _tool(self, data: dict[str, Any]) -> list[BackendMessage]:
        call_id = str(data.get("toolCallId"))
        call = self._calls.get(call_id)
        out: list[BackendMessage] = []
        if call is None:
            # A call first seen in an update (Gemini CLI announces some only when they end).
            call = self._begin(data)
        elif data.get("sessionUpdate") == "tool_call":
            out += self._start_held(but=call_id)
        self._absorb(call, data)
        status = data.get("status")
        if status in ("in_progress", *_ENDED) and not call.started:
            out += self._start(call)
        if status in _ENDED and not call.ended:
            out += self._end(call, data)
        return out

    def _absorb(self, call: _Call, data: dict[str, Any]) -> None:
        """What an update (or a permission request) tells of a call: input, title, kind, diffs."""
        if not call.started:
            # The start's raw payload is the update that gave its input (else its first).
            if data.get("rawInput") is not None and (data["rawInput"] or call.raw_input is None):
                call.raw_input, call.payload = data["rawInput"], data
            call.payload = call.payload or data
            call.title = data.get("title") or call.title
            call.kind = data.get("kind") or call.kind
        for item in diffs(data) if not call.ended else []:
            call.diffs[self._relative(str(item["path"]))] = item

    def _start_held(self, but: str | None = None) -> list[BackendMessage]:
        """Show the calls still held for their input: something else happened meanwhile."""
        return [m for call in list(self._open.values())
                if not call.started and call.id != but for m in self._start(call)]

    def _start(self, call: _Call) -> list[BackendMessage]:
        call.started = True
        raw = call.raw_input
        if call.kind == "execute":
            command = command_of(raw, call.title)
            return [BackendMessage(MessageType.COMMAND_START, command, tool_name=call.name,
                                   tool_input=raw if isinstance(raw, dict) and raw else {"command": command},
                                   tool_call_id=call.id, details={"command": command}, raw=call.payload)]
        return [BackendMessage(MessageType.TOOL_CALL, call.title or call.name, tool_name=call.name,
                               tool_input=None if raw is None else raw if isinstance(raw, dict) else {"input": raw},
                               tool_call_id=call.id, raw=call.payload)]

    def _end(self, call: _Call, data: dict[str, Any]) -> list[BackendMessage]:
        call.ended = True
        self._open.pop(call.id, None)
        status = data.get("status")
        text = result_text(data.get("content"), data.get("rawOutput"))
        failed = status == "failed"
        out: list[BackendMessage]
        if call.kind == "execute":
            code = exit_code(status, data.get("rawOutput"), text)
            out = [BackendMessage(MessageType.COMMAND_END, text, tool_name=call.name, tool_call_id=call.id,
                                  is_error=failed or code not in (None, 0), details={"exit_code": code}, raw=data)]
        else:
            out = [BackendMessage(MessageType.TOOL_RESULT, text, tool_name=call.name, tool_call_id=call.id,
                                  is_error=failed, raw=data)]
        if not failed:
            for path, item in call.diffs.items():
                if path in call.written:  # reported when agenter wrote it
                    continue
                counts = text_counts(item.get("oldText"), str(item.get("newText") or ""))
                out.append(file_edit(path, counts, tool=call.name, call_id=call.id, raw=item))
        call.diffs, call.written, call.payload = {}, set(), {}  # an ended call keeps only its name
        return out


def _with_text(chunk: dict[str, Any], text: str) -> dict[str, Any]:
    content = chunk.get("content")
    return {**chunk, "content": {**(content if isinstance(content, dict) else {"type": "text"}), "text": text}}
