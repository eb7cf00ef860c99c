"""The wire protocol: what a provider module writes so that agenter's own agent (the harness in
`loop.py`) runs on its model API.

A wire is only the provider's half of a model call. It turns a `WireRequest` (system prompt,
conversation, tool definitions, limits and sampling settings) into the provider's request,
streams it, and yields what arrives: `Delta`s of text and thinking as they come, `BlockDone` as
each text or thinking block completes, `Running` usage while it streams, and last one
`WireResponse` (the content in the neutral blocks, a stop reason in the neutral vocabulary
`Stop`, and the usage). It says what it supports in `WireFeatures` and reads its SDK's
exceptions into a `Failure` (agenter.backends._failures), so that the one classifier decides what
a failure is and the harness's one retry policy (agenter.host.retry) decides whether and when to
try again. Everything else is the harness's: the loop, the tools, the permission gate, the
conversation and its compaction, usage in the ledger, the events.

The neutral shape of a conversation is the Anthropic Messages shape (see `conversation.py`):
messages `{"role", "content": [block, ...]}`, blocks `text`, `tool_use` (id, name, input: a
dict), `tool_result` (tool_use_id, content: a string, is_error), and the thinking blocks a wire
keeps for itself (`thinking` with its signature, `redacted_thinking`; other wires leave them out
or carry their own kind). A tool definition is `{"name", "description", "input_schema"}`; one
with a `"type"` is a provider-defined tool (Anthropic's text editor), sent only to a wire whose
`WireFeatures.provider_tools` is set. A wire converts both ways and keeps nothing between
requests but its client.

Rules a wire keeps:
- the client's own retries are off: every attempt is the harness's (a STATUS message each);
- a stream that ends before the provider said the response is complete raises
  `StreamIncomplete` (retried like a dropped connection), and a transport error the client lets
  through while reading it is raised as `StreamIncomplete` too;
- the response's content holds only what the model completed: a tool call cut off by the output
  limit or the context window is left out (there is nothing to answer); a complete call whose
  arguments are not a JSON object is kept (input `{}`) and named in `input_errors`, so the harness
  answers it with the error;
- no third-party import at module level: the SDK is imported when the backend connects.

`BlockStream` below is the neutral half of stream accumulation (blocks by index, the cut-off
rule) for wires whose stream announces blocks one by one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agenter._types import Usage
from agenter.backends._failures import Failure, StreamIncomplete

__all__ = [
    "STOPS", "Block", "BlockDone", "BlockStream", "Delta", "Failure", "Message", "ModelWire", "Piece",
    "Running", "Stop", "StreamIncomplete", "StreamedBlock", "WireFeatures", "WireRequest", "WireResponse",
    "drain",
]

#: One content block and one message, in the neutral (Anthropic-shaped) form.
Block = dict[str, Any]
Message = dict[str, Any]

#: Why a response ended, in every wire's words:
#: - "end": the model finished (also a stop sequence, or a reason the wire does not know);
#: - "tool_use": it asks for tool calls (the harness answers every tool_use block either way);
#: - "max_tokens": cut off at the output limit (the harness raises the limit once, then nudges);
#: - "context_length": cut off because the conversation filled the context window (the
#:   harness compacts it; a request refused as too long is a `context_length` failure instead);
#: - "refusal": the provider's safety stop (the turn ends refused, with the response's text).
Stop = Literal["end", "tool_use", "max_tokens", "context_length", "refusal"]
STOPS: frozenset[str] = frozenset({"end", "tool_use", "max_tokens", "context_length", "refusal"})


@dataclass(frozen=True)
class WireFeatures:
    """What a wire supports; the harness uses no feature a wire does not declare."""

    #: Tool definitions go on the wire and calls come back as tool_use blocks. False: the model
    #: writes its calls in text (the harness's text tool-call mode: the tools described in the
    #: system prompt, calls parsed from the reply, the conversation sent as text).
    native_tools: bool = True
    #: The wire marks cache breakpoints itself when `WireRequest.cache` is set (Anthropic's
    #: cache_control); a wire whose provider caches prefixes by itself leaves it False.
    cache_marks: bool = False
    #: It takes `thinking`/`effort` and returns thinking blocks to send back.
    thinking: bool = False
    #: It takes provider-defined tools (definitions with a "type": Anthropic's text editor).
    provider_tools: bool = False
    #: It takes `WireRequest.output_schema` (the provider's own JSON output).
    structured_output: bool = False
    #: The model's largest max_tokens, when known: after a response cut off at the output limit
    #: the harness raises max_tokens once (doubled, at most to this).
    output_limit: int | None = None


@dataclass(frozen=True)
class WireRequest:
    """One model call as the harness asks for it. The model, the client and the provider's own
    settings are the wire's (given when it was built)."""

    system: str
    messages: Sequence[Message]
    max_tokens: int
    #: Tool definitions (see the module docstring); empty for a request without tools.
    tools: Sequence[Mapping[str, Any]] = ()
    #: None: the model's default. `thinking`: a type the wire knows ("adaptive", "disabled", ...)
    #: or a budget in tokens; `effort`: "low" .. "max". A wire maps what it has and refuses
    #: (ConfigurationError, at connect) what it cannot honour.
    temperature: float | None = None
    thinking: str | int | None = None
    effort: str | None = None
    #: "auto" (the model chooses), "any" (it must call a tool), "none"; None: the provider's default.
    tool_choice: Literal["auto", "any", "none"] | None = None
    #: A JSON schema the answer must match, for a wire with `structured_output` (the harness
    #: otherwise asks for structured output through its final_result tool).
    output_schema: Mapping[str, Any] | None = None
    #: A request of the loop, whose prefix repeats: mark cache breakpoints (system, tools, the
    #: newest messages) where the wire can. False for a one-off request (a summary).
    cache: bool = True
    #: Seconds for this request (None: the client's timeout).
    timeout: float | None = None
    #: Stop sequences (text tool-call mode: a model that writes a tool's result itself is making
    #: it up). A wire whose API takes none leaves them out (the text parser cuts there anyway).
    stop: Sequence[str] = ()


@dataclass(frozen=True)
class Delta:
    """Text or thinking as it streams in (shown at once; the response carries the whole)."""

    text: str
    thinking: bool = False
    #: The provider's own event, passed on with the message (JSON-able or with a repr).
    raw: Any = None


@dataclass(frozen=True)
class BlockDone:
    """A text or thinking block the model has completed (in the neutral form): the harness
    reports it whole, at once. A wire yields one for each such block as it completes (a wire
    whose provider does not say so yields them at the end, before the WireResponse); a block
    never completed (cut off) is not reported."""

    block: Block


@dataclass(frozen=True)
class Running:
    """The response's usage so far, while it streams (budgets see the tokens as they arrive;
    the response's own usage is what is settled)."""

    usage: Usage


@dataclass
class WireResponse:
    """One complete response (the last piece of a stream)."""

    content: list[Block]
    stop: Stop
    usage: Usage = field(default_factory=Usage)
    #: The provider's own stop reason (for messages and logs).
    stop_detail: str | None = None
    #: tool_use id -> why its arguments could not be used (the call is kept with input {}).
    input_errors: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")


Piece = Delta | BlockDone | Running | WireResponse


@runtime_checkable
class ModelWire(Protocol):
    """A provider's model API as the harness uses it (one instance per connected backend)."""

    features: WireFeatures
    #: How error messages name the API ("Anthropic API") and what to check after a 401/403.
    api_label: str
    auth_hint: str

    def stream(self, request: WireRequest) -> AsyncGenerator[Piece, None]:
        """Send `request` streamed (an async generator: the harness closes it when the turn is
        cancelled, so the HTTP stream closes with it): Deltas, BlockDones and Running as they
        come, then one WireResponse. Raises the SDK's exception on failure (`failure` reads it)
        and StreamIncomplete when the stream ends early."""
        ...

    async def complete(self, request: WireRequest) -> WireResponse:
        """Send `request` and wait for the whole response, unstreamed (the harness's one-off
        requests: a summary for compaction). `drain(self.stream(request))` where the provider
        has no unstreamed call."""
        ...

    def failure(self, exc: BaseException) -> Failure | None:
        """The Failure an exception of this wire's client stands for (HTTP status, headers,
        the provider's error type and message; `connection=True` when no answer came). None:
        not an API failure (the harness lets it through)."""
        ...

    async def close(self) -> None:
        """Close the client; never raises."""
        ...


async def drain(pieces: AsyncIterator[Piece]) -> WireResponse:
    """The WireResponse at the end of a stream (the other pieces are dropped)."""
    response: WireResponse | None = None
    async for piece in pieces:
        if isinstance(piece, WireResponse):
            response = piece
    if response is None:
        raise StreamIncomplete("the response stream ended before the response was complete")
    return response


# ---------------------------------------------------------------------- stream accumulation


@dataclass
class StreamedBlock:
    """One content block while it streams: text, thinking, or a tool call whose JSON arguments
    arrive in pieces (`json_buffer`), parsed when it stops."""

    type: str
    text: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""  # redacted_thinking
    tool_id: str = ""
    tool_name: str = ""
    json_buffer: str = ""
    tool_input: dict[str, Any] | None = None
    input_error: str | None = None
    stopped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def finish(self) -> None:
        self.stopped = True
        if self.type == "tool_use":
            if self.tool_input is not None and not self.json_buffer:
                return
            try:
                parsed = json.loads(self.json_buffer) if self.json_buffer.strip() else {}
            except json.JSONDecodeError as exc:
                self.input_error = f"tool input is not valid JSON ({exc.msg})"
                parsed = {}
            if not isinstance(parsed, dict):
                self.input_error = "tool input must be a JSON object"
                parsed = {}
            self.tool_input = parsed

    @property
    def complete(self) -> bool:
        return self.stopped and (self.type != "tool_use" or self.input_error is None)

    def to_param(self) -> Block | None:
        """The block in the neutral form, as the conversation keeps it (None: leave it out)."""
        if self.type == "text":
            return {"type": "text", "text": self.text} if self.text else None
        if self.type == "thinking":
            return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}
        if self.type == "redacted_thinking":
            return {"type": "redacted_thinking", "data": self.data}
        if self.type == "tool_use":
            return {"type": "tool_use", "id": self.tool_id, "name": self.tool_name,
                    "input": self.tool_input or {}}
        return self.extra or None


@dataclass
class BlockStream:
    """The blocks of one response by their index, and the rule for what of them is kept."""

    blocks: dict[int, StreamedBlock] = field(default_factory=dict)

    def content(self, *, cut_off: bool) -> list[Block]:
        """Content to keep in the history. When the response was cut off (`cut_off`: at the
        output limit or the context window), a tool call never stopped or whose JSON is
        incomplete is dropped (the model never finished asking for it) and so is a thinking
        block without its signature (the API would refuse it back)."""
        params: list[Block] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.type == "tool_use" and not block.complete and cut_off:
                continue
            if block.type == "thinking" and not block.signature and cut_off:
                continue
            if not block.stopped and block.type != "tool_use":
                block.finish()
            param = block.to_param()
            if param is not None:
                params.append(param)
        return params

    def input_errors(self, *, cut_off: bool) -> dict[str, str]:
        """tool_use id -> why its input could not be used (kept blocks only)."""
        if cut_off:
            return {}
        return {b.tool_id: b.input_error for b in self.blocks.values() if b.type == "tool_use" and b.input_error}

    def text(self) -> str:
        return "".join(self.blocks[i].text for i in sorted(self.blocks) if self.blocks[i].type == "text")
