"""The openhands backend: the OpenHands software-agent SDK (file editor + terminal tools, any
LiteLLM model). openhands-sdk needs Python >= 3.12 and is imported only when a backend connects,
so importing this package stays cheap (and works on 3.11, where using it is a ConfigurationError)."""

from agenter.backends.openhands._backend import OpenHandsBackend, runtime_problem
from agenter.backends.openhands._options import OpenHandsOptions

__all__ = ["OpenHandsBackend", "OpenHandsOptions", "runtime_problem"]
