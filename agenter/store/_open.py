"""Choosing a conversation store by what the user wrote: a path, a `sqlite://` or a `redis://` URL.

    open_store("runs/conversations")                 # the file store in that folder
    open_store("sqlite:///var/agenter/conv.db")      # SQLite, the database /var/agenter/conv.db
    open_store("sqlite://conv.db")                   # SQLite, conv.db in the current folder
    open_store("redis://localhost:6379/0")           # Redis (also rediss://, unix://; ?prefix=...)

Everything after `sqlite://` (or `file://`) is the path, so three slashes make an absolute path
and two a relative one (not SQLAlchemy's four-slash convention). An unknown scheme is refused
rather than read as a folder named "postgres:". Nothing connects here: a store that cannot be
reached fails on its first use with a StoreError naming it.
"""

from __future__ import annotations

import os
import re

from agenter._errors import ConfigurationError
from agenter.host.redact import Redactor
from agenter.store._base import ConversationStore
from agenter.store._file import FileConversationStore

__all__ = ["open_store"]

#: A URL's scheme, as written before "://".
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
#: What open_store takes, for messages.
_FORMS = "a folder path (file store), sqlite:///path/to/conversations.db, or redis://host:port/db"


def open_store(where: str | os.PathLike[str] | ConversationStore, *, redact: Redactor | None = None,
               durable: bool = True) -> ConversationStore:
    """The conversation store `where` names (see the module docstring); a ConversationStore is
    returned as it is. `redact` and `durable` go to the store made (Redis has no `durable`: its
    server's persistence settings decide). ConfigurationError for what names no store, or for
    Redis without the `redis` package."""
    if not isinstance(where, str):
        if isinstance(where, os.PathLike):
            return FileConversationStore(where, redact=redact, durable=durable)
        if isinstance(where, ConversationStore):
            return where
        raise ConfigurationError(f"a conversation store is {_FORMS} or a ConversationStore; got "
                                 f"{type(where).__name__}", parameter="store")
    if not where.strip():
        raise ConfigurationError(f"a conversation store is {_FORMS}; got an empty string", parameter="store")
    found = _SCHEME.match(where)
    if found is None:
        return FileConversationStore(where, redact=redact, durable=durable)
    scheme, rest = found[1].lower(), where[found.end():]
    if scheme in ("file", "sqlite"):
        if not rest:
            raise ConfigurationError(f"{scheme}:// needs a path, such as {scheme}:///var/agenter/conversations"
                                     f"{'.db' if scheme == 'sqlite' else ''}", parameter="store")
        if scheme == "file":
            return FileConversationStore(rest, redact=redact, durable=durable)
        from agenter.store._sqlite import SQLiteConversationStore

        return SQLiteConversationStore(rest, redact=redact, durable=durable)
    if scheme in ("redis", "rediss", "unix"):
        from agenter.store._redis import RedisConversationStore

        return RedisConversationStore(where, redact=redact)
    raise ConfigurationError(f"no conversation store for {scheme}:// URLs: use {_FORMS}", parameter="store")
