"""A folder of JSON files kept in the conversation store and written back
(backends/_stored_files.py: keep_folder, restore_folder), with the names OpenHands resumes a
conversation from (agents/openhands/_kept.py, free of OpenHands imports). The real OpenHands run
is in agents/openhands/test_openhands_pause.py; here, what a stored copy may not do."""

from __future__ import annotations

import json
import stat
from pathlib import Path, PurePosixPath

import pytest

from agenter.backends._stored_files import keep_folder, keep_text, restore_folder, restore_text
from agenter.backends.agents.openhands._kept import CONVERSATION_KIND, conversation_file
from agenter.host.redact import Redactor
from agenter.store import FileConversationStore, StoreError

KEY = "2f0c7d4e-8a5b-4c1d-9e3f-0a1b2c3d4e5f"
EVENT = "events/event-00000-34155b7d-d9df-4943-a3e5-d686d35ea6ea.json"
SECRET = "sk-test-stored-folder-0123456789abcdef"


def conversation(folder: Path) -> None:
    """A conversation's folder as OpenHands leaves it, with its sidecars and a file it does not
    resume from."""
    (folder / "events").mkdir(parents=True)
    (folder / "base_state.json").write_text(json.dumps({"id": KEY, "note": f"key {SECRET}"}))
    (folder / EVENT).write_text('{"id":"e0","text":"caf\\u00e9 \\"quoted\\""}')
    (folder / "events" / ".eventlog.lock").write_text("")
    (folder / "events" / ".eventlog-len-1.marker").write_text("")
    (folder / "observations").mkdir()
    (folder / "observations" / "out.txt").write_text("long output")


def test_a_folder_goes_to_the_store_and_comes_back_private(tmp_path):
    store = FileConversationStore(tmp_path / "store", redact=Redactor(extra=[SECRET]))
    conversation(tmp_path / "a" / "one")
    assert keep_folder(store, KEY, CONVERSATION_KIND, tmp_path / "a" / "one", conversation_file) == 2
    assert SECRET not in (tmp_path / "store" / f"{KEY}.jsonl").read_text()  # scrubbed like any record

    target = tmp_path / "b" / "one"
    assert restore_folder(store, KEY, CONVERSATION_KIND, target, conversation_file)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == [
        "base_state.json", "events", EVENT]
    assert json.loads((target / EVENT).read_text()) == {"id": "e0", "text": 'caf\u00e9 "quoted"'}
    assert json.loads((target / "base_state.json").read_text()) == {"id": KEY, "note": "key [REDACTED]"}
    assert [stat.S_IMODE(p.stat().st_mode) for p in (target, target / "events")] == [0o700, 0o700]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in target.rglob("*.json"))
    assert sorted(p.name for p in target.parent.iterdir()) == ["one"]  # no staging folder left

    # Nothing of this kind under another key; a folder already there is not written over.
    assert not restore_folder(store, "another", CONVERSATION_KIND, tmp_path / "c", conversation_file)
    with pytest.raises(StoreError, match="cannot be written back"):
        restore_folder(store, KEY, CONVERSATION_KIND, tmp_path / "a" / "one", conversation_file)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["one"]


@pytest.mark.parametrize("path", [
    "/etc/passwd", "../escaped.json", "events/../../escaped.json", "events/./" + EVENT[7:], ".hidden.json",
    "events/.eventlog.lock", "observations/out.txt", "events\\..\\x.json", "base_state.json/", "", "evil\0.json",
])
def test_a_stored_path_that_was_not_kept_is_refused_and_nothing_is_written(tmp_path, path):
    store = FileConversationStore(tmp_path / "store")
    store.save(KEY, [{"path": "base_state.json", "json": {}}, {"path": path, "json": {}}], {"kind": CONVERSATION_KIND})
    with pytest.raises(StoreError, match="refused, nothing was written"):
        restore_folder(store, KEY, CONVERSATION_KIND, tmp_path / "p" / "one", conversation_file)
    assert not (tmp_path / "p").exists() and not list(tmp_path.rglob("escaped.json"))


def test_a_file_that_is_not_json_or_a_folder_too_large_is_not_kept(tmp_path, monkeypatch):
    store = FileConversationStore(tmp_path / "store")
    conversation(tmp_path / "one")
    (tmp_path / "one" / "base_state.json").write_text('{"id": "half')
    with pytest.raises(StoreError, match="'base_state.json' in the folder 'one' is not JSON"):
        keep_folder(store, KEY, CONVERSATION_KIND, tmp_path / "one", conversation_file)
    (tmp_path / "one" / "base_state.json").write_text("{}")
    monkeypatch.setattr("agenter.backends._stored_files.KEPT_FOLDER_FILES", 1)
    with pytest.raises(StoreError, match="too large to keep"):
        keep_folder(store, KEY, CONVERSATION_KIND, tmp_path / "one", conversation_file)
    assert store.load(KEY) is None


def test_the_names_openhands_resumes_from():
    assert conversation_file(PurePosixPath("base_state.json"))
    assert conversation_file(PurePosixPath(EVENT))
    assert not conversation_file(PurePosixPath("events/event-1-abc.json"))
    assert not conversation_file(PurePosixPath("events/base_state.json"))
    assert not conversation_file(PurePosixPath("observations/out.txt"))


def test_a_text_file_comes_back_private_and_never_over_a_file_that_is_there(tmp_path):
    """keep_text / restore_text (Aider's chat history): scrubbed, written back 0600 as a new file,
    and a file (or a symbolic link) already at the path stays as it is."""
    store = FileConversationStore(tmp_path / "store", redact=Redactor(extra=[SECRET]))
    keep_text(store, KEY, "aider-chat-history", f"# chat\nkey {SECRET}\n")
    target = tmp_path / "home" / "chat.md"
    target.parent.mkdir()
    assert not restore_text(store, KEY, "another-kind", target) and not target.exists()
    assert restore_text(store, KEY, "aider-chat-history", target)
    assert target.read_text().startswith("# chat\nkey ") and SECRET not in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    target.write_text("this host's own chat\n")
    assert not restore_text(store, KEY, "aider-chat-history", target)
    assert target.read_text() == "this host's own chat\n"
    link = tmp_path / "home" / "link.md"
    link.symlink_to(tmp_path / "elsewhere.md")
    assert not restore_text(store, KEY, "aider-chat-history", link) and not (tmp_path / "elsewhere.md").exists()
