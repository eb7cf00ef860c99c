"""The OpenAI wires: Chat Completions (every OpenAI-compatible server: OpenAI, llama.cpp's server,
vLLM, Ollama, OpenRouter, a LiteLLM proxy) and the Responses API, over the official `openai`
client, for agenter's own agent (the harness) and for the context path of analysis and patch
mode (`_completion.py`). One request builder, one stream reader and one failure reading serve
both.

The Chat Completions shape itself (messages, the request body, the chunk reader) is
`model_api/_chat.py`, shared with the litellm wire. What only OpenAI's wires know is here:
- the client, and the Responses API: the conversation as input items (`function_call`,
  `function_call_output`), tool definitions as function tools with `strict` off (agenter's
  schemas are not written for strict mode, which Responses would otherwise apply), a JSON schema
  as `text.format`, no stop sequences (the Responses API takes none), and its stream events;
- limits and sampling: `max_tokens` (`max_completion_tokens` on the OpenAI API itself, which its
  newer models require; `max_output_tokens` on Responses; nothing when it is 0, so the server's
  default applies), temperature (only when set: llama.cpp's server then samples at 0.8),
  reasoning effort (`reasoning_effort` / `reasoning.effort`, only when set: not every model takes
  it), `extra_body`;
- reasoning (`reasoning_content` on compatible servers, reasoning summaries on Responses) is
  shown as thinking, never sent back; usage comes last (Chat Completions sends it when asked with
  `stream_options.include_usage`; until it comes, an estimate at 4 characters a token lets
  budgets see the response, its prompt from when httpx's request trace says the body was
  written, so a request cancelled before any answer still counts);
- failures: the client's exceptions (`_completion.openai_failure`, which litellm shares), an
  error event inside a stream, and a Responses stream that ends with `response.failed`.

Limits: no cache marks (OpenAI caches prefixes by itself; cached tokens are counted as cache
reads); no model's output ceiling is known, so a cut-off response is continued, not retried with
a larger max_tokens; reasoning is not sent back (Responses would need its encrypted content).
The `openai` package is imported only when a backend connects.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agenter._types import Usage
from agenter.backends._failures import Failure, StreamIncomplete, error_message, error_type, is_transport_error
from agenter.backends.model_api._chat import (
    TOOL_CHOICE,
    ChatReader,
    StreamReader,
    blocks_of,
    chat_body,
    function_tool,
    joined_text,
    json_format,
    plain_tools,
    prompt_chars,
    result_text,
)
from agenter.backends.model_api._completion import OutputFormat, openai_failure
from agenter.backends.model_api._harness.wire import (
    BlockStream,
    Delta,
    Message,
    Piece,
    Running,
    Stop,
    WireFeatures,
    WireRequest,
    WireResponse,
    drain,
)

if TYPE_CHECKING:
    from agenter.backends.model_api.openai_compat._options import OpenAIOptions

__all__ = ["ChatWire", "ResponseFailed", "ResponsesWire", "make_client", "responses_input", "responses_usage"]

#: Sent as the key to a server given by base_url when none is configured (the client needs one).
NO_KEY = "no-key"
#: Called once the body of the request this task is sending has been written (httpx's request trace).
_SENDING: ContextVar[Callable[[], None] | None] = ContextVar("agenter_openai_sending", default=None)


def make_client(options: OpenAIOptions, key: str | None) -> Any:
    """The async client, its own retries off (every attempt is the harness's or the context
    path's, each a STATUS message). `key` None: the placeholder a keyless local server takes."""
    import openai

    # httpx's request trace says when a request's body has been written: the wire counts its
    # prompt from then on (_OpenAIWire.sending), also when it is cancelled before any answer.
    http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [_trace_request]})
    return openai.AsyncOpenAI(api_key=key or NO_KEY, base_url=options.base_url or None, max_retries=0,
                              timeout=options.request_timeout, http_client=http)


async def _trace_request(request: Any) -> None:
    request.extensions["trace"] = _trace


async def _trace(event: str, info: Any) -> None:
    if event.endswith(".send_request_body.complete"):
        sent = _SENDING.get()
        if sent is not None:
            sent()


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
                 extra_body: Mapping[str, Any] | None = None, on_request: Callable[[Usage], None] | None = None):
        self._client = client
        #: Told the usage of a request in flight before its response comes (see `sending`).
        self.on_request = on_request
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
            return self._streamed(params, prompt_chars(request))
        return self._unstreamed(params, prompt_chars(request))

    async def complete(self, request: WireRequest, *, output: OutputFormat | None = None) -> WireResponse:
        return await drain(self._unstreamed(self.params(request, output), None))

    def params(self, request: WireRequest, output: OutputFormat | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def _streamed(self, params: dict[str, Any], chars: int) -> AsyncGenerator[Piece, None]:
        """One streamed request's pieces."""
        raise NotImplementedError

    def _unstreamed(self, params: dict[str, Any], chars: int | None) -> AsyncGenerator[Piece, None]:
        """One unstreamed request: its completed blocks, then the response. `chars`
        None: a request of the wire's own use (compaction's summary), not told to `on_request`."""
        raise NotImplementedError

    @contextlib.contextmanager
    def sending(self, chars: int | None) -> Iterator[None]:
        """Around the call that sends a request: once its body has been written, `on_request`
        is told its prompt's estimate (a paid API bills a prompt it received, also when the
        request is cancelled before any answer); when the server answers with an error status,
        it is told Usage() (an error answer bills nothing). Before that moment nothing counts:
        a request cancelled while it was being sent may not have reached the model."""
        import openai

        report = self.on_request
        if report is None or chars is None:
            yield
            return
        token = _SENDING.set(lambda: report(StreamReader(chars).estimate()))
        try:
            yield
        except openai.APIStatusError:
            report(Usage())
            raise
        finally:
            _SENDING.reset(token)

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
        # OpenAI's newer models take only max_completion_tokens; compatible servers know max_tokens.
        key = "max_completion_tokens" if self.official else "max_tokens"
        return {**self._common(request), **chat_body(request, output, max_tokens_key=key)}

    async def _streamed(self, params: dict[str, Any], chars: int) -> AsyncGenerator[Piece, None]:
        import openai

        reader = ChatReader(chars)
        try:
            with self.sending(chars):
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

    async def _unstreamed(self, params: dict[str, Any], chars: int | None) -> AsyncGenerator[Piece, None]:
        with self.sending(chars):
            answer = await self._client.chat.completions.create(**params)
        reader = ChatReader(0)
        reader.take_answer(answer)
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
            params["tools"] = [{"type": "function", **function_tool(tool), "strict": False}
                               for tool in plain_tools(request.tools)]
        if request.tool_choice is not None:
            params["tool_choice"] = TOOL_CHOICE[request.tool_choice]
        if request.effort is not None:
            params["reasoning"] = {"effort": request.effort}
        wanted = json_format(request, output)
        if wanted is not None and wanted.mode == "json_schema":
            params["text"] = {"format": {"type": "json_schema", "name": wanted.name,
                                         "schema": wanted.schema, "strict": True}}
        elif wanted is not None and wanted.mode == "json_object":
            params["text"] = {"format": {"type": "json_object"}}
        return params

    async def _streamed(self, params: dict[str, Any], chars: int) -> AsyncGenerator[Piece, None]:
        import openai

        reader = _ResponsesReader(chars)
        try:
            with self.sending(chars):
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

    async def _unstreamed(self, params: dict[str, Any], chars: int | None) -> AsyncGenerator[Piece, None]:
        with self.sending(chars):
            answer = await self._client.responses.create(**params)
        reader = _ResponsesReader(0)
        reader.final = answer
        for piece in reader.finished():
            yield piece


# ---------------------------------------------------------------------- requests


def responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Responses input items: messages, `function_call` for each tool_use
    and `function_call_output` for each result (thinking blocks are left out)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role") or "user")
        blocks = blocks_of(message.get("content"))
        if role == "assistant":
            text = joined_text(blocks)
            if text:
                items.append({"role": "assistant", "content": text})
            items += [{"type": "function_call", "call_id": b["id"], "name": b["name"],
                       "arguments": json.dumps(b.get("input") or {})} for b in blocks if b.get("type") == "tool_use"]
            continue
        items += [{"type": "function_call_output", "call_id": b["tool_use_id"], "output": result_text(b.get("content"))}
                  for b in blocks if b.get("type") == "tool_result"]
        text = joined_text(blocks)
        if text:
            items.append({"role": role, "content": text})
    return items


# ---------------------------------------------------------------------- responses


@dataclass
class _ResponsesReader(StreamReader):
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

