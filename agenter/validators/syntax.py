"""SyntaxValidator: every changed Python file must parse."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

from agenter.validators._base import ValidationResult

PYTHON_SUFFIXES = (".py", ".pyi")


def python_files(files: list[str]) -> list[str]:
    return [f for f in files if f.endswith(PYTHON_SUFFIXES)]


def check_syntax(path: Path, shown: str) -> str | None:
    """None when the file parses, else "path:line:col: ErrorType: message"."""
    try:
        source = path.read_bytes()
    except OSError as exc:
        return f"{shown}: could not read file: {exc.strerror or exc}"
    try:
        # A full compile (nothing runs) also catches what the parser alone lets through:
        # 'return' outside function, 'break' outside loop, misplaced nonlocal/global, ...
        # and it is faster than building Python AST objects.
        compile(source, shown, "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = exc.lineno or 1
        column = exc.offset or 1
        return f"{shown}:{line}:{column}: {type(exc).__name__}: {exc.msg}"
    except (ValueError, TypeError) as exc:  # e.g. NUL bytes on older Pythons
        return f"{shown}:1:1: SyntaxError: {exc}"
    return None


class SyntaxValidator:
    """Compiles changed *.py / *.pyi files with Python's own compiler (no code runs).

    Blocking by default: code that does not parse cannot be right. Skipped when no
    Python file changed.
    """

    def __init__(self, *, blocking: bool = True, name: str = "syntax"):
        self.name = name
        self.blocking = blocking

    def __repr__(self) -> str:
        return f"SyntaxValidator(blocking={self.blocking})"

    async def validate(self, files: list[str], cwd: Path) -> ValidationResult:
        targets = python_files(files)
        if not targets:
            return ValidationResult(validator=self.name, passed=True, blocking=self.blocking,
                                    skipped=True, details="no Python files changed")
        errors = await asyncio.to_thread(self._check_all, targets, Path(cwd))
        noun = "file" if len(targets) == 1 else "files"
        return ValidationResult(
            validator=self.name, passed=not errors, errors=errors, blocking=self.blocking,
            details=f"compiled {len(targets)} Python {noun}, {len(errors)} with syntax errors",
        )

    @staticmethod
    def _check_all(targets: list[str], cwd: Path) -> list[str]:
        errors: list[str] = []
        with warnings.catch_warnings():
            # Parsing reports e.g. invalid escape sequences as SyntaxWarning; they are not errors
            # and must not be printed on the caller's stderr.
            warnings.simplefilter("ignore")
            for target in targets:
                error = check_syntax(cwd / target, target)
                if error:
                    errors.append(error)
        return errors
