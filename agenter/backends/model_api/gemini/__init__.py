"""The gemini backend: agenter's own agent (the harness) over the Gemini API (or Vertex AI)
through the google-genai SDK. The SDK is imported only when a backend is connected, so
importing this package stays cheap."""

from agenter.backends.model_api.gemini._backend import GeminiBackend
from agenter.backends.model_api.gemini._options import GeminiOptions

__all__ = ["GeminiBackend", "GeminiOptions"]
