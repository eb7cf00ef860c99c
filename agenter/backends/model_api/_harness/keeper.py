"""The harness's conversation kept in a conversation store (agenter.store), so that a run killed
in one process can be continued in another (`CodingRequest(resume=...)`).

What is written, and when: the conversation as the model is sent it, at each point where it is
complete (every tool_use answered): when a turn's prompt has been added, after each round of
tool results, and when the turn ends. A write appends what changed since the last one (the last
message again when a prompt or results were merged into it); a history rewritten before that
(a compaction) is saved whole. Writes carry the revision the keeper last saw, so a second process
writing the same conversation meanwhile makes the next write fail (ConversationConflictError)
instead of interleaving two histories. A run killed mid-turn is continued from its last complete
point: the tool calls of a response whose results were not yet written are not in it.

Where: by default a `FileConversationStore` beside the run's transcripts (`<log_dir>/
conversations`), else in the user's cache; the `conversation_store` option puts it in a store of
the user's, or (False) nowhere. A resume by transcript loads from the store beside that
transcript; when that is not the store the run writes to, the first write saves the whole
conversation there, so the new run's transcript has its conversation beside it too.
"""

from __future__ import annotations

import asyncio
import copy
import os
from pathlib import Path
from typing import Any

from agenter._errors import ConfigurationError
from agenter.backends._pauses import run_store
from agenter.backends.model_api._harness.conversation import close_open_tool_uses, invariant_violations
from agenter.host.redact import Redactor
from agenter.store import (
    Conversation,
    ConversationStore,
    FileConversationStore,
    Message,
    check_session_id,
    is_pause_record,
)

__all__ = ["ConversationKeeper", "stores_for"]


def stores_for(option: Any, log_dir: Path | None, resume_log_dir: Path | None,
               redact: Redactor) -> tuple[ConversationStore | None, ConversationStore | None]:
    """(the store the run writes to, the store a resumed conversation is read from); (None, None)
    when the conversation_store option is False."""
    run = run_store(option, log_dir, redact)
    if run is None or option is not None or resume_log_dir is None:
        return run, run
    return run, FileConversationStore.beside(resume_log_dir, redact=redact)


def same_store(one: ConversationStore, other: ConversationStore) -> bool:
    if one is other:
        return True
    if isinstance(one, FileConversationStore) and isinstance(other, FileConversationStore):
        return os.path.realpath(one.root) == os.path.realpath(other.root)
    return False


async def load(store: ConversationStore, session_id: str, *, backend: str,
               redact: Redactor) -> tuple[list[Message], Conversation] | None:
    """The stored conversation of `session_id`, ready to continue, and as it was loaded; None
    when the store has none. ConfigurationError for an invalid id, another backend's
    conversation, or messages that are not a conversation."""
    check_session_id(session_id, redact)
    stored = await asyncio.to_thread(store.load, session_id)
    if stored is None:
        return None
    if is_pause_record(stored.metadata):
        raise ConfigurationError(f"{session_id!r} is the handle of a paused run, not a conversation: continue it "
                                 "with agent.approve(handle) or `agenter approve HANDLE`", parameter="resume")
    owner = stored.metadata.get("backend")
    if owner not in (None, backend):
        raise ConfigurationError(f"the stored conversation {session_id!r} is of the {owner} backend, not {backend}: "
                                 "continue it with the backend that wrote it", parameter="resume")
    messages = copy.deepcopy(stored.messages)
    problems = _shape_problems(messages)
    if not problems:
        close_open_tool_uses(messages)  # a store of the user's may hold a half-written round
        problems = invariant_violations(messages)
    if problems:
        raise ConfigurationError(f"the stored conversation {session_id!r} in {store!r} cannot be continued: "
                                 f"{problems[0]}", parameter="resume")
    return messages, stored


def _shape_problems(messages: list[Any]) -> list[str]:
    for index, message in enumerate(messages):
        if not (isinstance(message, dict) and message.get("role") in ("user", "assistant")
                and isinstance(message.get("content"), list | str)):
            return [f"message {index} is not a {{'role': 'user'|'assistant', 'content': [...]}} message"]
    return []


class ConversationKeeper:
    """Writes one session's conversation to its store as it grows (see the module docstring)."""

    def __init__(self, store: ConversationStore, session_id: str, metadata: dict[str, Any], *,
                 stored: list[Message] | None = None, revision: int | None = 0):
        self.store = store
        self.session_id = session_id
        self.metadata = metadata
        #: What the store holds of this conversation, as it was written (None: unknown, so the
        #: next write saves it whole).
        self._stored: list[Message] | None = copy.deepcopy(stored) if stored is not None else (
            [] if revision == 0 else None)
        self._revision = revision
        #: The metadata as last written (None: not yet): a change (the switch to text tool
        #: calls) goes with the next write.
        self._written: dict[str, Any] | None = None

    async def keep(self, messages: list[Message]) -> None:
        """Write what changed since the last write (nothing when nothing did)."""
        stored = self._stored
        if stored is None:
            revision = await asyncio.to_thread(self.store.save, self.session_id, messages, self.metadata,
                                               revision=self._revision)
            self._remember(messages, 0, revision)
            return
        at = _first_change(messages, stored)
        if at == len(messages) == len(stored) and self._written == self.metadata:
            return
        if at < len(stored) - 1:  # rewritten before the last stored message: a compaction
            revision = await asyncio.to_thread(self.store.save, self.session_id, messages, self.metadata,
                                               revision=self._revision)
            self._remember(messages, 0, revision)
            return
        metadata = self.metadata if not stored or self._written != self.metadata else None
        revision = await asyncio.to_thread(self.store.append, self.session_id, messages[at:], at=at,
                                           metadata=metadata, revision=self._revision)
        self._remember(messages, at, revision)

    def _remember(self, messages: list[Message], at: int, revision: int) -> None:
        kept = self._stored[:at] if self._stored is not None and at else []
        self._stored = kept + copy.deepcopy(messages[at:])
        self._revision = revision
        self._written = copy.deepcopy(self.metadata)


def _first_change(messages: list[Message], stored: list[Message]) -> int:
    """The index of the first message that differs from what is stored (or is new)."""
    for index, (now, then) in enumerate(zip(messages, stored, strict=False)):
        if now != then:
            return index
    return min(len(messages), len(stored))
