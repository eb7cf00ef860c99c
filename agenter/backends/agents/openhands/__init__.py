"""The openhands backend: the OpenHands software-agent SDK (file editor + terminal tools, any
LiteLLM model). openhands-sdk needs Python >= 3.12 and is imported only when a backend connects,
so importing this package stays cheap (and works on 3.11, where choosing it is a RequirementError
that says so)."""

from agenter.backends.agents.openhands._backend import OpenHandsBackend
from agenter.backends.agents.openhands._options import OpenHandsOptions

__all__ = ["OpenHandsBackend", "OpenHandsOptions"]
