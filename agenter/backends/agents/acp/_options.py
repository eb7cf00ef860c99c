"""Options of the acp backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from agenter.backends._pauses import PauseStoreOption
from agenter.backends.base import BackendOptions

#: File-system methods agenter can serve to the agent (ACP client capabilities fs.*TextFile).
FsCapability = Literal["read", "write"]
ALL_FS: tuple[FsCapability, ...] = ("read", "write")


class ACPOptions(BackendOptions, PauseStoreOption):
    """How the ACP agent is started and answered. See docs/backends/acp.md."""

    renamed: ClassVar[dict[str, str]] = {
        "acp_env": "env",
        "acp_mcp_servers": "mcp_servers",
        "acp_permission_policy": "permission_policy",
        "startup_timeout": "acp_startup_timeout",
    }

    acp_command: str = Field(description="The ACP agent program, e.g. 'codex-acp' or 'claude-agent-acp'.")
    acp_args: list[str] = Field(default_factory=list, description="Arguments for acp_command.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment added to agenter's own for the agent process.")
    mcp_servers: list[dict[str, Any]] = Field(
        default_factory=list,
        description="MCP servers for session/new, in ACP's shape: {name, command, args, env} "
                    "(stdio; env may be a dict) or {type: 'http'|'sse', name, url, headers}.")
    permission_policy: Literal["deny", "allow"] = Field(
        "deny", description="Answer to session/request_permission: 'deny' (pick a reject option) "
                            "or 'allow' (pick an allow-once option; still refused outside the sandbox).")
    acp_autonomous: bool = Field(
        True, description="Prepend agenter's autonomous contract to the first prompt and continue once "
                          "when the agent stops to ask for confirmation instead of editing.")
    acp_session_mode: str | None = Field(
        None, description="A session mode id to set after session/new (codex-acp: 'auto', "
                          "'full-access'; claude-agent-acp: 'acceptEdits', 'bypassPermissions', ...).")
    acp_fs: list[FsCapability] = Field(
        default_factory=lambda: list(ALL_FS),
        description="Which fs methods agenter serves (and advertises in initialize): 'read' "
                    "(fs/read_text_file) and 'write' (fs/write_text_file).")
    acp_startup_timeout: float = Field(60.0, gt=0, description="Seconds for initialize + session/new.")


    @field_validator("acp_command")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("acp_command must name the ACP agent program")
        return value


def mcp_server_json(server: dict[str, Any]) -> dict[str, Any]:
    """ACP wants stdio env as [{name, value}] and http headers as [{name, value}]; accept dicts."""
    out = dict(server)
    for key in ("env", "headers"):
        value = out.get(key)
        if isinstance(value, dict):
            out[key] = [{"name": str(k), "value": str(v)} for k, v in value.items()]
    if "type" not in out:  # stdio
        out.setdefault("args", [])
        out.setdefault("env", [])
    else:
        out.setdefault("headers", [])
    return out
