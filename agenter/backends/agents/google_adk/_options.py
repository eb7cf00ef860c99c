"""Options of the google-adk backend (keyword arguments of AutonomousCodingAgent).

Free of ADK: the facade builds and checks these before `google.adk` is imported. An MCP server
is agenter's one shape for it (`agenter.backends._mcp.MCPServer`): a stdio `command` ADK starts,
or a streamable-HTTP `url`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from agenter.backends._mcp import MCPServer
from agenter.backends._pauses import PauseStoreOption
from agenter.backends.base import BackendOptions

__all__ = ["DEFAULT_MODEL", "IN_MEMORY", "GoogleADKOptions", "default_session_db"]

#: The model when none is given (the gemini backend's default too).
DEFAULT_MODEL = "gemini-2.5-pro"
#: `adk_session_db` for ADK's InMemorySessionService: the conversation lives as long as the session.
IN_MEMORY = ":memory:"


def default_session_db(environ: dict[str, str] | None = None) -> Path:
    """Where ADK's SQLite session service keeps conversations by default:
    `$XDG_CACHE_HOME/agenter/google-adk/sessions.db` (a relative XDG_CACHE_HOME is ignored, as
    the XDG spec says), else `~/.cache/agenter/google-adk/sessions.db`."""
    env = os.environ if environ is None else environ
    cache = env.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "agenter" / "google-adk" / "sessions.db"


class GoogleADKOptions(BackendOptions, PauseStoreOption):
    """How the google-adk backend builds ADK's agent. See docs/backends/google-adk.md.

    api_key defaults to GOOGLE_API_KEY, then GEMINI_API_KEY (google-genai's order); base_url to
    the public Gemini API (or Vertex AI's with adk_vertex=True)."""

    # Shared with other backends (one name everywhere).
    api_key: SecretStr | None = Field(
        None, description="Gemini API key; defaults to GOOGLE_API_KEY, then GEMINI_API_KEY. With adk_vertex=True a "
                          "key means Vertex AI express mode.")
    base_url: str | None = Field(
        None, description="API base URL (a proxy, a gateway, the scripted server); defaults to the public API.")
    max_retries: int = Field(
        4, ge=0, le=20, description="google-genai's retries per model request on 408/429/5xx (exponential backoff).")
    request_timeout: float = Field(600.0, gt=0, description="Seconds per HTTP request (and between stream chunks).")
    max_tokens: int | None = Field(
        None, gt=0, description="Output token limit per model response (max_output_tokens); None: the model's.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Sampling temperature; None: the model's.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the agent's shell commands.")
    mcp_servers: list[Any] = Field(
        default_factory=list,
        description="MCP servers for ADK's McpToolset: {name, command, args, env, cwd} (stdio, started only when "
                    "the policy lists it in allowed_mcp_servers or on_permission allows it) or {name, url, "
                    "http_headers, bearer_token_env_var} (streamable HTTP); enabled_tools, startup_timeout_sec, "
                    "tool_timeout_sec. Their tools are named <server>_<tool>; every call passes the permission gate.")
    # Only this backend's.
    adk_vertex: bool = Field(
        False, description="Call Gemini on Vertex AI: with an API key in express mode, else with Application Default "
                           "Credentials and adk_project/adk_location.")
    adk_project: str | None = Field(None, description="Vertex AI project; defaults to GOOGLE_CLOUD_PROJECT.")
    adk_location: str | None = Field(None, description="Vertex AI location; defaults to GOOGLE_CLOUD_LOCATION.")
    adk_max_llm_calls: int = Field(
        100, gt=0, description="ADK's limit on model calls per execute() (RunConfig.max_llm_calls).")
    adk_shell: bool = Field(
        True, description="Give the agent ADK's Execute tool (confined with sandbox=True: see adk_shell_sandbox).")
    adk_shell_sandbox: Literal["auto", "landlock", "bubblewrap", "seatbelt"] = Field(
        "auto", description="How Execute's commands are confined with sandbox=True: 'auto' takes Landlock, else "
                            "bubblewrap, else Seatbelt; naming one forces it.")
    adk_shell_timeout: float = Field(
        120.0, gt=0, le=3600, description="Seconds a command may run (ADK's Execute tool asks for 30; this wins).")
    adk_session_db: str | None = Field(
        None, description="Where ADK's SqliteSessionService keeps conversations (resume across processes); None: "
                          "$XDG_CACHE_HOME/agenter/google-adk/sessions.db; ':memory:' for ADK's InMemorySessionService "
                          "(no resume).")


    @field_validator("mcp_servers")
    @classmethod
    def _servers(cls, servers: list[Any]) -> list[Any]:
        checked: list[MCPServer] = []
        for server in servers:
            if isinstance(server, dict):
                server = MCPServer.model_validate(server)
            elif not isinstance(server, MCPServer):
                raise ValueError(f"an MCP server must be a dict ({{name, command}} or {{name, url}}), not "
                                 f"{type(server).__name__}")
            checked.append(server)
        names = [server.name for server in checked]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"two MCP servers are named {', '.join(map(repr, twice))}")
        return checked

    def session_db(self) -> Path | None:
        """The SQLite file of the session service; None for the in-memory one."""
        if self.adk_session_db == IN_MEMORY:
            return None
        if self.adk_session_db is None:
            return default_session_db()
        return Path(os.path.expanduser(self.adk_session_db))
