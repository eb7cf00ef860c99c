"""The codex backend: OpenAI's Codex CLI driven through `codex app-server`. See docs/backends/codex.md."""

from agenter.backends.agents.codex._backend import CodexBackend
from agenter.backends.agents.codex._options import CodexMCPServer, CodexOptions

__all__ = ["CodexBackend", "CodexMCPServer", "CodexOptions"]
