"""Validators written for agenter 0.1.7, run as today's.

0.1.7's protocol was `async validate(files: dict[str, str], cwd: str)`: the changed files'
contents by path, no `name`, and `is_blocking` (default True) instead of `blocking`. Today a
validator gets the changed paths (`files: list[str]`, `cwd: Path`) and reads what it needs.
`Validator017` wraps such a validator: it reads the changed files (UTF-8, undecodable bytes
replaced, each at most MAX_FILE_BYTES: a longer one is cut and marked) and calls it as 0.1.7
did, takes `is_blocking` for `blocking` and the class name for `name`. It is made when the agent
is built, with a DeprecationWarning naming today's protocol.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from agenter.sandbox.paths import read_text_capped
from agenter.validators._base import ValidationResult

__all__ = ["MAX_FILE_BYTES", "Validator017", "is_validator_017"]

#: Bytes of one changed file handed to a 0.1.7 validator (the rest is cut and marked).
MAX_FILE_BYTES = 10 * 1024 * 1024


def is_validator_017(item: Any) -> bool:
    """An object with an async-looking `validate` that is missing today's `name` or `blocking`,
    or whose `files` parameter is annotated as a dict (0.1.7's path -> contents)."""
    if isinstance(item, type) or not callable(getattr(item, "validate", None)):
        return False
    if not isinstance(getattr(item, "name", None), str) or not hasattr(item, "blocking"):
        return True
    return _files_annotation(item.validate) in ("dict", "mapping")


def _files_annotation(validate: Any) -> str:
    try:
        parameters = list(inspect.signature(validate).parameters.values())
    except (TypeError, ValueError):
        return ""
    if not parameters:
        return ""
    annotation = parameters[0].annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    text = text.split("[", 1)[0].rsplit(".", 1)[-1].lower()
    return text if text in ("dict", "mapping") else ""


class Validator017:
    """A 0.1.7 validator as today's (see the module docstring)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = str(getattr(inner, "name", None) or type(inner).__name__)
        blocking = getattr(inner, "blocking", None)
        self.blocking = bool(getattr(inner, "is_blocking", True) if blocking is None else blocking)

    async def validate(self, files: list[str], cwd: Path) -> ValidationResult:
        contents = await asyncio.to_thread(_read_all, files, Path(cwd))
        result = await self.inner.validate(contents, str(cwd))
        if isinstance(result, ValidationResult):
            return result.model_copy(update={"validator": result.validator or self.name, "blocking": self.blocking})
        if hasattr(result, "passed"):  # a 0.1.7-shaped result of the user's own
            return ValidationResult(validator=self.name, passed=bool(result.passed), blocking=self.blocking,
                                    errors=[str(e) for e in (getattr(result, "errors", None) or [])])
        return ValidationResult(
            validator=self.name, passed=False, blocking=self.blocking,
            errors=[f"validator {self.name!r} returned {type(result).__name__}, not a ValidationResult"])

    def __repr__(self) -> str:
        return f"Validator017({self.inner!r})"


def _read_all(files: list[str], cwd: Path) -> dict[str, str]:
    contents: dict[str, str] = {}
    for path in files:
        text = read_text_capped(cwd / path, MAX_FILE_BYTES)
        if text is not None:
            contents[path] = text
    return contents
