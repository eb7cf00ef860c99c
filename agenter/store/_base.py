"""What every conversation store shares: the protocol, the conversation as loaded, the errors,
session id validation, and the one way a conversation becomes bytes (secrets scrubbed, lone
surrogates kept).

A store implementation calls `check_session_id` on every id it is given and `encode_messages` /
`encode_metadata` on everything it writes, so every store refuses the same ids, scrubs the same
secrets and keeps the same text; `agenter.testing.store_conformance` checks that it does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agenter._errors import AgenterError, ConfigurationError
from agenter.host.redact import Redactor

__all__ = [
    "Conversation", "ConversationConflictError", "ConversationStore", "Message", "StoreError",
    "check_session_id", "dumps", "encode_messages", "encode_metadata",
]

#: One message as the harness keeps it: {"role": "user"|"assistant", "content": [blocks]}.
Message = dict[str, Any]

#: A session id: a letter or digit, then letters, digits, '.', '_' or '-'; at most 128 in all.
#: No separator, no leading dot or dash, nothing a shell, a URL or a Redis key would read
#: differently (uuid4 hex, Claude's and Codex's uuids all fit).
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

#: Fields of a block that are the provider's opaque blobs (a thinking block's signature, a
#: redacted thinking block's encrypted data): written as they came, never scrubbed, because the
#: API refuses a changed one on resume and they hold no text of ours. Keyed by block type.
OPAQUE_FIELDS = {"thinking": "signature", "redacted_thinking": "data"}


class StoreError(AgenterError):
    """The store could not do what was asked: its storage is unreadable, unwritable, unreachable
    or holds data that is not a conversation. The message names the store and where it looked."""


class ConversationConflictError(StoreError):
    """The stored conversation is not the one the caller built on: another writer changed it
    since the revision the caller holds, or an append starts past its end. Load it again (and
    decide what to keep) rather than overwrite what the other writer wrote."""


@dataclass
class Conversation:
    """A conversation as loaded: its messages, its metadata, and its revision (pass it back to
    `append`/`save` to fail, rather than overwrite, when another writer got there first)."""

    session_id: str
    messages: list[Message]
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Counts the writes since the id was first written (1 after the first); strictly increasing.
    revision: int = 0


@runtime_checkable
class ConversationStore(Protocol):
    """Where agenter's own agent keeps its conversation between processes.

    Every method blocks (file or network I/O) and is safe to call from several threads and
    several processes at once; code on an event loop calls it through `asyncio.to_thread`.
    What a store writes is scrubbed of secrets (`encode_messages`), so a store is given the
    conversation as the model saw it and never writes an API key.

    Writes are whole: after a crash, a load finds the conversation as one write left it or as
    the next one did, never a mix. Two writers of one id: each write is whole and the last one
    wins, unless the writer passes the `revision` it built on, when a write that would lose the
    other writer's work raises ConversationConflictError instead.
    """

    def load(self, session_id: str) -> Conversation | None:
        """The stored conversation, or None when there is none under this id."""
        ...

    def save(self, session_id: str, messages: Sequence[Message], metadata: Mapping[str, Any] | None = None, *,
             revision: int | None = None) -> int:
        """Replace the whole conversation (and its metadata: None stores none); returns the new
        revision. With `revision`, ConversationConflictError unless the stored one is that."""
        ...

    def append(self, session_id: str, messages: Sequence[Message], *, at: int,
               metadata: Mapping[str, Any] | None = None, revision: int | None = None) -> int:
        """Keep the stored messages before index `at`, then `messages` (at = the stored count
        appends; one less also replaces the last, e.g. a user message merged into). Metadata
        is replaced when given, else kept. Costs what `messages` weigh, not the conversation.
        An id with nothing stored takes at=0. ConversationConflictError when `at` is past the
        stored end or `revision` is not the stored one. Returns the new revision."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove the conversation; False when there was none."""
        ...

    def session_ids(self) -> list[str]:
        """The ids of the stored conversations, sorted."""
        ...


def check_session_id(session_id: object, redact: Redactor | None = None) -> str:
    """`session_id` when it is a valid id, else ConfigurationError. Ids are untrusted input (a
    `resume=` argument): nothing that could name another place (a separator, '..', a leading
    dot) and, with `redact`, nothing that is a secret (it would be a file or key name)."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        shown = repr(session_id) if isinstance(session_id, str) and len(session_id) <= 80 else type(session_id).__name__
        raise ConfigurationError(
            f"invalid conversation session id {shown}: use 1-128 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit (such as the session_id of an earlier result)", parameter="session_id")
    if redact is not None and redact(session_id) != session_id:
        raise ConfigurationError("invalid conversation session id: it holds a secret (an API key or a secret "
                                 "environment variable's value); use the session_id of an earlier result",
                                 parameter="session_id")
    return session_id


def dumps(value: object) -> bytes:
    """`value` as compact JSON in UTF-8. Text holding lone surrogates (a tool's output decoded
    with surrogateescape) cannot be UTF-8, so that value is written with \\u escapes instead:
    either way `json.loads` gives back the very same strings. ConfigurationError for what JSON
    cannot hold (bytes, objects, cycles)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigurationError(f"a conversation must be JSON data (dicts, lists, strings, numbers): {exc}",
                                 parameter="messages") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def encode_messages(messages: Sequence[Message], redact: Redactor) -> list[Message]:
    """A copy of `messages` with every secret replaced by [REDACTED], ready for `dumps`.

    Scrubbed, not refused: a key-shaped string in a tool's output (a test fixture's fake key)
    is common, and refusing would lose the whole conversation for it. The resumed model sees
    [REDACTED] where the live one saw the value. OPAQUE_FIELDS are kept as they are.
    ConfigurationError when a message is not a dict.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ConfigurationError(f"messages must be a list of message dicts, got {type(messages).__name__}",
                                 parameter="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ConfigurationError(f"message {index} is a {type(message).__name__}, not a dict "
                                     "({'role': ..., 'content': ...})", parameter="messages")
    clean = redact.data(list(messages))
    assert isinstance(clean, list)
    _restore_opaque(clean, messages)
    return clean


def encode_metadata(metadata: Mapping[str, Any] | None, redact: Redactor) -> dict[str, Any]:
    """A scrubbed copy of `metadata` ({} for None); ConfigurationError when it is no mapping."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ConfigurationError(f"metadata must be a dict, got {type(metadata).__name__}", parameter="metadata")
    clean = redact.data(dict(metadata))
    assert isinstance(clean, dict)
    return clean


def _restore_opaque(clean: list[Any], original: Sequence[Message]) -> None:
    """Put OPAQUE_FIELDS back as they were (the scrubbed copy has the same shape)."""
    for new, old in zip(clean, original, strict=True):
        blocks, before = new.get("content"), old.get("content")
        if type(blocks) is not list or not isinstance(before, list | tuple):
            continue
        for block, was in zip(blocks, before, strict=True):
            kind = was.get("type") if isinstance(was, dict) else None
            if type(block) is dict and isinstance(kind, str):
                name = OPAQUE_FIELDS.get(kind)
                if name is not None and name in was:
                    block[name] = was[name]
