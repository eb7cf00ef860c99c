"""Options of the codex backend (keyword arguments of AutonomousCodingAgent(backend="codex"))."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator

from agenter.backends._mcp import MCPServer
from agenter.backends._pauses import PauseStoreOption
from agenter.backends.agents.codex._tools_server import SERVER_NAME
from agenter.backends.base import BackendOptions

ApprovalPolicy = Literal["never", "on-request", "on-failure", "untrusted"]
ReasoningEffort = Literal["minimal", "low", "medium", "high", "xhigh"]


class CodexMCPServer(MCPServer):
    """An extra MCP server handed to Codex: the shared shape (agenter.backends._mcp), plus how
    Codex approves its tools."""

    tools_approval_mode: Literal["approve", "auto", "prompt", "writes"] = Field(
        "approve",
        description=("Codex's default_tools_approval_mode for this server. 'approve' (default) lets "
                     "Codex call its tools without asking; otherwise a headless run declines them."),
    )

    def to_config(self) -> dict[str, Any]:
        """The [mcp_servers.<name>] table for Codex's config.toml."""
        table: dict[str, Any] = {}
        if self.command:
            table["command"] = self.command
            if self.args:
                table["args"] = list(self.args)
            if self.env:
                table["env"] = dict(self.env)
            if self.cwd:
                table["cwd"] = self.cwd
        else:
            table["url"] = self.url
            if self.bearer_token_env_var:
                table["bearer_token_env_var"] = self.bearer_token_env_var
            if self.http_headers:
                table["http_headers"] = dict(self.http_headers)
        table["default_tools_approval_mode"] = self.tools_approval_mode
        if self.enabled_tools is not None:
            table["enabled_tools"] = list(self.enabled_tools)
        if self.startup_timeout_sec is not None:
            table["startup_timeout_sec"] = self.startup_timeout_sec
        if self.tool_timeout_sec is not None:
            table["tool_timeout_sec"] = self.tool_timeout_sec
        return table


class CodexOptions(BackendOptions, PauseStoreOption):
    """How agenter runs `codex app-server`. See docs/backends/codex.md."""

    renamed: ClassVar[dict[str, str]] = {
        "codex_path": "program_path",
        "codex_mcp_servers": "mcp_servers",
        "model_provider": "codex_model_provider",
        "wire_api": "codex_wire_api",
        "network_access": "codex_network_access",
        "stream_idle_timeout_seconds": "codex_stream_idle_timeout",
        "config_overrides": "codex_config_overrides",
    }

    api_key: SecretStr | None = Field(
        None, description="API key for the provider; defaults to CODEX_API_KEY or OPENAI_API_KEY.")
    base_url: str | None = Field(
        None, description="Responses API base URL (…/v1) for a custom model provider; defaults to OpenAI's.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the codex process.")
    program_path: str | None = Field(
        None, description="The codex program (a path or a name on PATH); found automatically otherwise.")
    max_retries: int | None = Field(
        None, ge=0, le=20,
        description=("Retries of a failed model request and of a dropped stream (provider "
                     "request_max_retries and stream_max_retries); None keeps Codex's defaults."),
    )
    mcp_servers: list[CodexMCPServer] = Field(
        default_factory=list, description="Extra MCP servers whose tools Codex may call.")
    codex_approval_policy: ApprovalPolicy = Field(
        "never",
        description=("When Codex asks before acting. Headless, agenter answers every request itself "
                     "(see the docs): nothing ever waits for a human."),
    )
    codex_reasoning_effort: ReasoningEffort | None = Field(
        None, description="Reasoning effort for the model; None keeps the model's default.")
    codex_home: Path | None = Field(
        None,
        description=("Use this CODEX_HOME (your own login and config.toml) instead of a private, "
                     "throwaway one; agenter then passes its settings as -c overrides."),
    )
    codex_model_provider: str | None = Field(
        None,
        description=("Use a provider already defined in codex_home's config.toml (e.g. 'openai' with "
                     "a ChatGPT login) instead of agenter's own provider entry."),
    )
    codex_wire_api: Literal["responses"] = Field(
        "responses", description="The wire of agenter's provider entry (Codex speaks only the Responses API).")
    codex_stream_idle_timeout: float | None = Field(
        None, gt=0, description="Seconds a model stream may stay silent before Codex gives up (Codex: 300).")
    codex_network_access: bool = Field(
        False, description="Let sandboxed commands use the network (workspace-write only).")
    codex_config_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Raw Codex config keys (dotted paths allowed), applied last. An escape hatch.",
    )


    @field_validator("mcp_servers")
    @classmethod
    def _unique_names(cls, servers: list[CodexMCPServer]) -> list[CodexMCPServer]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate MCP server names: {', '.join(duplicates)}")
        if SERVER_NAME in names:
            raise ValueError(f"the MCP server name {SERVER_NAME!r} is reserved for agenter's custom tools")
        return servers
