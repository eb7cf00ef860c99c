"""Paused runs kept in a conversation store, found again by their handle (docs/approvals.md).

A run that stops at a call waiting for a person keeps a pause record in a conversation store (for
agenter's own agent, the one its conversation is in; claude-code keeps only the record there):
the request and its settings, the calls not run, the budget spent so far, the files changed so
far, the id of the conversation. It is stored as a conversation of
its own (no messages; the record in its metadata, `kind` "agenter-pause") under its handle, so
every store (file, SQLite, Redis, a user's own) keeps it with no new method, and a store reached
by two hosts serves both.

A handle is used once. `claim` marks the record "resumed" with a write that carries the revision
it read (the stores' compare-and-set): of two processes approving one handle at once, one wins
and the other gets ConversationConflictError, which `claim` reports as an already used handle.
The record stays in the store afterwards, so a second approve says "already used" rather than
"unknown". A store that cannot be reached raises StoreError naming it, and leaves the record as
it was. A continued run that could not begin its turn (the folder busy, the backend not
starting) gives the record back (`release_pause`), so the run stays paused.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from agenter._errors import ConfigurationError
from agenter.store._base import ConversationConflictError, ConversationStore, StoreError, is_session_id

__all__ = ["PAUSE_KIND", "HeldPause", "claim_pause", "is_pause_record", "load_pause", "new_handle", "release_pause",
           "save_pause"]

#: The `kind` in a pause record's metadata (a conversation store's id that holds one is a handle).
PAUSE_KIND = "agenter-pause"
#: The record's format version.
PAUSE_VERSION = 1
#: How a handle begins (the rest is random): readable in a log, and a valid session id.
HANDLE_PREFIX = "pause-"


@dataclass(frozen=True)
class HeldPause:
    """A pause record as loaded: its handle, the record, and the revision `claim_pause` writes on."""

    handle: str
    record: dict[str, Any]
    revision: int

    @property
    def used(self) -> bool:
        return self.record.get("state") != "paused"


def new_handle() -> str:
    return HANDLE_PREFIX + uuid.uuid4().hex


def is_pause_record(metadata: Any) -> bool:
    return isinstance(metadata, dict) and metadata.get("kind") == PAUSE_KIND


def save_pause(store: ConversationStore, record: dict[str, Any]) -> str:
    """Keep `record` under a new handle; returns the handle (blocks: call it in a thread)."""
    handle = new_handle()
    body = {**record, "kind": PAUSE_KIND, "version": PAUSE_VERSION, "state": "paused", "handle": handle,
            "paused_at": time.time()}
    store.save(handle, [], body, revision=0)
    return handle


def load_pause(store: ConversationStore, handle: object) -> HeldPause:
    """The record `handle` names. ConfigurationError (one line) for a handle that is not one or
    names nothing in `store`; StoreError when the store cannot be read (blocks)."""
    if not isinstance(handle, str) or not handle.startswith(HANDLE_PREFIX) or not is_session_id(handle):
        shown = repr(handle) if isinstance(handle, str) and len(handle) <= 80 else type(handle).__name__
        raise ConfigurationError(f"unknown resume handle {shown}: a handle is the resume_handle of a paused result "
                                 f"({HANDLE_PREFIX}...)", parameter="handle")
    stored = store.load(handle)
    if stored is None or not is_pause_record(stored.metadata):
        raise ConfigurationError(f"unknown resume handle {handle!r}: {store!r} holds no paused run under it (the "
                                 "run kept it in the store of its conversation: pass that store)", parameter="handle")
    return HeldPause(handle, dict(stored.metadata), stored.revision)


def claim_pause(store: ConversationStore, held: HeldPause) -> dict[str, Any]:
    """Mark the record used before the run continues; returns it as written. ConfigurationError
    when it was used already (also by another process that got there first)."""
    if held.used:
        raise already_used(held)
    record = {**held.record, "state": "resumed", "resumed_at": time.time()}
    try:
        store.save(held.handle, [], record, revision=held.revision)
    except ConversationConflictError:
        raise already_used(held) from None
    return record


def release_pause(store: ConversationStore, handle: str, claimed: dict[str, Any]) -> bool:
    """Give back a record this process claimed (`claimed`, as `claim_pause` wrote it) when the
    continued run did not begin: it is paused again. False when it changed since (another
    process's write wins) or cannot be read."""
    stored = store.load(handle)
    if stored is None or stored.metadata.get("resumed_at") != claimed.get("resumed_at"):
        return False
    record = {key: value for key, value in stored.metadata.items() if key != "resumed_at"}
    try:
        store.save(handle, [], {**record, "state": "paused"}, revision=stored.revision)
    except ConversationConflictError:
        return False
    return True


def already_used(held: HeldPause) -> ConfigurationError:
    when = held.record.get("resumed_at")
    at = f" at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(when))}" if isinstance(when, int | float) else ""
    return ConfigurationError(f"resume handle {held.handle!r} was already used{at}: a paused run is continued "
                              "once (a run that paused again has a new handle in its result)", parameter="handle")


def unreachable(store: object, exc: StoreError) -> StoreError:
    """The one-line error for a store that could not be read or written while approving."""
    text = " ".join(str(exc).split())
    return StoreError(f"the store of paused runs {store!r} could not be used: {text}; the run stays paused "
                      "(approve it again once the store is reachable)")
