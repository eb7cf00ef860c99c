"""ADK's events as agenter's messages. Free of ADK imports: events are read by shape.

`Runner.run_async(..., run_config=RunConfig(streaming_mode=SSE))` yields, per model response,
partial events as the stream arrives (text and thought pieces, running usage) and then one
whole event (the aggregated response: its text, its function calls, the response's usage and
finish reason); after the tools ran, an event of function responses. What becomes what:

- partial text → TEXT_DELTA (cut at whitespace, `_deltas`), partial thoughts → THINKING_DELTA,
  their usage → the ledger's running figure;
- the whole response → TEXT (and THINKING) whole, its usage settled into the ledger (the base
  then sends USAGE), a refusal finish reason (SAFETY, ...) → the turn's refusal, a cut-off
  (MAX_TOKENS) or another error code → STATUS;
- function calls and their results are reported by the backend's tool callbacks (after the
  gate allowed a call: TOOL_CALL or COMMAND_START; when it ended: TOOL_RESULT or COMMAND_END
  with the exit code, and FILE_EDIT per file changed); a function response the callbacks did not
  report (a tool the model made up) → TOOL_RESULT here.

`tool_answer` reads a tool's result dict (ADK's tools answer `{"status": ..., ...}`, agenter's
`{"output": ...}` or `{"error": ...}`) as the text and error flag agenter reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agenter._types import Usage
from agenter.backends._deltas import DeltaBuffer
from agenter.backends._genai import REFUSAL_REASONS, api_usage
from agenter.backends.base import BackendMessage, MessageType

__all__ = ["CONFIRMATION_CALL", "EVENT_TEXT_LIMIT", "TurnEvents", "confirmations_asked", "refused_beside",
           "response_calls", "tool_answer"]

#: Characters of a tool result an event carries (the model gets the whole result).
EVENT_TEXT_LIMIT = 20_000
#: The function call with which ADK asks its user to confirm a tool call (its tool confirmation:
#: args `originalFunctionCall` and `toolConfirmation`; the answer is a function response to it).
CONFIRMATION_CALL = "adk_request_confirmation"
#: Fields of a result dict that are its text, in the order they are shown.
_TEXT_FIELDS = ("output", "content", "message", "stdout", "stderr", "error", "result")


def tool_answer(response: Any) -> tuple[str, bool]:
    """(text, is_error) of a tool's result: an error when its status is "error" or it has an
    "error" field."""
    if not isinstance(response, Mapping):
        return ("" if response is None else str(response))[:EVENT_TEXT_LIMIT], False
    is_error = response.get("status") == "error" or "error" in response
    texts = [str(response[key]) for key in _TEXT_FIELDS if response.get(key) not in (None, "")]
    if not texts:
        texts = [json.dumps(dict(response), default=str, ensure_ascii=False)]
    return "\n".join(texts)[:EVENT_TEXT_LIMIT], is_error


def refused_beside(events: Sequence[Any], call_id: str, refusal_tool: str) -> bool:
    """Whether the model response that made call `call_id` (the latest of the session's events
    holding it) also called the refusal tool."""
    for event in reversed(events):
        calls = [_get(part, "function_call") for part in _parts(event)]
        names = {_get(c, "name") for c in calls if c is not None and _get(c, "id") != call_id}
        if any(c is not None and _get(c, "id") == call_id for c in calls):
            return refusal_tool in names
    return False


def response_calls(events: Sequence[Any], call_id: str) -> list[str]:
    """The ids of the calls of the model response that made call `call_id` (the latest of the
    session's events holding it), in the order the model made them ([] when none holds it)."""
    for event in reversed(events):
        ids = [_get(c, "id") for c in (_get(part, "function_call") for part in _parts(event)) if c is not None]
        if call_id in ids:
            return [str(i) for i in ids]
    return []


def confirmations_asked(events: Sequence[Any]) -> dict[str, str]:
    """The tool calls the session waits to have confirmed: those ADK asked its user to confirm
    after the user's latest message (original call id → the id of ADK's confirmation call)."""
    asked: dict[str, str] = {}
    for event in reversed(events):
        if _get(event, "author") == "user":
            break
        for part in _parts(event):
            call = _get(part, "function_call")
            if call is None or _get(call, "name") != CONFIRMATION_CALL:
                continue
            original = (_get(call, "args") or {}).get("originalFunctionCall")
            if isinstance(original, Mapping) and original.get("id") and _get(call, "id"):
                asked[str(original["id"])] = str(_get(call, "id"))
    return asked


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _parts(event: Any) -> list[Any]:
    content = _get(event, "content")
    return list(_get(content, "parts") or []) if content is not None else []


class TurnEvents:
    """One turn's translation of ADK's events. `settle(usage)` records a finished response's
    usage, `running(usage)` the one in flight, `refused(reason)` a response the provider
    stopped for its content."""

    def __init__(self, *, settle: Callable[[Usage], None], running: Callable[[Usage], None],
                 refused: Callable[[str], None]):
        self._settle = settle
        self._running = running
        self._refused = refused
        self._text = DeltaBuffer()
        self._thinking = DeltaBuffer()
        #: Call ids whose result the tool callbacks reported.
        self.reported: set[str] = set()
        #: The texts of the turn's whole responses, in order (the last is the agent's answer).
        self.texts: list[str] = []

    @property
    def final_text(self) -> str:
        return self.texts[-1] if self.texts else ""

    def event(self, event: Any) -> list[BackendMessage]:
        """The messages one ADK event stands for (none for the user's own message)."""
        if _get(event, "author") == "user":
            return []
        if _get(event, "partial"):
            return self._partial(event)
        return self._whole(event)

    def _partial(self, event: Any) -> list[BackendMessage]:
        messages: list[BackendMessage] = []
        for part in _parts(event):
            piece = _get(part, "text")
            if not piece:
                continue
            if _get(part, "thought"):
                delta = self._thinking.feed(piece)
                if delta:
                    messages.append(BackendMessage(MessageType.THINKING_DELTA, delta))
            else:
                delta = self._text.feed(piece)
                if delta:
                    messages.append(BackendMessage(MessageType.TEXT_DELTA, delta))
        usage = _get(event, "usage_metadata")
        if usage is not None:
            self._running(api_usage(usage))
        return messages

    def _whole(self, event: Any) -> list[BackendMessage]:
        messages = self._flush()
        parts = _parts(event)
        thought = "".join(_get(p, "text") or "" for p in parts if _get(p, "thought"))
        text = "".join(_get(p, "text") or "" for p in parts if not _get(p, "thought"))
        if thought:
            messages.append(BackendMessage(MessageType.THINKING, thought))
        if text:
            self.texts.append(text)
            messages.append(BackendMessage(MessageType.TEXT, text))
        for part in parts:
            response = _get(part, "function_response")
            if response is not None and _get(response, "id") not in self.reported:
                answer, is_error = tool_answer(_get(response, "response"))
                messages.append(BackendMessage(MessageType.TOOL_RESULT, answer, tool_name=_get(response, "name"),
                                               tool_call_id=_get(response, "id"), is_error=is_error))
        usage = _get(event, "usage_metadata")
        if usage is not None and _get(event, "finish_reason") is not None:
            self._settle(api_usage(usage))
        messages.extend(self._error(event, text))
        return messages

    def _error(self, event: Any, text: str) -> list[BackendMessage]:
        code = _get(event, "error_code")
        if not code:
            return []
        code = str(getattr(code, "value", code))
        if code in REFUSAL_REASONS:
            self._refused(text.strip() or f"The model declined the request (finish_reason={code}).")
            return []
        detail = _get(event, "error_message")
        if code == "MAX_TOKENS":
            return [BackendMessage(MessageType.STATUS, "the model's response was cut off at its output limit "
                                                       "(max_tokens)")]
        return [BackendMessage(MessageType.STATUS, f"the model's response ended with {code}"
                                                   + (f": {detail}" if detail else ""))]

    def _flush(self) -> list[BackendMessage]:
        """What the delta buffers still hold, at the end of a response."""
        messages = []
        thinking = self._thinking.flush()
        if thinking:
            messages.append(BackendMessage(MessageType.THINKING_DELTA, thinking))
        text = self._text.flush()
        if text:
            messages.append(BackendMessage(MessageType.TEXT_DELTA, text))
        return messages
