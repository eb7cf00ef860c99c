"""Options of the openai backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agenter.backends.model_api._completion import CompletionOptions


class OpenAIOptions(CompletionOptions):
    """How the openai backend talks to an OpenAI-compatible API.

    api_key defaults to OPENAI_API_KEY, base_url to OPENAI_BASE_URL or the OpenAI API; a server
    given by base_url needs no key.
    """

    openai_wire: Literal["chat", "responses"] = Field(
        "chat", description="Chat Completions (every compatible server) or the Responses API.")
    openai_extra_body: dict[str, Any] | None = Field(
        None, description="Extra JSON fields for each request, for server-specific parameters "
                          "(e.g. vLLM's or Ollama's own options).")
