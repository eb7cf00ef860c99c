"""ADK's tool calls as the permission gate sees them. Free of ADK imports: the backend passes a
call's tool name, its arguments and, for an MCP tool, its server and its own name.

The agent's tools are ADK's own environment tools (`Execute`, `ReadFile`, `EditFile`,
`WriteFile`: `google.adk.tools.environment`), the user's custom tools, agenter's refusal tool,
MCP tools (ADK's `McpToolset`) and, with structured output, ADK's `set_model_response`. Every
call but the refusal and the structured answer passes the gate before it runs.

Approvals that can wait (docs/approvals.md): ADK runs a model response's calls side by side, each
passing the gate in the before-tool callback. `CallOrder` has the gate decide them in the order the
model made them, so that once a call is deferred the calls after it wait too (as agenter's own
agent does): a call's decision waits for those of the earlier calls of its response whose callback
has begun (ADK starts them in order, so all of them, unless ADK suspended one before its callback).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agenter.backends._prompts import REFUSAL_TOOL_NAME
from agenter.permissions import ToolCall
from agenter.tools import Tool

__all__ = ["ENFORCED_KINDS", "FILE_READ", "FILE_WRITES", "OUTPUT_TOOL", "RESERVED_TOOL_NAMES", "SHELL", "UNGATED",
           "CallOrder", "MCPToolName", "tool_call"]

#: ADK's environment tools (google.adk.tools.environment), by the names the model calls them.
SHELL = "Execute"
FILE_READ = "ReadFile"
FILE_WRITES = frozenset({"EditFile", "WriteFile"})
#: ADK's structured-output tool (output_schema together with tools on the Gemini API).
OUTPUT_TOOL = "set_model_response"
#: Answers rather than actions: never asked about.
UNGATED = frozenset({REFUSAL_TOOL_NAME, OUTPUT_TOOL})
#: Names custom tools may not take: ADK's tools, and the names ADK gives its own function calls.
RESERVED_TOOL_NAMES = frozenset({SHELL, FILE_READ, *FILE_WRITES, OUTPUT_TOOL, "transfer_to_agent",
                                 "exit_loop", "finish_task"})
#: The rule kinds enforced: every tool call passes the gate; "network" is the shell's network
#: (cut by the sandbox unless the policy allows all of it).
ENFORCED_KINDS = frozenset({"read", "edit", "shell", "network", "mcp", "custom"})


@dataclass(frozen=True)
class MCPToolName:
    """What the model's name for an MCP tool (`<server>_<tool>`) stands for."""

    server: str
    tool: str
    read_only: bool


def tool_call(name: str, arguments: Mapping[str, Any] | None, custom: Mapping[str, Tool],
              mcp: MCPToolName | None = None) -> ToolCall | None:
    """The gate's view of one call (None: an answer, not gated). `mcp`: what an MCP tool's name
    stands for; its calls are `mcp:server/tool`, read-only when the server marks the tool so."""
    data = dict(arguments) if isinstance(arguments, Mapping) else {}
    if mcp is not None:
        return ToolCall.mcp(mcp.server, mcp.tool, data, read_only=mcp.read_only)
    if name in UNGATED:
        return None
    path = data.get("path")
    paths = (path,) if isinstance(path, str) and path else ()
    if name == SHELL:
        command = data.get("command")
        return ToolCall(kind="shell", name=name, command=command if isinstance(command, str) else "", input=data)
    if name == FILE_READ:
        return ToolCall(kind="read", name=name, paths=paths, input=data, read_only=True, destructive=False)
    if name in FILE_WRITES:
        return ToolCall(kind="edit", name=name, paths=paths, input=data)
    tool = custom.get(name)
    if tool is not None and tool.spec is not None:
        return tool.spec.call(name, data)
    return ToolCall(kind="custom", name=name, input=data)  # undeclared or unknown: the fail-closed defaults


class CallOrder:
    """The gate's decisions on one turn's calls, in the order of their model response (see the
    module docstring). `begin(call_id)` before a call is decided, `end(call_id, deferred)` after
    (also when it failed); `after(earlier)` waits for the earlier calls begun and says whether
    one of them was deferred."""

    def __init__(self) -> None:
        self._decided: dict[str, asyncio.Future[bool]] = {}

    def begin(self, call_id: str) -> None:
        self._decided[call_id] = asyncio.get_running_loop().create_future()

    def end(self, call_id: str, deferred: bool) -> None:
        decided = self._decided.get(call_id)
        if decided is not None and not decided.done():
            decided.set_result(deferred)

    async def after(self, earlier: Sequence[str]) -> bool:
        deferred = False
        for call_id in earlier:
            decided = self._decided.get(call_id)
            if decided is not None and await asyncio.shield(decided):
                deferred = True
        return deferred

    def clear(self) -> None:
        self._decided.clear()
