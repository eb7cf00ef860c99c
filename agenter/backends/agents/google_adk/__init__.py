"""The google-adk backend: Google ADK's own agent loop (LlmAgent + Runner) over Gemini, with ADK's
environment tools on the request's cwd, agenter's permission gate on every tool call and
agenter's shell sandbox. google-adk is imported only when a backend connects, so importing this
package stays cheap."""

from agenter.backends.agents.google_adk._backend import GoogleADKBackend
from agenter.backends.agents.google_adk._options import GoogleADKOptions

__all__ = ["GoogleADKBackend", "GoogleADKOptions"]
