"""What a validator returns, the protocol it follows, and the chain that runs them in order."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field


class ValidationResult(BaseModel):
    """The verdict of one validator on one iteration's changed files.

    skipped=True means there was nothing for this validator to check (e.g. no Python file
    changed). A session whose iteration changed no file and whose validators all skipped
    has verified nothing, and must not call that a success.
    """

    validator: str = Field("", description="The validator's name; the chain fills it in when empty.")
    passed: bool
    errors: list[str] = Field(default_factory=list)
    blocking: bool = True
    skipped: bool = False
    details: str | None = None
    duration_seconds: float | None = None

    @property
    def blocks(self) -> bool:
        """True when this result fails the iteration (a blocking validator that failed)."""
        return self.blocking and not self.passed


@runtime_checkable
class Validator(Protocol):
    """Anything with a name, a blocking flag and an async validate() is a validator.

    validate() receives the changed files (paths relative to cwd; deleted files are not
    passed) and must not block the event loop: do slow work with asyncio.to_thread or an
    asyncio subprocess.
    """

    name: str
    blocking: bool

    async def validate(self, files: list[str], cwd: Path) -> ValidationResult: ...


def passed(results: Iterable[ValidationResult]) -> bool:
    """True when no blocking validator failed (advisory failures do not count)."""
    return not any(result.blocks for result in results)


def all_skipped(results: Iterable[ValidationResult]) -> bool:
    """True when every result was skipped (also for no results): nothing was verified."""
    return all(result.skipped for result in results)


def _existing_files(files: Iterable[str | os.PathLike[str]], cwd: Path) -> list[str]:
    """Changed files as POSIX paths relative to cwd, without duplicates or deleted files."""
    seen: dict[str, None] = {}
    for file in files:
        rel = Path(file)
        if rel.is_absolute():
            try:
                rel = rel.relative_to(cwd)
            except ValueError:
                pass
        key = rel.as_posix()
        if key not in seen and (cwd / rel).is_file():
            seen[key] = None
    return list(seen)


class ValidatorChain:
    """Runs validators one after another, stopping after the first blocking failure.

    A validator that raises becomes a failed result carrying the exception text: an
    exception is never a silent pass.
    """

    def __init__(self, validators: Sequence[Validator]):
        self.validators = list(validators)

    @property
    def names(self) -> list[str]:
        return [getattr(v, "name", type(v).__name__) for v in self.validators]

    async def run(self, files: Iterable[str | os.PathLike[str]], cwd: str | os.PathLike[str]
                  ) -> AsyncIterator[ValidationResult]:
        """Yield one result per validator, in order; stop after a blocking failure."""
        root = Path(cwd)
        # One stat per changed file: many files would hold up the event loop, so in a thread.
        changed = await asyncio.to_thread(_existing_files, list(files), root)
        for validator in self.validators:
            result = await self._run_one(validator, changed, root)
            yield result
            if result.blocks:
                return

    async def run_all(self, files: Iterable[str | os.PathLike[str]], cwd: str | os.PathLike[str]
                      ) -> list[ValidationResult]:
        """Collect run() into a list."""
        return [result async for result in self.run(files, cwd)]

    @staticmethod
    async def _run_one(validator: Validator, files: list[str], cwd: Path) -> ValidationResult:
        name = str(getattr(validator, "name", None) or type(validator).__name__)
        blocking = bool(getattr(validator, "blocking", True))
        started = time.perf_counter()
        try:
            result = await validator.validate(list(files), cwd)
        except Exception as exc:  # noqa: BLE001 - any failure of a validator is a failed check
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            result = ValidationResult(
                validator=name, passed=False, blocking=blocking,
                errors=[f"validator {name!r} crashed: {detail}"],
            )
        else:
            if not isinstance(result, ValidationResult):
                result = ValidationResult(
                    validator=name, passed=False, blocking=blocking,
                    errors=[f"validator {name!r} returned {type(result).__name__}, not a ValidationResult"],
                )
            elif not result.validator:  # ValidationResult(passed=True), as agenter 0.1.7 wrote it
                result = result.model_copy(update={"validator": name})
        if result.duration_seconds is None:
            result = result.model_copy(update={"duration_seconds": time.perf_counter() - started})
        return result
