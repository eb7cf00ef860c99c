"""The OpenAI wires: Chat Completions (every OpenAI-compatible server: OpenAI, llama.cpp's server,
vLLM, Ollama, OpenRouter, a LiteLLM proxy) and the Responses API, over the official `openai`
client, for agenter's own agent (the harness) and for the context path of analysis and patch
mode (`_completion.py`). One request builder, one stream reader and one failure reading serve
both.

What only OpenAI's wires know is here:
- the conversation (the harness's Anthropic-shaped blocks) as Chat messages (an assistant's
  `tool_calls`, one `tool` message per result) or as Responses input items (`function_call`,
  `function_call_output`); tool definitions as function tools, with `strict` off (agenter's
  schemas are not written for strict mode, which Responses would otherwise apply); tool_choice
  ("any" is "required"); a JSON schema as `response_format` / `text.format`; stop sequences (the
  harness's text tool-call mode) as Chat Completions' `stop` (the Responses API takes none);
- limits and sampling: `max_tokens` (`max_completion_tokens` on the OpenAI API itself, which its
  newer models require; `max_output_tokens` on Responses; nothing when it is 0, so the server's
  default applies), temperature (only when set: llama.cpp's server then samples at 0.8),
  reasoning effort (`reasoning_effort` / `reasoning.effort`, only when set: not every model takes
  it);
- the stream read into one response: text, reasoning (`reasoning_content` on compatible servers,
  reasoning summaries on Responses: shown as thinking, never sent back), tool-call arguments
  accumulated into tool_use blocks, usage (Chat Completions sends it last, asked for with
  `stream_options.include_usage`; until it comes, an estimate at 4 characters a token lets
  budgets see the response), the finish reason in the wire protocol's words;
- failures: the client's exceptions (`_completion.openai_failure`, which litellm shares), an
  error event inside a stream, and a Responses stream that ends with `response.failed`.

Limits: no cache marks (OpenAI caches prefixes by itself; cached tokens are counted as cache
reads); no model's output ceiling is known, so a cut-off response is continued, not retried with
a larger max_tokens; reasoning is not sent back (Responses would need its encrypted content).
The `openai` package is imported only when a backend connects.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agenter._types import Usage
from agenter.backends._failures import Failure, StreamIncomplete, error_message, error_type, is_transport_error
from agenter.backends.model_api._completion import CHARS_PER_TOKEN, OutputFormat, chat_usage, openai_failure
from agenter.backends.model_api._harness.wire import (
    Block,
    BlockDone,
    BlockStream,
    Delta,
    Message,
    Piece,
    Running,
    Stop,
    StreamedBlock,
    WireFeatures,
    WireRequest,
    WireResponse,
    drain,
)

if TYPE_CHECKING:
    from agenter.backends.model_api.openai_compat._options import OpenAIOptions

__all__ = ["ChatWire", "ResponseFailed", "ResponsesWire", "chat_messages", "make_client", "responses_input",
           "responses_usage"]

#: Sent as the key to a server given by base_url when none is configured (the client needs one).
NO_KEY = "no-key"
#: Output characters between two running usage estimates while a response streams.
RUNNING_EVERY = 400
#: Chat Completions finish reasons with a word of their own in the wire protocol (the rest: "end").
_CHAT_STOPS: dict[str, Stop] = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
                                "content_filter": "refusal"}
_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def make_client(options: OpenAIOptions, key: str | None) -> Any:
    """The async client, its own retries off (every attempt is the harness's or the context
    path's, each a STATUS message). `key` None: the placeholder a keyless local server takes."""
    import openai

    return openai.AsyncOpenAI(api_key=key or NO_KEY, base_url=options.base_url or None, max_retries=0,
                              timeout=options.request_timeout)


class ResponseFailed(Exception):
    """A Responses stream that ended with response.failed or an error event."""

    def __init__(self, error: Any):
        self.code = str(getattr(error, "code", "") or "")
        super().__init__(str(getattr(error, "message", "") or self.code or "the response failed"))


# ---------------------------------------------------------------------- the two wires


class _OpenAIWire:
    """What both wires share: the client, the settings every request carries, the failures."""

    api_label = "OpenAI-compatible API"
    auth_hint = "check api_key (or OPENAI_API_KEY)"

    def __init__(self, client: Any, *, model: str, official: bool, streaming: bool = True,
                 extra_body: Mapping[str, Any] | None = None):
        self._client = client
        self.model = model
        #: The OpenAI API itself (some parameters differ from compatible servers').
        self.official = official
        #: False: every request is sent unstreamed (the `stream=False` option), its pieces yielded at once.
        self.streaming = streaming
        self.extra_body = dict(extra_body or {})
        self.features = WireFeatures(native_tools=True, cache_marks=False, thinking=False, provider_tools=False,
                                     structured_output=True, output_limit=None)

    def _common(self, request: WireRequest) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model}
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if self.extra_body:
            params["extra_body"] = dict(self.extra_body)
        if request.timeout is not None:
            params["timeout"] = request.timeout
        return params

    def stream(self, request: WireRequest, *, output: OutputFormat | None = None) -> AsyncGenerator[Piece, None]:
        """The response's pieces (see the ModelWire protocol). `output`: the context path's JSON
        format (json_schema with its name, json_object, or the prompt only), instead of
        `request.output_schema`."""
        params = self.params(request, output)
        if self.streaming:
            return self._streamed(params, _prompt_chars(request))
        return self._unstreamed(params)

    async def complete(self, request: WireRequest, *, output: OutputFormat | None = None) -> WireResponse:
        return await drain(self._unstreamed(self.params(request, output)))

    def params(self, request: WireRequest, output: OutputFormat | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def _streamed(self, params: dict[str, Any], prompt_chars: int) -> AsyncGenerator[Piece, None]:
        """One streamed request's pieces."""
        raise NotImplementedError

    def _unstreamed(self, params: dict[str, Any]) -> AsyncGenerator[Piece, None]:
        """One unstreamed request: its completed blocks, then the response."""
        raise NotImplementedError

    def failure(self, exc: BaseException) -> Failure | None:
        """The Failure an exception of the openai client stands for (None: not an API failure)."""
        import openai

        if isinstance(exc, ResponseFailed):
            return Failure(str(exc), status=_failed_status(exc.code), error_type=exc.code or None)
        if isinstance(exc, StreamIncomplete):
            return Failure(str(exc) or type(exc).__name__, connection=True)
        found = openai_failure(exc)
        if found is None and isinstance(exc, openai.APIError):
            # An error event inside a stream answered 200: no status, the provider's words.
            return Failure(error_message(exc), error_type=error_type(exc.body))
        return found

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
                pass


class ChatWire(_OpenAIWire):
    """Chat Completions as a harness wire (POST /chat/completions)."""

    def params(self, request: WireRequest, output: OutputFormat | None = None) -> dict[str, Any]:
        params = self._common(request)
        params["messages"] = chat_messages(request.system, request.messages)
        if request.max_tokens > 0:
            # OpenAI's newer models take only max_completion_tokens; compatible servers know max_tokens.
            params["max_completion_tokens" if self.official else "max_tokens"] = request.max_tokens
        if request.tools:
            params["tools"] = [{"type": "function", "function": _function(tool)} for tool in _plain(request.tools)]
        if request.tool_choice is not None:
            params["tool_choice"] = _TOOL_CHOICE[request.tool_choice]
        if request.effort is not None:
            params["reasoning_effort"] = request.effort
        if request.stop:
            params["stop"] = list(request.stop)
        json_format = _json_format(request, output)
        if json_format is not None and json_format.mode == "json_schema":
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": json_format.name, "schema": json_format.schema, "strict": True}}
        elif json_format is not None and json_format.mode == "json_object":
            params["response_format"] = {"type": "json_object"}
        return params

    async def _streamed(self, params: dict[str, Any], prompt_chars: int) -> AsyncGenerator[Piece, None]:
        import openai

        reader = _ChatReader(prompt_chars)
        try:
            stream = await self._client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True})
            async with stream:
                # The request is accepted: its prompt counts from now, also if the stream drops.
                yield Running(reader.estimate())
                async for chunk in stream:
                    for piece in reader.feed(chunk):
                        yield piece
        except Exception as exc:
            if not isinstance(exc, openai.APIError) and is_transport_error(exc):
                raise StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        if reader.finish is None:
            raise StreamIncomplete("the response stream ended without a finish_reason")
        for piece in reader.finished():
            yield piece

    async def _unstreamed(self, params: dict[str, Any]) -> AsyncGenerator[Piece, None]:
        answer = await self._client.chat.completions.create(**params)
        reader = _ChatReader(0)
        reader.usage = chat_usage(getattr(answer, "usage", None))
        choices = getattr(answer, "choices", None) or []
        if choices:
            choice = choices[0]
            message = choice.message
            reader.take(message)
            for index, call in enumerate(getattr(message, "tool_calls", None) or []):
                reader.take_call(index, call)
            reader.finish = choice.finish_reason or "stop"
        else:
            reader.finish = "stop"
        for piece in reader.finished():
            yield piece


class ResponsesWire(_OpenAIWire):
    """The Responses API as a harness wire (POST /responses; `store=False` on the OpenAI API, so
    nothing is kept there: every request carries the whole conversation)."""

    def params(self, request: WireRequest, output: OutputFormat | None = None) -> dict[str, Any]:
        params = self._common(request)
        if request.system:
            params["instructions"] = request.system
        params["input"] = responses_input(request.messages)
        if request.max_tokens > 0:
            params["max_output_tokens"] = request.max_tokens
        if self.official:
            params["store"] = False
        if request.tools:
            params["tools"] = [{"type": "function", **_function(tool), "strict": False}
                               for tool in _plain(request.tools)]
        if request.tool_choice is not None:
            params["tool_choice"] = _TOOL_CHOICE[request.tool_choice]
        if request.effort is not None:
            params["reasoning"] = {"effort": request.effort}
        json_format = _json_format(request, output)
        if json_format is not None and json_format.mode == "json_schema":
            params["text"] = {"format": {"type": "json_schema", "name": json_format.name,
                                         "schema": json_format.schema, "strict": True}}
        elif json_format is not None and json_format.mode == "json_object":
            params["text"] = {"format": {"type": "json_object"}}
        return params

    async def _streamed(self, params: dict[str, Any], prompt_chars: int) -> AsyncGenerator[Piece, None]:
        import openai

        reader = _ResponsesReader(prompt_chars)
        try:
            stream = await self._client.responses.create(**params, stream=True)
            async with stream:
                yield Running(reader.estimate())
                async for event in stream:
                    for piece in reader.feed(event):
                        yield piece
        except Exception as exc:
            if not isinstance(exc, openai.APIError | ResponseFailed) and is_transport_error(exc):
                raise StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        if reader.final is None:
            raise StreamIncomplete("the response stream ended before response.completed")
        for piece in reader.finished():
            yield piece

    async def _unstreamed(self, params: dict[str, Any]) -> AsyncGenerator[Piece, None]:
        answer = await self._client.responses.create(**params)
        reader = _ResponsesReader(0)
        reader.final = answer
        for piece in reader.finished():
            yield piece


# ---------------------------------------------------------------------- requests


def chat_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The system prompt and the conversation as Chat Completions messages: a user turn's tool
    results become `tool` messages (first, as the harness keeps them) and its text one user
    message; an assistant turn its text and its `tool_calls`; thinking blocks are left out."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        blocks = _blocks(message.get("content"))
        if message.get("role") == "assistant":
            text = _joined(blocks)
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})}}
                     for b in blocks if b.get("type") == "tool_use"]
            if not text and not calls:
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _result_text(block.get("content"))})
        text = _joined(blocks)
        if text:
            out.append({"role": str(message.get("role") or "user"), "content": text})
    return out


def responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Responses input items: messages, `function_call` for each tool_use
    and `function_call_output` for each result (thinking blocks are left out)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role") or "user")
        blocks = _blocks(message.get("content"))
        if role == "assistant":
            text = _joined(blocks)
            if text:
                items.append({"role": "assistant", "content": text})
            items += [{"type": "function_call", "call_id": b["id"], "name": b["name"],
                       "arguments": json.dumps(b.get("input") or {})} for b in blocks if b.get("type") == "tool_use"]
            continue
        items += [{"type": "function_call_output", "call_id": b["tool_use_id"], "output": _result_text(b.get("content"))}
                  for b in blocks if b.get("type") == "tool_result"]
        text = _joined(blocks)
        if text:
            items.append({"role": role, "content": text})
    return items


def _blocks(content: Any) -> list[Block]:
    """A message's content as blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


def _joined(blocks: Sequence[Block]) -> str:
    return "\n\n".join(str(b["text"]) for b in blocks if b.get("type") == "text" and b.get("text"))


def _result_text(content: Any) -> str:
    """A tool result's content as the text both APIs take (a list of blocks: its texts)."""
    if isinstance(content, str):
        return content
    return _joined(_blocks(content))


def _plain(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    provided = [str(tool.get("name")) for tool in tools if "type" in tool]
    if provided:
        raise ValueError(f"the OpenAI wires take no provider-defined tools: {', '.join(provided)}")
    return list(tools)


def _function(tool: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": tool["name"], "description": tool.get("description", ""),
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}


def _json_format(request: WireRequest, output: OutputFormat | None) -> OutputFormat | None:
    """The JSON asked for: the context path's format, else the request's schema (named by its
    title), else none."""
    if output is not None:
        return output
    schema = request.output_schema
    if schema is None:
        return None
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", str(schema.get("title") or "output"))[:64]
    return OutputFormat("json_schema", name, dict(schema))


def _prompt_chars(request: WireRequest) -> int:
    """The request's size in characters, for the estimate of its input tokens."""
    return len(request.system) + len(json.dumps(list(request.messages), default=str)) + len(
        json.dumps(list(request.tools), default=str))


# ---------------------------------------------------------------------- responses


@dataclass
class _Reader:
    """One response as it streams in: text, reasoning, tool calls (blocks by index), usage."""

    prompt_chars: int
    stream: BlockStream = field(default_factory=BlockStream)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    usage: Usage | None = None
    output_chars: int = 0
    reported_at: int = 0

    def estimate(self) -> Usage:
        return Usage(input_tokens=self.prompt_chars // CHARS_PER_TOKEN,
                     output_tokens=self.output_chars // CHARS_PER_TOKEN)

    def grew(self, chars: int) -> Iterator[Piece]:
        """A running estimate every RUNNING_EVERY characters (while no usage was reported)."""
        self.output_chars += chars
        if self.usage is None and self.output_chars - self.reported_at >= RUNNING_EVERY:
            self.reported_at = self.output_chars
            yield Running(self.estimate())

    def text_block(self, index: int) -> StreamedBlock:
        return self.stream.blocks.setdefault(index, StreamedBlock(type="text"))

    def tool_block(self, index: int) -> StreamedBlock:
        return self.stream.blocks.setdefault(index, StreamedBlock(type="tool_use"))

    def response(self, stop: Stop, detail: str | None) -> WireResponse:
        cut_off = stop in ("max_tokens", "context_length")
        for block in self.stream.blocks.values():
            if block.type == "tool_use" and not block.stopped and (block.json_buffer or not cut_off):
                block.finish()
            if block.type == "tool_use" and not block.tool_id:
                block.tool_id = f"call_{secrets.token_hex(8)}"  # a server that sent none
        content = self.stream.content(cut_off=cut_off)
        if self.refusal:
            content = [{"type": "text", "text": "".join(self.refusal)}, *content]
        if stop == "end" and any(b.get("type") == "tool_use" for b in content):
            stop = "tool_use"  # servers that answer a tool call with finish_reason "stop"
        return WireResponse(content=content, stop=stop, usage=self.usage or Usage(), stop_detail=detail,
                            input_errors=self.stream.input_errors(cut_off=cut_off))

    def done_blocks(self) -> list[BlockDone]:
        """The whole reasoning and text, reported once the response is complete."""
        done = [BlockDone({"type": "thinking", "thinking": "".join(self.reasoning)})] if self.reasoning else []
        text = self.stream.text()
        if text:
            done.append(BlockDone({"type": "text", "text": text}))
        return done


@dataclass
class _ChatReader(_Reader):
    """Chat Completions chunks: `delta.content`, `delta.reasoning_content` (or `reasoning`),
    `delta.refusal`, `delta.tool_calls` by index (the first piece carries id and name, the rest
    argument text), `finish_reason`, and a last chunk with the usage."""

    finish: str | None = None

    def feed(self, chunk: Any) -> list[Piece]:
        pieces: list[Piece] = []
        if getattr(chunk, "usage", None) is not None:
            self.usage = chat_usage(chunk.usage)
        for choice in getattr(chunk, "choices", None) or []:
            delta = choice.delta
            if delta is not None:
                pieces += self.take(delta, raw=chunk)
                for call in getattr(delta, "tool_calls", None) or []:
                    pieces += self.take_call(getattr(call, "index", None), call)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        return pieces

    def take(self, delta: Any, raw: Any = None) -> list[Piece]:
        """Text, reasoning and refusal of a delta (or of an unstreamed message)."""
        pieces: list[Piece] = []
        thought = _reasoning(delta)
        if thought:
            self.reasoning.append(thought)
            pieces += [Delta(thought, thinking=True, raw=raw), *self.grew(len(thought))]
        content = getattr(delta, "content", None)
        if isinstance(content, str) and content:
            self.text_block(0).text += content
            pieces += [Delta(content, raw=raw), *self.grew(len(content))]
        refusal = getattr(delta, "refusal", None)
        if isinstance(refusal, str) and refusal:
            self.refusal.append(refusal)
        return pieces

    def take_call(self, index: int | None, call: Any) -> list[Piece]:
        """A piece of a tool call (or a whole one, unstreamed); blocks 1.. are the calls by index."""
        function = getattr(call, "function", None)
        name = getattr(function, "name", None) if function is not None else None
        if not isinstance(index, int):  # a server that numbers no call: an id or a name starts one
            calls = [i for i, b in self.stream.blocks.items() if b.type == "tool_use"]
            starts = bool(getattr(call, "id", None) or name)
            index = (max(calls) if calls and not starts else len(calls) + 1) - 1
        block = self.tool_block(1 + index)
        if getattr(call, "id", None) and not block.tool_id:
            block.tool_id = call.id
        if name and name != block.tool_name:
            block.tool_name += name  # servers that stream the name in pieces
        arguments = getattr(function, "arguments", None) if function is not None else None
        if isinstance(arguments, str) and arguments:
            block.json_buffer += arguments
            return list(self.grew(len(arguments)))
        return []

    def finished(self) -> list[Piece]:
        reason = self.finish or "stop"
        stop: Stop = "refusal" if self.refusal else _CHAT_STOPS.get(reason, "end")
        detail = "refusal" if self.refusal and reason == "stop" else reason
        return [*self.done_blocks(), self.response(stop, detail)]


@dataclass
class _ResponsesReader(_Reader):
    """Responses stream events: output items by output_index (messages, function calls,
    reasoning), their deltas, and response.completed / response.incomplete with the whole
    response; response.failed and error events raise ResponseFailed."""

    final: Any = None

    def feed(self, event: Any) -> list[Piece]:
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta":
            self.text_block(int(event.output_index)).text += event.delta
            return [Delta(event.delta, raw=event), *self.grew(len(event.delta))]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self.reasoning.append(event.delta)
            return [Delta(event.delta, thinking=True, raw=event), *self.grew(len(event.delta))]
        if kind == "response.refusal.delta":
            self.refusal.append(event.delta)
        elif kind == "response.output_item.added" and getattr(event.item, "type", None) == "function_call":
            block = self.tool_block(int(event.output_index))
            block.tool_id, block.tool_name = event.item.call_id, event.item.name
        elif kind == "response.function_call_arguments.delta":
            self.tool_block(int(event.output_index)).json_buffer += event.delta
            return list(self.grew(len(event.delta)))
        elif kind == "response.output_item.done" and getattr(event.item, "type", None) == "function_call":
            block = self.tool_block(int(event.output_index))
            block.tool_id, block.tool_name = event.item.call_id, event.item.name
            block.json_buffer = event.item.arguments or ""  # the whole arguments, authoritative
            block.finish()
        elif kind in ("response.completed", "response.incomplete"):
            self.final = event.response
        elif kind == "response.failed":
            raise ResponseFailed(getattr(event.response, "error", None))
        elif kind == "error":
            raise ResponseFailed(event)
        return []

    def finished(self) -> list[Piece]:
        final = self.final
        self.usage = responses_usage(getattr(final, "usage", None))
        output = getattr(final, "output", None) or []
        if output:  # the whole response, authoritative (what streamed is in it)
            self.stream, self.reasoning, self.refusal = BlockStream(), [], []
            self._take_output(output)
        status = getattr(final, "status", None)
        reason = getattr(getattr(final, "incomplete_details", None), "reason", None)
        if self.refusal:
            stop: Stop = "refusal"
        elif status == "incomplete":
            stop = "refusal" if reason == "content_filter" else "max_tokens"
        else:
            stop = "end"
        detail = str(reason or "max_output_tokens") if status == "incomplete" else str(status or "completed")
        return [*self.done_blocks(), self.response(stop, detail)]

    def _take_output(self, output: Sequence[Any]) -> None:
        for index, item in enumerate(output):
            kind = getattr(item, "type", None)
            if kind == "message":
                for part in getattr(item, "content", None) or []:
                    if getattr(part, "type", None) == "output_text":
                        self.text_block(index).text += part.text or ""
                    elif getattr(part, "type", None) == "refusal":
                        self.refusal.append(part.refusal or "")
            elif kind == "function_call":
                block = self.tool_block(index)
                block.tool_id, block.tool_name, block.json_buffer = item.call_id, item.name, item.arguments or ""
                if getattr(item, "status", None) != "incomplete":  # cut off: left for the cut-off rule
                    block.finish()
            elif kind == "reasoning":
                for part in (getattr(item, "summary", None) or []) + (getattr(item, "content", None) or []):
                    if getattr(part, "text", None):
                        self.reasoning.append(part.text)


def _reasoning(item: Any) -> str:
    """Reasoning text compatible servers send beside the content (reasoning_content, reasoning)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(item, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def responses_usage(usage: Any) -> Usage | None:
    """Responses usage as agenter counts it: input without the cached part."""
    if usage is None:
        return None
    total = int(getattr(usage, "input_tokens", 0) or 0)
    details = getattr(usage, "input_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(input_tokens=max(total - cached, 0), output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                 cache_read_tokens=cached)


def _failed_status(code: str) -> int:
    """The status a Responses stream's failure code stands for (it came inside a 200)."""
    if code in ("rate_limit_exceeded",):
        return 429
    if code in ("server_error", "vector_store_timeout", ""):
        return 500
    return 400

