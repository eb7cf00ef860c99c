"""The Gemini wire (the Gemini API, or Gemini on Vertex AI) for the harness, over the google-genai
SDK: the client, the request (_events.py writes it), the stream read into one response, the
output-token ceilings of Gemini models, and the SDK's exceptions as Failures. The
`google-genai` package is imported only when the backend connects.

The client is agenter's google-genai client (`agenter.backends._genai`, shared with google-adk):
an httpx client of agenter's own, so `request_timeout` bounds each read (the wait between
chunks), and the SDK's own retries off (`HttpRetryOptions(attempts=1)`): nothing is retried but
by the harness.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from agenter.backends._failures import Failure, StreamIncomplete, is_transport_error
from agenter.backends._genai import MISSING_KEY, api_key_of, genai_failure, make_genai_client
from agenter.backends.model_api._harness.wire import Piece, Running, WireFeatures, WireRequest, WireResponse
from agenter.backends.model_api.gemini._events import ResponseReader, contents, generation_config

if TYPE_CHECKING:
    from agenter.backends.model_api.gemini._options import GeminiOptions

__all__ = ["MISSING_KEY", "GeminiWire", "make_client", "model_output_limit"]

#: Output-token ceilings per model family (substring match, most specific first), for the
#: one-time max_tokens escalation after a cut-off response.
_MODEL_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("gemini-3", 65536), ("gemini-2.5", 65536), ("gemini-2.0-flash-thinking", 65536), ("gemini-2.0", 8192),
    ("gemini-1.5", 8192),
)


def model_output_limit(model: str) -> int | None:
    for fragment, limit in _MODEL_OUTPUT_LIMITS:
        if fragment in model:
            return limit
    return None


def make_client(options: GeminiOptions, keep_secret: Callable[[str | None], None]) -> tuple[Any, Any]:
    """The SDK client for these options and the httpx client it sends through (see
    agenter.backends._genai), with the SDK's own retries off: the harness retries."""
    return make_genai_client(key=api_key_of(options.api_key), base_url=options.base_url,
                             request_timeout=options.request_timeout, keep_secret=keep_secret,
                             vertex=options.gemini_vertex, project=options.gemini_project,
                             location=options.gemini_location)


class GeminiWire:
    """The Gemini API (generateContent, streamGenerateContent) as a harness wire (see
    _harness/wire.py for the protocol)."""

    def __init__(self, client: Any, http: Any, *, model: str, include_thoughts: bool, vertex: bool = False):
        self._client = client
        self._http = http
        self.model = model
        self.include_thoughts = include_thoughts
        self.api_label = "Vertex AI Gemini API" if vertex else "Gemini API"
        self.auth_hint = ("check your Google Cloud credentials (or the Vertex AI API key)" if vertex
                          else "check GEMINI_API_KEY (or GOOGLE_API_KEY)")
        # Gemini caches repeated prefixes by itself (implicit caching): no marks to place.
        self.features = WireFeatures(native_tools=True, cache_marks=False, thinking=True, provider_tools=False,
                                     structured_output=True, output_limit=model_output_limit(model))

    def params(self, request: WireRequest) -> dict[str, Any]:
        """The SDK call's arguments for `request` (dicts the SDK validates into its types)."""
        return {"model": self.model, "contents": contents(request.messages),
                "config": generation_config(request, include_thoughts=self.include_thoughts)}

    async def stream(self, request: WireRequest) -> AsyncGenerator[Piece, None]:
        from google.genai import errors

        reader = ResponseReader()
        try:
            chunks = await self._client.aio.models.generate_content_stream(**self.params(request))
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    usage_before = reader.usage
                    pieces = reader.feed(chunk)
                    if reader.usage != usage_before and not reader.finished:
                        yield Running(reader.usage)
                    for piece in pieces:
                        yield piece
        except errors.UnknownApiResponseError as exc:
            # The SDK parses what is left of a cut stream as one last chunk.
            raise StreamIncomplete(f"the response stream ended in an unreadable chunk ({exc})") from exc
        except Exception as exc:
            if not isinstance(exc, errors.APIError) and is_transport_error(exc):
                raise StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        if not reader.finished:
            raise StreamIncomplete("the response stream ended before a finish reason")
        yield reader.response()

    async def complete(self, request: WireRequest) -> WireResponse:
        answer = await self._client.aio.models.generate_content(**self.params(request))
        reader = ResponseReader()
        reader.feed(answer)
        return reader.response()

    def failure(self, exc: BaseException) -> Failure | None:
        """The Failure a google-genai exception stands for (None: not an API failure)."""
        return genai_failure(exc)

    async def close(self) -> None:
        client, self._client = self._client, None
        http, self._http = self._http, None
        try:
            if client is not None:
                client.close()  # the SDK's own (sync) httpx client; ours is closed below
            if http is not None:
                await http.aclose()
        except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
            pass
