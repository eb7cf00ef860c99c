"""Options of the openai-agents backend (keyword arguments of AutonomousCodingAgent).

Free of the SDK: the facade builds and checks these before `agents` is imported. An MCP server
is given either as a small config (a stdio command or a streamable-HTTP url, `MCPServerConfig`)
or as the SDK's own server object (`agents.mcp.MCPServerStdio(...)`, ...), recognised by shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from agenter.backends._pauses import PauseStoreOption
from agenter.backends.base import BackendOptions

__all__ = ["MCPServerConfig", "OpenAIAgentsOptions"]

#: What an SDK MCP server object has (agents.mcp.MCPServer); checked by shape, the SDK unimported.
_MCP_SERVER_METHODS = ("connect", "cleanup", "list_tools", "call_tool")


class MCPServerConfig(BaseModel):
    """An MCP server the backend starts (stdio `command`) or reaches (streamable-HTTP `url`)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The server's name (in `mcp:NAME/tool` rules).")
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="Added to agenter's environment for the server.")
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(10.0, gt=0, description="Seconds for one request to the server.")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of `command` or `url`")
        return self


class OpenAIAgentsOptions(BackendOptions, PauseStoreOption):
    """How the openai-agents backend builds the SDK's agent. See docs/backends/openai-agents.md."""

    # Shared with other backends (one name everywhere).
    api_key: SecretStr | None = Field(
        None, description="OpenAI API key; defaults to OPENAI_API_KEY (a server given by base_url needs none).")
    base_url: str | None = Field(
        None, description="API base URL; defaults to OPENAI_BASE_URL or the OpenAI API.")
    max_retries: int = Field(2, ge=0, le=20, description="The OpenAI client's retries on 408/409/429/5xx.")
    request_timeout: float = Field(600.0, gt=0, description="Seconds per HTTP request.")
    max_tokens: int | None = Field(None, gt=0, description="Output token limit per model response.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Sampling temperature.")
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, description="Reasoning effort (reasoning models); None: the SDK's default for the model.")
    mcp_servers: list[Any] = Field(
        default_factory=list,
        description="MCP servers: {name, command, args, env, cwd} (stdio) or {name, url, headers} "
                    "(streamable HTTP), or the SDK's own MCPServer objects. Every call passes the gate.")
    # Only this backend's.
    openai_agents_wire: Literal["responses", "chat"] = Field(
        "responses", description="The model's wire: the Responses API (OpenAIResponsesModel, the SDK's default "
                                 "for OpenAI) or Chat Completions (OpenAIChatCompletionsModel, any compatible server).")
    openai_agents_max_turns: int | None = Field(
        None, gt=0, description="The SDK's limit on model responses per turn; None: no limit (the budget bounds it).")
    openai_agents_shell: bool = Field(
        True, description="Give the agent the shell tool (confined with sandbox=True: see openai_agents_shell_sandbox).")
    openai_agents_shell_sandbox: Literal["auto", "landlock", "bubblewrap", "seatbelt"] = Field(
        "auto", description="How the shell tool is confined with sandbox=True: 'auto' takes Landlock, else "
                            "bubblewrap, else Seatbelt; naming one forces it.")
    openai_agents_shell_timeout: float = Field(
        120.0, gt=0, le=3600, description="Seconds a command may run unless the model asks for another limit.")
    openai_agents_session: Any = Field(
        None, description="An SDK Session object (SQLiteSession, ...) to keep the conversation in; None: agenter's "
                          "conversation store (resume across processes by session id).")
    openai_agents_store_dir: Path | None = Field(
        None, description="Folder of agenter's conversation store; None: $XDG_CACHE_HOME/agenter/conversations.")

    @field_validator("mcp_servers")
    @classmethod
    def _servers(cls, servers: list[Any]) -> list[Any]:
        checked: list[Any] = []
        for server in servers:
            if isinstance(server, dict):
                server = MCPServerConfig.model_validate(server)
            elif not isinstance(server, MCPServerConfig) and not all(
                    callable(getattr(server, method, None)) for method in _MCP_SERVER_METHODS):
                raise ValueError(f"an MCP server must be a dict ({{name, command}} or {{name, url}}) or an "
                                 f"agents.mcp server object, not {type(server).__name__}")
            checked.append(server)
        names = [_server_name(server) for server in checked]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"two MCP servers are named {', '.join(map(repr, twice))}")
        return checked


    @field_validator("openai_agents_session")
    @classmethod
    def _session(cls, session: Any) -> Any:
        if session is None:
            return None
        missing = [m for m in ("get_items", "add_items", "pop_item", "clear_session") if not callable(
            getattr(session, m, None))]
        if missing or not isinstance(getattr(session, "session_id", None), str):
            raise ValueError("openai_agents_session must be an agents Session object (SQLiteSession, ...): it has "
                             f"no {', '.join(missing) or 'session_id'}")
        return session


def _server_name(server: Any) -> str:
    return str(server.name if isinstance(server, MCPServerConfig) else getattr(server, "name", ""))
