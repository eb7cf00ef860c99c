"""The harness's retry policy for model requests: an attempt that failed is read by its wire
(`ModelWire.failure`: HTTP status, headers, error type, message), classified by the shared
classifier (agenter.backends._failures: kind, retry or not) and waits as agenter.host.retry says;
this module only words the STATUS line and the final BackendError.

A wire's client retries nothing itself (its own retries are off), so that every retry is a
STATUS message the caller sees, and so that a stream dropped mid-response is retried too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agenter._errors import BackendError
from agenter.backends._failures import Failure, StreamIncomplete, Verdict, classify_failure

__all__ = ["Retry", "RetryPolicy"]


@dataclass(frozen=True)
class Retry:
    """Another attempt: why (for the STATUS message) and after how many seconds."""

    summary: str
    delay: float


class RetryPolicy:
    """Decides, per failed attempt, between another attempt and a BackendError."""

    def __init__(self, *, max_retries: int, max_wait: float, backend: str, api_label: str, auth_hint: str,
                 failure: Callable[[BaseException], Failure | None], redact: Callable[[str], str]):
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.backend = backend
        self.api_label = api_label
        self.auth_hint = auth_hint
        self.redact = redact
        self._read = failure

    def decide(self, exc: BaseException, attempt: int) -> Retry | None:
        """A Retry for attempt number `attempt` (0-based) that failed with `exc`; raises
        BackendError when it is final; None when `exc` is no API failure (the caller re-raises)."""
        failure = self.failure(exc)
        if failure is None:
            return None
        verdict = classify_failure(failure)
        delay = verdict.wait(attempt, self.max_retries, self.max_wait)
        if delay is None:
            raise self._error(exc, failure, verdict, attempt) from None
        if failure.connection:
            summary = "a dropped connection" if isinstance(exc, StreamIncomplete) else "a connection error"
        else:
            summary = f"{failure.status} {failure.error_type or ''}".strip()
        return Retry(summary, delay)

    def failure(self, exc: BaseException) -> Failure | None:
        """The Failure `exc` stands for: a stream that ended early is a dropped connection,
        anything else is the wire's to read."""
        if isinstance(exc, StreamIncomplete):
            return Failure(str(exc) or type(exc).__name__, connection=True)
        return self._read(exc)

    def _error(self, exc: BaseException, failure: Failure, verdict: Verdict, attempt: int) -> BackendError:
        status = failure.status
        tried = f" after {attempt + 1} attempts" if verdict.retry else ""
        if failure.connection:
            return BackendError(f"{self.api_label} unreachable{tried} ({self.redact(str(exc)) or type(exc).__name__})",
                                backend=self.backend, kind=verdict.kind)
        if verdict.kind == "auth":
            return BackendError(f"authentication failed ({status}): {self.auth_hint}", backend=self.backend,
                                status_code=status, kind="auth")
        summary = f"{status} {failure.error_type or ''}".strip()
        return BackendError(f"{self.api_label} error {summary}{tried}: {self.redact(failure.message)}",
                            backend=self.backend, status_code=status, kind=verdict.kind)
