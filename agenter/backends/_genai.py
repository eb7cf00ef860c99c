"""The google-genai client as agenter builds it, and what its answers mean, for the backends that
reach Gemini through google-genai: `gemini` (agenter's own agent) and `google-adk` (ADK's agent,
whose `Gemini` model is handed this client).

The client is given an httpx client of agenter's own (the SDK's `httpx_async_client` option), so
that it behaves the same whether aiohttp is installed or not: with aiohttp the SDK would put one
total timeout on a whole stream and retry a refused connection by itself; with this client
`request_timeout` bounds each read (the wait between chunks). The SDK's own retries are what the
caller asks for (`attempts`): one attempt for the harness, which retries itself.

Imports google-genai only inside the functions that need it (the callers run them at connect).
"""

from __future__ import annotations

import functools
import os
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from agenter._errors import ConfigurationError
from agenter._types import Usage
from agenter.backends._failures import Failure, StreamIncomplete, is_transport_error

__all__ = ["MISSING_KEY", "REFUSAL_REASONS", "api_key_of", "api_usage", "genai_failure", "make_genai_client"]

MISSING_KEY = ("no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) or pass api_key=... "
               "(or gemini_vertex=True with Application Default Credentials)")
#: Finish reasons that mean the provider stopped the answer for its content (the turn ends refused).
REFUSAL_REASONS = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                             "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"})
#: A google.rpc.RetryInfo delay ("1.5s") in an error's details.
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def api_key_of(explicit: Any) -> str | None:
    """The key: the option (a SecretStr or a str), else GOOGLE_API_KEY, else GEMINI_API_KEY (the
    SDK's own order)."""
    if explicit is not None:
        return str(explicit.get_secret_value() if hasattr(explicit, "get_secret_value") else explicit)
    return os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or None


def make_genai_client(*, key: str | None, base_url: str | None, request_timeout: float,
                      keep_secret: Callable[[str | None], None], attempts: int = 1, vertex: bool = False,
                      project: str | None = None, location: str | None = None,
                      missing_key: str = MISSING_KEY) -> tuple[Any, Any]:
    """The SDK client (Vertex AI's with `vertex`: express mode with a key, else Application
    Default Credentials in `project` and `location`) and the httpx client it sends through
    (closed with it). `attempts`: the SDK's tries per request (1: no retry). Raises
    ConfigurationError without credentials; the key goes to `keep_secret` (the Redactor's
    `add`)."""
    import httpx
    from google import genai
    from google.genai import types

    if key is None and not vertex:
        raise ConfigurationError(missing_key, parameter="api_key")
    keep_secret(key)
    # Loading the trust store costs ~150 ms: built once per process, shared by every session's clients.
    context = _shared_ssl_context()
    http = httpx.AsyncClient(verify=context, timeout=request_timeout)
    http_options = types.HttpOptions(
        base_url=base_url, timeout=int(request_timeout * 1000),
        retry_options=types.HttpRetryOptions(attempts=attempts), httpx_async_client=http,
        client_args={"verify": context})
    try:
        if vertex and key:  # Vertex AI express mode: the key alone
            client = genai.Client(vertexai=True, api_key=key, http_options=http_options)
        elif vertex:  # Application Default Credentials, in a project and a location
            client = genai.Client(vertexai=True, project=project, location=location, http_options=http_options)
        else:
            # vertexai=False: GOOGLE_GENAI_USE_VERTEXAI is not read (the option says it).
            client = genai.Client(vertexai=False, api_key=key, http_options=http_options)
    except Exception as exc:  # the SDK's ValueError, or google-auth's missing default credentials
        raise ConfigurationError(f"the Gemini client could not be built: {exc}", parameter="api_key") from exc
    return client, http


def api_usage(metadata: Any) -> Usage:
    """Gemini's usage_metadata as agenter's Usage: input is the prompt less its cached part (plus
    the tool-use prompt), output the candidates and the thoughts (billed as output)."""
    prompt = int(_get(metadata, "prompt_token_count", 0))
    cached = int(_get(metadata, "cached_content_token_count", 0))
    tool_prompt = int(_get(metadata, "tool_use_prompt_token_count", 0))
    output = int(_get(metadata, "candidates_token_count", 0)) + int(_get(metadata, "thoughts_token_count", 0))
    return Usage(input_tokens=max(prompt - cached, 0) + tool_prompt, output_tokens=output, cache_read_tokens=cached)


def genai_failure(exc: BaseException) -> Failure | None:
    """The Failure a google-genai exception stands for (None: not an API failure): an APIError's
    status, message, google.rpc status and retry hint; a transport error or a cut stream as a
    connection failure."""
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        response = getattr(exc, "response", None)
        headers = _with_retry_hint(getattr(response, "headers", None), exc.details)
        return Failure(str(exc.message or exc), int(exc.code) if exc.code else None, headers,
                       error_type=exc.status or None)
    if isinstance(exc, StreamIncomplete) or is_transport_error(exc):
        return Failure(str(exc) or type(exc).__name__, connection=True)
    return None


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Attribute or key access: the SDK's pydantic objects and plain dicts alike (None: default)."""
    value = obj.get(key, default) if isinstance(obj, Mapping) else getattr(obj, key, default)
    return default if value is None else value


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
