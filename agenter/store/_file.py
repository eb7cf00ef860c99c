"""The local file store: one append-only JSONL file per conversation, in a private directory.

Layout of the store's directory (0700; files 0600):

    <id>.jsonl      the conversation: a snapshot line, then one line per append
    .<id>.lock      what writers lock (flock) while they write <id>.jsonl; readers share it
    .<id>.tmp       a snapshot being written (left only by a writer killed mid-save; the
                    next save of the id overwrites it, delete removes it)

Every line is one JSON object ending in `"n":<messages after it>,"rev":<revision>}`, so a writer
learns the stored length and revision from the file's last bytes without reading the rest:

    {"format":"agenter-conversation","version":1,"session_id":...,"metadata":{...},"messages":[...],"n":3,"rev":1}
    {"at":3,"messages":[{...},{...}],"n":5,"rev":2}
    {"at":4,"messages":[{...},{...}],"metadata":{...},"n":6,"rev":3}

`save` writes a new snapshot beside the file (fsync) and renames it over the old one (then
fsyncs the directory), so a crash leaves the old file or the new one. `append` adds one line with
one write (then fdatasync), so a turn costs what its messages weigh; a crash mid-line leaves a
line without its newline, which readers ignore and the next writer cuts off. `durable=False`
skips the syncs: what was written still survives the process being killed, not a power cut.

Limits: POSIX only (flock); a directory on a network file system is only as safe as its flock.
On a case-insensitive file system ids differing only in case are one conversation.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agenter._errors import ConfigurationError
from agenter.host.redact import Redactor
from agenter.store._base import (
    Conversation,
    ConversationConflictError,
    Message,
    StoreError,
    check_session_id,
    dumps,
    encode_messages,
    encode_metadata,
)

__all__ = ["FORMAT", "VERSION", "FileConversationStore", "default_root"]

FORMAT = "agenter-conversation"
VERSION = 1

#: How a complete line ends: the messages after it and the revision, then the newline.
_TAIL = re.compile(rb'"n":(\d+),"rev":(\d+)\}\n\Z')
#: Bytes read from a file's end to find _TAIL (two 20-digit numbers fit with room to spare).
_TAIL_BYTES = 96
#: Chunk read backwards when looking for the end of the last complete line after a crash.
_BACK_CHUNK = 1 << 16
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: fdatasync where there is one (Linux); fsync elsewhere (macOS).
_datasync = getattr(os, "fdatasync", os.fsync)


def default_root(log_dir: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Where conversations go: `<log_dir>/conversations` beside a run's transcripts, else
    `$XDG_CACHE_HOME/agenter/conversations` (a relative XDG_CACHE_HOME is ignored, as the XDG
    spec says), else `~/.cache/agenter/conversations`."""
    if log_dir is not None:
        return Path(log_dir).expanduser() / "conversations"
    env = os.environ if environ is None else environ
    cache = env.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "agenter" / "conversations"


class FileConversationStore:
    """Conversations as files in one directory (see the module docstring for the format).

    `root` defaults to `default_root()`; `FileConversationStore.beside(log_dir)` is the store
    beside a run's transcripts. `redact` scrubs what is written (default: a Redactor of this
    process's environment; pass the backend's, which also knows its API key). Thread- and
    process-safe; every method blocks on file I/O (call it through `asyncio.to_thread` from a
    coroutine).
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, redact: Redactor | None = None,
                 durable: bool = True):
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.redact = redact if redact is not None else Redactor()
        self.durable = durable

    @classmethod
    def beside(cls, log_dir: str | os.PathLike[str] | None, *, redact: Redactor | None = None,
               durable: bool = True) -> FileConversationStore:
        """The store of a run with this log_dir (`<log_dir>/conversations`), or the user's cache
        store when log_dir is None."""
        return cls(default_root(log_dir), redact=redact, durable=durable)

    def __repr__(self) -> str:
        return f"FileConversationStore({str(self.root)!r})"

    def path(self, session_id: str) -> Path:
        """The file of a conversation (ConfigurationError for an invalid id)."""
        return self.root / f"{check_session_id(session_id, self.redact)}.jsonl"

    # ------------------------------------------------------------------ reading
    def load(self, session_id: str) -> Conversation | None:
        path = self.path(session_id)
        if not path.exists():
            return None
        with self._lock(session_id, shared=True):
            try:
                fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
            except FileNotFoundError:
                return None  # deleted meanwhile
            except OSError as exc:
                raise self._error("cannot read", path, exc) from None
            try:
                data = _read_all(fd)
            except OSError as exc:
                raise self._error("cannot read", path, exc) from None
            finally:
                os.close(fd)
        return _parse(session_id, data, path)

    def session_ids(self) -> list[str]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._error("cannot list", self.root, exc) from None
        ids = [name[:-6] for name in names if name.endswith(".jsonl") and not name.startswith(".")]
        return sorted(i for i in ids if _valid(i))

    # ------------------------------------------------------------------ writing
    def save(self, session_id: str, messages: Sequence[Message], metadata: Mapping[str, Any] | None = None, *,
             revision: int | None = None) -> int:
        path = self.path(session_id)
        _check_revision(revision)
        body = dumps({"format": FORMAT, "version": VERSION, "session_id": session_id,
                      "metadata": encode_metadata(metadata, self.redact),
                      "messages": encode_messages(messages, self.redact)})
        self._ensure_root()
        with self._lock(session_id):
            current = self._stored(path, repair=False)
            stored = current[1] if current else 0
            if revision is not None and revision != stored:
                raise _conflict(session_id, f"it is at revision {stored}, not {revision}")
            self._write_snapshot(session_id, body, len(messages), stored + 1)
        return stored + 1

    def append(self, session_id: str, messages: Sequence[Message], *, at: int,
               metadata: Mapping[str, Any] | None = None, revision: int | None = None) -> int:
        path = self.path(session_id)
        _check_revision(revision)
        if type(at) is not int or at < 0:
            raise ConfigurationError(f"at must be an index (an int >= 0), got {at!r}", parameter="at")
        encoded = encode_messages(messages, self.redact)
        record: dict[str, Any] = {"at": at, "messages": encoded}
        if metadata is not None:
            record["metadata"] = encode_metadata(metadata, self.redact)
        body = dumps(record)
        self._ensure_root()
        with self._lock(session_id):
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | _O_NOFOLLOW | _O_CLOEXEC)
            except FileNotFoundError:
                return self._first_append(session_id, record, at, revision)
            except OSError as exc:
                raise self._error("cannot open", path, exc) from None
            try:
                count, stored, size = self._tail(fd, path, repair=True)
                if revision is not None and revision != stored:
                    raise _conflict(session_id, f"it is at revision {stored}, not {revision}")
                if at > count:
                    raise _conflict(session_id, f"it holds {count} messages, so an append cannot start at {at}")
                line = _line(body, at + len(encoded), stored + 1)
                try:
                    _write_all(fd, line)
                    if self.durable:
                        _datasync(fd)
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)  # no half line left behind (a full disk)
                    raise self._error("cannot append to", path, exc) from None
            finally:
                os.close(fd)
        return stored + 1

    def delete(self, session_id: str) -> bool:
        path = self.path(session_id)
        if not self.root.is_dir():
            return False
        with self._lock(session_id):
            existed = True
            try:
                path.unlink()
            except FileNotFoundError:
                existed = False
            except OSError as exc:
                raise self._error("cannot delete", path, exc) from None
            for extra in (self._tmp_path(session_id), self._lock_path(session_id)):
                with contextlib.suppress(FileNotFoundError):
                    extra.unlink()
            self._sync_dir()
        return existed

    # ------------------------------------------------------------------ internals
    def _first_append(self, session_id: str, record: dict[str, Any], at: int, revision: int | None) -> int:
        if at != 0 or revision not in (None, 0):
            raise _conflict(session_id, "nothing is stored under this id (an append to a new id starts at 0)")
        body = dumps({"format": FORMAT, "version": VERSION, "session_id": session_id,
                      "metadata": record.get("metadata", {}), "messages": record["messages"]})
        self._write_snapshot(session_id, body, len(record["messages"]), 1)
        return 1

    def _write_snapshot(self, session_id: str, body: bytes, count: int, revision: int) -> None:
        """The whole conversation into .<id>.tmp, synced, renamed over <id>.jsonl (lock held)."""
        tmp, path = self._tmp_path(session_id), self.root / f"{session_id}.jsonl"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
            try:
                _write_all(fd, _line(body, count, revision))
                if self.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise self._error("cannot write", path, exc) from None
        self._sync_dir()

    def _stored(self, path: Path, *, repair: bool) -> tuple[int, int] | None:
        """(message count, revision) of the stored conversation, None when there is none."""
        try:
            fd = os.open(path, (os.O_RDWR if repair else os.O_RDONLY) | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error("cannot open", path, exc) from None
        try:
            count, revision, _ = self._tail(fd, path, repair=repair)
        finally:
            os.close(fd)
        return count, revision

    def _tail(self, fd: int, path: Path, *, repair: bool) -> tuple[int, int, int]:
        """(message count, revision, file size) from the last complete line. A line a crash cut
        off is ignored, and with `repair` cut off the file (under the writers' lock)."""
        try:
            size = os.fstat(fd).st_size
            found = _TAIL.search(os.pread(fd, min(size, _TAIL_BYTES), max(0, size - _TAIL_BYTES)))
            if found is None:
                end = _last_line_end(fd, size)
                if repair and end:
                    os.ftruncate(fd, end)
                    if self.durable:
                        _datasync(fd)
                size = end
                found = _TAIL.search(os.pread(fd, min(end, _TAIL_BYTES), max(0, end - _TAIL_BYTES)))
        except OSError as exc:
            raise self._error("cannot read", path, exc) from None
        if found is None:
            raise StoreError(f"{self!r}: {str(path)!r} is not a conversation file (no complete record at its end); "
                             "move it away or delete the conversation")
        return int(found[1]), int(found[2]), size

    @contextlib.contextmanager
    def _lock(self, session_id: str, *, shared: bool = False) -> Iterator[None]:
        """Hold .<id>.lock: exclusive for writers, shared for readers (so a reader never sees a
        torn line being cut off and rewritten)."""
        try:
            import fcntl
        except ImportError:  # Windows
            raise StoreError(f"{self!r} needs POSIX file locks (fcntl.flock); this platform has none") from None
        lock = self._lock_path(session_id)
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
            except OSError as exc:
                raise self._error("cannot lock", lock, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                # Delete unlinks the lock file while holding it: a lock taken on an unlinked
                # file guards nothing, so check that the path still names this very file.
                with contextlib.suppress(FileNotFoundError):
                    if os.path.samestat(os.fstat(fd), os.stat(lock, follow_symlinks=False)):
                        break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            yield
        finally:
            os.close(fd)

    def _ensure_root(self) -> None:
        """The directory, made 0700 if missing; one of another user is refused, a looser mode
        of one of ours tightened."""
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(self.root)
            if not stat.S_ISDIR(info.st_mode):
                raise StoreError(f"{self!r}: {str(self.root)!r} is not a directory")
            if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
                raise StoreError(f"{self!r}: {str(self.root)!r} belongs to another user; choose a directory of "
                                 "your own")
            if info.st_mode & 0o077:
                os.chmod(self.root, 0o700)
        except OSError as exc:
            raise self._error("cannot make", self.root, exc) from None

    def _sync_dir(self) -> None:
        """Make a rename or an unlink durable (the directory entry)."""
        if not self.durable:
            return
        with contextlib.suppress(OSError):  # some file systems refuse to sync a directory
            fd = os.open(self.root, os.O_RDONLY | _O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _lock_path(self, session_id: str) -> Path:
        return self.root / f".{session_id}.lock"

    def _tmp_path(self, session_id: str) -> Path:
        return self.root / f".{session_id}.tmp"

    def _error(self, doing: str, path: Path, exc: OSError) -> StoreError:
        if exc.errno == errno.ELOOP:
            return StoreError(f"{self!r} {doing} {str(path)!r}: it is a symbolic link, which the store never "
                              "follows; delete the conversation (that removes only the link)")
        return StoreError(f"{self!r} {doing} {str(path)!r}: {exc.strerror or exc}")


def _valid(session_id: str) -> bool:
    try:
        check_session_id(session_id)
    except ConfigurationError:
        return False
    return True


def _check_revision(revision: int | None) -> None:
    if revision is not None and (type(revision) is not int or revision < 0):
        raise ConfigurationError(f"revision must be an int >= 0 (a revision the store returned), got {revision!r}",
                                 parameter="revision")


def _conflict(session_id: str, why: str) -> ConversationConflictError:
    return ConversationConflictError(f"the stored conversation {session_id!r} changed under this writer: {why}; "
                                     "load it again before writing")


def _line(body: bytes, count: int, revision: int) -> bytes:
    """A JSON object's bytes with the count and revision added as its last fields, and a newline."""
    return body[:-1] + b',"n":%d,"rev":%d}\n' % (count, revision)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _last_line_end(fd: int, size: int) -> int:
    """The offset just past the file's last newline (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - _BACK_CHUNK)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _parse(session_id: str, data: bytes, path: Path) -> Conversation:
    """The conversation a file's complete lines make (a last line without its newline is a
    write a crash cut off: not part of it)."""
    lines = data.split(b"\n")
    lines.pop()
    try:
        head = json.loads(lines[0]) if lines else None
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise ValueError("it does not start with a conversation snapshot")
        if head.get("version") != VERSION:
            raise ValueError(f"format version {head.get('version')!r}; this agenter reads version {VERSION}")
        messages, metadata, revision = list(head["messages"]), dict(head["metadata"]), int(head["rev"])
        for number, line in enumerate(lines[1:], start=2):
            record = json.loads(line)
            at = record["at"]
            if type(at) is not int or not 0 <= at <= len(messages):
                raise ValueError(f"line {number} appends at {at!r} to {len(messages)} messages")
            del messages[at:]
            messages.extend(record["messages"])
            if "metadata" in record:
                metadata = dict(record["metadata"])
            revision = int(record["rev"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"{str(path)!r} is not a readable conversation file: {exc}; move it away or delete "
                         "the conversation") from None
    return Conversation(session_id=session_id, messages=messages, metadata=metadata, revision=revision)
