"""The Redis store: conversations on a Redis server, one list element per message, every write one
server-side script.

Keys, under a prefix (default "agenter:conversation:"; ids never hold ':', so no key of one id
can be another's):

    <prefix>c:<id>     hash: n (message count), rev (revision), meta (metadata JSON), tok (the
                       last write's token)
    <prefix>m:<id>     list: one message's JSON per element
    <prefix>index      set: the ids stored (session_ids reads it; no SCAN of the keyspace)

Every save and append is one Lua script (`_WRITE`): the revision check, the trim of the list at
`at`, the push of the new messages and the head's update run as one command, which Redis runs
whole, never interleaved with another client's. A client killed mid-write leaves the server with
a command it never received whole, which it drops: the conversation is as one write left it or
as the next did. A load is a MULTI/EXEC of the head and the list (one consistent state).

Retries: a connection error is retried twice (a pooled connection the server had closed), and a
write carries a random token the script records, so a write retried after it had landed is
answered with its revision instead of being written again. Timeouts are not retried (the
write may be running): they are a StoreError.

Durability is the server's: with Redis's defaults (snapshots, no append-only file) a write is in
memory when it returns and a server crash loses what came after the last snapshot; run the
server with `appendonly yes` (and `appendfsync always` to match the file store's syncs) to keep
every write. Limits: one server (or a primary with its replicas); Redis Cluster is not supported
(a write touches three keys). The `redis` package (the `redis` extra) is imported when a store is
made, never by `import agenter.store`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from agenter._errors import ConfigurationError
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

__all__ = ["DEFAULT_PREFIX", "DEFAULT_URL", "RedisConversationStore"]

DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_PREFIX = "agenter:conversation:"
#: URL schemes redis-py reads: TCP, TLS, a Unix socket.
SCHEMES = ("redis", "rediss", "unix")
#: What a prefix may hold: printable ASCII without spaces or glob characters (it is also a SCAN
#: pattern in tests); '{' '}' allowed for a hash tag.
_PREFIX = re.compile(r"[A-Za-z0-9:._{}/-]{0,200}")
#: Seconds to connect, and to wait for one reply (a 10 MB save over a slow link takes a while).
CONNECT_SECONDS = 5.0
REPLY_SECONDS = 30.0
#: Retries of a command whose connection failed (not of a timeout).
_RETRIES = 2

#: KEYS: head hash, message list, index set.
#: ARGV: id, 'save' | 'append', at, revision ('' = any), token, '1' when metadata is given,
#: metadata (the one for a new id when not given), messages...
#: Returns {1, revision} written, {0, revision, count} stale revision, {-1, revision, count} at past the end.
_WRITE = """
local head = redis.call('HMGET', KEYS[1], 'n', 'rev', 'tok')
local count, rev = tonumber(head[1]) or 0, tonumber(head[2]) or 0
if head[3] == ARGV[5] then return {1, rev} end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= rev then return {0, rev, count} end
local at = 0
if ARGV[2] == 'append' then
  at = tonumber(ARGV[3])
  if at > count then return {-1, rev, count} end
end
if at == 0 then
  redis.call('DEL', KEYS[2])
elseif at < count then
  redis.call('LTRIM', KEYS[2], 0, at - 1)
end
for i = 8, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
rev = rev + 1
redis.call('HSET', KEYS[1], 'n', at + #ARGV - 7, 'rev', rev, 'tok', ARGV[5])
if ARGV[6] == '1' or rev == 1 then redis.call('HSET', KEYS[1], 'meta', ARGV[7]) end
redis.call('SADD', KEYS[3], ARGV[1])
return {1, rev}
"""


class RedisConversationStore:
    """Conversations on a Redis server (see the module docstring for the keys and guarantees).

    `url` is redis-py's: `redis://[[user]:password@]host[:port][/db]`, `rediss://` for TLS,
    `unix:///path/to/socket?db=0`; a `prefix` query parameter sets the key prefix (or pass
    `prefix=`). `redact` scrubs what is written (default: a Redactor of this process's
    environment; pass the backend's, which also knows its API key). Nothing connects until the
    first call; a server that cannot be reached is a StoreError naming the store (its URL with the
    password hidden). Thread- and process-safe (redis-py's connection pool); every method blocks on
    the network (call it through `asyncio.to_thread` from a coroutine). `close()` closes the pool.
    """

    def __init__(self, url: str = DEFAULT_URL, *, prefix: str | None = None, redact: Redactor | None = None,
                 connect_timeout: float = CONNECT_SECONDS, timeout: float = REPLY_SECONDS):
        try:
            import redis
            from redis.backoff import ExponentialBackoff
            from redis.retry import Retry
        except ImportError:
            raise ConfigurationError("RedisConversationStore needs the redis package: pip install 'agenter-sdk[redis]'",
                                     parameter="store") from None
        self.redact = redact if redact is not None else Redactor()
        self.url, query_prefix = _split_url(url)
        self.prefix = _check_prefix(prefix if prefix is not None else query_prefix or DEFAULT_PREFIX)
        self._shown = _hide_password(self.url)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        try:
            self._client = redis.Redis.from_url(
                self.url, socket_connect_timeout=connect_timeout, socket_timeout=timeout,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), _RETRIES,
                            supported_errors=(redis.ConnectionError,)))
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"invalid Redis URL {self._shown!r}: {exc}", parameter="store") from None
        self._write_script = self._client.register_script(_WRITE)

    def __repr__(self) -> str:
        return f"RedisConversationStore({self._shown!r}, prefix={self.prefix!r})"

    def __enter__(self) -> RedisConversationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (the store connects again if used after)."""
        self._client.close()

    def keys(self, session_id: str) -> tuple[str, str]:
        """The head hash's and the message list's key of an id (ConfigurationError for an invalid id)."""
        check_session_id(session_id, self.redact)
        return f"{self.prefix}c:{session_id}", f"{self.prefix}m:{session_id}"

    @property
    def index_key(self) -> str:
        return f"{self.prefix}index"

    # ------------------------------------------------------------------ reading
    def load(self, session_id: str) -> Conversation | None:
        head_key, list_key = self.keys(session_id)
        try:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.hmget(head_key, "n", "rev", "meta")
                pipe.lrange(list_key, 0, -1)
                (count, revision, meta), bodies = pipe.execute()
        except self._errors as exc:
            raise self._error("read", exc) from None
        if revision is None:
            return None
        try:
            if len(bodies) != int(count):
                raise ValueError(f"it holds {len(bodies)} messages where its head says {int(count)}")
            messages = [json.loads(body) for body in bodies]
            metadata = dict(json.loads(meta)) if meta is not None else {}
            return Conversation(session_id=session_id, messages=messages, metadata=metadata, revision=int(revision))
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{self!r}: conversation {session_id!r} is not readable ({exc}); its keys were changed "
                             "by something else: delete the conversation") from None

    def session_ids(self) -> list[str]:
        try:
            members = self._client.smembers(self.index_key)
        except self._errors as exc:
            raise self._error("list", exc) from None
        ids = (m.decode("ascii", "replace") if isinstance(m, bytes) else str(m) for m in members)
        return sorted(i for i in ids if is_session_id(i))

    # ------------------------------------------------------------------ writing
    def save(self, session_id: str, messages: Sequence[Message], metadata: Mapping[str, Any] | None = None, *,
             revision: int | None = None) -> int:
        check_session_id(session_id, self.redact)
        check_revision(revision)
        bodies = [dumps(m) for m in encode_messages(messages, self.redact)]
        meta = dumps(encode_metadata(metadata, self.redact))
        return self._write(session_id, "save", 0, revision, meta, bodies, given=True)

    def append(self, session_id: str, messages: Sequence[Message], *, at: int,
               metadata: Mapping[str, Any] | None = None, revision: int | None = None) -> int:
        check_session_id(session_id, self.redact)
        check_revision(revision)
        check_at(at)
        bodies = [dumps(m) for m in encode_messages(messages, self.redact)]
        given = metadata is not None
        meta = dumps(encode_metadata(metadata, self.redact)) if given else b"{}"
        return self._write(session_id, "append", at, revision, meta, bodies, given=given)

    def delete(self, session_id: str) -> bool:
        head_key, list_key = self.keys(session_id)
        try:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.delete(head_key, list_key)
                pipe.srem(self.index_key, session_id)
                removed, _ = pipe.execute()
        except self._errors as exc:
            raise self._error("delete", exc) from None
        return int(removed) > 0

    # ------------------------------------------------------------------ internals
    def _write(self, session_id: str, mode: str, at: int, revision: int | None, meta: bytes, bodies: list[bytes], *,
               given: bool, token: str | None = None) -> int:
        head_key, list_key = self.keys(session_id)
        args: list[Any] = [session_id, mode, at, "" if revision is None else revision, token or os.urandom(12).hex(),
                           "1" if given else "0", meta, *bodies]
        try:
            reply = self._write_script(keys=[head_key, list_key, self.index_key], args=args)
        except self._errors as exc:
            raise self._error("write", exc) from None
        status, stored = int(reply[0]), int(reply[1])
        if status == 1:
            return stored
        if status == 0:
            raise conflict(session_id, f"it is at revision {stored}, not {revision}")
        count = int(reply[2])
        raise conflict(session_id, f"it holds {count} messages, so an append cannot start at {at}" if stored else
                       "nothing is stored under this id (an append to a new id starts at 0)")

    def _error(self, doing: str, exc: BaseException) -> StoreError:
        """redis-py's error as a one-line StoreError naming the store (password hidden, secrets
        scrubbed); `doing` is what was tried ("read", "write", ...)."""
        import redis

        reason = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, redis.AuthenticationError):
            return StoreError(self.redact(f"{self!r} cannot log in to the server (to {doing}): {reason} (the URL "
                                          "gives the user and password: redis://user:password@host:port/db)"))
        if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
            return StoreError(self.redact(f"{self!r} cannot reach the server (to {doing}): {reason}"))
        return StoreError(self.redact(f"{self!r} cannot {doing}: {reason}"))


def _split_url(url: object) -> tuple[str, str | None]:
    """(the URL without a `prefix` query parameter, that parameter's value)."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a Redis URL must be a str such as {DEFAULT_URL!r}, got {type(url).__name__}",
                                 parameter="store")
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ConfigurationError(f"a Redis URL starts with {', '.join(s + '://' for s in SCHEMES)}; got "
                                 f"{_hide_password(url)!r}", parameter="store")
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for name, value in query if name == "prefix"]
    rest = urlencode([(name, value) for name, value in query if name != "prefix"])
    return urlunsplit(parts._replace(query=rest)), (prefixes[-1] if prefixes else None)


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(f"invalid Redis key prefix {prefix!r}: use up to 200 letters, digits and ':._{{}}/-'",
                                 parameter="prefix")
    return prefix


def _hide_password(url: str) -> str:
    """The URL with its password (if any) replaced by '***', for messages and repr."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return re.sub(r"//[^@/]*@", "//***@", url)
