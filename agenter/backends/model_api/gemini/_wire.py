"""The Gemini wire (the Gemini API, or Gemini on Vertex AI) for the harness, over the google-genai
SDK: the client, the request (_events.py writes it), the stream read into one response, the
output-token ceilings of Gemini models, and the SDK's exceptions as Failures. The
`google-genai` package is imported only when the backend connects.

The client is given an httpx client of agenter's own (an option the SDK has, `httpx_async_client`),
so that it behaves the same whether aiohttp is installed or not: with aiohttp the SDK would put
one total timeout on a whole stream and retry a refused connection by itself; with this client
`request_timeout` bounds each read (the wait between chunks) and nothing is retried but by the
harness. The SDK's own retries are off (`HttpRetryOptions(attempts=1)`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import ssl
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agenter._errors import ConfigurationError
from agenter.backends._failures import Failure, StreamIncomplete, is_transport_error
from agenter.backends.model_api._harness.wire import Piece, Running, WireFeatures, WireRequest, WireResponse
from agenter.backends.model_api.gemini._events import ResponseReader, contents, generation_config

if TYPE_CHECKING:
    from agenter.backends.model_api.gemini._options import GeminiOptions

MISSING_KEY = ("no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) or pass api_key=... "
               "(or gemini_vertex=True with Application Default Credentials)")
#: Output-token ceilings per model family (substring match, most specific first), for the
#: one-time max_tokens escalation after a cut-off response.
_MODEL_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("gemini-3", 65536), ("gemini-2.5", 65536), ("gemini-2.0-flash-thinking", 65536), ("gemini-2.0", 8192),
    ("gemini-1.5", 8192),
)
#: A google.rpc.RetryInfo delay ("1.5s") in an error's details.
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def model_output_limit(model: str) -> int | None:
    for fragment, limit in _MODEL_OUTPUT_LIMITS:
        if fragment in model:
            return limit
    return None


def api_key_of(options: GeminiOptions) -> str | None:
    """The key: the option, else GOOGLE_API_KEY, else GEMINI_API_KEY (the SDK's own order)."""
    if options.api_key is not None:
        return options.api_key.get_secret_value()
    return os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or None


def make_client(options: GeminiOptions, keep_secret: Callable[[str | None], None]) -> tuple[Any, Any]:
    """The SDK client (Vertex AI's with gemini_vertex) and the httpx client it sends through
    (closed with it). Raises ConfigurationError without credentials; the key goes to
    `keep_secret` (the Redactor's `add`)."""
    import httpx
    from google import genai
    from google.genai import types

    key = api_key_of(options)
    if key is None and not options.gemini_vertex:
        raise ConfigurationError(MISSING_KEY, parameter="api_key")
    keep_secret(key)
    # Loading the trust store costs ~150 ms: built once per process, shared by every session's clients.
    context = _shared_ssl_context()
    http = httpx.AsyncClient(verify=context, timeout=options.request_timeout)
    http_options = types.HttpOptions(
        base_url=options.base_url, timeout=int(options.request_timeout * 1000),
        retry_options=types.HttpRetryOptions(attempts=1), httpx_async_client=http,
        client_args={"verify": context})
    try:
        if options.gemini_vertex and key:  # Vertex AI express mode: the key alone
            client = genai.Client(vertexai=True, api_key=key, http_options=http_options)
        elif options.gemini_vertex:  # Application Default Credentials, in a project and a location
            client = genai.Client(vertexai=True, project=options.gemini_project, location=options.gemini_location,
                                  http_options=http_options)
        else:
            # vertexai=False: GOOGLE_GENAI_USE_VERTEXAI is not read (gemini_vertex says it).
            client = genai.Client(vertexai=False, api_key=key, http_options=http_options)
    except Exception as exc:  # the SDK's ValueError, or google-auth's missing default credentials
        raise ConfigurationError(f"the Gemini client could not be built: {exc}", parameter="api_key") from exc
    return client, http


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
        from google.genai import errors

        if isinstance(exc, errors.APIError):
            response = getattr(exc, "response", None)
            headers = _with_retry_hint(getattr(response, "headers", None), exc.details)
            return Failure(str(exc.message or exc), int(exc.code) if exc.code else None, headers,
                           error_type=exc.status or None)
        if isinstance(exc, StreamIncomplete) or is_transport_error(exc):
            return Failure(str(exc) or type(exc).__name__, connection=True)
        return None

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


def _with_retry_hint(headers: Mapping[str, str] | None, details: Any) -> Mapping[str, str] | None:
    """The response's headers, with the body's RetryInfo delay as `retry-after` when the headers
    carry none (the Gemini API says when to come back in the error's details)."""
    delay = _retry_delay(details)
    if delay is None:
        return headers
    found = dict(headers or {})
    if not any(name.lower() in ("retry-after", "retry-after-ms") for name in found):
        found["retry-after"] = delay
    return found


def _retry_delay(details: Any) -> str | None:
    error = details.get("error", details) if isinstance(details, dict) else None
    for detail in (error or {}).get("details") or []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return match.group(1)
    return None


@functools.lru_cache(maxsize=1)
def _shared_ssl_context() -> ssl.SSLContext:
    """The trust store the SDK itself would load (SSL_CERT_FILE, else certifi's bundle; and
    SSL_CERT_DIR), once per process for every session."""
    import certifi

    return ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE", certifi.where()),
                                      capath=os.environ.get("SSL_CERT_DIR"))
