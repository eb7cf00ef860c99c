"""Options of the litellm backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agenter.backends.model_api._completion import CompletionOptions
from agenter.backends.model_api._harness.options import HarnessOptions


class LiteLLMOptions(CompletionOptions, HarnessOptions):
    """How the litellm backend calls litellm.acompletion and runs agenter's own agent.

    api_key and base_url (LiteLLM's api_base) are optional: LiteLLM reads each provider's own
    environment variables (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) when they are not given. The
    options of the context path (structured_output, max_attempts, repo_map_tokens,
    context_tokens, read_step, max_read_files) apply to analysis and patch mode with
    litellm_context="prompt"; the litellm_max_turns_per_iteration and litellm_shell* options, and
    the harness's mcp_servers and conversation_store, to the tool loop (autonomous mode, and
    litellm_context="tools").
    """

    litellm_extra: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments for litellm.acompletion "
                                          "(e.g. aws_region_name, vertex_project, api_version).")
    litellm_drop_params: bool = Field(
        True, description="Let LiteLLM drop parameters the provider does not support instead of failing.")
    litellm_context: Literal["prompt", "tools"] = Field(
        "prompt", description=(
            "How analysis and patch mode give the model the repository: 'prompt' shows a repository map and "
            "the files in the prompt and asks for one answer (what small local models manage); 'tools' runs "
            "agenter's own agent read-only (the model reads with the file tools and bash). Autonomous mode "
            "always runs the agent."))
    litellm_tool_calls: Literal["auto", "native", "text"] = Field(
        "auto", description=(
            "How the model calls tools in agenter's own agent: 'native' (tool calls on the wire), 'text' (written "
            "in its reply as <tool_call> JSON, for models that make none on the wire: docs/text-tool-calls.md), "
            "'auto' (native, switching to text when a reply holds text calls instead)."))
    litellm_prompt_caching: bool = Field(
        True, description=("Ask LiteLLM to mark the system prompt and the newest message cacheable "
                           "(cache_control_injection_points), for models LiteLLM says support prompt caching."))
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, description="Reasoning effort (LiteLLM's reasoning_effort, mapped by it per provider); None: the "
                          "model's default (nothing sent).")
    thinking: Literal["disabled"] | int | None = Field(
        None, description=("Extended thinking: a budget in tokens (thinking={'type': 'enabled', 'budget_tokens': "
                           "N}, which LiteLLM maps for Anthropic, Bedrock, Vertex and Gemini models) or 'disabled'; "
                           "None: the model's default (nothing sent)."))
    litellm_max_turns_per_iteration: int = Field(
        50, gt=0, description="Model responses per execute() call before the tool loop stops.")
    litellm_shell: bool = Field(
        True, description="Give the model the bash tool (confined with sandbox=True: see litellm_shell_sandbox).")
    litellm_shell_sandbox: Literal["auto", "landlock", "bubblewrap", "seatbelt"] = Field(
        "auto", description=(
            "How the bash tool is confined with sandbox=True: 'auto' takes Landlock (Linux 6.2+), else bubblewrap "
            "(Linux), else Seatbelt (macOS); naming one forces it (a RequirementError when it is not there)."))
    litellm_shell_timeout: float = Field(
        120.0, gt=0, le=3600, description="Seconds a bash command may run unless the model asks for another limit.")

    @model_validator(mode="after")
    def _check_thinking(self) -> LiteLLMOptions:
        if isinstance(self.thinking, int) and self.thinking <= 0:
            raise ValueError("a thinking budget is a positive number of tokens (or 'disabled')")
        return self
