"""What a failed model call means: the one failure classifier every backend uses (pure, no
third-party imports).

Backends meet API failures in two forms: an SDK exception with an HTTP status and a JSON body
(anthropic-sdk, openai, litellm), or text an agent program printed ("API Error: 429 ...",
"unexpected status 401", "litellm.RateLimitError: ..."). Both become a `Failure` (the HTTP status
when known, the provider's error type when known, the message), and `classify_failure` says what
it is: a BackendError kind (agenter._errors.ERROR_KINDS, the classes a fallback chain acts on)
and whether another attempt at the same API may succeed. How long to wait before that attempt
is agenter.host.retry's (`Verdict.wait`). `classify` is the same for a program's text.

The rules:
- no HTTP answer at all (refused, dropped, timed out): `transient`, retried;
- no status: the kind the provider's error type or its words name (`KNOWN_FAILURES`), else
  `unknown`;
- a status: its kind (agenter._errors.kind_of_status: 401/403 auth, 402 quota, 429 rate_limit,
  413 context_length, 408/409/5xx transient, other 4xx config), made more precise by the type or
  the words where the status is ambiguous (`REFINES`): a 400 about the credit balance is
  `quota` (Anthropic sends exactly that when credit runs out), a 400 about the context window
  `context_length`, a 429 about the billing plan `quota`. A 500 stays `transient` whatever it says.
- where the type and the words name different kinds, the earlier one in `KIND_ORDER` wins
  (a rate-limit exception whose message is about the quota is `quota`).
- retried: a dropped connection, 408, 409, 429, any 5xx, and the error types marked `retry=True`
  (Anthropic's overloaded_error sent inside a stream answered 200); never the types marked
  `retry=False` (no credit left is not cured by waiting) nor an answer with `x-should-retry:
  false`.

Limits: the words are the English phrases providers and programs send today; a provider that
rewords a message gets its status's kind. An error type is matched exactly (case included).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agenter._errors import ERROR_KINDS, kind_of_status
from agenter.host.retry import retry_delay

__all__ = [
    "ANOTHER_BACKEND_MAY_FIX", "ERROR_KINDS", "KIND_ORDER", "KNOWN_FAILURES", "REFINES", "RETRYABLE_STATUS",
    "Failure", "Known", "StreamIncomplete", "Verdict", "classify", "classify_failure", "error_message",
    "error_type", "is_transport_error", "kind_of_type", "status_in",
]

#: The kinds a type or words can name, in the order that decides when they name two.
KIND_ORDER = ("quota", "context_length", "auth", "rate_limit", "transient", "config")
#: Kinds another backend (another account, provider or program) may not suffer from: a fallback
#: chain moves on for these by default. Not "config" (a bad request fails anywhere) nor "unknown".
ANOTHER_BACKEND_MAY_FIX = ("missing_program", "auth", "quota", "rate_limit", "transient", "context_length",
                           "agent_crash")
#: Statuses worth another attempt besides every 5xx (and dropped connections).
RETRYABLE_STATUS = frozenset({408, 409, 429})
#: Where a status's kind is ambiguous: the kinds its error type or words may make of it.
REFINES: dict[int, frozenset[str]] = {
    400: frozenset({"quota", "context_length", "auth"}),  # credit balance; context window; Gemini's bad key
    403: frozenset({"quota", "context_length"}),
    413: frozenset({"quota", "context_length"}),
    429: frozenset({"quota"}),  # a 429 about the plan or billing, not the request rate
}


@dataclass(frozen=True)
class Known:
    """One way a provider or program says what went wrong: its error types (codes, exception
    names; exact) and phrases (regular expressions, any case, searched in the message)."""

    kind: str
    source: str
    types: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()
    #: What these error types say of another attempt (None: the status decides).
    retry: bool | None = None


#: Every provider text and error type agenter knows, by kind (in KIND_ORDER). The messages, as
#: the providers send them, are in tests/backends/test_failures.py.
KNOWN_FAILURES: tuple[Known, ...] = (
    # quota: money or an allowance ran out; waiting will not help, another account may.
    Known("quota", "Anthropic", ("billing_error",), (
        r"credit balance",  # 400 invalid_request_error "Your credit balance is too low to access the Anthropic API."
    ), retry=False),
    Known("quota", "OpenAI", ("insufficient_quota",), (
        r"insufficient_quota", r"exceeded your current quota",  # 429 (Gemini says it too)
    ), retry=False),
    Known("quota", "Gemini", (), (r"quota exceeded", r"quota has been exhausted", r"terminalquotaerror")),
    Known("quota", "LiteLLM", ("BudgetExceededError", "PaymentRequiredError"), (), retry=False),
    Known("quota", "Codex", ("usageLimitExceeded", "sessionBudgetExceeded"), ()),
    # Codex "You've hit your usage limit"; Anthropic 400 "You have reached your specified API usage
    # limits."; but not Claude Code's "Server is temporarily limiting requests (not your usage limit)".
    Known("quota", "Codex, Claude Code, Anthropic", (), (r"(?<!not your )usage limit",)),
    Known("quota", "any (402 texts)", (), (
        r"billing", r"payment required", r"out of credits",
        r"insufficient[_ ](?:balance|credits?|funds)",
    )),
    # context_length: the request does not fit the model; a model with a larger window may take it.
    Known("context_length", "Anthropic", ("request_too_large",), (
        r"prompt is too long",  # 400 "prompt is too long: 210000 tokens > 200000 maximum"
        r"exceed context limit",  # 400 "input length and `max_tokens` exceed context limit: ..."
    )),
    Known("context_length", "OpenAI", ("context_length_exceeded",), (
        r"maximum context length",  # 400 "This model's maximum context length is 128000 tokens. ..."
    )),
    Known("context_length", "Gemini", (), (
        r"exceeds the maximum number of tokens",  # 400 "The input token count (N) exceeds the maximum ..."
    )),
    Known("context_length", "llama.cpp", ("exceed_context_size_error",), (
        r"exceeds the available context size",  # 400 "request (4476 tokens) exceeds the available context size ..."
    )),
    Known("context_length", "LiteLLM", ("ContextWindowExceededError",), (r"contextwindowexceeded",)),
    Known("context_length", "Codex", ("contextWindowExceeded",), (r"context window",)),
    Known("context_length", "any", (), (
        r"context[_ ]length", r"input is too long", r"too many tokens", r"request too large",
        r"exceeds the context",
    )),
    # auth: the key or login is missing, wrong or not allowed here.
    Known("auth", "Anthropic", ("authentication_error", "permission_error"), (r"invalid x-api-key",)),
    Known("auth", "OpenAI", ("invalid_api_key",), (r"incorrect api key",)),
    Known("auth", "Gemini", ("UNAUTHENTICATED", "PERMISSION_DENIED"), (r"api key not valid",)),
    Known("auth", "LiteLLM", ("AuthenticationError", "PermissionDeniedError"), (r"permissiondeniederror",)),
    Known("auth", "Codex", ("unauthorized",), ()),
    Known("auth", "Claude Code", (), (r"not logged in", r"please run /login", r"oauth token",
                                     r"failed to authenticate")),
    Known("auth", "any", (), (
        r"unauthori[sz]ed", r"unauthenticated", r"authentication", r"invalid[ _]api[ _]key",
        r"no api key", r"missing api key",
    )),
    # rate_limit: too many requests or tokens per minute; later, or elsewhere, it goes through.
    Known("rate_limit", "Anthropic", ("rate_limit_error",), (), retry=True),
    Known("rate_limit", "OpenAI", ("rate_limit_exceeded",), ()),
    Known("rate_limit", "Gemini", ("RESOURCE_EXHAUSTED",), (r"resource_exhausted",)),
    Known("rate_limit", "LiteLLM", ("RateLimitError",), ()),
    Known("rate_limit", "Codex", ("rateLimitExceeded",), ()),
    Known("rate_limit", "any", (), (r"rate[ _-]?limit", r"too many requests")),
    # transient: the server or the connection failed this time.
    Known("transient", "Anthropic", ("overloaded_error", "api_error", "timeout_error"), (), retry=True),
    Known("transient", "OpenAI", ("server_error",), ()),
    Known("transient", "Gemini", ("UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"), ()),
    Known("transient", "LiteLLM", ("InternalServerError", "ServiceUnavailableError", "BadGatewayError",
                                   "APIConnectionError", "Timeout", "APIError"), ()),
    Known("transient", "Codex", ("internalServerError", "serverOverloaded", "flexUnavailable",
                                 "policyCapacityUnavailable"), (r"stream disconnected",)),
    Known("transient", "any", (), (
        r"overloaded", r"internal server error", r"internalservererror", r"server error",
        r"service unavailable", r"serviceunavailable", r"bad gateway", r"gateway timeout", r"high demand",
        r"temporar(?:y|ily)", r"apiconnectionerror", r"connection (?:refused|reset|error)", r"timed out",
        r"timeout", r"\bunavailable\b", r"\binternal\b",
    )),
    # config: a request no server of this kind takes (types only: words never say it).
    Known("config", "Anthropic, OpenAI", ("invalid_request_error", "not_found_error"), ()),
    Known("config", "Gemini", ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"), ()),
    Known("config", "LiteLLM", ("BadRequestError", "NotFoundError"), ()),
    Known("config", "Codex", ("modelNotFound", "badRequest"), ()),
)

_BY_TYPE: dict[str, Known] = {name: row for row in KNOWN_FAILURES for name in row.types}
_PHRASES: list[tuple[str, re.Pattern[str]]] = [
    (kind, re.compile("|".join(p for row in KNOWN_FAILURES if row.kind == kind for p in row.phrases), re.IGNORECASE))
    for kind in KIND_ORDER if any(row.phrases for row in KNOWN_FAILURES if row.kind == kind)
]

#: How programs write an HTTP status into their text.
_STATUS_PATTERNS = [
    re.compile(r"(?i)\b(?:status(?:\s*code)?|statusCode|http|api error)\W{0,3}(?:request rejected\s*\()?([45]\d\d)\b"),
    re.compile(r'"(?:code|status|statusCode)"\s*:\s*"?([45]\d\d)\b'),
    re.compile(r"\(([45]\d\d)\)"),
    re.compile(r"\berror code:?\s*([45]\d\d)\b", re.IGNORECASE),
]
#: How programs write an error type into their text: LiteLLM's exception names, JSON fields.
_TYPE_PATTERNS = [re.compile(r"\blitellm\.(\w+)"), re.compile(r'"(?:type|code|status)"\s*:\s*"(\w+)"')]


class StreamIncomplete(Exception):
    """The response stream ended before the server said it was finished (the connection
    dropped): retried like a connection error."""


@dataclass(frozen=True)
class Failure:
    """An API failure as a backend saw it: what the classifier reads."""

    message: str
    status: int | None = None
    #: The server's headers (retry-after, x-should-retry), when it answered.
    headers: Mapping[str, str] | None = None
    #: No HTTP answer: refused, dropped, timed out.
    connection: bool = False
    #: The provider's error type, code or exception name ("rate_limit_error", "insufficient_quota").
    error_type: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What a failure is: its BackendError kind and whether another attempt may succeed."""

    kind: str
    retry: bool
    headers: Mapping[str, str] | None = None

    def wait(self, attempt: int, max_retries: int, cap: float) -> float | None:
        """Seconds before another attempt after attempt number `attempt` (0-based) failed, or
        None when there is none (not retryable, or `max_retries` used up)."""
        if not self.retry or attempt >= max_retries:
            return None
        return retry_delay(attempt, self.headers, cap)


def kind_of_type(error_type: str | None) -> str | None:
    """The kind a provider's error type names (None: unknown to KNOWN_FAILURES)."""
    row = _BY_TYPE.get(error_type or "")
    return row.kind if row is not None else None


def _worded(message: str) -> str | None:
    for kind, pattern in _PHRASES:
        if pattern.search(message):
            return kind
    return None


def classify_failure(failure: Failure) -> Verdict:
    """The kind of `failure` and whether to retry it (the rules: the module docstring)."""
    typed = _BY_TYPE.get(failure.error_type or "")
    named = [kind for kind in (typed.kind if typed else None, _worded(failure.message)) if kind]
    specific = min(named, key=KIND_ORDER.index) if named else None
    status = failure.status
    if status is None:
        kind = "transient" if failure.connection else specific or "unknown"
    else:
        kind = kind_of_status(status)
        if specific is not None and (kind == "unknown" or specific in REFINES.get(status, ())):
            kind = specific
    retry = failure.connection or (status is not None and (status in RETRYABLE_STATUS or status >= 500))
    if typed is not None and typed.retry is not None:
        retry = typed.retry
    headers = failure.headers
    if headers is not None and str(headers.get("x-should-retry", "")).lower() == "false":
        retry = False
    return Verdict(kind, retry, headers)


def status_in(text: str) -> int | None:
    """The first HTTP error status (4xx/5xx) the text mentions, if any."""
    for pattern in _STATUS_PATTERNS:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def _type_in(text: str) -> str | None:
    """The first error type KNOWN_FAILURES knows that the text names (LiteLLM's exception
    names, a JSON body's type, code or status)."""
    for pattern in _TYPE_PATTERNS:
        for match in pattern.finditer(text):
            if match.group(1) in _BY_TYPE:
                return match.group(1)
    return None


def classify(text: str, status_code: int | None = None) -> tuple[str, int | None]:
    """(kind, status) of a failure a program described in `text`: the status given or the one
    the text mentions, the error type it names, its words. Kind "unknown" when none tells."""
    status = status_code or status_in(text)
    return classify_failure(Failure(text, status, error_type=_type_in(text))).kind, status


# ---------------------------------------------------------------------- reading SDK exceptions


def _error_object(body: Any) -> dict[str, Any] | None:
    """The error object of a JSON error body: Anthropic's {"type": "error", "error": {...}},
    OpenAI's {"error": {...}} (the openai client passes the inner object), Google's
    [{"error": {...}}]."""
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return None
    error = body.get("error", body)
    return error if isinstance(error, dict) else None


def error_type(body: Any) -> str | None:
    """The provider's error type in an error body: the first of its code, type and status that
    KNOWN_FAILURES knows, else the first given ("overloaded_error", "insufficient_quota", ...)."""
    error = _error_object(body)
    if error is None:
        return None
    names = [error.get(key) for key in ("code", "type", "status")]
    names = [name for name in names if isinstance(name, str) and name and name != "error"]
    return next((name for name in names if name in _BY_TYPE), names[0] if names else None)


def error_message(exc: Any) -> str:
    """The provider's own message of an SDK exception (its body's message when it has one)."""
    body = getattr(exc, "body", None)
    error = _error_object(body)
    if error is not None and error.get("message"):
        return str(error["message"])
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return str(getattr(exc, "message", None) or exc)


def is_transport_error(exc: BaseException) -> bool:
    """httpx/aiohttp transport failures (a dropped stream) that a client lets through while a
    stream is read, found along the exception's causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        module = type(current).__module__ or ""
        if module.startswith(("httpx", "httpcore", "h11", "aiohttp")) or isinstance(
                current, ConnectionError | EOFError | TimeoutError):
            return True
        current = current.__cause__ or current.__context__
    return False
