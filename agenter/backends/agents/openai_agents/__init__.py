"""openai-agents backend: the OpenAI Agents SDK's own agent loop, with agenter's tools, permission
gate and sandbox.

Imported lazily by the backend registry; the SDK itself (`agents`) is imported only on connect.
"""

from agenter.backends.agents.openai_agents._backend import OpenAIAgentsBackend
from agenter.backends.agents.openai_agents._options import OpenAIAgentsOptions

__all__ = ["OpenAIAgentsBackend", "OpenAIAgentsOptions"]
