"""OpenHands events and metrics → agenter's BackendMessages and Usage.

Free of I/O, so each rule can be unit-tested. The OpenHands event classes are imported only when
an event is translated (the SDK is imported when a backend connects, never before).
"""

from __future__ import annotations

import json
from typing import Any

from agenter._types import Usage
from agenter.backends._deltas import DeltaBuffer
from agenter.backends._edits import text_counts
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

    The vocabulary: a terminal action is `COMMAND_START` (details: command) and its observation
    `COMMAND_END` (details: exit_code) instead of a tool call and result; a file editor change is
    a tool call and result followed by `FILE_EDIT` (path, lines_added, lines_removed, counted
    from the observation's content before and after); the model's reasoning and the `think`
    tool's thought are `THINKING`. Each message keeps its event as `raw` (see `raw_event`).
    """

    def __init__(self, refusal_tool_name: str):
        self.refusal_tool_name = refusal_tool_name
        #: Paths the file editor changed, as OpenHands named them (absolute or relative).
        self.edited: list[str] = []
        self.texts: list[str] = []
        self.final_text: str | None = None
        self.refused = False
        self._pending_edits: dict[str, str] = {}
        #: Tool call ids reported as COMMAND_START, so their end is a COMMAND_END.
        self._commands: set[str] = set()

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
            return [self._result(event, event.error, is_error=True)]
        if isinstance(event, UserRejectObservation):
            self._pending_edits.pop(event.tool_call_id, None)
            return [self._result(event, f"rejected: {event.rejection_reason}", is_error=True)]
        if isinstance(event, ConversationErrorEvent):
            return [BackendMessage(MessageType.ERROR, f"{event.code}: {event.detail}", is_error=True,
                                   raw=raw_event(event))]
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
        raw = raw_event(event)
        messages = []
        reasoning = reasoning_text(event.llm_message)
        if reasoning:
            messages.append(BackendMessage(MessageType.THINKING, reasoning, raw=raw))
        text = content_text(event.llm_message.content)
        if text:
            self.texts.append(text)
            self.final_text = text
            messages.append(BackendMessage(MessageType.TEXT, text, raw=raw))
        return messages

    def _action(self, event: Any) -> list[BackendMessage]:
        raw = raw_event(event)
        messages = []
        # OpenHands puts a response's reasoning on the first of its actions only.
        reasoning = reasoning_text(event)
        if reasoning:
            messages.append(BackendMessage(MessageType.THINKING, reasoning, raw=raw))
        thought = content_text(event.thought)
        if thought:
            self.texts.append(thought)
            messages.append(BackendMessage(MessageType.TEXT, thought, raw=raw))
        action = event.action
        arguments = tool_arguments(event.tool_call)
        if event.tool_name == "terminal":
            command = getattr(action, "command", None)
            command = command if isinstance(command, str) else str(arguments.get("command") or "")
            self._commands.add(event.tool_call_id)
            messages.append(BackendMessage(MessageType.COMMAND_START, command, tool_name=event.tool_name,
                                           tool_input=arguments, tool_call_id=event.tool_call_id,
                                           details={"command": command}, raw=raw))
        else:
            messages.append(BackendMessage(MessageType.TOOL_CALL, getattr(event, "summary", None) or "",
                                           tool_name=event.tool_name, tool_input=arguments,
                                           tool_call_id=event.tool_call_id, raw=raw))
        path = getattr(action, "path", None)
        if event.tool_name == "file_editor" and getattr(action, "command", None) in EDITOR_WRITE_COMMANDS and path:
            self._pending_edits[event.tool_call_id] = str(path)
        if event.tool_name == "think":
            idea = getattr(action, "thought", None)
            if isinstance(idea, str) and idea.strip():
                messages.append(BackendMessage(MessageType.THINKING, idea, tool_call_id=event.tool_call_id, raw=raw))
        if event.tool_name == "finish":
            final = getattr(action, "message", None)
            if isinstance(final, str) and final:
                self.texts.append(final)
                self.final_text = final
                messages.append(BackendMessage(MessageType.TEXT, final, raw=raw))
        return messages

    def _observation(self, event: Any) -> list[BackendMessage]:
        observation = event.observation
        is_error = bool(getattr(observation, "is_error", False))
        exit_code = command_exit_code(observation)
        if exit_code is not None and exit_code > 0:
            is_error = True  # a failed shell command is a failed tool call
        edited = self._pending_edits.pop(event.tool_call_id, None)
        if event.tool_name == self.refusal_tool_name and not is_error:
            self.refused = True
        # The finish message was already reported with its call.
        text = "" if event.tool_name == "finish" else observation_text(observation)
        result = self._result(event, text, is_error=is_error, exit_code=exit_code)
        messages = [result]
        if edited is not None and not is_error:
            self.edited.append(edited)
            path = getattr(observation, "path", None) or edited
            added, removed = line_changes(getattr(observation, "old_content", None),
                                          getattr(observation, "new_content", None))
            messages.append(BackendMessage(MessageType.FILE_EDIT, tool_name=event.tool_name,
                                           tool_call_id=event.tool_call_id,
                                           details={"path": str(path), "lines_added": added,
                                                    "lines_removed": removed}, raw=result.raw))
        return messages

    def _result(self, event: Any, text: str, *, is_error: bool, exit_code: int | None = None) -> BackendMessage:
        """The end of a tool call: COMMAND_END for a terminal command (exit_code None when it did
        not finish: denied, failed to start, still running at OpenHands' timeout), else TOOL_RESULT."""
        if event.tool_call_id in self._commands:
            self._commands.discard(event.tool_call_id)
            return BackendMessage(MessageType.COMMAND_END, text, tool_name=event.tool_name,
                                  tool_call_id=event.tool_call_id, is_error=is_error,
                                  details={"exit_code": exit_code}, raw=raw_event(event))
        return BackendMessage(MessageType.TOOL_RESULT, text, tool_name=event.tool_name,
                              tool_call_id=event.tool_call_id, is_error=is_error, raw=raw_event(event))


class TokenStream:
    """A model response's streamed tokens (LiteLLM's Chat Completions chunks, which OpenHands
    hands its token callbacks) as TEXT_DELTA and THINKING_DELTA, closed by the response's event.

    Only `content` and `reasoning_content` stream: a tool call's argument pieces are never text.
    Deltas are cut at whitespace (`DeltaBuffer`), so a key split over chunks is redacted whole.
    When the response's event arrives (`close`), the held-back rest goes out, and a kind that
    streamed but has no whole message in that event gets one (the session takes the whole
    message as the end of its deltas, and would otherwise close them with a later text).

    A model call retried after it began to stream (LiteLLM gives each attempt its own completion
    id) streams the response again: what the broken attempt streamed is closed first, as a
    whole message of its own, so the new attempt's deltas do not join its cut-off text.
    """

    def __init__(self) -> None:
        self._text = DeltaBuffer()
        self._thinking = DeltaBuffer()
        #: What each kind streamed since the last response event (None: nothing).
        self._streamed: dict[MessageType, list[str]] = {}
        #: The completion id of the attempt streaming now.
        self._attempt: str | None = None

    def feed(self, chunk: Any) -> list[BackendMessage]:
        """The deltas one stream chunk lets go out now."""
        messages = []
        attempt = getattr(chunk, "id", None)
        if isinstance(attempt, str) and attempt:
            if self._attempt is not None and attempt != self._attempt:
                messages += self.close(has_text=False, has_thinking=False)
            self._attempt = attempt
        for choice in getattr(chunk, "choices", None) or ():
            delta = getattr(choice, "delta", None)
            reasoning = getattr(delta, "reasoning_content", None)
            if isinstance(reasoning, str) and reasoning:
                messages += self._piece(MessageType.THINKING_DELTA, self._thinking.feed(reasoning))
            content = getattr(delta, "content", None)
            if isinstance(content, str) and content:
                messages += self._piece(MessageType.TEXT_DELTA, self._text.feed(content))
        return messages

    def close(self, *, has_text: bool, has_thinking: bool) -> list[BackendMessage]:
        """What goes before a response event's messages: the rest of each stream, and a whole
        message for a kind that streamed but that the event does not say."""
        self._attempt = None
        messages = [*self._piece(MessageType.THINKING_DELTA, self._thinking.flush()),
                    *self._piece(MessageType.TEXT_DELTA, self._text.flush())]
        thinking = self._streamed.pop(MessageType.THINKING_DELTA, None)
        if thinking is not None and not has_thinking:
            messages.append(BackendMessage(MessageType.THINKING, "".join(thinking)))
        text = self._streamed.pop(MessageType.TEXT_DELTA, None)
        if text is not None and not has_text:
            messages.append(BackendMessage(MessageType.TEXT, "".join(text)))
        return messages

    def _piece(self, kind: MessageType, content: str) -> list[BackendMessage]:
        if not content:
            return []
        self._streamed.setdefault(kind, []).append(content)
        return [BackendMessage(kind, content)]


def response_says(event: Any) -> tuple[bool, bool] | None:
    """(has text, has reasoning) of an event that ends a model response (the agent's message,
    an action), as the recorder reports them; None for any other event."""
    from openhands.sdk.event import ActionEvent, MessageEvent

    if isinstance(event, MessageEvent):
        if event.source != "agent":
            return None
        return bool(content_text(event.llm_message.content)), bool(reasoning_text(event.llm_message))
    if isinstance(event, ActionEvent):
        return bool(content_text(event.thought)), bool(reasoning_text(event))
    return None


def reasoning_text(source: Any) -> str:
    """The visible reasoning of an action or a message: reasoning_content, Anthropic thinking
    blocks (redacted ones have no text) and a Responses reasoning item's summary and content
    (never its encrypted content)."""
    parts: list[str] = []
    reasoning = getattr(source, "reasoning_content", None)
    if isinstance(reasoning, str) and reasoning.strip():
        parts.append(reasoning)
    for block in getattr(source, "thinking_blocks", None) or []:
        thinking = getattr(block, "thinking", None)
        if isinstance(thinking, str) and thinking.strip():
            parts.append(thinking)
    item = getattr(source, "responses_reasoning_item", None)
    if item is not None:
        for line in [*(getattr(item, "summary", None) or []), *(getattr(item, "content", None) or [])]:
            if isinstance(line, str) and line.strip():
                parts.append(line)
    return "\n".join(parts)


def command_exit_code(observation: Any) -> int | None:
    """A terminal observation's exit code; None when the command did not finish (OpenHands'
    -1: it hit the no-output timeout and may still run) or the observation is not a command's."""
    code = getattr(observation, "exit_code", None)
    if not isinstance(code, int):
        code = getattr(getattr(observation, "metadata", None), "exit_code", None)
    if not isinstance(code, int) or code < 0 or getattr(observation, "timeout", False) is True:
        return None
    return code


def line_changes(old: str | None, new: str | None) -> tuple[int | None, int | None]:
    """(lines added, lines removed) between a file's content before and after an edit; a file
    that did not exist before (`old` None) gained all its lines. (None, None) when the content
    after is unknown."""
    if new is None:
        return None, None
    return text_counts(old, new)


#: Longest string kept in a raw event (a file's content, a command's output).
RAW_TEXT_LIMIT = 4000


def raw_event(event: Any) -> dict[str, Any] | None:
    """An OpenHands event as JSON for `BackendMessage.raw`, with long strings cut to
    RAW_TEXT_LIMIT and encrypted reasoning left out."""
    try:
        data = event.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - raw is a courtesy; the message stands without it
        return None
    shrunk = _shrink(data)
    return shrunk if isinstance(shrunk, dict) else None


def _shrink(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) > RAW_TEXT_LIMIT:
            return f"{value[:RAW_TEXT_LIMIT]}… [{len(value) - RAW_TEXT_LIMIT} more characters]"
        return value
    if isinstance(value, dict):
        return {key: _shrink(item) for key, item in value.items() if key != "encrypted_content"}
    if isinstance(value, list):
        return [_shrink(item) for item in value]
    return value


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

    def start(self, metrics: Any) -> None:
        """Count from `metrics` on (a resumed conversation's hold the earlier runs')."""
        self._responses = len(list(getattr(metrics, "token_usages", None) or []))
        self._cost.cost(float(getattr(metrics, "accumulated_cost", 0.0) or 0.0))

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
