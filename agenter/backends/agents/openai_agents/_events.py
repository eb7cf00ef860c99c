"""The SDK's stream events as agenter's messages. Free of SDK imports: events are read by shape.

`Runner.run_streamed(...).stream_events()` gives raw model events (the Responses API's, also on
the Chat Completions wire, which the SDK converts) and run items. What becomes what:

- `response.output_text.delta` → TEXT_DELTA (cut at whitespace, `_deltas`); the finished
  message (`message_output_created`) → TEXT, or a refusal when the model refused;
- reasoning deltas → THINKING_DELTA, the reasoning item → THINKING;
- `response.completed` / `response.incomplete` → the response's usage settled into the ledger
  (the base then sends USAGE);
- `tool_called` → COMMAND_START for the shell tool, else TOOL_CALL; `tool_output` →
  COMMAND_END with the exit code, else TOOL_RESULT, then one FILE_EDIT per file the call changed
  (what the tool itself recorded under the call's id: `ToolOutcomes`).

The SDK emits `tool_called` when the model's response is in, before the tools run, and
`tool_output` when the step's tools are done; a call the permission gate refuses is a
TOOL_CALL (or COMMAND_START) followed by the PERMISSION decision and an error result. A paused
run continued announces the calls it goes on with again (`resumed`), so each result pairs with a
start in the continued turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenter._types import Usage
from agenter.backends._deltas import DeltaBuffer
from agenter.backends.base import BackendMessage, MessageType

__all__ = ["SHELL_TOOL_NAME", "ToolOutcome", "ToolOutcomes", "TurnEvents", "usage_of"]

SHELL_TOOL_NAME = "shell"
#: Characters of a tool result an event carries (the model gets the whole result).
EVENT_TEXT_LIMIT = 20_000


@dataclass
class ToolOutcome:
    """What one tool call did beyond its text: error or not, exit code, files edited."""

    is_error: bool = False
    exit_code: int | None = None
    edits: list[tuple[str, int, int]] = field(default_factory=list)


class ToolOutcomes(dict[str, ToolOutcome]):
    """Outcomes by call id, written by the tools and taken by `TurnEvents` at `tool_output`."""

    def record(self, call_id: str | None, outcome: ToolOutcome) -> None:
        if call_id:
            self[call_id] = outcome


def usage_of(usage: Any) -> Usage | None:
    """A Responses usage object (the SDK gives one on both wires) as agenter counts it: input
    without its cached part."""
    if usage is None:
        return None
    total = int(getattr(usage, "input_tokens", 0) or 0)
    details = getattr(usage, "input_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(input_tokens=max(total - cached, 0), output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                 cache_read_tokens=cached)


class TurnEvents:
    """One turn's translation. `settle(usage, model)` records a finished response's usage;
    `refused(reason)` a refusal the model wrote instead of an answer."""

    def __init__(self, outcomes: ToolOutcomes, *, settle: Callable[[Usage, str | None], None],
                 refused: Callable[[str], None]):
        self._outcomes = outcomes
        self._settle = settle
        self._refused = refused
        self._text = DeltaBuffer()
        self._thinking = DeltaBuffer()
        self._calls: dict[str, str] = {}  # call id -> tool name
        #: The last message text of the turn (the agent's answer).
        self.final_text = ""

    def event(self, event: Any) -> list[BackendMessage]:
        kind = getattr(event, "type", None)
        if kind == "raw_response_event":
            return self._raw(event.data)
        if kind == "run_item_stream_event":
            return self._item(event.name, event.item)
        return []

    def resumed(self, raw: Any) -> list[BackendMessage]:
        """A call a paused run goes on with (announced when it paused): announced again, so its
        result pairs with a start in this turn."""
        return self._called(raw)

    def flush(self) -> list[BackendMessage]:
        """What is held back at the end of the turn (a delta cut off by a failure)."""
        return self._deltas()

    # ------------------------------------------------------------------ raw model events
    def _raw(self, data: Any) -> list[BackendMessage]:
        kind = getattr(data, "type", "")
        if kind == "response.output_text.delta":
            piece = self._text.feed(str(getattr(data, "delta", "") or ""))
            return [BackendMessage(MessageType.TEXT_DELTA, piece)] if piece else []
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            piece = self._thinking.feed(str(getattr(data, "delta", "") or ""))
            return [BackendMessage(MessageType.THINKING_DELTA, piece)] if piece else []
        if kind in ("response.completed", "response.incomplete"):
            response = getattr(data, "response", None)
            usage = usage_of(getattr(response, "usage", None))
            if usage is not None:
                self._settle(usage, getattr(response, "model", None))
        return []

    # ------------------------------------------------------------------ run items
    def _item(self, name: str, item: Any) -> list[BackendMessage]:
        raw = getattr(item, "raw_item", None)
        if name == "message_output_created":
            return self._message(raw)
        if name == "reasoning_item_created":
            messages = self._deltas()
            text = "\n".join(part_text for part in (getattr(raw, "summary", None) or [])
                             if (part_text := getattr(part, "text", None)))
            return messages + ([BackendMessage(MessageType.THINKING, text)] if text else [])
        if name == "tool_called":
            return self._deltas() + self._called(raw)
        if name == "tool_output":
            return self._output(raw, getattr(item, "output", None))
        return []

    def _message(self, raw: Any) -> list[BackendMessage]:
        messages = self._deltas()
        texts, refusals = [], []
        for part in getattr(raw, "content", None) or []:
            if getattr(part, "type", None) == "output_text":
                texts.append(str(getattr(part, "text", "") or ""))
            elif getattr(part, "type", None) == "refusal":
                refusals.append(str(getattr(part, "refusal", "") or ""))
        if refusals:
            self._refused(" ".join(r for r in refusals if r) or "The model refused.")
        text = "".join(texts) or " ".join(refusals)
        if text:
            self.final_text = text
            messages.append(BackendMessage(MessageType.TEXT, text))
        return messages

    def _called(self, raw: Any) -> list[BackendMessage]:
        name = str(_field(raw, "name") or _field(raw, "type") or "tool")
        call_id = str(_field(raw, "call_id") or _field(raw, "id") or "")
        self._calls[call_id] = name
        arguments = _arguments(_field(raw, "arguments"))
        if name == SHELL_TOOL_NAME:
            return [BackendMessage(MessageType.COMMAND_START, tool_name=name, tool_input=arguments,
                                   tool_call_id=call_id, details={"command": arguments.get("command")})]
        return [BackendMessage(MessageType.TOOL_CALL, tool_name=name, tool_input=arguments, tool_call_id=call_id)]

    def _output(self, raw: Any, output: Any) -> list[BackendMessage]:
        call_id = str(_field(raw, "call_id") or "")
        name = self._calls.pop(call_id, None)
        outcome = self._outcomes.pop(call_id, None) or ToolOutcome()
        text = output if isinstance(output, str) else str(_field(raw, "output") or output or "")
        text = text if len(text) <= EVENT_TEXT_LIMIT else text[:EVENT_TEXT_LIMIT] + " [...]"
        if name == SHELL_TOOL_NAME:
            return [BackendMessage(MessageType.COMMAND_END, text, tool_name=name, tool_call_id=call_id,
                                   is_error=outcome.is_error, details={"exit_code": outcome.exit_code})]
        messages = [BackendMessage(MessageType.TOOL_RESULT, text, tool_name=name, tool_call_id=call_id,
                                   is_error=outcome.is_error)]
        messages += [BackendMessage(MessageType.FILE_EDIT, tool_name=name, tool_call_id=call_id,
                                    details={"path": path, "lines_added": added, "lines_removed": removed})
                     for path, added, removed in outcome.edits]
        return messages

    def _deltas(self) -> list[BackendMessage]:
        """The held-back end of streamed text and thinking, before anything else is said."""
        messages = []
        thought = self._thinking.flush()
        if thought:
            messages.append(BackendMessage(MessageType.THINKING_DELTA, thought))
        text = self._text.flush()
        if text:
            messages.append(BackendMessage(MessageType.TEXT_DELTA, text))
        return messages


def _field(raw: Any, name: str) -> Any:
    """A field of a raw item, a pydantic object or a dict (tool outputs are dicts)."""
    if isinstance(raw, dict):
        return raw.get(name)
    return getattr(raw, name, None)


def _arguments(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}
