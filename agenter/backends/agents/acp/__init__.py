"""The acp backend: any Agent Client Protocol agent over stdio, with agenter as the ACP client.

Importing this package is cheap: the `acp` package (agent-client-protocol) is imported only
when a session connects.
"""

from agenter.backends.agents.acp._backend import ACPBackend
from agenter.backends.agents.acp._options import ACPOptions

__all__ = ["ACPBackend", "ACPOptions"]
