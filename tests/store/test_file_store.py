"""The file conversation store: the store conformance suite, the suite failing stores that break
the contract, then what is particular to files (permissions, where files go, crashes at each
step of a write, damaged files)."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest

from agenter._errors import ConfigurationError
from agenter.host.redact import Redactor
from agenter.session.transcript import TranscriptWriter, read_transcript
from agenter.store import (
    ConversationStore,
    FileConversationStore,
    StoreError,
    default_root,
)
from agenter.testing import store_conformance as sc


@pytest.mark.parametrize("check", sc.CHECKS, ids=sc.check_id)
def test_store_contract(check, tmp_path):
    check(sc.FILE_STORE, tmp_path)


@pytest.mark.parametrize(("factory", "check"), [
    ("unscrubbed", sc.check_secrets_never_stored),
    ("unchecked_ids", sc.check_odd_ids_refused),
    ("scrubbing_signatures", sc.check_opaque_fields_kept),
    ("unlocked", sc.check_concurrent_appends_same_id),
    ("in_place", sc.check_concurrent_saves_one_id),
], ids=lambda v: v if isinstance(v, str) else sc.check_id(v))
def test_the_suite_fails_a_store_that_breaks_the_contract(factory, check, tmp_path):
    broken = sc.StoreHarness(factory=f"naive_stores:{factory}", raw=sc.file_store_bytes)
    with pytest.raises((AssertionError, ValueError)):
        check(broken, tmp_path)


def _conversation(count: int, size: int = 100) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"{i}" * size}]}
            for i in range(count)]


def test_is_a_conversation_store(tmp_path):
    assert isinstance(FileConversationStore(tmp_path), ConversationStore)


# ---------------------------------------------------------------------- permissions and places
def test_directory_0700_and_files_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        store = FileConversationStore(tmp_path / "logs" / "conversations")
        store.save("s", _conversation(2))
        store.append("s", _conversation(1), at=2)
    finally:
        os.umask(old)
    assert os.stat(store.root).st_mode & 0o777 == 0o700
    for name in os.listdir(store.root):
        assert os.stat(store.root / name).st_mode & 0o777 == 0o600, name


def test_a_looser_directory_of_ours_is_tightened(tmp_path):
    root = tmp_path / "conversations"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    FileConversationStore(root).save("s", _conversation(1))
    assert os.stat(root).st_mode & 0o777 == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to make another user's dir")
def test_a_directory_of_another_user_is_refused(tmp_path):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o777)
    os.chown(root, 65534, 65534)
    with pytest.raises(StoreError, match="belongs to another user"):
        FileConversationStore(root).save("s", _conversation(1))
    assert os.listdir(root) == []


def test_default_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_root(tmp_path / "runs") == tmp_path / "runs" / "conversations"
    assert default_root(None, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg" / "agenter" / "conversations"
    # A relative XDG_CACHE_HOME is ignored (the XDG spec), as is an empty one.
    for value in ("relative/cache", ""):
        assert default_root(None, {"XDG_CACHE_HOME": value}) == tmp_path / "home" / ".cache" / "agenter" / "conversations"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert FileConversationStore().root == tmp_path / "xdg" / "agenter" / "conversations"


def test_beside_the_transcripts(tmp_path):
    """Conversations go in log_dir/conversations: transcripts and `agenter runs` are unaffected."""
    from agenter.cli import main

    writer = TranscriptWriter.create(tmp_path, backend="anthropic-sdk", model="m", mode="autonomous", cwd=tmp_path,
                                     redact=Redactor())
    writer.agent_session("6c1f0e9a2b3c4d5e")
    writer.close()
    store = FileConversationStore.beside(tmp_path)
    store.save(read_transcript(writer.path).session_id or "", _conversation(2))
    assert store.root == tmp_path / "conversations"
    assert store.session_ids() == ["6c1f0e9a2b3c4d5e"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([writer.path.name, "conversations"])
    assert main(["runs", str(tmp_path)]) == 0


def test_session_ids_ignore_other_files(tmp_path):
    store = FileConversationStore(tmp_path)
    store.save("one", _conversation(1))
    for name in ("notes.txt", ".hidden.jsonl", "bad id.jsonl", ".one.tmp"):
        (tmp_path / name).write_text("x")
    assert store.session_ids() == ["one"]


# ---------------------------------------------------------------------- crashes and damage
def test_a_failure_between_temp_write_and_rename_leaves_the_old_conversation(tmp_path, monkeypatch):
    store = FileConversationStore(tmp_path)
    store.save("s", _conversation(3))
    store.append("s", _conversation(1), at=3)

    def no_rename(src, dst):
        raise OSError(errno.EIO, "I/O error (injected between the temp file and the rename)")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(StoreError, match="cannot write"):
        store.save("s", _conversation(50))
    monkeypatch.undo()
    loaded = store.load("s")
    assert loaded is not None and loaded.messages == [*_conversation(3), *_conversation(1)] and loaded.revision == 2
    assert sorted(os.listdir(tmp_path)) == [".s.lock", "s.jsonl"], "the temp file was left behind"
    assert store.save("s", _conversation(5), revision=2) == 3


def test_a_writer_killed_mid_save_leaves_the_old_file(tmp_path):
    """SIGKILL until one lands inside a save (its temp file is left): the conversation loads as
    the previous write left it, and the next save replaces the leftover."""
    location = str(tmp_path / "store")
    store = sc.FILE_STORE.open(location)
    size = 96 * 1024
    for attempt in range(40):
        with sc._children(sc.FILE_STORE, location, [{"role": "crash", "id": "c", "size": size}]) as (process,):
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
            while store.load("c") is None:
                time.sleep(0.005)
            time.sleep(0.05 + attempt % 7 * 0.03)
            process.send_signal(signal.SIGKILL)
            process.wait()
        if (Path(location) / ".c.tmp").exists():
            break
    else:
        pytest.skip("no kill of 40 landed inside a save on this machine")
    loaded = store.load("c")
    assert loaded is not None
    assert loaded.messages == [sc._crash_message(i, size) for i in range(len(loaded.messages))]
    store.save("c", _conversation(1), revision=loaded.revision)
    assert not (Path(location) / ".c.tmp").exists()


def test_a_line_cut_off_by_a_crash_is_ignored_then_cut(tmp_path):
    """What a power cut mid-append leaves (a line without its newline): readers skip it, the
    next writer cuts it off and goes on."""
    store = FileConversationStore(tmp_path)
    revision = store.append("s", _conversation(2), at=0)
    revision = store.append("s", _conversation(1), at=2, revision=revision)
    path = store.path("s")
    whole = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(b'{"at":3,"messages":[{"role":"user","content":[{"type":"text","text":"half')
    loaded = store.load("s")
    assert loaded is not None and len(loaded.messages) == 3 and loaded.revision == revision
    assert store.append("s", _conversation(1), at=3, revision=revision) == revision + 1
    data = path.read_bytes()
    assert data.startswith(whole) and b"half" not in data and data.endswith(b"}\n")
    loaded = store.load("s")
    assert loaded is not None and len(loaded.messages) == 4


def test_a_failed_append_leaves_no_half_line(tmp_path, monkeypatch):
    store = FileConversationStore(tmp_path)
    store.save("s", _conversation(2))
    before = store.path("s").read_bytes()
    real_write = os.write

    def disk_full(fd, data):
        if len(data) > 1000:
            real_write(fd, bytes(data[:500]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(StoreError, match="No space left"):
        store.append("s", _conversation(3, size=2000), at=2)
    monkeypatch.undo()
    assert store.path("s").read_bytes() == before
    loaded = store.load("s")
    assert loaded is not None and loaded.messages == _conversation(2) and loaded.revision == 1


def test_an_append_writes_only_its_messages(tmp_path):
    """A turn appended to a 10 MB conversation adds its own bytes; the file is not rewritten."""
    store = FileConversationStore(tmp_path)
    revision = store.save("big", _conversation(160, size=64 * 1024))
    path = store.path("big")
    before = os.stat(path)
    turn = _conversation(2, size=3000)
    store.append("big", turn, at=160, revision=revision)
    after = os.stat(path)
    added = len(json.dumps({"at": 160, "messages": turn}, separators=(",", ":")))
    assert after.st_ino == before.st_ino
    assert added <= after.st_size - before.st_size <= added + 40


def test_a_file_that_is_not_a_conversation(tmp_path):
    store = FileConversationStore(tmp_path)
    store.save("s", _conversation(1))
    store.path("s").write_text("not json\n")
    with pytest.raises(StoreError, match="not a readable conversation file"):
        store.load("s")
    with pytest.raises(StoreError, match="not a conversation file"):
        store.append("s", _conversation(1), at=1)
    store.path("s").write_text(json.dumps({"format": "agenter-conversation", "version": 99}) + "\n")
    with pytest.raises(StoreError, match="version 99"):
        store.load("s")
    with pytest.raises(StoreError):
        store.save("s", _conversation(2))  # its revision is unknown: the error says to delete it
    assert store.delete("s") is True
    assert store.save("s", _conversation(2)) == 1


def test_a_symlink_in_place_of_a_conversation_is_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("private\n")
    root = tmp_path / "store"
    store = FileConversationStore(root)
    store.save("other", _conversation(1))
    (root / "s.jsonl").symlink_to(outside)
    with pytest.raises(StoreError):
        store.load("s")
    with pytest.raises(StoreError):
        store.append("s", _conversation(1), at=1)
    with pytest.raises(StoreError):
        store.save("s", _conversation(1))
    assert store.delete("s") is True
    store.save("s", _conversation(1))
    assert outside.read_text() == "private\n" and not (root / "s.jsonl").is_symlink()


def test_not_durable(tmp_path):
    store = FileConversationStore(tmp_path, durable=False)
    revision = store.save("s", _conversation(2))
    store.append("s", _conversation(1), at=2, revision=revision)
    loaded = store.load("s")
    assert loaded is not None and len(loaded.messages) == 3


def test_the_backends_redactor_hides_its_api_key(tmp_path):
    """The harness passes its own redactor, which knows the key it was given (not only the
    environment's)."""
    key = "plain-key-without-a-known-shape-0042"
    store = FileConversationStore(tmp_path, redact=Redactor(extra=[key]))
    store.save("s", [{"role": "user", "content": [{"type": "text", "text": f"the key is {key}"}]}], {"key": key})
    assert key.encode() not in store.path("s").read_bytes()
    with pytest.raises(ConfigurationError, match="holds a secret"):
        store.save(key, _conversation(1))
