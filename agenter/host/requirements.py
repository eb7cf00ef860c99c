"""What a backend needs from the machine, probed when the facade is built (fail fast).

A backend declares its requirements (a Python version, a package from an extra, a program on
PATH, a system tool for its sandbox); `check_requirements` probes them without importing the
packages and raises one RequirementError that names everything missing and how to install it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agenter._errors import RequirementError

__all__ = ["MODEL_PROVIDER_KEYS", "Credentials", "Program", "PythonPackage", "PythonVersion", "Requirement", "check_requirements",
           "distribution_version", "find_program", "missing_requirements"]


@dataclass(frozen=True)
class Requirement:
    """Base: `problem()` says what is missing and how to fix it, or None when satisfied."""

    def problem(self) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class PythonVersion(Requirement):
    minimum: tuple[int, int]
    why: str = ""

    def problem(self) -> str | None:
        if sys.version_info[:2] >= self.minimum:
            return None
        need = ".".join(map(str, self.minimum))
        have = f"{sys.version_info.major}.{sys.version_info.minor}"
        return f"Python >= {need} (this is Python {have}){': ' + self.why if self.why else ''}"


@dataclass(frozen=True)
class PythonPackage(Requirement):
    """An importable module, optionally of a minimum major version; `install` is the fix."""

    module: str
    install: str
    distribution: str | None = None
    min_major: int | None = None

    def problem(self) -> str | None:
        try:
            found = importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"the Python package {self.distribution or self.module!r}: {self.install}"
        if self.min_major is not None and self.distribution:
            version = distribution_version(self.distribution)
            try:
                major = int(version.split(".")[0]) if version else -1
            except ValueError:
                major = -1
            if major < self.min_major:
                return (f"{self.distribution} >= {self.min_major} (found {version or 'unknown'}): "
                        f"{self.install}")
        return None


@dataclass(frozen=True)
class Program(Requirement):
    """A program on PATH (or at an explicit path); `install` is the fix."""

    name: str
    install: str
    path: str | None = None
    env_path: str | None = None

    def problem(self) -> str | None:
        if find_program(self.name, self.path, self.env_path) is not None:
            return None
        where = f" at {self.path!r}" if self.path else " on PATH"
        return f"the program {self.name!r}{where}: {self.install}"


def find_program(name: str, path: str | None = None, search_path: str | None = None) -> str | None:
    """An explicit executable path, or `name` found on the search path (default: PATH)."""
    if path:
        expanded = os.path.expanduser(path)
        if os.path.isfile(expanded) and os.access(expanded, os.X_OK):
            return expanded
        return shutil.which(expanded, path=search_path)
    return shutil.which(name, path=search_path)


def distribution_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def missing_requirements(requirements: Iterable[Requirement]) -> list[str]:
    return [problem for r in requirements if (problem := r.problem())]


def check_requirements(requirements: Iterable[Requirement], *, backend: str,
                       env: Mapping[str, str] | None = None) -> None:
    """Raise RequirementError naming every unmet requirement (first the blocking ones, in order)."""
    missing = missing_requirements(requirements)
    if missing:
        lines = "\n".join(f"  - {m}" for m in missing)
        raise RequirementError(f"the {backend} backend cannot run here; it needs:\n{lines}",
                               backend=backend, missing=missing)


#: The variables LiteLLM-style programs (aider, opencode, litellm) read a provider's key from.
MODEL_PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY",
                       "DEEPSEEK_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "XAI_API_KEY", "AZURE_API_KEY",
                       "AWS_ACCESS_KEY_ID", "AWS_PROFILE")


@dataclass(frozen=True)
class Credentials:
    """Where a backend's credentials may be: any variable set, or any file existing (paths
    start with ~ or $VARIABLE; a variable that is unset skips its path). Looked for by name
    only: values are never read or printed."""

    env: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def source(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The first variable or file found (its name, never its value), or None."""
        environ = dict(os.environ if environ is None else environ)
        for name in self.env:
            if environ.get(name):
                return name
        for pattern in self.files:
            path = _expand(pattern, environ)
            if path is not None and path.is_file():
                return pattern
        return None


def _expand(pattern: str, environ: Mapping[str, str]) -> Path | None:
    if pattern.startswith("$"):
        variable, _, rest = pattern[1:].partition("/")
        base = environ.get(variable)
        return Path(base, rest) if base else None
    if pattern.startswith("~/"):
        home = environ.get("HOME")
        return Path(home, pattern[2:]) if home else Path(pattern).expanduser()
    return Path(pattern)
