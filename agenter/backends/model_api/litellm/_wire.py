"""The LiteLLM wire: agenter's own agent (the harness) and the context path over
`litellm.acompletion`, which reaches every provider LiteLLM knows and answers each in the Chat
Completions shape. The conversion is `model_api/_chat.py`'s, shared with the openai backend's
Chat Completions wire; what is LiteLLM's is here:

- the call: the model string ("provider/model"), `api_key` and `api_base` when given, LiteLLM's
  own retries off (`num_retries=0`, `max_retries=0`: every attempt is the harness's),
  `drop_params` (LiteLLM drops what a provider does not take), `litellm_extra` beside;
- what LiteLLM passes on to providers that have it: prompt caching as
  `cache_control_injection_points` (the system prompt and the newest message; only for models
  LiteLLM says support prompt caching, and never on one-off requests), `reasoning_effort`,
  `thinking` (a budget: `{"type": "enabled", "budget_tokens": N}`), Anthropic's signed thinking
  blocks kept and sent back as `thinking_blocks` (the API refuses a tool-use turn without them),
  structured output as `response_format`, stop sequences;
- the model's output ceiling from LiteLLM's model map (`get_model_info`), so a response cut off
  at max_tokens is retried once with more room;
- usage: LiteLLM's, with cache reads and cache writes apart (`_completion.chat_usage`); the cost
  of each response is LiteLLM's own price (`cost_per_token`, cache reads and writes included)
  when its model map knows the model, else None and the ledger prices it with genai-prices;
- a stream that ends early: LiteLLM closes every stream with a finish_reason ("stop" when the
  provider sent none), so the wire asks its stream wrapper whether the provider sent one
  (`received_finish_reason`); none is StreamIncomplete, retried like a dropped connection, and so
  is a stream that broke off (LiteLLM raises MidStreamFallbackError, a 503 by its status, with
  the connection error inside);
- failures: LiteLLM's exceptions subclass the openai client's (`_completion.openai_failure`: the
  status, the headers, LiteLLM's class name as the error type).

Limits: no provider-defined tools; images are not sent; `litellm` is imported only when the
backend connects (its import takes seconds).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

from agenter._types import Usage
from agenter.backends._failures import Failure, StreamIncomplete, is_transport_error
from agenter.backends.model_api._chat import ChatReader, chat_body, prompt_chars
from agenter.backends.model_api._completion import OutputFormat, openai_failure
from agenter.backends.model_api._harness.wire import Piece, Running, WireFeatures, WireRequest, WireResponse, drain

__all__ = ["CACHE_POINTS", "LiteLLMWire", "model_facts"]

#: Where LiteLLM marks the prompt cacheable (a provider's cached prefix ends at a mark): the
#: system prompt (with the tools before it) and the newest message (the conversation so far).
CACHE_POINTS = ({"location": "message", "role": "system"}, {"location": "message", "index": -1})


def model_facts(litellm: Any, model: str) -> tuple[int | None, bool]:
    """What LiteLLM's model map says of `model`: its largest max_tokens (None: unknown) and
    whether it supports prompt caching (False when unknown)."""
    ceiling: int | None = None
    try:
        info = litellm.get_model_info(model)
        value = info.get("max_output_tokens") or info.get("max_tokens")
        ceiling = int(value) if isinstance(value, int) and value > 0 else None
    except Exception:  # noqa: BLE001 - a model LiteLLM does not map: nothing known
        pass
    try:
        caching = bool(litellm.utils.supports_prompt_caching(model=model))
    except Exception:  # noqa: BLE001 - as above
        caching = False
    return ceiling, caching


class LiteLLMWire:
    """litellm.acompletion as a harness wire (see the module docstring)."""

    api_label = "LiteLLM"
    auth_hint = "check api_key (or the provider's own key variable LiteLLM reads, e.g. OPENAI_API_KEY)"

    def __init__(self, litellm: Any, *, model: str, call: Mapping[str, Any], streaming: bool = True,
                 prompt_caching: bool = False, output_limit: int | None = None):
        self._litellm = litellm
        self.model = model
        #: What every call carries besides the request: credentials, api_base, timeout,
        #: drop_params, litellm_extra.
        self.call = dict(call)
        self.streaming = streaming
        self.prompt_caching = prompt_caching
        self.features = WireFeatures(native_tools=True, cache_marks=prompt_caching, thinking=True,
                                     provider_tools=False, structured_output=True, output_limit=output_limit)

    def params(self, request: WireRequest, output: OutputFormat | None = None) -> dict[str, Any]:
        """The keyword arguments of litellm.acompletion for `request`."""
        params: dict[str, Any] = {**self.call, "model": self.model, "num_retries": 0, "max_retries": 0}
        params.update(chat_body(request, output, thinking_blocks=True))
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if isinstance(request.thinking, int):
            params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking}
        elif request.thinking == "disabled":
            params["thinking"] = {"type": "disabled"}
        if request.timeout is not None:
            params["timeout"] = request.timeout
        if request.cache and self.prompt_caching:
            params["cache_control_injection_points"] = [dict(point) for point in CACHE_POINTS]
        return params

    def stream(self, request: WireRequest, *, output: OutputFormat | None = None) -> AsyncGenerator[Piece, None]:
        """The response's pieces (see the ModelWire protocol). `output`: the context path's JSON
        format, instead of `request.output_schema`."""
        params = self.params(request, output)
        if self.streaming:
            return self._streamed(params, prompt_chars(request))
        return self._unstreamed(params)

    async def complete(self, request: WireRequest, *, output: OutputFormat | None = None) -> WireResponse:
        return await drain(self._unstreamed(self.params(request, output)))

    async def _streamed(self, params: dict[str, Any], chars: int) -> AsyncGenerator[Piece, None]:
        reader = ChatReader(chars, keep_thinking=True)
        stream: Any = None
        try:
            stream = await self._litellm.acompletion(**params, stream=True, stream_options={"include_usage": True})
            # The request is accepted: its prompt counts from now, also if the stream drops.
            yield Running(reader.estimate())
            async for chunk in stream:
                for piece in reader.feed(chunk):
                    yield piece
        except Exception as exc:
            dropped = _dropped(exc)
            if dropped is not None:
                raise StreamIncomplete(str(dropped) or type(dropped).__name__) from exc
            raise
        finally:
            await _close(stream)
        if reader.finish is None or _ended_early(stream):
            raise StreamIncomplete("the response stream ended before the provider finished the response")
        for piece in self._finished(reader):
            yield piece

    async def _unstreamed(self, params: dict[str, Any]) -> AsyncGenerator[Piece, None]:
        reader = ChatReader(0, keep_thinking=True)
        reader.take_answer(await self._litellm.acompletion(**params))
        for piece in self._finished(reader):
            yield piece

    def _finished(self, reader: ChatReader) -> list[Piece]:
        pieces = reader.finished()
        response = pieces[-1]
        assert isinstance(response, WireResponse)
        response.cost = self.cost(response.usage) if reader.usage is not None else None
        return pieces

    def cost(self, usage: Usage) -> float | None:
        """LiteLLM's price for a response's usage, or None when its model map does not know the
        model (the ledger then prices it with genai-prices, or notes that none is known)."""
        try:
            prompt_cost, completion_cost = self._litellm.cost_per_token(
                model=self.model, prompt_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
                completion_tokens=usage.output_tokens, cache_read_input_tokens=usage.cache_read_tokens,
                cache_creation_input_tokens=usage.cache_write_tokens)
        except Exception:  # noqa: BLE001 - an unmapped model
            return None
        return float(prompt_cost) + float(completion_cost)

    def failure(self, exc: BaseException) -> Failure | None:
        """The Failure an exception of LiteLLM stands for (None: not an API failure)."""
        if isinstance(exc, StreamIncomplete):
            return Failure(str(exc) or type(exc).__name__, connection=True)
        return openai_failure(exc)

    async def close(self) -> None:
        """Nothing to close: LiteLLM keeps its HTTP clients itself, shared by every caller."""


def _dropped(exc: Exception) -> BaseException | None:
    """The transport error behind `exc` when the connection failed (None: another failure): a
    transport error the client let through, or the one LiteLLM wraps in a stream that broke off
    (MidStreamFallbackError, a 5xx by its status, keeps it as `original_exception`)."""
    import openai  # LiteLLM's exceptions subclass the openai client's

    original = getattr(exc, "original_exception", None)
    if isinstance(original, openai.APIConnectionError):
        return original
    for error in (original, exc):
        if isinstance(error, Exception) and not isinstance(error, openai.APIError) and is_transport_error(error):
            return error
    return None


def _ended_early(stream: Any) -> bool:
    """Whether the provider never said the response was complete. LiteLLM's stream wrapper closes
    every stream with a finish_reason ("stop" when the provider sent none) and keeps the one the
    provider sent; a wrapper without that record is trusted."""
    if stream is None or not hasattr(stream, "received_finish_reason"):
        return False
    return stream.received_finish_reason is None and getattr(stream, "intermittent_finish_reason", None) is None


async def _close(stream: Any) -> None:
    """Close LiteLLM's stream (and its HTTP response), also when the turn is cancelled."""
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # noqa: BLE001 - the response is complete or already failed
        pass
