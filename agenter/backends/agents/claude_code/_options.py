"""Options of the claude-code backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, SecretStr

from agenter.backends._pauses import PauseStoreOption
from agenter.backends.base import BackendOptions

#: Claude Code's own tools the agent gets by default: read, search, edit files and run commands.
DEFAULT_ALLOWED_TOOLS: tuple[str, ...] = ("Read", "Edit", "Write", "Bash", "Glob", "Grep")


class ClaudeCodeOptions(BackendOptions, PauseStoreOption):
    """How Claude Code is started. Everything has a headless-pipeline default."""

    renamed: ClassVar[dict[str, str]] = {
        "allowed_tools": "claude_allowed_tools",
        "setting_sources": "claude_setting_sources",
        "max_turns": "claude_max_turns",
        "cli_path": "program_path",
    }

    api_key: SecretStr | None = Field(
        None, description="Anthropic API key (ANTHROPIC_API_KEY for the CLI); defaults to the environment."
    )
    base_url: str | None = Field(None, description="Anthropic API base URL (ANTHROPIC_BASE_URL for the CLI).")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the Claude Code process."
    )
    program_path: str | None = Field(
        None, description="Path of the `claude` executable; default: the one bundled with claude-agent-sdk."
    )
    claude_allowed_tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOWED_TOOLS),
        description=(
            "Claude Code's built-in tools the agent may use (they are also the only built-in tools it "
            "sees). Custom tools and the refusal tool are added automatically."
        ),
    )
    claude_setting_sources: list[Literal["user", "project", "local"]] = Field(
        default_factory=list,
        description=(
            "Which settings files Claude Code loads. Empty (default): none, so a repository's "
            ".claude/settings.json cannot add hooks or permissions. Add 'project' to load CLAUDE.md "
            "and project settings."
        ),
    )
    claude_max_thinking_tokens: int | None = Field(
        None, ge=0, description="Extended-thinking budget in tokens; 0 disables thinking; None: Claude Code's default."
    )
    claude_max_turns: int | None = Field(
        None, gt=0, description="Claude Code's own limit on model round trips per iteration."
    )

