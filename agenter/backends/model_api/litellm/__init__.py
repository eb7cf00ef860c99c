"""The litellm backend: any model LiteLLM reaches (a "provider/model" string): agenter's own agent
over litellm.acompletion, and the context path for analysis and patch mode. See
docs/backends/litellm.md."""

from agenter.backends.model_api.litellm._backend import LiteLLMBackend
from agenter.backends.model_api.litellm._options import LiteLLMOptions

__all__ = ["LiteLLMBackend", "LiteLLMOptions"]
