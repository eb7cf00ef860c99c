"""OpenHands tool calls as the permission gate sees them.

Free of OpenHands imports: the backend passes each action's fields (an `ActionEvent`'s action)
and gets the `ToolCall` the gate judges, or None for calls that only answer or think.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from agenter.backends._prompts import REFUSAL_TOOL_NAME
from agenter.permissions import PermissionGate, ToolCall
from agenter.tools import Tool

__all__ = ["ENFORCED_KINDS", "UNGATED_TOOLS", "action_fields", "tool_call",
           "use_home"]

#: The rule kinds enforced: every action OpenHands runs passes the gate first. Network rules are
#: not (the terminal's curl is a shell command the gate cannot see the network of), nor MCP ones
#: (this backend starts no MCP servers).
ENFORCED_KINDS = frozenset({"read", "edit", "shell", "custom"})
#: OpenHands' finish and think and agenter's refusal tool: answers, not actions (never gated).
UNGATED_TOOLS = frozenset({"finish", "think", REFUSAL_TOOL_NAME})
#: What the terminal's `is_input` may send that is a key press, not text a program reads.
_KEYS = re.compile(r"C-[a-z]|UP|DOWN|LEFT|RIGHT|HOME|END|PGUP|PGDN|TAB|ESC|BS|ENTER", re.IGNORECASE)


def tool_call(name: str, fields: Mapping[str, Any], tools: Mapping[str, Tool] | None = None) -> ToolCall | None:
    """The gate's view of one OpenHands action (None when it is not gated).

    fields: the action's fields (a custom tool's: its arguments).
    tools: the custom tools, by name (their ToolSpec says what they do).
    """
    data = dict(fields) if isinstance(fields, Mapping) else {}

    def text(key: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) else ""

    if name in UNGATED_TOOLS:
        return None
    if name == "file_editor":
        path = text("path")
        paths = (path,) if path else ()
        if text("command") == "view":
            return ToolCall(kind="read", name=name, paths=paths, input=data, read_only=True, destructive=False)
        # create, str_replace, insert, undo_edit, and any command a later OpenHands adds
        return ToolCall(kind="edit", name=name, paths=paths, input=data)
    if name == "terminal":
        command = text("command")
        if not command.strip():
            return None  # asks for more output of the running command
        if data.get("is_input") and _KEYS.fullmatch(command.strip()):
            return None  # a key press (C-c, ENTER, ...) to the running command
        # A command line, or text sent to a running program (which may be a shell).
        return ToolCall.shell(command, name=name)
    custom = (tools or {}).get(name)
    if custom is not None and custom.spec is not None:
        return custom.spec.call(name, data)
    return ToolCall(kind="custom", name=name, input=data)  # undeclared or unknown: fail closed


def action_fields(action: Any) -> dict[str, Any]:
    """An OpenHands action's fields; for a custom tool (an MCPToolAction) its arguments."""
    data = getattr(action, "data", None)
    if isinstance(data, dict):
        return dict(data)
    dump = getattr(action, "model_dump", None)
    fields = dump() if callable(dump) else None
    return dict(fields) if isinstance(fields, dict) else {}


def use_home(gate: PermissionGate, home: str) -> None:
    """Let `~` mean the terminal's HOME (the `env` option's) in the gate's judgements."""
    workspace = gate.workspace
    workspace.home = os.path.abspath(home)
    workspace.real_home = os.path.realpath(workspace.home)
