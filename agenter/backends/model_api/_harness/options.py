"""The options every backend of agenter's own agent has, under the shared names: a provider's
options class subclasses `HarnessOptions` and adds its own (and its `loop_config` passes these
on to the harness).

- `mcp_servers`: MCP servers whose tools the model may call (mcptools.py);
- `conversation_store`: where the conversation is kept so that `resume=` continues it in another
  process (keeper.py over agenter.store): None (the default) keeps it in a file store beside the run's transcripts,
  else in the user's cache; a `ConversationStore` of the user's keeps it there; False keeps it
  only in the process (no resume across processes).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from agenter.backends._mcp import MCPServer
from agenter.backends._pauses import check_store_option
from agenter.backends.base import BackendOptions

__all__ = ["HarnessOptions"]


class HarnessOptions(BackendOptions):
    """Options shared by the harness backends (anthropic-sdk, gemini, ...)."""

    mcp_servers: list[MCPServer] = Field(
        default_factory=list,
        description="MCP servers whose tools the model may call: {name, command, args, env} (stdio) or "
                    "{name, url, http_headers} (streamable HTTP). A stdio server starts only when the "
                    "permission policy lists it in allowed_mcp_servers (or on_permission allows it).")
    conversation_store: Any = Field(
        None,
        description="Where the conversation is kept for resume= in another process: None (the default: a file "
                    "store beside the run's transcripts, else in the user's cache), a folder path, a "
                    "sqlite:///path.db or redis://host:port/db URL (agenter.store.open_store), a "
                    "ConversationStore (agenter.store) of your own, or False (only in this process).")

    text_code_edits: bool = Field(
        True,
        description="Tool calls in text (the provider's tool_calls option 'text', or 'auto' once switched): a reply "
                    "that makes no call has its code blocks read as file edits, a block after a line with a file's "
                    "path, or Python functions and classes that one file the task names or the model read defines "
                    "(docs/text-tool-calls.md). False: only calls change files.")
    text_edits_end_turn: bool = Field(
        True,
        description="With text_code_edits: a reply whose code blocks were all written as edits, with no call and "
                    "no problem, ends the turn (the validators judge it, and their findings come back as the next "
                    "message), as an edit-format tool's reply does; no request only to hear the model say it is done. "
                    "False: the model is sent the write results and answers again.")
    attach_named_files: bool | None = Field(
        None,
        description="The text of the files the task names (up to 4, 32,000 characters in all) goes with its first "
                    "message. None (the default): only when tool calls are in text from the start (small local "
                    "models edit what they see and rarely read first).")

    @field_validator("mcp_servers")
    @classmethod
    def _unique_names(cls, servers: list[MCPServer]) -> list[MCPServer]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate MCP server names: {', '.join(duplicates)}")
        return servers

    @field_validator("conversation_store")
    @classmethod
    def _a_store(cls, value: Any) -> Any:
        return check_store_option(value)
