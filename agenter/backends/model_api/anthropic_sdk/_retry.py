"""Retry policy for Messages API requests: which failures are worth another attempt, how long to
wait before it, and the BackendError for those that are not.

The SDK's own retries are off (the client is built with max_retries=0) so that every retry is a
STATUS message the caller sees, and so that a stream dropped mid-response is retried too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agenter._errors import BackendError
from agenter.host.retry import retry_delay

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
#: Exponential backoff without a retry-after header: 0.5 s, 1 s, 2 s, ... up to this.


class StreamIncomplete(Exception):
    """The response stream ended before message_stop (the connection dropped)."""


@dataclass(frozen=True)
class Retry:
    """Another attempt: why (for the STATUS message) and after how many seconds."""

    summary: str
    delay: float


class RetryPolicy:
    """Decides, per failed attempt, between another attempt and a BackendError."""

    def __init__(self, *, max_retries: int, max_wait: float, backend: str, auth_hint: str,
                 redact: Callable[[str], str]):
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.backend = backend
        self.auth_hint = auth_hint
        self.redact = redact

    def decide(self, exc: BaseException, attempt: int) -> Retry | None:
        """A Retry for attempt number `attempt` (0-based) that failed with `exc`; raises
        BackendError when it is final; None when `exc` is no API failure (the caller re-raises)."""
        import anthropic

        if isinstance(exc, anthropic.APIStatusError):
            return self._status_error(exc, attempt)
        if isinstance(exc, anthropic.APIConnectionError | StreamIncomplete):
            summary = "a dropped connection" if isinstance(exc, StreamIncomplete) else "a connection error"
            if attempt >= self.max_retries:
                raise BackendError(f"Anthropic API unreachable after {attempt + 1} attempts "
                                   f"({self.redact(str(exc)) or type(exc).__name__})",
                                   backend=self.backend, kind="transient") from None
            return Retry(summary, retry_delay(attempt, None, self.max_wait))
        return None

    def _status_error(self, exc: Any, attempt: int) -> Retry:
        status: int = exc.status_code
        if status in (401, 403):
            raise BackendError(f"authentication failed ({status}): {self.auth_hint}",
                               backend=self.backend, status_code=status) from None
        kind = error_type(exc.body)
        headers = exc.response.headers if exc.response is not None else None
        retryable = status in RETRYABLE_STATUS or status >= 500 or kind in RETRYABLE_ERROR_TYPES
        if headers is not None and headers.get("x-should-retry") == "false":
            retryable = False
        summary = f"{status} {kind or ''}".strip()
        if not retryable or attempt >= self.max_retries:
            detail = self.redact(error_message(exc))
            tried = f" after {attempt + 1} attempts" if retryable else ""
            raise BackendError(f"Anthropic API error {summary}{tried}: {detail}", backend=self.backend,
                               status_code=status, kind=_kind(status, kind, detail)) from None
        return Retry(summary, retry_delay(attempt, headers, self.max_wait))


def error_type(body: Any) -> str | None:
    """The API's error type ("overloaded_error", ...) from an error body."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return error.get("type")
        return body.get("type") if body.get("type") != "error" else None
    return None


def error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
        return str(body["error"]["message"])
    return str(getattr(exc, "message", None) or exc)


def is_transport_error(exc: BaseException) -> bool:
    """httpx transport failures (a dropped stream) that the SDK lets through while iterating."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        module = type(current).__module__ or ""
        if module.startswith(("httpx", "httpcore", "h11")) or isinstance(current, ConnectionError | EOFError):
            return True
        current = current.__cause__ or current.__context__
    return False


#: How the API says a request does not fit the context window (400 invalid_request_error):
#: "prompt is too long: 210000 tokens > 200000 maximum", and on models that count the output
#: limit in, "input length and `max_tokens` exceed context limit: 199000 + 21333 > 200000, ...".
CONTEXT_OVERFLOW_MESSAGES = ("prompt is too long", "exceed context limit")


def is_context_overflow(status: int, detail: str) -> bool:
    """An API error that says the conversation no longer fits (compaction may help)."""
    lowered = detail.lower()
    return status in (400, 413) and any(text in lowered for text in CONTEXT_OVERFLOW_MESSAGES)


def _kind(status: int, error_kind: str | None, detail: str) -> str | None:
    """Failure classes the status code alone does not tell (None: derive from the status)."""
    if error_kind == "billing_error":
        return "quota"
    if is_context_overflow(status, detail):
        return "context_length"
    return None
