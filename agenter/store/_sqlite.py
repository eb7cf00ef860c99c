"""The SQLite store: conversations in one database file, one row per message, in WAL mode.

Tables (prefixed, so the store can share a database the user keeps other tables in):

    agenter_store           one row: the format's name and version (refused when not ours)
    agenter_conversations   session_id (primary key), revision, count, metadata (JSON)
    agenter_messages        session_id, position, body (one message's JSON); key (session_id, position)

Why one row per message rather than an append log like the file store's: a database rewrites
rows in place, so the file store's reason for a log (a file cannot cheaply replace its middle)
does not apply. An append deletes the rows at and past `at` and inserts the new ones, so a turn
costs what its messages weigh; the database holds exactly the conversation (no rewritten last
messages piling up, nothing to compact); a load is one range scan of the primary key. Every write
is one transaction (`BEGIN IMMEDIATE`: the revision check and the write under one lock), so a
crash leaves the conversation as one write left it or as the next did (WAL: a transaction
without its commit record is ignored on the next open). In WAL mode readers never wait for a
writer and see one committed state; writers of any id wait for each other (up to `timeout`).

`durable=True` (the default) is `synchronous=FULL`: each commit is on disk before the write
returns. `durable=False` is `synchronous=NORMAL`: a commit survives the process being killed,
not a power cut (as the file store's `durable=False`).

Limits: a database on a network file system is as safe as that system's locks (SQLite says: do
not); the writers of one database are serialized, which is ample for conversations written
once a turn. The database file is created 0600 (its -wal and -shm files take its mode) and a
missing folder above it 0700; an existing file or folder keeps its mode.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agenter.host.redact import Redactor
from agenter.store._base import (
    Conversation,
    Message,
    StoreError,
    check_at,
    check_revision,
    check_session_id,
    conflict,
    dumps,
    encode_messages,
    encode_metadata,
    is_session_id,
)

__all__ = ["SQLiteConversationStore"]

#: What agenter_store holds: the format's name and the schema version this module reads.
FORMAT = "agenter-conversation"
VERSION = 1
#: Seconds a writer waits for another writer's transaction before StoreError.
DEFAULT_TIMEOUT = 30.0
#: Bytes the WAL file is cut back to after a checkpoint (a 10 MB save grows it past this).
_WAL_LIMIT = 16 * 1024 * 1024

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS agenter_store (format TEXT NOT NULL, version INTEGER NOT NULL)",
    "INSERT INTO agenter_store (format, version) SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM agenter_store)",
    "CREATE TABLE IF NOT EXISTS agenter_conversations (session_id TEXT PRIMARY KEY, revision INTEGER NOT NULL, "
    "count INTEGER NOT NULL, metadata BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS agenter_messages (session_id TEXT NOT NULL, position INTEGER NOT NULL, "
    "body BLOB NOT NULL, PRIMARY KEY (session_id, position))",
)


class _Handle:
    """One thread's connection (sqlite3 connections are not to be shared between threads, and
    not across a fork). `ready`: the schema is known to be there."""

    __slots__ = ("__weakref__", "connection", "pid", "ready")

    def __init__(self, connection: sqlite3.Connection):
        self.connection = connection
        self.pid = os.getpid()
        self.ready = False


class SQLiteConversationStore:
    """Conversations in a SQLite database file (see the module docstring for the tables and
    why one row per message).

    `path` is the database file (made on the first write, with its parent directories).
    `redact` scrubs what is written (default: a Redactor of this process's environment; pass the
    backend's, which also knows its API key). Thread- and process-safe: each thread opens its own
    connection; every method blocks on the database (call it through `asyncio.to_thread` from a
    coroutine). `close()` closes this process's connections (also on `with`).
    """

    def __init__(self, path: str | os.PathLike[str], *, redact: Redactor | None = None, durable: bool = True,
                 timeout: float = DEFAULT_TIMEOUT):
        self.path = Path(path).expanduser()
        self.redact = redact if redact is not None else Redactor()
        self.durable = durable
        self.timeout = timeout
        self._local = threading.local()
        self._handles: weakref.WeakSet[_Handle] = weakref.WeakSet()
        self._inherited: list[_Handle] = []
        self._guard = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteConversationStore({str(self.path)!r})"

    def __enter__(self) -> SQLiteConversationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections this process opened (call it when no method is running)."""
        with self._guard:
            handles = [h for h in self._handles if h.pid == os.getpid()]
            self._handles = weakref.WeakSet()
        for handle in handles:
            with contextlib.suppress(sqlite3.Error):
                handle.connection.close()
        self._local = threading.local()

    # ------------------------------------------------------------------ reading
    def load(self, session_id: str) -> Conversation | None:
        check_session_id(session_id, self.redact)
        with self._read("read") as db:
            if db is None:
                return None
            head = db.execute("SELECT revision, count, metadata FROM agenter_conversations WHERE session_id = ?",
                              (session_id,)).fetchone()
            if head is None:
                return None
            bodies = db.execute("SELECT body FROM agenter_messages WHERE session_id = ? ORDER BY position",
                                (session_id,)).fetchall()
        revision, count, metadata = head
        if len(bodies) != count:
            raise StoreError(f"{self!r}: conversation {session_id!r} holds {len(bodies)} messages where its record "
                             f"says {count}; the database was changed by hand: delete the conversation")
        try:
            messages = [json.loads(body) for (body,) in bodies]
            meta = json.loads(metadata)
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{self!r}: conversation {session_id!r} is not readable JSON ({exc}); delete "
                             "the conversation") from None
        return Conversation(session_id=session_id, messages=messages, metadata=dict(meta), revision=int(revision))

    def session_ids(self) -> list[str]:
        with self._read("list") as db:
            if db is None:
                return []
            rows = db.execute("SELECT session_id FROM agenter_conversations").fetchall()
        return sorted(i for (i,) in rows if is_session_id(i))

    # ------------------------------------------------------------------ writing
    def save(self, session_id: str, messages: Sequence[Message], metadata: Mapping[str, Any] | None = None, *,
             revision: int | None = None) -> int:
        check_session_id(session_id, self.redact)
        check_revision(revision)
        bodies = [dumps(m) for m in encode_messages(messages, self.redact)]
        meta = dumps(encode_metadata(metadata, self.redact))
        with self._write("write") as db:
            stored, _ = self._head(db, session_id)
            if revision is not None and revision != stored:
                raise conflict(session_id, f"it is at revision {stored}, not {revision}")
            db.execute("DELETE FROM agenter_messages WHERE session_id = ?", (session_id,))
            self._insert(db, session_id, 0, bodies)
            self._put_head(db, session_id, stored, len(bodies), meta)
        return stored + 1

    def append(self, session_id: str, messages: Sequence[Message], *, at: int,
               metadata: Mapping[str, Any] | None = None, revision: int | None = None) -> int:
        check_session_id(session_id, self.redact)
        check_revision(revision)
        check_at(at)
        bodies = [dumps(m) for m in encode_messages(messages, self.redact)]
        meta = None if metadata is None else dumps(encode_metadata(metadata, self.redact))
        with self._write("append to") as db:
            stored, count = self._head(db, session_id)
            if revision is not None and revision != stored:
                raise conflict(session_id, f"it is at revision {stored}, not {revision}")
            if at > count:
                why = (f"it holds {count} messages, so an append cannot start at {at}" if stored else
                       "nothing is stored under this id (an append to a new id starts at 0)")
                raise conflict(session_id, why)
            if at < count:
                db.execute("DELETE FROM agenter_messages WHERE session_id = ? AND position >= ?", (session_id, at))
            self._insert(db, session_id, at, bodies)
            self._put_head(db, session_id, stored, at + len(bodies), meta)
        return stored + 1

    def delete(self, session_id: str) -> bool:
        check_session_id(session_id, self.redact)
        if self._missing():
            return False
        with self._write("delete from") as db:
            db.execute("DELETE FROM agenter_messages WHERE session_id = ?", (session_id,))
            return db.execute("DELETE FROM agenter_conversations WHERE session_id = ?", (session_id,)).rowcount > 0

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _head(db: sqlite3.Connection, session_id: str) -> tuple[int, int]:
        """(revision, message count) of the stored conversation; (0, 0) when there is none."""
        row = db.execute("SELECT revision, count FROM agenter_conversations WHERE session_id = ?",
                         (session_id,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    @staticmethod
    def _insert(db: sqlite3.Connection, session_id: str, start: int, bodies: list[bytes]) -> None:
        db.executemany("INSERT INTO agenter_messages (session_id, position, body) VALUES (?, ?, ?)",
                       [(session_id, start + i, body) for i, body in enumerate(bodies)])

    @staticmethod
    def _put_head(db: sqlite3.Connection, session_id: str, stored: int, count: int, meta: bytes | None) -> None:
        """The conversation's row at revision stored + 1; `meta` None keeps the stored metadata."""
        if stored == 0:
            db.execute("INSERT INTO agenter_conversations (session_id, revision, count, metadata) VALUES (?, 1, ?, ?)",
                       (session_id, count, b"{}" if meta is None else meta))
        elif meta is None:
            db.execute("UPDATE agenter_conversations SET revision = ?, count = ? WHERE session_id = ?",
                       (stored + 1, count, session_id))
        else:
            db.execute("UPDATE agenter_conversations SET revision = ?, count = ?, metadata = ? WHERE session_id = ?",
                       (stored + 1, count, meta, session_id))

    @contextlib.contextmanager
    def _read(self, doing: str) -> Iterator[sqlite3.Connection | None]:
        """A read transaction (one committed state for every query in it); None when nothing
        was ever written here (no file, or no tables yet)."""
        if self._missing():
            yield None
            return
        with self._errors(doing):
            handle = self._handle()
            if not handle.ready and not self._check_schema(handle):
                yield None
                return
            db = handle.connection
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    @contextlib.contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from its start, so the revision
        read in it is still the stored one when it commits; rolled back on any error."""
        with self._errors(doing):
            if self._missing():
                self._create_file()
            handle = self._handle()
            db = handle.connection
            if not handle.ready:
                self._use_wal(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                if not handle.ready:
                    for statement in _SCHEMA:
                        db.execute(statement, (FORMAT, VERSION) if "?" in statement else ())
                    self._check_schema(handle)
                yield db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _use_wal(self, db: sqlite3.Connection) -> None:
        """Put the database in WAL mode (it stays so), before any lock is held. Only writers do:
        a reader asking for the switch while a writer commits would deadlock with it, and SQLite
        breaks that by failing one of them at once. The switch itself can meet another
        connection's lock without waiting for it, so it is tried again until `timeout`."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                mode = db.execute("PRAGMA journal_mode").fetchone()[0]
                if mode != "wal":
                    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
                continue
            if mode != "wal":
                raise StoreError(f"{self!r}: the database cannot be put in WAL mode (it stays in {mode!r} mode)")
            return

    def _check_schema(self, handle: _Handle) -> bool:
        """Whether the tables are there (False: not yet); StoreError when the database holds
        another format or a newer version."""
        try:
            row = handle.connection.execute("SELECT format, version FROM agenter_store").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return False
            raise
        if row is None:
            return False
        if tuple(row) != (FORMAT, VERSION):
            raise StoreError(f"{self!r}: the database holds conversations of format {row[0]!r} version {row[1]!r}; "
                             f"this agenter reads {FORMAT!r} version {VERSION}")
        handle.ready = True
        return True

    def _handle(self) -> _Handle:
        """This thread's connection, opened on first use (again after a fork)."""
        handle: _Handle | None = getattr(self._local, "handle", None)
        if handle is not None and handle.pid == os.getpid():
            return handle
        if handle is not None:
            self._inherited.append(handle)  # the parent's: neither used nor closed here
        connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            connection.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")
            connection.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
        except BaseException:
            connection.close()
            raise
        handle = _Handle(connection)
        self._local.handle = handle
        with self._guard:
            self._handles.add(handle)
        return handle

    def _missing(self) -> bool:
        """Whether the database file does not exist yet (nothing is stored); StoreError when
        its place cannot be reached (a regular file above it, no permission) or is no file."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return True
        except OSError as exc:
            raise self._error("cannot reach", exc) from None
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{self!r}: {str(self.path)!r} is not a database file")
        return False

    def _create_file(self) -> None:
        """The database file, empty and 0600 whatever the umask (and missing folders above it 0700),
        before SQLite opens it: its -wal and -shm files then take the same mode. It is made under
        another name and linked into place, never opened at its own: closing a descriptor of the
        database drops every POSIX lock this process holds on it, so another thread's connection
        that had just created and locked it would lose its locks (SQLite's "How To Corrupt" 2.2;
        seen as "database disk image is malformed" with three threads and three processes)."""
        try:
            missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
            for folder in reversed(missing):  # each one 0700 (mkdir -p would leave the upper ones to the umask)
                folder.mkdir(mode=0o700, exist_ok=True)
            _create_unopened(self.path)
        except OSError as exc:
            raise self._error("cannot create", exc) from None

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """sqlite3's errors (and the OS's) as StoreError naming this store."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self!r} cannot {doing} the database: {exc}") from None
        except OSError as exc:
            raise self._error(f"cannot {doing}", exc) from None

    def _error(self, doing: str, exc: OSError) -> StoreError:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOTDIR:
            reason = "a part of the path is a regular file, not a directory"
        return StoreError(f"{self!r} {doing} {str(self.path)!r}: {reason}")


def _create_unopened(path: Path) -> None:
    """An empty 0600 file at `path` unless one is there, without opening a descriptor of the file
    once it is visible at `path` (see SQLiteConversationStore._create_file)."""
    spare = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    os.close(fd)
    try:
        os.link(spare, path)
    except FileExistsError:
        pass  # another thread or process made it first
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # No hard links on this filesystem: exclusive creation, with the small window it leaves.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600))
    finally:
        os.unlink(spare)
