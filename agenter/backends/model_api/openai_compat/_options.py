"""Options of the openai backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agenter.backends.model_api._completion import CompletionOptions


class OpenAIOptions(CompletionOptions):
    """How the openai backend talks to an OpenAI-compatible API and runs agenter's own agent.

    api_key defaults to OPENAI_API_KEY, base_url to OPENAI_BASE_URL or the OpenAI API; a server
    given by base_url needs no key. The options of the context path (structured_output,
    max_attempts, repo_map_tokens, context_tokens, read_step, max_read_files) apply to analysis
    and patch mode with openai_context="prompt"; the openai_max_turns_per_iteration and
    openai_shell* options to the tool loop (autonomous mode, and openai_context="tools").
    """

    openai_wire: Literal["chat", "responses"] = Field(
        "chat", description="Chat Completions (every compatible server) or the Responses API.")
    openai_extra_body: dict[str, Any] | None = Field(
        None, description="Extra JSON fields for each request, for server-specific parameters "
                          "(e.g. vLLM's or Ollama's own options).")
    openai_context: Literal["prompt", "tools"] = Field(
        "prompt", description=(
            "How analysis and patch mode give the model the repository: 'prompt' shows a repository map and "
            "the files in the prompt and asks for one answer (what small local models manage); 'tools' runs "
            "agenter's own agent read-only (the model reads with the file tools and bash). Autonomous mode "
            "always runs the agent."))
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, description="Reasoning effort (reasoning_effort; Responses: reasoning.effort), for models that take "
                          "it; None: the model's default (nothing sent).")
    openai_tool_calls: Literal["auto", "native", "text"] = Field(
        "auto", description=(
            "How the model calls tools in agenter's own agent: 'native' (tool calls on the wire), 'text' (written "
            "in its reply as <tool_call> JSON, for models that make none on the wire: docs/text-tool-calls.md), "
            "'auto' (native, switching to text when a reply holds text calls instead)."))
    openai_max_turns_per_iteration: int = Field(
        50, gt=0, description="Model responses per execute() call before the tool loop stops.")
    openai_shell: bool = Field(
        True, description="Give the model the bash tool (confined with sandbox=True: see openai_shell_sandbox).")
    openai_shell_sandbox: Literal["auto", "landlock", "bubblewrap", "seatbelt"] = Field(
        "auto", description=(
            "How the bash tool is confined with sandbox=True: 'auto' takes Landlock (Linux 6.2+), else bubblewrap "
            "(Linux), else Seatbelt (macOS); naming one forces it (a RequirementError when it is not there)."))
    openai_shell_timeout: float = Field(
        120.0, gt=0, le=3600, description="Seconds a bash command may run unless the model asks for another limit.")
