"""Options of the openhands backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, SecretStr

from agenter.backends._pauses import PauseStoreOption
from agenter.backends.base import BackendOptions

#: Where conversations are kept by default (`~` is the user's home when the backend connects).
DEFAULT_PERSISTENCE_DIR = "~/.openhands/agenter-conversations"


class OpenHandsOptions(BackendOptions, PauseStoreOption):
    """How the OpenHands agent reaches its model (through LiteLLM) and runs its tools."""

    renamed: ClassVar[dict[str, str]] = {
        "num_retries": "max_retries",
        "max_output_tokens": "max_tokens",
        "retry_max_wait": "max_retry_wait",
        "retry_min_wait": "openhands_retry_min_wait",
        "api_version": "openhands_api_version",
        "stream": "openhands_stream",
        "max_steps": "openhands_max_steps",
        "terminal_type": "openhands_terminal_type",
        "extra_headers": "openhands_extra_headers",
    }

    # Shared with other backends (one name everywhere).
    api_key: SecretStr | None = Field(
        None,
        description="Model API key; defaults to the provider's environment variable "
        "(OPENAI_API_KEY, ANTHROPIC_API_KEY, ...), read by LiteLLM.",
    )
    base_url: str | None = Field(
        None,
        description="Model API base URL (LiteLLM's api_base), e.g. an OpenAI-compatible server's "
        "'http://host:port/v1'. Defaults to what LiteLLM reads from the provider's environment.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the terminal's shell.")
    max_retries: int = Field(
        2, ge=0, le=20,
        description="LiteLLM retries per model call on rate limits, 5xx and dropped connections.",
    )
    max_retry_wait: float = Field(30.0, ge=0, description="Cap in seconds on one retry wait.")
    request_timeout: float = Field(300.0, gt=0, description="Seconds per model request.")
    max_tokens: int | None = Field(None, gt=0, description="Output token limit per model response.")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    # Only this backend's.
    openhands_api_version: str | None = Field(None, description="API version (Azure OpenAI).")
    openhands_stream: bool = Field(
        True, description="Stream model responses from the provider: the model's text and reasoning "
        "arrive as deltas while it writes (Chat Completions models; on the Responses API the "
        "request streams but events stay whole).")
    openhands_retry_min_wait: int = Field(
        4, ge=0, description="Seconds before the first retry (grows exponentially).")
    openhands_max_steps: int = Field(
        100, gt=0,
        description="Agent steps (model calls) per execute() before OpenHands stops the run.",
    )
    openhands_terminal_type: Literal["subprocess", "tmux"] = Field(
        "subprocess",
        description="How the terminal tool runs bash: a child process in its own process group "
        "(ended with the session), or a tmux session (needs the tmux program).",
    )
    openhands_extra_headers: dict[str, str] | None = Field(
        None, description="Extra HTTP headers on every model request.")
    openhands_persistence_dir: str | None = Field(
        DEFAULT_PERSISTENCE_DIR,
        description="Where OpenHands keeps each conversation (one folder per conversation id), so a "
        "later run can resume it. None: in memory only (no resume).",
    )

