"""Wire-neutral script items: what the scripted model says, or how it fails.

A script is a list of items. Each model-turn request consumes one item; the wire of the
incoming request (Anthropic Messages, OpenAI Responses, OpenAI Chat Completions) decides
how the item is rendered. Items are plain frozen dataclasses so scripts are easy to build,
compare and print.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any


def new_id(prefix: str) -> str:
    """A unique, realistic-looking id such as ``toolu_01AbC...`` or ``call_...``."""
    return f"{prefix}{secrets.token_hex(12)}"


# ---------------------------------------------------------------------------------------------
# Content parts of one model turn


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ThinkingPart:
    thinking: str
    signature: str | None = None


@dataclass(frozen=True)
class ToolCallPart:
    """A tool call. ``input`` is a dict for JSON tools, or a string for free-form tools
    (Codex's ``custom`` tools such as ``apply_patch``); sent to a JSON tool, a string becomes
    ``{"input": text}``. ``id`` is generated when omitted."""

    name: str
    input: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


Part = TextPart | ThinkingPart | ToolCallPart


def text(value: str) -> TextPart:
    """A text block of the reply."""
    return TextPart(str(value))


def thinking(value: str, signature: str | None = None) -> ThinkingPart:
    """A thinking (reasoning) block. A signature is generated for Anthropic when omitted."""
    return ThinkingPart(str(value), signature)


def tool_call(name: str, input: dict[str, Any] | str | None = None, id: str | None = None) -> ToolCallPart:
    """A tool call the agent should execute. A unique id is generated when ``id`` is None."""
    return ToolCallPart(name, {} if input is None else input, id)


# ---------------------------------------------------------------------------------------------
# Script items


@dataclass(frozen=True)
class ReplyUsage:
    """Token counts to report for one reply. ``None`` fields are estimated."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True)
class Reply:
    """One model turn: parts in order, a stop reason, usage, and an optional delay."""

    parts: tuple[Part, ...]
    stop_reason: str | None = None
    usage: ReplyUsage | None = None
    delay: float = 0.0

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [part for part in self.parts if isinstance(part, ToolCallPart)]

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts if isinstance(part, TextPart))


@dataclass(frozen=True)
class HttpError:
    """Answer the request with an HTTP error in the wire's error shape."""

    status: int
    message: str
    error_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    #: The JSON body sent as it is, instead of the wire's error shape (a provider's exact answer).
    body: Any = field(default=None, hash=False)


@dataclass(frozen=True)
class Disconnect:
    """Start answering, then drop the connection after ``after_events`` SSE events.

    ``reply`` is the turn being streamed (a short text turn when None). On a non-streaming
    request the server sends the headers and part of the body, then drops the connection."""

    after_events: int = 2
    reply: Reply | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Hang:
    """Accept the request and never answer (until ``seconds`` pass or the server stops),
    then close the connection without a response.

    With ``after_events`` on a streaming request, the server first streams that many SSE
    events of ``reply`` and then stalls: a stream that goes silent (client idle timeouts)."""

    seconds: float | None = None
    after_events: int | None = None
    reply: Reply | None = None


ScriptItem = Reply | HttpError | Disconnect | Hang
SCRIPT_ITEM_TYPES = (Reply, HttpError, Disconnect, Hang)


def _coerce_usage(usage: ReplyUsage | dict[str, int] | None) -> ReplyUsage | None:
    if usage is None or isinstance(usage, ReplyUsage):
        return usage
    if isinstance(usage, dict):
        return ReplyUsage(**usage)
    raise TypeError(f"usage must be a dict or ReplyUsage, not {type(usage).__name__}")


def _coerce_part(part: Part | str) -> Part:
    if isinstance(part, str):
        return TextPart(part)
    if isinstance(part, TextPart | ThinkingPart | ToolCallPart):
        return part
    raise TypeError(f"a reply part must be text(), thinking(), tool_call() or str, not {part!r}")


def reply(
    *parts: Part | str,
    stop_reason: str | None = None,
    usage: ReplyUsage | dict[str, int] | None = None,
    delay: float = 0.0,
) -> Reply:
    """One model turn. Plain strings are text parts.

    ``stop_reason`` defaults to ``tool_use`` when the turn has tool calls and ``end_turn``
    otherwise (Anthropic names; other wires map them). ``usage`` overrides estimated token
    counts (keys of :class:`ReplyUsage`). ``delay`` waits that many seconds before answering.
    """
    return Reply(tuple(_coerce_part(part) for part in parts), stop_reason, _coerce_usage(usage), float(delay))


def refusal_reply(message: str = "I can't help with that.", **kwargs: Any) -> Reply:
    """A turn the model ends with ``stop_reason="refusal"`` (OpenAI wires render a refusal)."""
    return reply(text(message), stop_reason="refusal", **kwargs)


_RETRY_NOW = (("retry-after", "0"), ("retry-after-ms", "1"))


def http_error(
    status: int,
    message: str | None = None,
    *,
    error_type: str | None = None,
    headers: dict[str, str] | None = None,
    delay: float = 0.0,
    body: Any = None,
) -> HttpError:
    """An HTTP error (429, 500, 529, 401, ...) in the error JSON shape of the request's wire.

    ``error_type`` defaults to the wire's usual type for the status (Anthropic:
    ``overloaded_error`` for 529, ``rate_limit_error`` for 429, ...). ``headers`` default to
    ``retry-after: 0`` and ``retry-after-ms: 1`` so SDK retries happen at once. ``body``, when
    given, is the JSON sent as it is instead of the wire's shape (``message`` and ``error_type``
    then only name the item in logs), e.g. OpenAI's exact answer when the quota runs out:
    ``{"error": {"message": "You exceeded your current quota, ...", "type": "insufficient_quota",
    "param": None, "code": "insufficient_quota"}}``.
    """
    chosen = _RETRY_NOW if headers is None else tuple((str(k), str(v)) for k, v in headers.items())
    if body is not None:
        json.dumps(body)  # fails now, not when the server answers, for a body that is not JSON
    return HttpError(int(status), message or f"scripted HTTP {status} error", error_type, chosen, float(delay),
                     body)


def disconnect(after_events: int = 2, reply: Reply | None = None, *, delay: float = 0.0) -> Disconnect:
    """Drop the connection mid-stream after ``after_events`` SSE events of ``reply``."""
    return Disconnect(int(after_events), reply, float(delay))


def hang(seconds: float | None = None, *, after_events: int | None = None, reply: Reply | None = None) -> Hang:
    """Accept the request, never answer; the connection closes after ``seconds`` or at stop.

    ``after_events``: on a streaming request, stream that many events of ``reply`` first,
    then go silent."""
    return Hang(seconds, None if after_events is None else int(after_events), reply)


def as_script_item(value: Any) -> ScriptItem:
    """Accept items, bare parts and strings (as one-part replies) in scripts."""
    if isinstance(value, SCRIPT_ITEM_TYPES):
        return value
    if isinstance(value, str | TextPart | ThinkingPart | ToolCallPart):
        return reply(value)
    raise TypeError(
        "script items must be reply(...), http_error(...), disconnect(...), hang(...), "
        f"a part or a string, not {value!r}"
    )
