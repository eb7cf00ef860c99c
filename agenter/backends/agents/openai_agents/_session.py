"""The SDK's conversation memory (its `Session` protocol) kept in agenter's conversation store.

Every turn is `Runner.run_streamed(..., session=...)`: the SDK reads the history from the session
before the turn and adds each step's items (the user's prompt, the model's messages and tool
calls, the tool outputs) after it. Kept in a `ConversationStore` (default: the file store in
agenter's cache folder), the conversation survives the process: a later run passes the session
id as `resume=` and the SDK continues it. The store scrubs secrets from what it writes (a key a
command printed is [REDACTED] in the resumed history), writes whole lines or nothing, and
refuses ids that could name another place. Free of the SDK: the protocol is structural.

Limits: one writer per session at a time (agenter's folder lock gives that for one workspace);
the SDK's own compaction of sessions (OpenAIResponsesCompactionSession) is not offered here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from agenter.store import ConversationConflictError, ConversationStore

__all__ = ["StoredSession"]


class StoredSession:
    """An `agents.memory.Session` over one conversation of a ConversationStore."""

    #: The SDK reads it (None: its defaults).
    session_settings: Any = None

    def __init__(self, store: ConversationStore, session_id: str, metadata: Mapping[str, Any] | None = None):
        self.store = store
        self.session_id = session_id
        self.metadata = dict(metadata or {})
        self._count: int | None = None  # the stored items, as far as this session knows

    async def exists(self) -> bool:
        """Whether the store holds this conversation already."""
        return await asyncio.to_thread(self.store.load, self.session_id) is not None

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = await asyncio.to_thread(self._load)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        await asyncio.to_thread(self._append, [dict(item) for item in items])

    async def pop_item(self) -> Any | None:
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self.store.delete, self.session_id)
        self._count = 0

    # ------------------------------------------------------------------ blocking halves
    def _load(self) -> list[Any]:
        conversation = self.store.load(self.session_id)
        items = list(conversation.messages) if conversation is not None else []
        self._count = len(items)
        return items

    def _append(self, items: list[dict[str, Any]]) -> None:
        if self._count is None:
            self._load()
        try:
            self.store.append(self.session_id, items, at=self._count or 0, metadata=self.metadata)
        except ConversationConflictError:  # written meanwhile by another writer: add after theirs
            self._load()
            self.store.append(self.session_id, items, at=self._count or 0, metadata=self.metadata)
        self._count = (self._count or 0) + len(items)

    def _pop(self) -> Any | None:
        conversation = self.store.load(self.session_id)
        if conversation is None or not conversation.messages:
            self._count = 0
            return None
        *kept, last = conversation.messages
        self.store.save(self.session_id, kept, conversation.metadata, revision=conversation.revision)
        self._count = len(kept)
        return last
