"""What kind of failure an agent program reported, from its own words (pure functions).

Agent CLIs report a failed model call as text: "API Error: 429 ...", "unexpected status 401
Unauthorized", '{"error":{"code":500,...}}', "litellm.RateLimitError: ...". `classify` reads an
HTTP status where the text carries one and refines it by the words around it (a 429 about
billing is a quota problem, not a rate limit); without a status, the words alone decide. The
kinds are BackendError.kind's (agenter._errors.ERROR_KINDS), which a fallback chain acts on.
"""

from __future__ import annotations

import re

from agenter._errors import kind_of_status

__all__ = ["classify", "status_in"]

_STATUS_PATTERNS = [
    re.compile(r"(?i)\b(?:status(?:\s*code)?|statusCode|http|api error)\W{0,3}(?:request rejected\s*\()?([45]\d\d)\b"),
    re.compile(r'"(?:code|status|statusCode)"\s*:\s*"?([45]\d\d)\b'),
    re.compile(r"\(([45]\d\d)\)"),
    re.compile(r"\berror code:?\s*([45]\d\d)\b", re.IGNORECASE),
]

#: Words that name a failure class, checked in this order (the first class that matches wins).
_WORDS: list[tuple[str, re.Pattern[str]]] = [
    ("quota", re.compile(
        r"insufficient_quota|exceeded your current quota|quota exceeded|quota has been exhausted|"
        r"terminalquotaerror|billing|credit balance|payment required|out of credits|usage limit",
        re.IGNORECASE)),
    ("context_length", re.compile(
        r"context[_ ]length|context window|maximum context|prompt is too long|input is too long|"
        r"too many tokens|contextwindowexceeded|request too large|exceeds the context", re.IGNORECASE)),
    ("auth", re.compile(
        r"unauthori[sz]ed|unauthenticated|authentication|failed to authenticate|invalid[ _]api[ _]key|"
        r"api key not valid|incorrect api key|no api key|missing api key|not logged in|please run /login|"
        r"permissiondeniederror|invalid x-api-key|oauth token", re.IGNORECASE)),
    ("rate_limit", re.compile(r"rate[ _-]?limit|too many requests|resource_exhausted", re.IGNORECASE)),
    ("transient", re.compile(
        r"overloaded|internal server error|internalservererror|server error|service unavailable|"
        r"serviceunavailable|bad gateway|gateway timeout|high demand|temporar(?:y|ily)|"
        r"apiconnectionerror|connection (?:refused|reset|error)|timed out|timeout|stream disconnected|"
        r"\bunavailable\b|\binternal\b", re.IGNORECASE)),
]


def status_in(text: str) -> int | None:
    """The first HTTP error status (4xx/5xx) the text mentions, if any."""
    for pattern in _STATUS_PATTERNS:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def _words(text: str) -> str | None:
    for kind, pattern in _WORDS:
        if pattern.search(text):
            return kind
    return None


def classify(text: str, status_code: int | None = None) -> tuple[str, int | None]:
    """(kind, status) of a failure the program described in `text`; kind "unknown" when
    neither a status nor the words tell."""
    status = status_code or status_in(text)
    words = _words(text)
    if status is None:
        return words or "unknown", None
    kind = kind_of_status(status)
    # The status says how the server answered; the words can say why more precisely.
    if status == 429 and words == "quota":
        kind = "quota"
    elif status in (400, 403, 413) and words in ("context_length", "quota"):
        kind = words
    return kind, status
