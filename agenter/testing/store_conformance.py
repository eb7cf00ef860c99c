"""The ConversationStore contract as a reusable test suite, for the built-in stores and your own.

A store is checked through a `StoreHarness`: an importable factory that opens the store at a
location (called here and in child processes, so two processes really share one store), and a
function that returns every byte the store holds there (for the secrets check). Every check is
a plain function `check(harness, tmp_path)`:

    from agenter.testing import store_conformance as sc

    MY_STORE = sc.StoreHarness(factory="my_package.stores:open_for_tests", raw=my_raw_bytes)

    @pytest.mark.parametrize("check", sc.CHECKS, ids=sc.check_id)
    def test_store_contract(check, tmp_path):
        check(MY_STORE, tmp_path)

where `open_for_tests(location: str, secrets: list[str]) -> ConversationStore` opens the store
at `location` with a redactor that also hides `secrets` (`Redactor(extra=secrets)`).

What the checks prove:

- save, load, append (also replacing the tail), delete and session_ids do what the protocol
  says; revisions increase; a stale revision or an append past the end is a
  ConversationConflictError and changes nothing;
- text survives exactly: every script, emoji, NUL, line separators, and the lone surrogates a
  tool's output decoded with surrogateescape holds; a 10 MB conversation too;
- ids that could name another place (separators, '..', a leading dot or dash, control
  characters, non-ASCII, over 128 characters, not a str) are refused by every method and create
  nothing; an id that is a secret is refused;
- secrets (a redactor's extra values, a secret-named environment variable's value, key-shaped
  strings), written through save and append, are in neither what load returns nor the raw
  bytes; the provider's opaque fields (a thinking block's signature) are kept as they came;
- what is not JSON data is refused before anything is written;
- concurrent writers, threads and processes, to different ids and to one id: nothing torn,
  nothing interleaved; appends that pass their revision (and retry on conflict) all land once, in
  each writer's order; whole saves racing a reader: every load is one writer's whole conversation;
- a process killed (SIGKILL) at random points while it saves and appends leaves a conversation
  a load reads whole (a prefix of what it wrote), and the next writer continues it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from agenter._errors import ConfigurationError
from agenter.host.redact import Redactor
from agenter.store import (
    ConversationConflictError,
    ConversationStore,
    FileConversationStore,
    Message,
)

__all__ = [
    "BAD_IDS", "CHECKS", "FILE_STORE", "GOOD_IDS", "StoreHarness", "check_id", "file_store_bytes", "open_file_store",
]

#: Ids every store must refuse: separators, traversal, hidden, option-like, control characters,
#: spaces, non-ASCII, too long, empty, and values that are not strings.
BAD_IDS: tuple[Any, ...] = (
    "", ".", "..", "../evil", "a/../../evil", "/abs-evil", "a/b", "a\\b", ".hidden", "-rf", "a b", "a\x00evil",
    "a\nb", "evil\t", "é", "a:b", "a*", "x" * 129, None, 5, b"bytes",
)
#: Ids every store must take.
GOOD_IDS = ("a", "A.b-c_d", "0" * 128, "6c1f0e9a-2b3c-4d5e-8f90-a1b2c3d4e5f6", "run.1")
#: Passed to the factory as the redactor's extra secrets.
EXTRA_SECRET = "conformance-extra-secret-3f9a1c"
QUOTED_SECRET = 'conformance"quoted\\secret-19'
#: A secret-named environment variable and its value, set while the store is opened.
ENV_SECRET_NAME = "AGENTER_CONFORMANCE_API_TOKEN"
ENV_SECRET = "conformance-env-secret-77d2e0b4"
#: Key-shaped strings; for the Bearer one only the token must go.
KEY_SHAPED = ("sk-ant-api03-" + "Q" * 40, "AIza" + "S" * 35, "Bearer tok3nV4lueZZZZZZ")
BEARER_TOKEN = "tok3nV4lueZZZZZZ"
#: Text the store must give back exactly.
UNICODE_TEXTS = (
    "日本語のテキスト", "emoji 🙂👍🏽 and a flag 🇫🇷", "combining e\u0301 vs é", "rtl \u202eabc\u202c",
    "nul \x00 byte", "line\u2028separator\u2029", "surrogateescape " + os.fsdecode(b"\xff\xfe bad bytes"),
    "lone high \ud800 and low \udfff", "tab\tnewline\n\"quote\" \\ backslash", "\ufeffbom",
)

#: How long a child process may take to finish its part.
CHILD_SECONDS = 120.0
#: Conflicts in a row a writer of the shared-id check takes before the store is deemed stuck.
_RETRIES = 2000


def open_file_store(location: str, secrets: Sequence[str]) -> ConversationStore:
    """The factory of the file store for the suite."""
    return FileConversationStore(location, redact=Redactor(extra=list(secrets)))


def file_store_bytes(location: str) -> bytes:
    """Every byte under the file store's directory (temporary and lock files included)."""
    root = Path(location)
    if not root.exists():
        return b""
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


def _default_location(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@dataclass(frozen=True)
class StoreHarness:
    """How the suite opens the store under test.

    `factory` is "module:callable"; the callable takes (location, secrets) and returns a
    ConversationStore whose redactor also hides `secrets`. Child processes import it, so it must
    be importable from the test's sys.path. `raw(location)` returns every byte the store keeps
    there. `location(tmp_path)` gives a fresh, empty location (default: a folder in tmp_path;
    a Redis store would return a key prefix).
    """

    factory: str
    raw: Callable[[str], bytes]
    location: Callable[[Path], str] = field(default=_default_location)

    def open(self, location: str, secrets: Sequence[str] = ()) -> ConversationStore:
        module, _, name = self.factory.partition(":")
        store = getattr(importlib.import_module(module), name)(location, list(secrets))
        if not isinstance(store, ConversationStore):
            raise TypeError(f"{self.factory} returned {store!r}, which is not a ConversationStore")
        return store


FILE_STORE = StoreHarness(factory="agenter.testing.store_conformance:open_file_store", raw=file_store_bytes)

Check = Callable[[StoreHarness, Path], None]


def check_id(check: Check) -> str:
    return check.__name__.removeprefix("check_")


# ---------------------------------------------------------------------- messages
def _text(role: str, text: str) -> Message:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def _turn(index: int, size: int = 200) -> Message:
    """Message `index` of a conversation the suite can rebuild: a prompt, then assistant tool
    calls and user tool results in turn."""
    filler = (f"{index}:" + "x" * size)[:size]
    if index == 0:
        return _text("user", f"task {filler}")
    if index % 2:
        return {"role": "assistant", "content": [
            {"type": "text", "text": f"step {index}"},
            {"type": "tool_use", "id": f"toolu_{index}", "name": "bash", "input": {"command": f"cat f{index}.py"}}]}
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{index - 1}", "content": filler}]}


def _conversation(count: int, size: int = 200) -> list[Message]:
    return [_turn(i, size) for i in range(count)]


def _expect_conflict(call: Callable[[], object], what: str) -> None:
    try:
        call()
    except ConversationConflictError:
        return
    raise AssertionError(f"{what} did not raise ConversationConflictError")


def _expect_refused(call: Callable[[], object], what: str) -> None:
    try:
        call()
    except ConfigurationError:
        return
    except Exception as exc:  # the wrong type is the finding
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}, not ConfigurationError") from exc
    raise AssertionError(f"{what} was not refused")


# ---------------------------------------------------------------------- the contract, one process
def check_save_load_delete(harness: StoreHarness, tmp_path: Path) -> None:
    """Save, load, session_ids and delete; revisions start at 1 and increase."""
    store = harness.open(harness.location(tmp_path))
    assert store.load("s1") is None, "load of an unknown id must be None"
    assert store.delete("s1") is False, "delete of an unknown id must be False"
    assert store.session_ids() == []
    messages = _conversation(5)
    first = store.save("s1", messages, {"backend": "anthropic-sdk", "model": "m", "tools": ["bash"]})
    assert first == 1, f"the first save's revision must be 1, got {first}"
    loaded = store.load("s1")
    assert loaded is not None and loaded.session_id == "s1"
    assert loaded.messages == messages and loaded.revision == 1
    assert loaded.metadata == {"backend": "anthropic-sdk", "model": "m", "tools": ["bash"]}
    second = store.save("s1", messages[:2])
    assert second == 2
    again = store.load("s1")
    assert again is not None and again.messages == messages[:2] and again.metadata == {} and again.revision == 2
    store.save("s0", messages)
    assert store.session_ids() == ["s0", "s1"]
    assert store.delete("s1") is True
    assert store.load("s1") is None and store.session_ids() == ["s0"]
    assert store.delete("s1") is False
    assert store.save("s1", messages) >= 1
    reloaded = store.load("s1")
    assert reloaded is not None and reloaded.messages == messages


def check_append_and_replace_tail(harness: StoreHarness, tmp_path: Path) -> None:
    """append(at=count) adds; a smaller `at` replaces the tail; metadata kept unless given; a
    new id takes at=0."""
    store = harness.open(harness.location(tmp_path))
    conversation = _conversation(3)
    revision = store.append("s", conversation, at=0, metadata={"model": "m"})
    assert revision == 1
    revision = store.append("s", [_turn(3)], at=3, revision=revision)
    merged = _text("user", "tool results and a follow-up merged into the last user message")
    revision = store.append("s", [merged, _turn(5)], at=3, revision=revision)
    loaded = store.load("s")
    assert loaded is not None
    assert loaded.messages == [*conversation, merged, _turn(5)] and loaded.revision == revision == 3
    assert loaded.metadata == {"model": "m"}, "append without metadata keeps it"
    revision = store.append("s", [], at=2, metadata={"model": "m", "summary": "compacted"}, revision=revision)
    loaded = store.load("s")
    assert loaded is not None and loaded.messages == conversation[:2]
    assert loaded.metadata == {"model": "m", "summary": "compacted"}
    store.append("s", [_turn(0)], at=0)
    loaded = store.load("s")
    assert loaded is not None and loaded.messages == [_turn(0)] and loaded.revision == revision + 1
    bad_indexes: tuple[Any, ...] = (-1, "1", 1.0, None, True)
    for bad in bad_indexes:
        _expect_refused(partial(store.append, "s", [_turn(1)], at=bad), f"append(at={bad!r})")


def check_conflicts(harness: StoreHarness, tmp_path: Path) -> None:
    """A stale revision or an append past the end raises ConversationConflictError and writes
    nothing."""
    store = harness.open(harness.location(tmp_path))
    ours = store.save("s", _conversation(4))
    theirs = store.save("s", _conversation(2), {"by": "the other writer"})
    _expect_conflict(lambda: store.append("s", [_turn(4)], at=4, revision=ours), "append with a stale revision")
    _expect_conflict(lambda: store.save("s", _conversation(6), revision=ours), "save with a stale revision")
    _expect_conflict(lambda: store.append("s", [_turn(3)], at=3), "append past the stored end")
    _expect_conflict(lambda: store.append("new", [_turn(1)], at=1), "append at 1 to an unknown id")
    _expect_conflict(lambda: store.save("s", _conversation(1), revision=0), "save with revision 0 over a stored one")
    loaded = store.load("s")
    assert loaded is not None and loaded.messages == _conversation(2) and loaded.revision == theirs
    assert loaded.metadata == {"by": "the other writer"}
    assert store.load("new") is None
    assert store.append("s", [_turn(2)], at=2, revision=theirs) == theirs + 1
    assert store.save("fresh", _conversation(1), revision=0) == 1, "revision=0 creates a new id"


def check_unicode_and_surrogates(harness: StoreHarness, tmp_path: Path) -> None:
    """Every text comes back exactly, lone surrogates included, in messages and metadata."""
    store = harness.open(harness.location(tmp_path))
    blocks = [{"type": "text", "text": text} for text in UNICODE_TEXTS]
    messages: list[Message] = [
        {"role": "user", "content": blocks},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "write_file",
                                           "input": {"path": "données/文件.py", "contenu": UNICODE_TEXTS[6]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": UNICODE_TEXTS[7]}]},
    ]
    metadata = {"system_prompt_hash": "é🙂", "summary": UNICODE_TEXTS[7]}
    revision = store.save("u", messages[:1], metadata)
    store.append("u", messages[1:], at=1, revision=revision)
    loaded = store.load("u")
    assert loaded is not None
    assert loaded.messages == messages, "text changed on its way through the store"
    assert loaded.metadata == metadata


def check_large_conversation(harness: StoreHarness, tmp_path: Path) -> None:
    """A 10 MB conversation is saved, loaded and appended to whole."""
    store = harness.open(harness.location(tmp_path))
    piece = ("def f():\n    return 'données'\n" * 2200)[:64 * 1024]
    messages = [_text("user" if i % 2 == 0 else "assistant", f"{i} {piece}") for i in range(160)]
    assert sum(len(m["content"][0]["text"].encode()) for m in messages) >= 10 * 1024 * 1024
    revision = store.save("big", messages, {"model": "m"})
    loaded = store.load("big")
    assert loaded is not None and loaded.messages == messages
    store.append("big", [_turn(1)], at=160, revision=revision)
    loaded = store.load("big")
    assert loaded is not None and loaded.messages == [*messages, _turn(1)] and loaded.revision == revision + 1


def check_odd_ids_refused(harness: StoreHarness, tmp_path: Path) -> None:
    """Ids that could name another place are refused by every method, and nothing is made."""
    location = harness.location(tmp_path)
    store = harness.open(location, [EXTRA_SECRET])
    for bad in (*BAD_IDS, EXTRA_SECRET):
        shown = repr(bad)
        _expect_refused(partial(store.save, bad, _conversation(1)), f"save({shown})")
        _expect_refused(partial(store.append, bad, _conversation(1), at=0), f"append({shown})")
        _expect_refused(partial(store.load, bad), f"load({shown})")
        _expect_refused(partial(store.delete, bad), f"delete({shown})")
    assert store.session_ids() == []
    made = [str(p) for p in (*tmp_path.rglob("*evil*"), *tmp_path.parent.glob("*evil*"), *Path("/").glob("abs-evil*"))]
    assert not made, f"a refused id made {made}"
    assert EXTRA_SECRET.encode() not in harness.raw(location)
    for good in GOOD_IDS:
        store.save(good, _conversation(1))
        loaded = store.load(good)
        assert loaded is not None and loaded.messages == _conversation(1), f"id {good!r}"
    assert store.session_ids() == sorted(GOOD_IDS)


def check_not_json_refused(harness: StoreHarness, tmp_path: Path) -> None:
    """What is not JSON data is refused (ConfigurationError) before anything is written."""
    store = harness.open(harness.location(tmp_path))
    store.save("s", _conversation(2))
    bad_messages: list[Any] = [
        [{"role": "user", "content": [{"type": "text", "text": b"bytes"}]}],
        [{"role": "user", "content": object()}],
        ["a message that is a str"],
        "not a list",
    ]
    for bad in bad_messages:
        _expect_refused(partial(store.save, "s", bad), f"save({bad!r})")
        _expect_refused(partial(store.append, "s", bad, at=2), f"append({bad!r})")
        _expect_refused(partial(store.save, "other", bad), f"save of a new id ({bad!r})")
    _expect_refused(lambda: store.save("s", _conversation(1), {"key": {1, 2}}), "save with a set in metadata")
    _expect_refused(lambda: store.save("s", _conversation(1), ["not", "a", "mapping"]),  # type: ignore[arg-type]
                    "save with metadata that is a list")
    loaded = store.load("s")
    assert loaded is not None and loaded.messages == _conversation(2) and loaded.revision == 1
    assert store.load("other") is None


@contextlib.contextmanager
def _env_secret() -> Iterator[None]:
    previous = os.environ.get(ENV_SECRET_NAME)
    os.environ[ENV_SECRET_NAME] = ENV_SECRET
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ENV_SECRET_NAME, None)
        else:
            os.environ[ENV_SECRET_NAME] = previous


def _secret_messages(secret: str) -> list[Message]:
    return [
        _text("user", f"use the key {secret} to deploy"),
        {"role": "assistant", "content": [
            {"type": "text", "text": f"running with {secret}"},
            {"type": "tool_use", "id": "t1", "name": "bash",
             "input": {"command": f"export KEY={secret}", "nested": {"list": [secret, {"deep": secret}]}}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": f"echo: {secret}"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": secret}]}]},
    ]


def check_secrets_never_stored(harness: StoreHarness, tmp_path: Path) -> None:
    """Secrets written through save and append are neither loaded back nor in the raw bytes."""
    location = harness.location(tmp_path)
    with _env_secret():
        store = harness.open(location, [EXTRA_SECRET, QUOTED_SECRET])
    secrets = [EXTRA_SECRET, QUOTED_SECRET, ENV_SECRET, *KEY_SHAPED]
    revision = 0
    for index, secret in enumerate(secrets):
        saved = _secret_messages(secret)
        metadata = {"system_prompt": f"key {secret}", "tools": [secret]}
        if index % 2 == 0:
            revision = store.save(f"s{index}", saved, metadata)
        else:
            revision = store.save(f"s{index}", saved[:1])
            store.append(f"s{index}", saved[1:], at=1, metadata=metadata, revision=revision)
    hidden = [EXTRA_SECRET, QUOTED_SECRET, ENV_SECRET, *KEY_SHAPED[:2], BEARER_TOKEN]
    forms = [form for secret in hidden for form in (secret, json.dumps(secret)[1:-1])]
    for index in range(len(secrets)):
        loaded = store.load(f"s{index}")
        assert loaded is not None and len(loaded.messages) == 3
        text = json.dumps([loaded.messages, loaded.metadata], ensure_ascii=False)
        assert "[REDACTED]" in text, f"conversation s{index} lost its text instead of a [REDACTED] mark"
        leaked = [form for form in forms if form in text]
        assert not leaked, f"load gave back secrets {leaked}"
    raw = harness.raw(location)
    assert raw, "the harness's raw() returned nothing for a store that holds conversations"
    leaked = [form for form in forms if form.encode() in raw]
    assert not leaked, f"secrets {leaked} are in the store's bytes"


def check_opaque_fields_kept(harness: StoreHarness, tmp_path: Path) -> None:
    """A thinking block's signature and a redacted thinking block's data come back as they were
    (the provider refuses a changed one), even where they look like a key."""
    store = harness.open(harness.location(tmp_path))
    signature = "EqQBCkgIARABGAIiQL" + "AIza" + "Z" * 30 + "/+=="
    data = "AIza" + "D" * 40
    messages: list[Message] = [
        _text("user", "think"),
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": signature},
            {"type": "redacted_thinking", "data": data},
            {"type": "text", "text": "done"}]},
    ]
    store.save("t", messages[:1])
    store.append("t", messages[1:], at=1)
    loaded = store.load("t")
    assert loaded is not None and loaded.messages == messages, "an opaque field came back changed"


# ---------------------------------------------------------------------- concurrency and crashes
def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


@contextlib.contextmanager
def _children(harness: StoreHarness, location: str, jobs: list[dict[str, Any]]) -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes running `_child` with each job; every one is ended (by pid) on the way out."""
    processes: list[subprocess.Popen[str]] = []
    try:
        for job in jobs:
            argument = json.dumps({"factory": harness.factory, "location": location, **job})
            processes.append(subprocess.Popen(
                [sys.executable, "-c", "from agenter.testing.store_conformance import _child; _child()", argument],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env()))
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def _finish(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        _, err = process.communicate(timeout=CHILD_SECONDS)
        assert process.returncode == 0, f"a writer process failed ({process.returncode}):\n{err[-3000:]}"


def _child() -> None:
    """Entry point of the suite's child processes (one job, given as JSON in argv[1])."""
    job = json.loads(sys.argv[1])
    module, _, name = job["factory"].partition(":")
    store = getattr(importlib.import_module(module), name)(job["location"], [])
    if job["role"] == "crash":
        print("ready", flush=True)
        _crash_writer(store, job["id"], job["size"])
    else:
        _ROLES[job["role"]](store, **{k: v for k, v in job.items() if k not in ("factory", "location", "role")})


def _tagged(writer: str, index: int) -> Message:
    return _text("user" if index % 2 else "assistant", f"{writer}#{index} " + "y" * 300)


def _append_own(store: ConversationStore, writer: str, count: int) -> None:
    """Appends to an id of its own, at the end each time, without revisions."""
    for index in range(count):
        store.append(f"own-{writer}", [_tagged(writer, index)], at=index)


def _append_shared(store: ConversationStore, writer: str, count: int, session_id: str) -> None:
    """Appends to a shared id: load, append at the end with the revision, again on conflict."""
    for index in range(count):
        for _ in range(_RETRIES):
            current = store.load(session_id)
            assert current is not None
            try:
                store.append(session_id, [_tagged(writer, index)], at=len(current.messages),
                             revision=current.revision)
                break
            except ConversationConflictError:
                time.sleep(random.random() * 0.002)
        else:
            raise AssertionError(f"writer {writer}: {_RETRIES} appends in a row met a conflict")


def _save_whole(store: ConversationStore, writer: str, count: int, session_id: str) -> None:
    """Saves its own whole conversation again and again."""
    messages = _whole(writer)
    for _ in range(count):
        store.save(session_id, messages, {"writer": writer})


def _whole(writer: str) -> list[Message]:
    return [_text("user", f"{writer} {i} " + writer * 8000) for i in range(12)]


_ROLES: dict[str, Callable[..., None]] = {"append_own": _append_own, "append_shared": _append_shared,
                                          "save_whole": _save_whole}


def check_concurrent_writers_different_ids(harness: StoreHarness, tmp_path: Path) -> None:
    """Three processes and three threads, each appending to an id of its own: every id ends
    with exactly its writer's messages, in order."""
    location = harness.location(tmp_path)
    count = 25
    writers = [f"p{i}" for i in range(3)] + [f"t{i}" for i in range(3)]
    store = harness.open(location)
    with _children(harness, location, [{"role": "append_own", "writer": w, "count": count}
                                       for w in writers[:3]]) as processes:
        with ThreadPoolExecutor(3) as pool:
            for future in [pool.submit(_append_own, store, w, count) for w in writers[3:]]:
                future.result()
        _finish(processes)
    for writer in writers:
        loaded = store.load(f"own-{writer}")
        assert loaded is not None
        assert loaded.messages == [_tagged(writer, i) for i in range(count)], f"id own-{writer} is not whole"
    assert store.session_ids() == sorted(f"own-{w}" for w in writers)


def check_concurrent_appends_same_id(harness: StoreHarness, tmp_path: Path) -> None:
    """Three processes and three threads append to one id, each passing the revision it loaded
    and retrying on ConversationConflictError: every message lands exactly once, whole, each
    writer's in its order (no lost update, no interleaving)."""
    location = harness.location(tmp_path)
    count = 15
    writers = [f"p{i}" for i in range(3)] + [f"t{i}" for i in range(3)]
    store = harness.open(location)
    seed = _text("user", "the task")
    store.save("shared", [seed])
    with _children(harness, location, [{"role": "append_shared", "writer": w, "count": count, "session_id": "shared"}
                                       for w in writers[:3]]) as processes:
        with ThreadPoolExecutor(3) as pool:
            for future in [pool.submit(_append_shared, store, w, count, "shared") for w in writers[3:]]:
                future.result()
        _finish(processes)
    loaded = store.load("shared")
    assert loaded is not None and loaded.messages[0] == seed
    rest = loaded.messages[1:]
    assert len(rest) == count * len(writers), f"{len(rest)} messages landed, not {count * len(writers)}"
    assert loaded.revision == 1 + count * len(writers)
    for writer in writers:
        own = [m for m in rest if m["content"][0]["text"].startswith(f"{writer}#")]
        assert own == [_tagged(writer, i) for i in range(count)], f"writer {writer}'s messages are not whole, in order"


def check_concurrent_saves_one_id(harness: StoreHarness, tmp_path: Path) -> None:
    """Three processes save their own whole conversation to one id over and over while this
    process loads it: every load is exactly one writer's conversation, never a mix."""
    location = harness.location(tmp_path)
    store = harness.open(location)
    wholes = {w: _whole(w) for w in ("A", "B", "C")}
    loads = 0
    with _children(harness, location, [{"role": "save_whole", "writer": w, "count": 20, "session_id": "one"}
                                       for w in wholes]) as processes:
        deadline = time.monotonic() + CHILD_SECONDS
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            loaded = store.load("one")
            if loaded is None:
                continue
            loads += 1
            writer = loaded.metadata.get("writer")
            assert writer in wholes and loaded.messages == wholes[writer], "a load mixed two writers' saves"
        _finish(processes)
    loaded = store.load("one")
    assert loaded is not None and loaded.messages == wholes[loaded.metadata["writer"]]
    assert loaded.revision == 60, f"60 saves left revision {loaded.revision}"
    assert loads > 0


def _crash_message(index: int, size: int) -> Message:
    return _text("assistant" if index % 2 else "user", f"{index}:" + "z" * size)


def _crash_writer(store: ConversationStore, session_id: str, size: int) -> None:
    """Writes the conversation _crash_message(0), (1), ... forever: appends, and every third
    write a whole save; back to one message after 40."""
    while True:
        revision = store.save(session_id, [_crash_message(0, size)])
        for index in range(1, 40):
            if index % 3 == 0:
                revision = store.save(session_id, [_crash_message(i, size) for i in range(index + 1)],
                                      revision=revision)
            else:
                revision = store.append(session_id, [_crash_message(index, size)], at=index, revision=revision)


def check_crash_between_writes(harness: StoreHarness, tmp_path: Path) -> None:
    """A writer killed (SIGKILL) at random moments of its saves and appends: each time the
    conversation loads whole, as a prefix of what it wrote, and the next writer continues it."""
    location = harness.location(tmp_path)
    store = harness.open(location)
    size = 96 * 1024
    rng = random.Random(20261122)
    for _ in range(6):
        with _children(harness, location, [{"role": "crash", "id": "crash", "size": size}]) as (process,):
            assert process.stdout is not None
            ready = process.stdout.readline()
            assert ready.strip() == "ready", f"the writer did not start: {process.stderr.read() if process.stderr else ''}"
            deadline = time.monotonic() + CHILD_SECONDS
            while store.load("crash") is None:
                assert process.poll() is None and time.monotonic() < deadline, "the writer wrote nothing"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.02, 0.4))
            process.send_signal(signal.SIGKILL)
            process.wait()
        loaded = store.load("crash")
        assert loaded is not None and loaded.messages, "nothing loads after the crash"
        count = len(loaded.messages)
        assert loaded.messages == [_crash_message(i, size) for i in range(count)], "the crash left a mixed conversation"
        revision = store.append("crash", [_crash_message(count, size)], at=count, revision=loaded.revision)
        after = store.load("crash")
        assert after is not None and after.revision == revision and len(after.messages) == count + 1
        assert after.messages[-1] == _crash_message(count, size)


CHECKS: tuple[Check, ...] = (
    check_save_load_delete, check_append_and_replace_tail, check_conflicts, check_unicode_and_surrogates,
    check_large_conversation, check_odd_ids_refused, check_not_json_refused, check_secrets_never_stored,
    check_opaque_fields_kept, check_concurrent_writers_different_ids, check_concurrent_appends_same_id,
    check_concurrent_saves_one_id, check_crash_between_writes,
)
