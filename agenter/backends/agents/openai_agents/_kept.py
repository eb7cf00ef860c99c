"""The SDK session's conversation kept in the pause store, for a paused run (docs/approvals.md).

The backend keeps a conversation in agenter's file store under `openai_agents_store_dir` (by
default the user's cache on this host), and a paused run is continued by another process,
perhaps on another host that shares only the pause store (`conversation_store`). So `hold` also
keeps the conversation's items there: a conversation under the session id with ".paused" added,
`kind` "openai-agents-conversation", its messages the items as the SDK session holds them. Its
own id, not the session's: by default both stores are the same folder, where the session's own
conversation must stay as it is. A session that resumes that id and finds no conversation in its
own store writes it there from this copy; one whose conversation is behind the paused run (it
paused again on another host) catches up from it; one that has its conversation uses it as is.
A session that kept or restored a copy brings it up to date when it ends.

The store scrubs secrets from what it writes, as for any conversation. Blocking store I/O: call
these in a thread. Free of the SDK: the items are plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agenter._errors import ConfigurationError

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["CONVERSATION_KIND", "catch_up", "copy_key", "keep_conversation", "kept_conversation", "restore_conversation"]

#: The `kind` in the metadata of a conversation kept for a paused run.
CONVERSATION_KIND = "openai-agents-conversation"
#: Added to the session id to name the copy in the pause store.
SUFFIX = ".paused"


def copy_key(session_id: str) -> str:
    """The id of the session's copy in the pause store."""
    return session_id + SUFFIX


def keep_conversation(store: ConversationStore, session_id: str, items: list[dict[str, Any]]) -> bool:
    """Store the session's items as they are now; False when the session id is too long to name
    a copy (the store's ids have at most 128 characters)."""
    from agenter.store import check_session_id

    key = copy_key(session_id)
    try:
        check_session_id(key)
    except ConfigurationError:
        return False
    store.save(key, items, {"kind": CONVERSATION_KIND, "session_id": session_id})
    return True


def kept_conversation(store: ConversationStore, session_id: str) -> list[dict[str, Any]] | None:
    """The items the pause store keeps for this session; None when it keeps none."""
    from agenter.backends._stored_files import kept

    found = kept(store, copy_key(session_id), CONVERSATION_KIND)
    if found is None:
        return None
    return [item for item in found.messages if isinstance(item, dict)]


def restore_conversation(pauses: ConversationStore, local: ConversationStore, session_id: str,
                         metadata: Mapping[str, Any]) -> int | None:
    """Write the kept copy as the session's conversation in `local`, which has none; returns how
    many items it holds (None: the pause store keeps none). A conversation written meanwhile by
    another writer wins (ConversationConflictError)."""
    items = kept_conversation(pauses, session_id)
    if items is None:
        return None
    local.save(session_id, items, metadata, revision=0)
    return len(items)


def catch_up(pauses: ConversationStore, local: ConversationStore, session_id: str, count: int) -> bool:
    """Bring the session's conversation in `local` up to the `count` items of a paused run from
    the kept copy, when the conversation is its beginning (the run went on and paused elsewhere);
    False when there is nothing to catch up from (no copy of that length, or a conversation that
    went another way)."""
    items = kept_conversation(pauses, session_id)
    stored = local.load(session_id)
    if items is None or stored is None or len(items) != count or len(stored.messages) >= count:
        return False
    if list(stored.messages) != items[:len(stored.messages)]:
        return False
    local.save(session_id, items, stored.metadata, revision=stored.revision)
    return True
