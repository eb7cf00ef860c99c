"""Conversation stores: where agenter's own agent keeps its conversation, so a run killed in one
process can be continued in another (`CodingRequest(resume=...)`).

A conversation is the list of messages the harness sends the model (Anthropic-shaped, JSON
data) and a little metadata (backend, model, the system prompt's hash, tool names, ...). The
`ConversationStore` protocol is five blocking methods (load, save, append, delete,
session_ids). Three stores implement it: `FileConversationStore`, the default, one file per
conversation beside the run's transcripts or in the user's cache directory;
`SQLiteConversationStore`, one database file; `RedisConversationStore`, a Redis server (the
`redis` extra). `open_store` makes one from a path or a `sqlite://` / `redis://` URL. Every store
scrubs secrets from what it writes and refuses session ids that could name another place;
`agenter.testing.store_conformance` is the suite a store must pass. See docs/sessions.md.
A paused run's record is kept in the same store, under its handle (`_pauses.py`,
docs/approvals.md).

Imports only the standard library and agenter's host layer; the SQLite and Redis stores' modules
(sqlite3, redis) load when first named.
"""

from typing import TYPE_CHECKING

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
from agenter.store._open import open_store
from agenter.store._pauses import HeldPause, claim_pause, is_pause_record, load_pause, save_pause

if TYPE_CHECKING:
    from agenter.store._redis import RedisConversationStore
    from agenter.store._sqlite import SQLiteConversationStore

__all__ = [
    "Conversation", "ConversationConflictError", "ConversationStore", "FileConversationStore", "HeldPause", "Message",
    "RedisConversationStore", "SQLiteConversationStore", "StoreError", "check_session_id", "claim_pause",
    "default_root", "dumps", "encode_messages", "encode_metadata", "is_pause_record", "load_pause", "open_store",
    "save_pause",
]

#: Stores whose module imports what `import agenter.store` should not pay for (sqlite3, redis):
#: loaded on first access.
_LAZY = {"SQLiteConversationStore": "agenter.store._sqlite", "RedisConversationStore": "agenter.store._redis"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agenter.store' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
