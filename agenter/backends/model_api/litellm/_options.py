"""Options of the litellm backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agenter.backends.model_api._completion import CompletionOptions


class LiteLLMOptions(CompletionOptions):
    """How the litellm backend calls litellm.acompletion.

    api_key and base_url (LiteLLM's api_base) are optional: LiteLLM reads each provider's own
    environment variables (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) when they are not given.
    """

    litellm_extra: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments for litellm.acompletion "
                                          "(e.g. aws_region_name, vertex_project, api_version).")
    litellm_drop_params: bool = Field(
        True, description="Let LiteLLM drop parameters the provider does not support instead of failing.")
