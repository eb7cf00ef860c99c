"""An ADK session kept in agenter's conversation store, for a paused run (docs/approvals.md).

ADK keeps a session's events in its session service: by default a SQLite file in the user's cache
on this host, or only in memory (`adk_session_db=':memory:'`). A run that pauses is continued by
another process, perhaps on another host with the same store, so `hold` also keeps the session's
events there: a conversation under the ADK session id whose messages are the events as ADK's
SQLite service writes them (JSON, bytes in base64), with `kind` "adk-session". A session that
resumes that id and finds no such session in its own service creates it from this copy, and a
session that kept or restored a copy brings it up to date when it ends.

The store scrubs secrets from what it writes, as for any conversation. Blocking store I/O: call
these in a thread. Free of ADK imports (the backend turns events into data and back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["SESSION_KIND", "keep_session", "kept_session"]

#: The `kind` in the metadata of a stored ADK session.
SESSION_KIND = "adk-session"


def keep_session(store: ConversationStore, session_id: str, events: list[dict[str, Any]]) -> None:
    """Store the session's events (`event_data` of each) as they are now."""
    store.save(session_id, events, {"kind": SESSION_KIND})


def kept_session(store: ConversationStore, session_id: str) -> list[dict[str, Any]] | None:
    """The events of the session the store keeps under this id; None when it keeps none (an id
    that is no store id, another kind of conversation)."""
    from agenter.backends._stored_files import kept

    found = kept(store, session_id, SESSION_KIND)
    if found is None:
        return None
    return [event for event in found.messages if isinstance(event, dict)]
