"""Options of the anthropic-sdk backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

import os
import warnings
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, model_validator

from agenter._compat import deprecated, outside_level
from agenter.backends.base import BackendOptions

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_BEDROCK_MODEL = "us.anthropic.claude-sonnet-5-5"
#: The Bedrock API key's variable (read by the anthropic SDK's Bedrock client; agenter 0.1.7
#: chose Bedrock when it was set).
BEDROCK_TOKEN_VARIABLE = "AWS_BEARER_TOKEN_BEDROCK"


class AnthropicSDKOptions(BackendOptions):
    """How the anthropic-sdk backend talks to the Messages API and runs its tool loop."""

    renamed: ClassVar[dict[str, str]] = {
        "use_anthropic_tools": "anthropic_text_editor",
        "bedrock": "anthropic_bedrock",
        "aws_region": "anthropic_aws_region",
        "aws_profile": "anthropic_aws_profile",
        "aws_access_key": "anthropic_aws_access_key",
        "aws_secret_key": "anthropic_aws_secret_key",
        "aws_session_token": "anthropic_aws_session_token",
        "max_turns_per_iteration": "anthropic_max_turns_per_iteration",
        "prompt_caching": "anthropic_prompt_caching",
    }

    # Shared with other backends (one name everywhere).
    api_key: SecretStr | None = Field(
        None, description="Anthropic API key; defaults to the ANTHROPIC_API_KEY environment variable.")
    base_url: str | None = Field(None, description="API base URL; defaults to ANTHROPIC_BASE_URL or the public API.")
    max_retries: int = Field(4, ge=0, le=20, description="Retries per request on 408/409/429/5xx/529/dropped streams.")
    max_retry_wait: float = Field(60.0, ge=0, description="Cap in seconds on one retry wait (retry-after included).")
    request_timeout: float = Field(600.0, gt=0, description="Seconds per HTTP request (and between stream chunks).")
    # Model settings other model backends have too.
    max_tokens: int = Field(16384, gt=0, description="Output token limit per model response.")
    temperature: float | None = Field(
        None, ge=0.0, le=1.0, description="Sampling temperature. Claude 5 models reject non-default values.")
    thinking: Literal["adaptive", "between_tools", "disabled"] | int | None = Field(
        None,
        description=(
            "None: the model's default (adaptive thinking on Claude 5 models). 'adaptive', "
            "'between_tools' or 'disabled' set the thinking type; an int is a legacy thinking "
            "budget in tokens (Claude 4.5 and older)."
        ),
    )
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="How much effort the model spends (output_config.effort); None: the model's default.")
    # Only this backend's.
    anthropic_text_editor: bool = Field(
        False, description="Use Anthropic's text editor tool (text_editor_20250728) instead of agenter's file tools.")
    anthropic_bedrock: bool = Field(False, description="Call Claude on AWS Bedrock (needs the 'bedrock' extra).")
    anthropic_aws_region: str | None = Field(None, description="Bedrock region; defaults to AWS_REGION.")
    anthropic_aws_profile: str | None = None
    anthropic_aws_access_key: SecretStr | None = None
    anthropic_aws_secret_key: SecretStr | None = None
    anthropic_aws_session_token: SecretStr | None = None
    anthropic_max_turns_per_iteration: int = Field(
        50, gt=0, description="Model responses per execute() call before the tool loop stops.")
    anthropic_prompt_caching: bool = Field(True, description="Mark the stable prefix and the latest message cacheable.")
    anthropic_shell: bool = Field(
        True, description="Give the model the bash tool (confined with sandbox=True: see anthropic_shell_sandbox).")
    anthropic_shell_sandbox: Literal["auto", "landlock", "bubblewrap", "seatbelt"] = Field(
        "auto", description=(
            "How the bash tool is confined with sandbox=True: 'auto' takes Landlock (Linux 6.2+), else bubblewrap "
            "(Linux), else Seatbelt (macOS); naming one forces it (a RequirementError when it is not there)."))
    anthropic_shell_timeout: float = Field(
        120.0, gt=0, le=3600, description="Seconds a bash command may run unless the model asks for another limit.")

    @model_validator(mode="after")
    def _check_thinking(self) -> AnthropicSDKOptions:
        if isinstance(self.thinking, int):
            if self.thinking < 1024:
                raise ValueError("a thinking budget must be at least 1024 tokens")
            if self.thinking >= self.max_tokens:
                raise ValueError("the thinking budget must be smaller than max_tokens")
        if self.thinking not in (None, "disabled") and self.temperature is not None:
            raise ValueError("temperature cannot be set while thinking is on (the API requires the default)")
        return self

    @model_validator(mode="after")
    def _bedrock_from_its_token(self) -> AnthropicSDKOptions:
        """agenter 0.1.7 called Claude on Bedrock whenever AWS_BEARER_TOKEN_BEDROCK was set; today
        `anthropic_bedrock=True` does. Unless that option is given: with the token and no
        Anthropic key (nor api_key / base_url) Bedrock is all the environment can mean, so it is
        used (a DeprecationWarning); with both, the Anthropic API is used and a warning says so,
        since 0.1.7 would have sent the requests to Bedrock."""
        if "anthropic_bedrock" in self.model_fields_set or not os.environ.get(BEDROCK_TOKEN_VARIABLE):
            return self
        if self.api_key is None and self.base_url is None and not any(
                os.environ.get(name) for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")):
            deprecated(f"{BEDROCK_TOKEN_VARIABLE} alone selecting Bedrock", "anthropic_bedrock=True")
            self.anthropic_bedrock = True
        else:
            warnings.warn(
                f"{BEDROCK_TOKEN_VARIABLE} is set, but the anthropic-sdk backend calls the Anthropic API "
                "(an Anthropic key or base_url is given too); agenter 0.1.7 used Bedrock whenever the "
                "variable was set. Pass anthropic_bedrock=True for Bedrock, or anthropic_bedrock=False "
                "to keep the Anthropic API without this warning (docs/migrating.md)",
                UserWarning, stacklevel=outside_level())
        return self
