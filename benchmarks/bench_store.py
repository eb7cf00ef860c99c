"""The conversation stores' cost per turn (goal: <= 2 % of a 20-turn session): file, SQLite, Redis.

A 20-turn session of a realistic size is written the way the harness writes it: the task first
(a save), then before each model call the turn's new messages appended (the assistant's text
and tool call with ~1.5 KB of code, the tool result of ~4 KB), the last user message written
again each time as if merged into (the harness's worst case). The conversation reaches ~120 KB.
Each append's wall time is measured (scrubbing secrets, JSON, then the store's own work: for the
file store the lock, the write, fdatasync; for SQLite one transaction; for Redis one script on the
server), and the session's total divided by its turns is the cost per turn. Beside each store's
default: the file store and SQLite with `durable=False` (no syncs), a file store that saves the
whole conversation every turn (what `append` avoids), Redis with `appendfsync always` (every
write on disk before the reply, as the synced file store), plus the one load a resume does.

Redis runs against a redis-server this benchmark starts on a free port of 127.0.0.1 (the
distribution's package; skipped with a line when it or the redis package is absent), sharing the
machine's cores with the benchmark: a server elsewhere adds a network round trip per turn.

The share is of a model turn taken as a conservative 1 s (a real model answering a tool turn
with a growing context takes seconds; the figure is what the goal means). For scale, the share
of a scripted turn is printed too: the 20-turn anthropic-sdk session of bench_transcript against
the scripted server, no model at all, agenter's whole turn only — a floor no real run reaches.

The store's folder is a temporary directory (on this machine /tmp is on the same disk as ~/.cache,
where the store goes by default): fsync costs what that disk costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agenter.host.redact import Redactor
from agenter.store import ConversationStore, FileConversationStore, SQLiteConversationStore

TURNS = 20
SESSIONS = 12
#: The conservative model turn the share is taken of.
MODEL_TURN_SECONDS = 1.0

CODE = "".join(f"def helper_{i}(value):\n    # normalise the input (é, ü)\n    return value * {i} + 1\n\n"
               for i in range(40))


def _assistant(turn: int) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "text", "text": f"Turn {turn}: I will update the module and run the tests. " * 5},
        {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": "write_file",
         "input": {"path": f"src/module_{turn}.py", "content": CODE[: 1500 + turn]}}]}


def _results(turn: int) -> dict[str, Any]:
    output = (f"===== test session starts =====\ncollected {turn + 3} items\n" + CODE)[: 4000 + turn * 10]
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{turn:04d}", "content": output}]}


def _task() -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "Refactor the helpers and keep the tests green. " * 30}]}


METADATA = {"backend": "anthropic-sdk", "model": "claude-sonnet-4-5", "system_sha256": "ab" * 32,
            "tools": ["read_file", "write_file", "edit_file", "bash", "glob", "grep"]}


#: Scrubs what the stores write (a bench key besides the environment's).
REDACT = Redactor(extra=["sk-bench-not-a-real-key-1234"])


def one_session(store: ConversationStore, session_id: str, whole: bool) -> tuple[float, list[float], int]:
    """(seconds the store took in all, each turn's seconds, bytes of the conversation)."""
    conversation = [_task()]
    started = time.perf_counter()
    revision = store.save(session_id, conversation, METADATA)
    first = time.perf_counter() - started
    turns = []
    for turn in range(1, TURNS + 1):
        start = len(conversation) - 1  # the last user message written again: the worst case
        conversation += [_assistant(turn), _results(turn)]
        began = time.perf_counter()
        if whole:
            revision = store.save(session_id, conversation, METADATA, revision=revision)
        else:
            revision = store.append(session_id, conversation[start:], at=start, revision=revision)
        turns.append(time.perf_counter() - began)
    return first + sum(turns), turns, len(json.dumps(conversation, ensure_ascii=False).encode())


def measure(label: str, store: ConversationStore, whole: bool = False,
            stored_kb: Callable[[], float] | None = None) -> dict[str, float]:
    """Run the sessions on `store` and print its line; `stored_kb` says what it keeps."""
    one_session(store, "warm-up", whole)
    totals, turns = [], []
    size = 0
    for index in range(SESSIONS):
        total, each, size = one_session(store, f"s{index}", whole)
        totals.append(total)
        turns += each
    per_turn = statistics.median(totals) / TURNS
    began = time.perf_counter()
    loaded = store.load("s0")
    load_ms = (time.perf_counter() - began) * 1000
    assert loaded is not None and len(loaded.messages) == 1 + 2 * TURNS
    turns.sort()
    kept = f"keeps {stored_kb():.0f} KB, " if stored_kb is not None else ""
    print(f"{label:<34} {per_turn * 1000:6.2f} ms per turn (one turn's median {statistics.median(turns) * 1000:.2f}, "
          f"p90 {turns[int(len(turns) * 0.9)] * 1000:.2f} ms) = {per_turn / MODEL_TURN_SECONDS * 100:.2f} % of a "
          f"{MODEL_TURN_SECONDS:.0f} s model turn; {kept}load {load_ms:.1f} ms")
    return {"per_turn": per_turn, "load": load_ms / 1000, "size": size}


def file_stores(folder: Path) -> dict[str, dict[str, float]]:
    results = {}
    for key, label, durable, whole in (("file", "file, append, durable (default)", True, False),
                                       ("file_fast", "file, append, durable=False", False, False),
                                       ("file_whole", "file, save whole every turn", True, True)):
        store = FileConversationStore(folder / key, redact=REDACT, durable=durable)
        results[key] = measure(label, store, whole, lambda s=store: s.path("s0").stat().st_size / 1024)
    return results


def sqlite_stores(folder: Path) -> dict[str, dict[str, float]]:
    results = {}
    for key, label, durable in (("sqlite", "SQLite, durable (default: FULL)", True),
                                ("sqlite_fast", "SQLite, durable=False (NORMAL)", False)):
        path = folder / f"{key}.db"
        with SQLiteConversationStore(path, redact=REDACT, durable=durable) as store:
            results[key] = measure(label, store, stored_kb=lambda p=path: _sqlite_kb(p))
    return results


def _sqlite_kb(path: Path) -> float:
    """The database file's size after a checkpoint, per session (all sessions share it; pages
    freed by rewritten messages are reused, not returned)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size / 1024 / (SESSIONS + 1)


def redis_stores() -> dict[str, dict[str, float]]:
    from agenter.testing.redis_server import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        print("Redis: skipped, redis-server is not installed (scripts/install-system-deps.sh installs it)")
        return {}
    from agenter._errors import ConfigurationError
    from agenter.store import RedisConversationStore

    try:
        RedisConversationStore("redis://127.0.0.1:1/0").close()
    except ConfigurationError as exc:  # the redis package is missing
        print(f"Redis: skipped, {exc}")
        return {}
    results = {}
    for key, label, settings in (("redis", "Redis (server defaults, in memory)", ()),
                                 ("redis_aof", "Redis, appendfsync always", ("--appendonly", "yes",
                                                                               "--appendfsync", "always"))):
        with RedisServer(*settings) as server, _closing(RedisConversationStore(server.url, redact=REDACT)) as store:
            results[key] = measure(label, store, stored_kb=lambda s=store: _redis_kb(s))
    return results


@contextlib.contextmanager
def _closing(store: Any) -> Iterator[Any]:
    try:
        yield store
    finally:
        store.close()


def _redis_kb(store: Any) -> float:
    """The server's MEMORY USAGE of one session's keys."""
    head, messages = store.keys("s0")
    return sum(store._client.memory_usage(key) or 0 for key in (head, messages)) / 1024


def scripted_turn_seconds() -> float | None:
    """The median time of one turn of bench_transcript's scripted 20-turn session (no model)."""
    try:
        from bench_transcript import TURNS as SCRIPTED_TURNS
        from bench_transcript import one_run
    except ImportError:
        return None

    async def runs() -> list[float]:
        await one_run(None)  # warm up
        return [(await one_run(None))[0] for _ in range(3)]

    return statistics.median(asyncio.run(runs())) / SCRIPTED_TURNS


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="agenter-bench-store-") as tmp:
        folder = Path(tmp)
        load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
        print(f"{TURNS}-turn session, {SESSIONS} sessions each, files in {folder}; load average {load}")
        results = {**file_stores(folder), **sqlite_stores(folder)}
    results.update(redis_stores())
    durable = results["file"]
    print(f"conversation after {TURNS} turns: {durable['size'] / 1024:.0f} KB; a resume loads it once")
    scripted = scripted_turn_seconds()
    if scripted is not None:
        print(f"for scale, a scripted turn (agenter's own work, no model; bench_transcript's session): "
              f"{scripted * 1000:.1f} ms; the default file store is {durable['per_turn'] / scripted * 100:.0f} % "
              f"of it, durable=False {results['file_fast']['per_turn'] / scripted * 100:.1f} %")
    shares = ", ".join(f"{key} {value['per_turn'] / MODEL_TURN_SECONDS * 100:.2f} %" for key, value in results.items()
                       if key in ("file", "sqlite", "redis", "redis_aof"))
    print(f"store share of a 20-turn session with {MODEL_TURN_SECONDS:.0f} s model turns: {shares} (goal <= 2 %)")
    figures = {"store_per_turn_s": durable["per_turn"], "store_share": durable["per_turn"] / MODEL_TURN_SECONDS,
               "store_per_turn_not_durable_s": results["file_fast"]["per_turn"],
               "store_per_turn_whole_save_s": results["file_whole"]["per_turn"]}
    for key in ("sqlite", "sqlite_fast", "redis", "redis_aof"):
        if key in results:
            figures[f"store_per_turn_{key}_s"] = results[key]["per_turn"]
            figures[f"store_share_{key}"] = results[key]["per_turn"] / MODEL_TURN_SECONDS
    if scripted is not None:
        figures["scripted_turn_s"] = scripted
    return figures


if __name__ == "__main__":
    main()
