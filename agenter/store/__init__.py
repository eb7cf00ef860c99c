"""Conversation stores: where agenter's own agent keeps its conversation, so a run killed in one
process can be continued in another (`CodingRequest(resume=...)`).

A conversation is the list of messages the harness sends the model (Anthropic-shaped, JSON
data) and a little metadata (backend, model, the system prompt's hash, tool names, ...). The
`ConversationStore` protocol is five blocking methods (load, save, append, delete,
session_ids); `FileConversationStore` is the default, one file per conversation beside the run's
transcripts or in the user's cache directory. Every store scrubs secrets from what it writes
and refuses session ids that could name another place; `agenter.testing.store_conformance` is
the suite a store must pass. See docs/sessions.md.

Imports only the standard library and agenter's host layer.
"""

from agenter.store._base import (
    Conversation,
    ConversationConflictError,
    ConversationStore,
    Message,
    StoreError,
    check_session_id,
    dumps,
    encode_messages,
    encode_metadata,
)
from agenter.store._file import FileConversationStore, default_root

__all__ = [
    "Conversation", "ConversationConflictError", "ConversationStore", "FileConversationStore", "Message",
    "StoreError", "check_session_id", "default_root", "dumps", "encode_messages", "encode_metadata",
]
