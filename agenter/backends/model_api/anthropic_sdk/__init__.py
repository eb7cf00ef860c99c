"""The anthropic-sdk backend (the default): agenter's own streaming tool-use loop over the
Anthropic Messages API, with sandboxed file tools. The `anthropic` package is imported only
when a backend is connected, so importing this package stays cheap."""

from agenter.backends.model_api.anthropic_sdk._backend import AnthropicSDKBackend
from agenter.backends.model_api.anthropic_sdk._options import AnthropicSDKOptions

__all__ = ["AnthropicSDKBackend", "AnthropicSDKOptions"]
