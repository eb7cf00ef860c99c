"""The Anthropic Messages wire (the API itself or Claude on AWS Bedrock) for the harness: the
client, the request (cache marks on the system prompt, the last tool and the two newest user
messages; thinking and effort), the stream read into one response (_events.py), Anthropic's stop
reasons in the wire protocol's words, the output-token ceilings of its models, and its
exceptions as Failures. The `anthropic` package is imported only when the backend connects.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agenter._errors import ConfigurationError
from agenter.backends._failures import Failure, StreamIncomplete, error_message, error_type, is_transport_error
from agenter.backends.model_api._harness.wire import (
    BlockDone,
    Delta,
    Piece,
    Running,
    WireFeatures,
    WireRequest,
    WireResponse,
)
from agenter.backends.model_api.anthropic_sdk._events import (
    CACHE_MARK,
    StreamAccumulator,
    api_usage,
    neutral_stop,
    text_delta,
    with_cache_marks,
)

if TYPE_CHECKING:
    from agenter.backends.model_api.anthropic_sdk._options import AnthropicSDKOptions

# Output-token ceilings per model family (substring match, most specific first), for the
# one-time max_tokens escalation after a cut-off response.
_MODEL_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("sonnet-5", 128000), ("opus-5", 128000), ("haiku-5", 128000), ("fable-5", 128000),
    ("mythos-5", 128000), ("opus-4-5", 64000), ("opus-4-6", 64000), ("opus-4-7", 64000),
    ("opus-4-8", 64000), ("opus-4-1", 32000), ("opus-4-0", 32000), ("opus-4", 32000),
    ("sonnet-4", 64000), ("haiku-4", 64000), ("3-7-sonnet", 64000), ("3-5-haiku", 8192),
    ("3-5-sonnet", 8192), ("3-haiku", 4096),
)
_TOOL_CHOICE = {"auto": {"type": "auto"}, "any": {"type": "any"}, "none": {"type": "none"}}


def model_output_limit(model: str) -> int | None:
    for fragment, limit in _MODEL_OUTPUT_LIMITS:
        if fragment in model:
            return limit
    return None


def make_client(options: AnthropicSDKOptions, keep_secret: Callable[[str | None], None]) -> Any:
    """The async client (Bedrock's with anthropic_bedrock), its own retries off. Raises
    ConfigurationError without a key; the key goes to `keep_secret` (the Redactor's `add`)."""
    import anthropic

    common: dict[str, Any] = {"max_retries": 0, "timeout": options.request_timeout}
    if options.base_url:
        common["base_url"] = options.base_url
    if options.anthropic_bedrock:
        def secret(value: Any) -> str | None:
            return value.get_secret_value() if value is not None else None

        return anthropic.AsyncAnthropicBedrock(
            aws_region=options.anthropic_aws_region, aws_profile=options.anthropic_aws_profile,
            aws_access_key=secret(options.anthropic_aws_access_key),
            aws_secret_key=secret(options.anthropic_aws_secret_key),
            aws_session_token=secret(options.anthropic_aws_session_token), **common)
    api_key = options.api_key.get_secret_value() if options.api_key else os.environ.get("ANTHROPIC_API_KEY")
    if not api_key and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        raise ConfigurationError(
            "no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key=...", parameter="api_key")
    keep_secret(api_key)
    # Loading the trust store costs ~150 ms; build it once per process, not per session.
    http_client = anthropic.DefaultAsyncHttpxClient(verify=_shared_ssl_context())
    return anthropic.AsyncAnthropic(api_key=api_key, http_client=http_client, **common)


class AnthropicWire:
    """The Messages API as a harness wire (see _harness/wire.py for the protocol)."""

    api_label = "Anthropic API"

    def __init__(self, client: Any, *, model: str, prompt_caching: bool, bedrock: bool = False):
        self._client = client
        self.model = model
        self.prompt_caching = prompt_caching
        self.auth_hint = "check your AWS credentials" if bedrock else "check ANTHROPIC_API_KEY"
        self.features = WireFeatures(native_tools=True, cache_marks=prompt_caching, thinking=True,
                                     provider_tools=True, output_limit=model_output_limit(model))

    def params(self, request: WireRequest) -> dict[str, Any]:
        """The Messages API's parameters for `request`."""
        if request.output_schema is not None:
            raise ValueError("the Anthropic wire takes no output_schema: structured output goes through a tool")
        caching = request.cache and self.prompt_caching
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if caching:
            system["cache_control"] = dict(CACHE_MARK)
        params: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens, "system": [system]}
        if request.tools:
            params["tools"] = _marked_tools(request.tools) if caching else list(request.tools)
        params["messages"] = with_cache_marks(request.messages) if caching else request.messages
        if request.temperature is not None:
            params["temperature"] = request.temperature
        thinking = request.thinking
        if isinstance(thinking, int):
            params["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        elif thinking is not None:
            params["thinking"] = {"type": thinking}
        if request.effort is not None:
            params["output_config"] = {"effort": request.effort}
        if request.tool_choice is not None:
            params["tool_choice"] = _TOOL_CHOICE[request.tool_choice]
        if request.timeout is not None:
            params["timeout"] = request.timeout
        return params

    async def stream(self, request: WireRequest) -> AsyncGenerator[Piece, None]:
        import anthropic

        response = StreamAccumulator()
        try:
            stream = await self._client.messages.create(**self.params(request), stream=True)
            async with stream:
                async for event in stream:
                    usage_before = response.usage
                    completed = response.feed(event)
                    if response.usage is not usage_before and not response.finished:
                        yield Running(response.usage)
                    delta = text_delta(event)
                    if delta:
                        # Streamed as it arrives; the whole text that follows is not sent again.
                        yield Delta(delta, raw=event)
                    if completed is not None and completed.type in ("text", "thinking"):
                        block = completed.to_param()
                        if block is not None:
                            yield BlockDone(block)
        except Exception as exc:
            if not isinstance(exc, anthropic.APIError) and is_transport_error(exc):
                raise StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        if not response.finished:
            raise StreamIncomplete("the response stream ended before message_stop")
        yield response.response()

    async def complete(self, request: WireRequest) -> WireResponse:
        answer = await self._client.messages.create(**self.params(request))
        reason = getattr(answer, "stop_reason", None)
        content = [_block_of(block) for block in getattr(answer, "content", None) or []]
        return WireResponse(content=[b for b in content if b is not None], stop=neutral_stop(reason),
                            usage=api_usage(getattr(answer, "usage", None)), stop_detail=reason)

    def failure(self, exc: BaseException) -> Failure | None:
        """The Failure an anthropic exception stands for (None: not an API failure)."""
        import anthropic

        if isinstance(exc, anthropic.APIStatusError):
            headers = exc.response.headers if exc.response is not None else None
            return Failure(error_message(exc), exc.status_code, headers, error_type=error_type(exc.body))
        if isinstance(exc, anthropic.APIConnectionError | StreamIncomplete):
            return Failure(str(exc) or type(exc).__name__, connection=True)
        return None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
                pass


def _marked_tools(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tool definitions with a cache mark on the last one (the system prompt and the tools
    are one cached prefix)."""
    marked = list(tools)
    marked[-1] = {**marked[-1], "cache_control": dict(CACHE_MARK)}
    return marked


def _block_of(block: Any) -> dict[str, Any] | None:
    """A content block of an unstreamed answer in the neutral form (None: nothing to keep)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": getattr(block, "text", "")}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input or {})}
    dump = getattr(block, "model_dump", None)
    return dump(exclude_none=True) if dump is not None else None


@functools.lru_cache(maxsize=1)
def _shared_ssl_context() -> ssl.SSLContext:
    """The system trust store (honours SSL_CERT_FILE / SSL_CERT_DIR), shared by all sessions."""
    return ssl.create_default_context()
