"""Permissions: one declarative policy for every tool call, decided in a fixed order.

    deny rules → ask rules → tool-specific validation → safety checks → mode policy → capability

`PermissionPolicy` holds the rules and the mode; `PermissionGate` decides `ToolCall`s against it
for one workspace, asks `on_permission` when a call needs a decision, and records every decision.
Shell commands are judged by parsing them (`parse_shell`), not by their text. See
docs/permissions.md.
"""

from __future__ import annotations

from agenter.permissions._gate import (
    DEFER,
    PermissionAnswer,
    PermissionDecision,
    PermissionGate,
    PermissionRequest,
    PermissionVerdict,
)
from agenter.permissions._paths import PROTECTED_PATHS, Finding, ProtectedPaths, Workspace
from agenter.permissions._rules import (
    MODES,
    TOOL_KINDS,
    PermissionMode,
    PermissionPolicy,
    PermissionRule,
    ToolCall,
    ToolKind,
)
from agenter.permissions._safety import ShellAnalysis, analyze_shell
from agenter.permissions._shell import ShellScript, SimpleCommand, Word, parse_shell

__all__ = [
    "DEFER",
    "MODES",
    "PROTECTED_PATHS",
    "TOOL_KINDS",
    "Finding",
    "PermissionAnswer",
    "PermissionDecision",
    "PermissionGate",
    "PermissionMode",
    "PermissionPolicy",
    "PermissionRequest",
    "PermissionRule",
    "PermissionVerdict",
    "ProtectedPaths",
    "ShellAnalysis",
    "ShellScript",
    "SimpleCommand",
    "ToolCall",
    "ToolKind",
    "Word",
    "Workspace",
    "analyze_shell",
    "parse_shell",
]
