"""The openai backend: any OpenAI-compatible API (OpenAI, llama.cpp, vLLM, Ollama, OpenRouter, ...)
through the `openai` client: agenter's own agent on the Chat Completions or Responses wire, and
the context path for analysis and patch mode. See docs/backends/openai.md."""

from agenter.backends.model_api.openai_compat._backend import OpenAICompatBackend
from agenter.backends.model_api.openai_compat._options import OpenAIOptions

__all__ = ["OpenAICompatBackend", "OpenAIOptions"]
