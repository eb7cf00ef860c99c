"""MCP servers for the SDK's agent, every call through the permission gate. Imports the SDK (only
imported when the backend connects).

Each server, whether the backend builds it from a config (`MCPServerConfig`: `MCPServerStdio`,
`MCPServerStreamableHttp`) or the user passed the SDK's own object, is handed to the agent
wrapped in `GatedServer`: the SDK lists and calls its tools as usual (its MCP support turns
them into function tools), and `call_tool` asks the gate first (`ToolCall.mcp(server, tool,
arguments)`, which `deny mcp:server/tool*` rules match). A refused call is an error result the
model reads; the server never sees it. The wrapper replaces a server object's own
`require_approval` (the gate decides instead).

The servers' lifetimes are the SDK's `MCPServerManager`'s, one worker task per server, so a
stdio server is started and stopped in the same task whatever task connects and disconnects the
backend. A stdio server the backend starts carries a process mark: `reap` ends what is left of
it at disconnect.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp
from mcp.types import CallToolResult, TextContent

from agenter.backends.agents.openai_agents._options import MCPServerConfig
from agenter.host import marked_env
from agenter.permissions import PermissionDecision, ToolCall

__all__ = ["GatedServer", "build_servers"]

Permit = Callable[[ToolCall], Awaitable[PermissionDecision]]


class GatedServer(MCPServer):
    """An MCP server whose tool calls pass the permission gate first."""

    def __init__(self, inner: Any, permit: Permit):
        super().__init__(use_structured_content=bool(getattr(inner, "use_structured_content", False)),
                         tool_meta_resolver=getattr(inner, "tool_meta_resolver", None))
        self.inner = inner
        self._permit = permit

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def cached_tools(self) -> Any:
        return getattr(self.inner, "cached_tools", None)

    async def connect(self) -> None:
        await self.inner.connect()

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> Any:
        return await self.inner.list_tools(run_context, agent)

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None,
                        meta: dict[str, Any] | None = None) -> CallToolResult:
        decision = await self._permit(ToolCall.mcp(self.name, tool_name, arguments or {}))
        if not decision.allowed:
            return CallToolResult(content=[TextContent(type="text", text=decision.reason)], isError=True)
        if meta is None:
            return await self.inner.call_tool(tool_name, arguments)
        return await self.inner.call_tool(tool_name, arguments, meta)

    async def list_prompts(self) -> Any:
        return await self.inner.list_prompts()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.inner.get_prompt(name, arguments)


def build_servers(servers: Sequence[Any], permit: Permit, cwd: str) -> tuple[list[GatedServer], list[str]]:
    """The gated servers, and the process marks of the stdio servers built here (for `reap`)."""
    gated: list[GatedServer] = []
    marks: list[str] = []
    for server in servers:
        if isinstance(server, MCPServerConfig):
            server, mark = _from_config(server, cwd)
            if mark:
                marks.append(mark)
        gated.append(GatedServer(server, permit))
    return gated, marks


def _from_config(config: MCPServerConfig, cwd: str) -> tuple[Any, str | None]:
    if config.url:
        return MCPServerStreamableHttp(
            {"url": config.url, "headers": dict(config.headers), "timeout": config.timeout},
            name=config.name, cache_tools_list=True, client_session_timeout_seconds=config.timeout), None
    env, mark = marked_env({**os.environ, **config.env})
    assert config.command is not None
    params: dict[str, Any] = {"command": config.command, "args": list(config.args), "env": env,
                              "cwd": config.cwd or cwd}
    return MCPServerStdio(params,  # type: ignore[arg-type]
                          name=config.name, cache_tools_list=True,
                          client_session_timeout_seconds=config.timeout), mark
