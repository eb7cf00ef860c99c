"""The tools the SDK's agent is given, as data, and what each call is for the permission gate.
Free of the SDK (`_setup` makes them the SDK's function tools).

The built-in tools are agenter's: `shell` (one `bash -c` command, agenter's shell runner and
sandbox, `agenter.sandbox.commands`) and the file tools (`_files`). The SDK's own `ShellTool`
and `ApplyPatchTool` are hosted-tool types of the Responses API that only OpenAI's newer
models are trained on, and Chat Completions cannot carry them; function tools work with every
model on both wires. Custom tools (`@tool`) keep their name, description and schema; the
refusal tool ends the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agenter.backends._prompts import REFUSAL_TOOL_NAME
from agenter.backends.agents.openai_agents._events import SHELL_TOOL_NAME
from agenter.backends.agents.openai_agents._files import FILE_TOOLS, READ_FILE
from agenter.permissions import ToolCall
from agenter.sandbox.commands import MAX_TIMEOUT
from agenter.tools import Tool

__all__ = ["BUILTIN_TOOL_NAMES", "ENFORCED_KINDS", "SHELL_SCHEMA", "shell_description", "tool_call"]

#: The rule kinds enforced: every call of a tool agenter gives the agent, and every MCP tool call,
#: passes the gate; "network" is the shell's network (cut by the sandbox unless allowed).
ENFORCED_KINDS = frozenset({"read", "edit", "shell", "network", "mcp", "custom"})
#: The names of agenter's own tools (custom tools may not take them).
BUILTIN_TOOL_NAMES = frozenset({SHELL_TOOL_NAME, *FILE_TOOLS})

SHELL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command line, run as `bash -c COMMAND`."},
        "timeout": {"type": "number", "description": f"Seconds, at most {MAX_TIMEOUT:g}."},
    },
    "required": ["command"],
    "additionalProperties": False,
}


def shell_description(*, sandbox: bool, network: bool, read_only: bool, timeout: float) -> str:
    """What the model is told of the shell; it says what the sandbox allows."""
    limits = [f"Times out after {timeout:g} s unless you pass a larger timeout (at most {MAX_TIMEOUT:g} s)."]
    if sandbox:
        limits.append("Nothing can be written (read-only session)." if read_only else
                      "Only the working directory and $TMPDIR (private) are writable; the rest of the "
                      "filesystem is read-only. Write temporary files under $TMPDIR, not /tmp.")
        limits.append("The network is available." if network else "There is no network access.")
    return ("Run a shell command with bash in the working directory and return its output (stdout and stderr "
            "together, then the exit code when it is not 0). Each call starts a new shell: cd and variables do "
            "not carry over. No terminal and no input: use non-interactive flags. List and search files here "
            "(ls, find, grep -rn); read and change them with the file tools. " + " ".join(limits))


def tool_call(name: str, arguments: Mapping[str, Any], custom: Mapping[str, Tool]) -> ToolCall | None:
    """The gate's view of one call of a tool agenter gave the agent (None: the refusal tool,
    an answer rather than an action)."""
    data = dict(arguments)
    path = data.get("path")
    paths = (path,) if isinstance(path, str) and path else ()
    if name == REFUSAL_TOOL_NAME:
        return None
    if name == SHELL_TOOL_NAME:
        command = data.get("command")
        return ToolCall(kind="shell", name=name, command=command if isinstance(command, str) else "", input=data)
    if name == READ_FILE:
        return ToolCall(kind="read", name=name, paths=paths, input=data, read_only=True, destructive=False)
    if name in FILE_TOOLS:
        return ToolCall(kind="edit", name=name, paths=paths, input=data)
    tool = custom.get(name)
    if tool is not None and tool.spec is not None:
        return tool.spec.call(name, data)
    return ToolCall(kind="custom", name=name, input=data)  # undeclared: the fail-closed defaults
