"""MCP servers as ADK's `McpToolset`s, for the google-adk backend: imported only when servers are
configured (ADK's MCP support and the `mcp` package take seconds to import; the backend imports
this module in a thread).

One toolset per server (agenter's `MCPServer` shape): a stdio server is started by ADK with the
server's `env` over the minimal environment the `mcp` package gives (HOME, PATH, ...), never the
host's whole environment, carrying a process mark so that nothing it started outlives the
session (`agenter.host.reap`); a streamable-HTTP server gets its `http_headers` and the bearer
token named by `bearer_token_env_var`. Its tools are named `<server>_<tool>` (ADK's
`tool_name_prefix`: two servers' tools, or a server's and agenter's, never share a name), only
`enabled_tools` when given, and in a read-only session only those the server marks
`readOnlyHint`. `ServerToolset.known` maps each name offered to (server, tool, read-only), which
is what the permission gate judges (`mcp:<server>/<tool>`).

ADK drops a toolset whose listing fails and runs on without it; `open_toolsets` lists every
server's tools at connect instead, within its startup timeout, so a server that cannot start
fails the connect with a BackendError naming it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams, StreamableHTTPConnectionParams
from mcp import StdioServerParameters

from agenter._errors import BackendError
from agenter.backends._mcp import MCPServer
from agenter.backends.agents.google_adk._permissions import MCPToolName
from agenter.host import marked_env

__all__ = ["ServerToolset", "open_toolsets", "toolsets"]

#: Seconds a server may take to start and list its tools (its startup_timeout_sec overrides).
STARTUP_TIMEOUT = 30.0
#: Seconds one tool call of a streamable-HTTP server may take (its tool_timeout_sec overrides).
TOOL_TIMEOUT = 300.0


class ServerToolset(McpToolset):
    """ADK's McpToolset for one server, recording the tools it offers in `known`."""

    def __init__(self, server: MCPServer, known: dict[str, MCPToolName], *, read_only_session: bool, **kwargs: Any):
        super().__init__(tool_name_prefix=server.name, tool_filter=server.enabled_tools, **kwargs)
        self.server = server
        self._known = known
        self._read_only_session = read_only_session

    async def get_tools(self, readonly_context: Any = None) -> list[Any]:
        kept = []
        for tool in await super().get_tools(readonly_context):
            read_only = _read_only_hint(tool)
            if self._read_only_session and not read_only:
                continue
            self._known[f"{self.server.name}_{tool.name}"] = MCPToolName(self.server.name, tool.name, read_only)
            kept.append(tool)
        return kept


def _read_only_hint(tool: Any) -> bool:
    """The server's readOnlyHint of the tool (mcp 2's `read_only_hint`, mcp 1's `readOnlyHint`)."""
    annotations = getattr(getattr(tool, "raw_mcp_tool", None), "annotations", None)
    hint = getattr(annotations, "read_only_hint", None)
    return bool(getattr(annotations, "readOnlyHint", False) if hint is None else hint)


def toolsets(servers: Sequence[MCPServer], cwd: Path, known: dict[str, MCPToolName], *,
             read_only_session: bool) -> tuple[list[ServerToolset], list[str]]:
    """A toolset per server, and the process marks of the stdio ones (for `reap`)."""
    made: list[ServerToolset] = []
    marks: list[str] = []
    for server in servers:
        startup = server.startup_timeout_sec or STARTUP_TIMEOUT
        params: Any
        if server.transport == "stdio":
            env, mark = marked_env(server.env)
            marks.append(mark)
            params = StdioConnectionParams(
                server_params=StdioServerParameters(command=server.command or "", args=list(server.args), env=env,
                                                    cwd=Path(cwd, server.cwd) if server.cwd else cwd),
                timeout=server.tool_timeout_sec or startup)
        else:
            headers = dict(server.http_headers)
            if server.bearer_token_env_var:
                headers["Authorization"] = f"Bearer {os.environ.get(server.bearer_token_env_var, '')}"
            params = StreamableHTTPConnectionParams(url=server.url or "", headers=headers or None, timeout=startup,
                                                    sse_read_timeout=server.tool_timeout_sec or TOOL_TIMEOUT)
        made.append(ServerToolset(server, known, read_only_session=read_only_session, connection_params=params))
    return made, marks


async def open_toolsets(made: Sequence[ServerToolset], backend: str) -> None:
    """List every server's tools (starting the stdio ones), each within its startup timeout; a
    BackendError naming the server when one cannot."""
    for toolset in made:
        server = toolset.server
        timeout = server.startup_timeout_sec or STARTUP_TIMEOUT
        try:
            await asyncio.wait_for(toolset.get_tools(), timeout)
        except TimeoutError:
            raise BackendError(f"the MCP server {server.name!r} did not list its tools within {timeout:g} s "
                               "(startup_timeout_sec)", backend=backend, kind="transient") from None
        except Exception as exc:  # noqa: BLE001 - becomes the BackendError that names the server
            kind = "missing_program" if isinstance(exc, FileNotFoundError) else "config"
            raise BackendError(f"the MCP server {server.name!r} could not be started or listed: "
                               f"{type(exc).__name__}: {exc}", backend=backend, kind=kind) from None
