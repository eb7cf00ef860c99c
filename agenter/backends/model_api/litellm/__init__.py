"""The litellm backend: any model LiteLLM reaches (a "provider/model" string), in patch and
analysis modes. See docs/backends/litellm.md."""

from agenter.backends.model_api.litellm._backend import LiteLLMBackend
from agenter.backends.model_api.litellm._options import LiteLLMOptions

__all__ = ["LiteLLMBackend", "LiteLLMOptions"]
