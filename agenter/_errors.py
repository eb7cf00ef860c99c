"""Exceptions. Expected outcomes (refusal, failed validation, budget) are statuses, not exceptions.

    AgenterError
    ├── ConfigurationError (ValueError)   a bad option or request, found before anything runs
    │   └── RequirementError              a missing extra, program or Python version
    ├── BackendError                      the agent could not run (kind: auth, quota, ...)
    ├── BudgetExceededError               only with raise_on_budget_exceeded=True
    └── PathSecurityError (PermissionError)
"""

from __future__ import annotations

import os
from typing import Any

from agenter._compat import deprecated


class AgenterError(Exception):
    """Base of every error agenter raises."""

    @property
    def message(self) -> str:
        """The error's text (agenter 0.1.7's attribute; `str(error)` says the same)."""
        return str(self)


class ConfigurationError(AgenterError, ValueError):
    """A bad option: names the parameter and, where finite, the valid values."""

    def __init__(self, message: str, *, parameter: str | None = None, valid: list[str] | None = None,
                 valid_label: str | None = None):
        if valid:
            label = valid_label or f"values for {parameter or 'this option'}"
            message = f"{message} (valid {label}: {', '.join(valid)})"
        super().__init__(message)
        self.parameter = parameter
        self.valid = valid


class RequirementError(ConfigurationError):
    """A backend cannot run on this machine: names what is missing and how to install it."""

    def __init__(self, message: str, *, backend: str | None = None, missing: list[str] | None = None):
        super().__init__(message, parameter="backend")
        self.backend = backend
        self.missing = missing or []


class BackendError(AgenterError):
    """The backend could not run: missing program, crashed process, API error.

    `stderr_tail` holds the last lines of an agent program's stderr, already redacted. `kind`
    classifies the failure for callers that decide what to do next (a fallback chain moves on for
    some kinds only): one of ERROR_KINDS, derived from `status_code` when not given.
    """

    def __init__(self, message: str, *, backend: str | None = None, stderr_tail: str | None = None,
                 status_code: int | None = None, kind: str | None = None,
                 cause: BaseException | None = None):
        text = message
        if stderr_tail:
            text = f"{message}\n--- stderr (tail) ---\n{stderr_tail}"
        super().__init__(text)
        self.backend = backend
        self.stderr_tail = stderr_tail
        self.status_code = status_code
        self.kind = kind or kind_of_status(status_code)
        if cause is not None:  # agenter 0.1.7's keyword
            deprecated("BackendError(..., cause=exc)", "raise BackendError(...) from exc")
            self.__cause__ = cause

    @property
    def cause(self) -> BaseException | None:
        """The exception behind this one (`raise ... from exc`; agenter 0.1.7's attribute)."""
        return self.__cause__


#: Failure classes of BackendError.kind.
ERROR_KINDS = ("auth", "quota", "rate_limit", "transient", "context_length", "missing_program",
               "agent_crash", "config", "unknown")


def kind_of_status(status_code: int | None) -> str:
    """The failure class an HTTP status implies."""
    if status_code in (401, 403):
        return "auth"
    if status_code == 402:
        return "quota"
    if status_code == 429:
        return "rate_limit"
    if status_code == 413:
        return "context_length"
    if status_code is not None and (status_code >= 500 or status_code in (408, 409)):
        return "transient"
    if status_code is not None and 400 <= status_code < 500:
        return "config"
    return "unknown"


class BudgetExceededError(AgenterError):
    """Raised only when the agent was built with raise_on_budget_exceeded=True.

    `limit` names the limit crossed (tokens, cost, time or iterations), `limit_value` its
    configured figure and `actual_value` what was spent (None when unknown); `result` is the
    run's CodingResult. agenter 0.1.7's `limit_type` still reads `limit` (deprecated).
    """

    def __init__(self, message: str, *, limit: str | None = None, result: object | None = None,
                 limit_value: float | None = None, actual_value: float | None = None,
                 limit_type: str | None = None):
        if limit_type is not None:
            if limit is not None and limit != limit_type:
                raise TypeError("BudgetExceededError: limit_type= is agenter 0.1.7's name of limit=; pass only limit=")
            deprecated("BudgetExceededError(limit_type=...)", "BudgetExceededError(limit=...)")
            limit = limit_type
        if limit is None:
            raise TypeError("BudgetExceededError needs limit= (tokens, cost, time or iterations)")
        super().__init__(message)
        self.limit = limit
        self.result = result
        self.limit_value = limit_value
        self.actual_value = actual_value

    @property
    def limit_type(self) -> str:
        deprecated("BudgetExceededError.limit_type", "BudgetExceededError.limit")
        return self.limit


class PathSecurityError(AgenterError, PermissionError):
    """A file operation tried to leave the sandbox (cwd and allowed_write_paths).

    `path`, `cwd` and `reason` are optional details (agenter 0.1.7 took them as keywords)."""

    def __init__(self, message: str, *args: Any, path: str | os.PathLike[str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, reason: str | None = None):
        super().__init__(message, *args)
        self.path = os.fspath(path) if path is not None else None
        self.cwd = os.fspath(cwd) if cwd is not None else None
        self.reason = reason
