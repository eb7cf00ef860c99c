"""Pause records in a conversation store (agenter.store._pauses): kept under a handle, found,
claimed once (compare-and-set: of two claims on one loaded record, one wins), given back when
the continued run did not begin; the file store and SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenter._errors import ConfigurationError
from agenter.store import FileConversationStore, SQLiteConversationStore, claim_pause, load_pause, save_pause
from agenter.store._pauses import release_pause


@pytest.fixture(params=["file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "file":
        return FileConversationStore(tmp_path / "store")
    return SQLiteConversationStore(tmp_path / "store.db")


def test_a_record_is_found_claimed_once_and_given_back(store):
    handle = save_pause(store, {"backend": "anthropic-sdk", "pending": [{"id": "c1", "tool": "write_file"}]})
    assert handle.startswith("pause-") and store.load(handle).messages == []
    first, second = load_pause(store, handle), load_pause(store, handle)  # two processes load it
    assert not first.used and first.record["pending"][0]["id"] == "c1"
    claimed = claim_pause(store, first)
    with pytest.raises(ConfigurationError, match="was already used"):
        claim_pause(store, second)  # the stale one loses the compare-and-set
    with pytest.raises(ConfigurationError, match="was already used at"):
        claim_pause(store, load_pause(store, handle))
    assert release_pause(store, handle, claimed)  # the run did not begin: paused again
    again = load_pause(store, handle)
    assert not again.used and "resumed_at" not in again.record
    assert not release_pause(store, handle, claimed)  # nothing of ours to give back now
    claim_pause(store, again)


def test_what_is_not_a_handle_is_refused(store):
    store.save("conversation1", [{"role": "user", "content": "hi"}], {"backend": "anthropic-sdk"})
    for handle in ("conversation1", "pause-missing", "../x", 42):
        with pytest.raises(ConfigurationError, match="unknown resume handle"):
            load_pause(store, handle)
