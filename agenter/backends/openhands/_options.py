"""Options of the openhands backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from agenter.backends.base import BackendOptions


class OpenHandsOptions(BackendOptions):
    """How the OpenHands agent reaches its model (through LiteLLM) and runs its tools."""

    base_url: str | None = Field(
        None,
        description="Model API base URL (LiteLLM's api_base), e.g. an OpenAI-compatible server's "
        "'http://host:port/v1'. Defaults to what LiteLLM reads from the provider's environment.",
    )
    api_key: SecretStr | None = Field(
        None,
        description="Model API key; defaults to the provider's environment variable "
        "(OPENAI_API_KEY, ANTHROPIC_API_KEY, ...), read by LiteLLM.",
    )
    api_version: str | None = Field(None, description="API version (Azure OpenAI).")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_output_tokens: int | None = Field(None, gt=0, description="Output token limit per model response.")
    stream: bool = Field(False, description="Stream model responses (token by token) from the provider.")
    num_retries: int = Field(
        2, ge=0, le=20,
        description="LiteLLM retries per model call on rate limits, 5xx and dropped connections.",
    )
    retry_min_wait: int = Field(4, ge=0, description="Seconds before the first retry (grows exponentially).")
    retry_max_wait: int = Field(30, ge=0, description="Cap in seconds on one retry wait.")
    request_timeout: int = Field(300, gt=0, description="Seconds per model request.")
    max_steps: int = Field(
        100, gt=0,
        description="Agent steps (model calls) per execute() before OpenHands stops the run.",
    )
    terminal_type: Literal["subprocess", "tmux"] = Field(
        "subprocess",
        description="How the terminal tool runs bash: a child process in its own process group "
        "(ended with the session), or a tmux session (needs the tmux program).",
    )
    extra_headers: dict[str, str] | None = Field(None, description="Extra HTTP headers on every model request.")
