"""The options every backend of agenter's own agent has, under the shared names: a provider's
options class subclasses `HarnessOptions` and adds its own (and its `loop_config` passes these
on to the harness).

- `mcp_servers`: MCP servers whose tools the model may call (mcptools.py).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from agenter.backends._mcp import MCPServer
from agenter.backends.base import BackendOptions

__all__ = ["HarnessOptions"]


class HarnessOptions(BackendOptions):
    """Options shared by the harness backends (anthropic-sdk, gemini, ...)."""

    mcp_servers: list[MCPServer] = Field(
        default_factory=list,
        description="MCP servers whose tools the model may call: {name, command, args, env} (stdio) or "
                    "{name, url, http_headers} (streamable HTTP). A stdio server starts only when the "
                    "permission policy lists it in allowed_mcp_servers (or on_permission allows it).")

    @field_validator("mcp_servers")
    @classmethod
    def _unique_names(cls, servers: list[MCPServer]) -> list[MCPServer]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate MCP server names: {', '.join(duplicates)}")
        return servers
