"""Permission compilers of the agent CLIs: a PermissionPolicy as the program's own flags, config or
files, one module per program (claude, codex, gemini, opencode, aider). An agent CLI cannot call
agenter back for a decision, so its program enforces what these write; each compiler raises
ConfigurationError for a rule its program cannot express, which the backend's
`check_permissions` calls when the agent is built. Functions of the policy and of the workspace
and home they resolve paths against (codex's also asks which of those paths exist); no process,
no state. What each compiles, and what it cannot, is docs/backends/cli.md.
"""

from __future__ import annotations

from pathlib import Path

from agenter._errors import ConfigurationError
from agenter.permissions import PermissionRule

__all__ = ["cannot_compile", "path_pattern"]


def cannot_compile(backend: str, what: str) -> ConfigurationError:
    """The error for what `backend`'s program cannot express ("the permission rule <rule>", or
    "<rule>: why"), raised when the agent is built."""
    return ConfigurationError(f"the {backend} backend cannot compile {what}", parameter="permissions")


def path_pattern(rule: PermissionRule, home: Path, backend: str) -> str:
    """A path rule's pattern with a leading `~` as `home`. A negated pattern (`!x`) is an error:
    no program's rules can express "all but"."""
    pattern = rule.pattern
    if pattern.startswith("!"):
        raise cannot_compile(backend, f"the negated pattern in {rule}")
    if pattern == "~" or pattern.startswith("~/"):
        pattern = str(home) + pattern[1:]
    return pattern
