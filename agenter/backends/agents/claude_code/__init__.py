"""claude-code backend: Claude Code (the real `claude` CLI) driven through claude-agent-sdk.

Imported lazily by the backend registry; claude_agent_sdk itself is imported only on connect.
"""

from agenter.backends.agents.claude_code._backend import ClaudeCodeBackend
from agenter.backends.agents.claude_code._options import ClaudeCodeOptions

__all__ = ["ClaudeCodeBackend", "ClaudeCodeOptions"]
