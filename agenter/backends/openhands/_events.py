"""OpenHands events and metrics → agenter's BackendMessages and Usage.

Free of I/O, so each rule can be unit-tested. The OpenHands event classes are imported only when
an event is translated (the SDK is imported when a backend connects, never before).
"""

from __future__ import annotations

import json
from typing import Any

from agenter._types import Usage
from agenter.backends.base import BackendMessage, MessageType
from agenter.host.redact import strip_ansi
from agenter.usage import RunningTotal

#: File editor commands that change the file they name.
EDITOR_WRITE_COMMANDS = frozenset({"create", "str_replace", "insert", "undo_edit"})


def content_text(content: Any) -> str:
    """Text of a list of OpenHands content blocks (TextContent; images are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(p for p in parts if p)


def observation_text(observation: Any) -> str:
    """What the model reads of a tool result, without terminal escape sequences."""
    try:
        text = content_text(observation.to_llm_content)
    except Exception:  # noqa: BLE001 - an observation without LLM content still has content
        text = content_text(getattr(observation, "content", None))
    return strip_ansi(text).strip("\n")


class TurnRecorder:
    """Turns one turn's OpenHands events into BackendMessages and remembers what the turn did.

    Runs on the backend's private loop thread (OpenHands' event callback); the caller's loop
    reads `edited`, `texts` and `final_text` (lists only appended to).
    """

    def __init__(self, refusal_tool_name: str):
        self.refusal_tool_name = refusal_tool_name
        #: Paths the file editor changed, as OpenHands named them (absolute or relative).
        self.edited: list[str] = []
        self.texts: list[str] = []
        self.final_text: str | None = None
        self.refused = False
        self._pending_edits: dict[str, str] = {}

    def translate(self, event: Any) -> list[BackendMessage]:
        from openhands.sdk.event import (
            ActionEvent,
            AgentErrorEvent,
            Condensation,
            InterruptEvent,
            MessageEvent,
            ObservationEvent,
            PauseEvent,
            UserRejectObservation,
        )
        from openhands.sdk.event.conversation_error import ConversationErrorEvent

        if isinstance(event, MessageEvent):
            return self._message(event)
        if isinstance(event, ActionEvent):
            return self._action(event)
        if isinstance(event, ObservationEvent):
            return self._observation(event)
        if isinstance(event, AgentErrorEvent):
            self._pending_edits.pop(event.tool_call_id, None)
            return [BackendMessage(MessageType.TOOL_RESULT, event.error, tool_name=event.tool_name,
                                   tool_call_id=event.tool_call_id, is_error=True)]
        if isinstance(event, UserRejectObservation):
            self._pending_edits.pop(event.tool_call_id, None)
            return [BackendMessage(MessageType.TOOL_RESULT, f"rejected: {event.rejection_reason}",
                                   tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                                   is_error=True)]
        if isinstance(event, ConversationErrorEvent):
            return [BackendMessage(MessageType.ERROR, f"{event.code}: {event.detail}", is_error=True)]
        if isinstance(event, InterruptEvent):
            return [BackendMessage(MessageType.STATUS, "OpenHands run interrupted")]
        if isinstance(event, PauseEvent):
            return [BackendMessage(MessageType.STATUS, "OpenHands run paused")]
        if isinstance(event, Condensation):
            return [BackendMessage(MessageType.STATUS, "OpenHands condensed the conversation history")]
        return []

    def _message(self, event: Any) -> list[BackendMessage]:
        if event.source != "agent":
            return []  # our own prompt, or environment notes fed back to the model
        messages = []
        reasoning = getattr(event, "reasoning_content", None) or getattr(event.llm_message, "reasoning_content", None)
        if reasoning:
            messages.append(BackendMessage(MessageType.THINKING, reasoning))
        text = content_text(event.llm_message.content)
        if text:
            self.texts.append(text)
            self.final_text = text
            messages.append(BackendMessage(MessageType.TEXT, text))
        return messages

    def _action(self, event: Any) -> list[BackendMessage]:
        messages = []
        if event.reasoning_content:
            messages.append(BackendMessage(MessageType.THINKING, event.reasoning_content))
        thought = content_text(event.thought)
        if thought:
            self.texts.append(thought)
            messages.append(BackendMessage(MessageType.TEXT, thought))
        messages.append(BackendMessage(MessageType.TOOL_CALL, getattr(event, "summary", None) or "",
                                       tool_name=event.tool_name, tool_input=tool_arguments(event.tool_call),
                                       tool_call_id=event.tool_call_id))
        action = event.action
        path = getattr(action, "path", None)
        if event.tool_name == "file_editor" and getattr(action, "command", None) in EDITOR_WRITE_COMMANDS and path:
            self._pending_edits[event.tool_call_id] = str(path)
        if event.tool_name == "finish":
            final = getattr(action, "message", None)
            if isinstance(final, str) and final:
                self.texts.append(final)
                self.final_text = final
                messages.append(BackendMessage(MessageType.TEXT, final))
        return messages

    def _observation(self, event: Any) -> list[BackendMessage]:
        observation = event.observation
        is_error = bool(getattr(observation, "is_error", False))
        exit_code = getattr(getattr(observation, "metadata", None), "exit_code", None)
        if isinstance(exit_code, int) and exit_code > 0:
            is_error = True  # a failed shell command is a failed tool call
        edited = self._pending_edits.pop(event.tool_call_id, None)
        if edited is not None and not is_error:
            self.edited.append(edited)
        if event.tool_name == self.refusal_tool_name and not is_error:
            self.refused = True
        # The finish message was already reported with its call.
        text = "" if event.tool_name == "finish" else observation_text(observation)
        return [BackendMessage(MessageType.TOOL_RESULT, text, tool_name=event.tool_name,
                               tool_call_id=event.tool_call_id, is_error=is_error)]


def tool_arguments(tool_call: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict (empty when they are not a JSON object)."""
    try:
        arguments = json.loads(tool_call.arguments)
    except (ValueError, TypeError, AttributeError):
        return {}
    return arguments if isinstance(arguments, dict) else {}


# ---------------------------------------------------------------------- usage
def response_usage(record: Any) -> Usage:
    """agenter Usage of one OpenHands TokenUsage record.

    LiteLLM's prompt_tokens (OpenAI style) include cached tokens; agenter's input_tokens do not.
    """
    cache_read = int(getattr(record, "cache_read_tokens", 0) or 0)
    cache_write = int(getattr(record, "cache_write_tokens", 0) or 0)
    return Usage(
        input_tokens=max(int(getattr(record, "prompt_tokens", 0) or 0) - cache_read - cache_write, 0),
        output_tokens=int(getattr(record, "completion_tokens", 0) or 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


class MetricsCursor:
    """What OpenHands' cumulative metrics (one TokenUsage per model response, LiteLLM's
    accumulated cost) added since the last look."""

    def __init__(self) -> None:
        self._responses = 0
        self._cost = RunningTotal()

    def take(self, metrics: Any) -> tuple[list[Usage], float | None]:
        """(usage of each new response, LiteLLM's cost of them or None when it has no price).

        OpenHands adds a response's cost before its tokens, so the cost is read only together
        with new responses: a cost seen alone belongs to a response not yet listed.
        """
        records = list(getattr(metrics, "token_usages", None) or [])
        new = records[self._responses:]
        if not new:
            return [], None
        self._responses = len(records)
        cost = self._cost.cost(float(getattr(metrics, "accumulated_cost", 0.0) or 0.0))
        return [response_usage(record) for record in new], (cost if cost > 0 else None)


# ---------------------------------------------------------------------- errors
def error_status_code(exc: BaseException | None) -> int | None:
    """The HTTP status of a LiteLLM/OpenAI error somewhere in the cause chain."""
    seen = 0
    while exc is not None and seen < 8:
        code = getattr(exc, "status_code", None)
        if isinstance(code, int):
            return code
        exc = getattr(exc, "original_exception", None) or exc.__cause__
        seen += 1
    return None


def root_cause(exc: BaseException) -> BaseException:
    seen = 0
    while seen < 8:
        inner = getattr(exc, "original_exception", None) or exc.__cause__
        if inner is None or inner is exc:
            return exc
        exc = inner
        seen += 1
    return exc


def failure_message(exc: BaseException) -> tuple[str, int | None]:
    """(what the run's failure says, its HTTP status if any), unredacted."""
    cause = root_cause(exc)
    status = error_status_code(exc)
    message = f"OpenHands run failed: {type(cause).__name__}: {str(cause) or type(cause).__name__}"
    if status is not None and f"{status}" not in message:
        message += f" (HTTP {status})"
    return message, status
