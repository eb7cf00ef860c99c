"""One shape for an MCP server in agenter's options, shared by the backends that take a list of
them: a local program spoken to over stdio (`command`, `args`, `env`, `cwd`) or a streamable-HTTP
endpoint (`url`, `http_headers`, `bearer_token_env_var`), with the tools to offer and timeouts.

codex writes it into Codex's config (its own `CodexMCPServer` adds Codex's approval mode);
agenter's own agent (model_api/_harness/mcptools.py) connects it through the `mcp` package. The
claude-cli, codex-cli, gemini-cli and acp backends take their program's own format instead.
"""

from __future__ import annotations

import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agenter.host.redact import _secret_name

__all__ = ["MCPServer"]


class MCPServer(BaseModel):
    """An MCP server: a stdio command or a streamable-HTTP url (exactly one)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$",
                      description="The server's name: what permission rules name (mcp:<name>/<tool>).")
    command: str | None = Field(None, description="The program of a stdio server.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment for a stdio server, over a minimal one (HOME, PATH, ...).")
    cwd: str | None = Field(None, description="Working directory of a stdio server (default: the session's).")
    url: str | None = Field(None, description="The endpoint of a streamable-HTTP server.")
    bearer_token_env_var: str | None = Field(
        None, description="Name of an environment variable holding a bearer token for `url`.")
    http_headers: dict[str, str] = Field(default_factory=dict, description="Headers sent to `url`.")
    enabled_tools: list[str] | None = Field(None, description="Only these tools of the server (None: all).")
    startup_timeout_sec: float | None = Field(None, gt=0, description="Seconds to start and list its tools.")
    tool_timeout_sec: float | None = Field(None, gt=0, description="Seconds one tool call may take.")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServer:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of `command` or `url`")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def command_line(self) -> str:
        """The stdio command as one shell-quoted line (what the permission gate shows)."""
        return shlex.join([self.command or "", *self.args])

    def secrets(self) -> list[str]:
        """Values to hide from events and logs: secret-named environment variables and headers
        (Authorization, X-Api-Key, ...)."""
        named = {**self.env, **self.http_headers}
        return [value for key, value in named.items() if value and _secret_name(key)]
