"""Exceptions. Expected outcomes (refusal, failed validation, budget) are statuses, not exceptions."""

from __future__ import annotations


class AgenterError(Exception):
    """Base of every error agenter raises."""


class ConfigurationError(AgenterError, ValueError):
    """A bad option: names the parameter and, where finite, the valid values."""

    def __init__(self, message: str, *, parameter: str | None = None, valid: list[str] | None = None):
        if valid:
            message = f"{message} (valid values for {parameter or 'this option'}: {', '.join(valid)})"
        super().__init__(message)
        self.parameter = parameter
        self.valid = valid


class BackendError(AgenterError):
    """The backend could not run: missing program, crashed process, API error.

    `stderr_tail` holds the last lines of an agent program's stderr, already redacted.
    """

    def __init__(self, message: str, *, backend: str | None = None, stderr_tail: str | None = None,
                 status_code: int | None = None):
        text = message
        if stderr_tail:
            text = f"{message}\n--- stderr (tail) ---\n{stderr_tail}"
        super().__init__(text)
        self.backend = backend
        self.stderr_tail = stderr_tail
        self.status_code = status_code


class BudgetExceededError(AgenterError):
    """Raised only when the agent was built with raise_on_budget_exceeded=True."""

    def __init__(self, message: str, *, limit: str, result: object | None = None):
        super().__init__(message)
        self.limit = limit
        self.result = result


class PathSecurityError(AgenterError, PermissionError):
    """A file operation tried to leave the sandbox (cwd and allowed_write_paths)."""
