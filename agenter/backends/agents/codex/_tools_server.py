"""The user's custom tools, served to Codex by an MCP server inside agenter's own process.

Codex connects to it as a streamable-HTTP MCP server on 127.0.0.1, so a tool runs in the
caller's process and event loop: closures, clients and locks work, nothing is pickled. A
random bearer token keeps other local processes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from agenter._errors import ConfigurationError
from agenter.backends._prompts import REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_NAME, REFUSAL_TOOL_SCHEMA
from agenter.backends.base import ToolReply
from agenter.tools import Tool

#: The MCP server's name in Codex's config; the model sees its tools as `mcp__<name>.<tool>`.
SERVER_NAME = "agenter_tools"
TOKEN_ENV_VAR = "AGENTER_TOOLS_MCP_TOKEN"

#: Runs one custom tool (the backend's `run_tool`: errors redacted, the call tracked).
RunTool = Callable[[Tool, dict[str, Any]], Awaitable[ToolReply]]
#: Records a refusal (the backend's `refuse`).
Refuse = Callable[[dict[str, Any]], ToolReply]


class ToolsServer:
    """Start with `await ToolsServer.start(tools, run_tool, refuse)`; `url` and `token` go into
    Codex's config."""

    def __init__(self) -> None:
        self.url = ""
        self.token = secrets.token_urlsafe(24)
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, tools: list[Tool], run_tool: RunTool, refuse: Refuse) -> ToolsServer:
        self = cls()
        try:
            import uvicorn
            from mcp.server.lowlevel import Server
            from mcp.types import CallToolResult, ListToolsResult, TextContent
            from mcp.types import Tool as MCPTool
        except ImportError as exc:
            raise ConfigurationError(
                "custom tools with the codex backend need the MCP SDK (mcp>=2): "
                "pip install 'agenter-sdk[codex]'", parameter="tools") from exc

        by_name = {tool.name: tool for tool in tools}
        listed = [MCPTool(name=t.name, description=t.description, input_schema=t.input_schema)
                  for t in tools]
        listed.append(MCPTool(name=REFUSAL_TOOL_NAME, description=REFUSAL_TOOL_DESCRIPTION,
                              input_schema=REFUSAL_TOOL_SCHEMA))

        async def list_tools(ctx: Any, params: Any) -> Any:
            return ListToolsResult(tools=listed)

        async def call_tool(ctx: Any, params: Any) -> Any:
            arguments = params.arguments or {}
            tool = by_name.get(params.name)
            if params.name == REFUSAL_TOOL_NAME:
                reply = refuse(arguments)
            elif tool is None:
                return CallToolResult(content=[TextContent(text=f"unknown tool {params.name!r}")],
                                      is_error=True)
            else:
                reply = await run_tool(tool, arguments)
            return CallToolResult(content=[TextContent(text=reply.text)], is_error=reply.is_error)

        server = Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)
        app = server.streamable_http_app(json_response=True, stateless_http=True)
        guarded = _BearerGuard(app, self.token)

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(guarded, log_level="warning", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        for _ in range(200):
            if self._server.started or self._task.done():
                break
            await asyncio.sleep(0.01)
        if not self._server.started:
            await self.stop()
            raise ConfigurationError("agenter's MCP server for custom tools did not start",
                                     parameter="tools")
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 5)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        self._task = None


class _BearerGuard:
    """ASGI wrapper: only requests that carry the session's bearer token reach the MCP app."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if not secrets.compare_digest(headers.get(b"authorization", b""), self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)
