"""Stores that break the contract on purpose, each in one way: the conformance suite must fail them."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from agenter.host.redact import Redactor
from agenter.store import Conversation, ConversationConflictError, FileConversationStore, check_session_id
from agenter.store._redis import RedisConversationStore
from agenter.store._sqlite import _SCHEMA, FORMAT, VERSION, SQLiteConversationStore


class InPlaceStore:
    """Rewrites the whole file in place (no temp file, no rename, no lock): a reader or a crash
    can meet half a file, two writers can lose each other's appends."""

    def __init__(self, location: str, secrets: list[str]):
        self.root = Path(location)
        self.redact = Redactor(extra=secrets)

    def _path(self, session_id: str) -> Path:
        return self.root / f"{check_session_id(session_id, self.redact)}.json"

    def load(self, session_id):
        path = self._path(session_id)
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return Conversation(session_id, data["messages"], data["metadata"], data["rev"])

    def save(self, session_id, messages, metadata=None, *, revision=None):
        from agenter.store import dumps, encode_messages, encode_metadata

        path = self._path(session_id)
        current = self.load(session_id)
        stored = current.revision if current else 0
        if revision is not None and revision != stored:
            raise ConversationConflictError("stale")
        self.root.mkdir(parents=True, exist_ok=True)
        body = dumps({"messages": encode_messages(messages, self.redact),
                      "metadata": encode_metadata(metadata, self.redact), "rev": stored + 1})
        with open(path, "wb") as handle:
            for start in range(0, len(body), 65536):  # as a large write may land, in pieces
                handle.write(body[start:start + 65536])
                handle.flush()
        return stored + 1

    def append(self, session_id, messages, *, at, metadata=None, revision=None):
        from agenter._errors import ConfigurationError

        if type(at) is not int or at < 0:
            raise ConfigurationError("at")
        current = self.load(session_id)
        if current is None:
            if at:
                raise ConversationConflictError("new")
            return self.save(session_id, messages, metadata)
        if (revision is not None and revision != current.revision) or at > len(current.messages):
            raise ConversationConflictError("stale")
        return self.save(session_id, current.messages[:at] + list(messages),
                         current.metadata if metadata is None else metadata)

    def delete(self, session_id):
        try:
            self._path(session_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def session_ids(self):
        return sorted(p.stem for p in self.root.glob("*.json")) if self.root.exists() else []


class UnlockedStore(InPlaceStore):
    """Writes whole files atomically (temp file, rename) but holds no lock: a revision checked
    and a file written by two writers at once lose one writer's append."""

    def save(self, session_id, messages, metadata=None, *, revision=None):
        from agenter.store import dumps, encode_messages, encode_metadata

        path = self._path(session_id)
        current = self.load(session_id)
        stored = current.revision if current else 0
        if revision is not None and revision != stored:
            raise ConversationConflictError("stale")
        self.root.mkdir(parents=True, exist_ok=True)
        body = dumps({"messages": encode_messages(messages, self.redact),
                      "metadata": encode_metadata(metadata, self.redact), "rev": stored + 1})
        temp = path.with_name(f".{path.name}.{os.getpid()}.{id(body)}")
        temp.write_bytes(body)
        # Between the check and the rename, as a slow disk would hold it: without this pause the
        # writers' windows met in most runs but not all, and the suite's check then passed.
        time.sleep(0.005)
        os.replace(temp, path)
        return stored + 1


class SignatureScrubbingStore(FileConversationStore):
    """The file store that also scrubs the provider's opaque fields (a thinking signature)."""

    def save(self, session_id, messages, metadata=None, *, revision=None):
        return super().save(session_id, self.redact.data(list(messages)), metadata, revision=revision)

    def append(self, session_id, messages, *, at, metadata=None, revision=None):
        return super().append(session_id, self.redact.data(list(messages)), at=at, metadata=metadata,
                              revision=revision)


class UnscrubbedStore(FileConversationStore):
    """The file store with a redactor that hides nothing."""

    def __init__(self, location: str, secrets: list[str]):
        super().__init__(location, redact=_NoRedactor())


class _NoRedactor(Redactor):
    def __call__(self, text):
        return text

    def data(self, value):
        return json.loads(json.dumps(value))


class UncheckedIdStore(FileConversationStore):
    """The file store that takes any id as a file name."""

    def path(self, session_id):
        return self.root / f"{session_id}.jsonl"


def in_place(location, secrets):
    return InPlaceStore(location, secrets)


def unlocked(location, secrets):
    return UnlockedStore(location, secrets)


def scrubbing_signatures(location, secrets):
    return SignatureScrubbingStore(location, redact=Redactor(extra=secrets))


def unscrubbed(location, secrets):
    return UnscrubbedStore(location, secrets)


def unchecked_ids(location, secrets):
    return UncheckedIdStore(location, redact=Redactor(extra=secrets))


__all__ = ["in_place", "scrubbing_signatures", "unchecked_ids", "unlocked", "unscrubbed"]


class SQLiteAutocommitStore(SQLiteConversationStore):
    """The SQLite store with each statement its own transaction: the revision check, the delete
    of the old rows and the insert of the new ones are no longer one write."""

    @contextlib.contextmanager
    def _write(self, doing):
        with self._errors(doing):
            if self._missing():
                self._create_file()
            handle = self._handle()
            if not handle.ready:
                for statement in _SCHEMA:
                    handle.connection.execute(statement, (FORMAT, VERSION) if "?" in statement else ())
                self._check_schema(handle)
            yield _SlowDeletes(handle.connection)


class _SlowDeletes:
    """A connection that waits a moment after each DELETE, so a reader meets the gap between
    the delete and the insert on every run, not only when the scheduler happens to allow it."""

    def __init__(self, connection):
        self._connection = connection

    def execute(self, statement, *args):
        cursor = self._connection.execute(statement, *args)
        if statement.lstrip().upper().startswith("DELETE"):
            time.sleep(0.005)
        return cursor

    def __getattr__(self, name):
        return getattr(self._connection, name)


def sqlite_autocommit(location, secrets):
    return SQLiteAutocommitStore(Path(location) / "conversations.sqlite3", redact=Redactor(extra=secrets))


class RedisUnscriptedStore(RedisConversationStore):
    """The Redis store writing with separate commands (read the head, check, trim, push, set the
    head) instead of one script: two writers can pass the same revision check."""

    def _write(self, session_id, mode, at, revision, meta, bodies, *, given, token=None):
        head_key, list_key = self.keys(session_id)
        count, rev = (int(v or 0) for v in self._client.hmget(head_key, "n", "rev"))
        if (revision is not None and revision != rev) or (mode == "append" and at > count):
            raise ConversationConflictError("stale")
        at = 0 if mode == "save" else at
        if at == 0:
            self._client.delete(list_key)
        elif at < count:
            self._client.ltrim(list_key, 0, at - 1)
        if bodies:
            self._client.rpush(list_key, *bodies)
        self._client.hset(head_key, mapping={"n": at + len(bodies), "rev": rev + 1})
        if given or rev == 0:
            self._client.hset(head_key, "meta", meta)
        self._client.sadd(self.index_key, session_id)
        return rev + 1


def redis_unscripted(location, secrets):
    return RedisUnscriptedStore(location, redact=Redactor(extra=secrets))
