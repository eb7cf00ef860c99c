"""open_store: a store chosen by what the user wrote (a path, sqlite://, redis://), and what
names no store refused with what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenter._errors import ConfigurationError
from agenter.host.redact import Redactor
from agenter.store import FileConversationStore, SQLiteConversationStore, StoreError, open_store
from agenter.testing.redis_server import RedisServer, free_port, redis_server_binary

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


def test_a_path_is_the_file_store(tmp_path):
    for where in (str(tmp_path / "a"), tmp_path / "b", f"file://{tmp_path / 'c'}"):
        store = open_store(where)
        assert isinstance(store, FileConversationStore) and store.root.name in "abc"
        store.save("s", MESSAGES)
        assert store.load("s").messages == MESSAGES


def test_sqlite_urls_absolute_and_relative(tmp_path, monkeypatch):
    absolute = open_store(f"sqlite://{tmp_path / 'abs.db'}", durable=False)
    assert isinstance(absolute, SQLiteConversationStore) and absolute.path == tmp_path / "abs.db"
    assert absolute.durable is False
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite://rel.db")
    assert isinstance(relative, SQLiteConversationStore) and relative.path == Path("rel.db")
    relative.save("s", MESSAGES)
    assert (tmp_path / "rel.db").is_file()
    for store in (absolute, relative):
        store.close()


def test_the_redactor_goes_to_the_store(tmp_path):
    secret = "open-store-secret-value-0042"
    store = open_store(f"sqlite://{tmp_path / 'c.db'}", redact=Redactor(extra=[secret]))
    store.save("s", [{"role": "user", "content": [{"type": "text", "text": f"key {secret}"}]}])
    assert "[REDACTED]" in store.load("s").messages[0]["content"][0]["text"]
    store.close()


def test_a_store_is_passed_through(tmp_path):
    store = FileConversationStore(tmp_path)
    assert open_store(store) is store


@pytest.mark.parametrize(("where", "says"), [
    ("", "empty"),
    ("   ", "empty"),
    ("postgres://db/conversations", "no conversation store for postgres://"),
    ("sqlite://", "needs a path"),
    (42, "got int"),
    (None, "got NoneType"),
])
def test_what_names_no_store_is_refused(where, says):
    with pytest.raises(ConfigurationError, match=says) as caught:
        open_store(where)
    assert "sqlite:///" in str(caught.value) or "needs a path" in str(caught.value)


def test_an_unreachable_sqlite_store_fails_on_first_use_naming_it(tmp_path):
    (tmp_path / "file").write_text("x")
    store = open_store(f"sqlite://{tmp_path / 'file' / 'c.db'}")
    with pytest.raises(StoreError) as caught:
        store.save("s", MESSAGES)
    assert str(caught.value).startswith(repr(store)) and "\n" not in str(caught.value)


def test_redis_urls(tmp_path):
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs it: scripts/install-system-deps.sh)")
    with RedisServer() as server:
        store = open_store(server.url + "?prefix=open-store:")
        try:
            assert type(store).__name__ == "RedisConversationStore" and store.prefix == "open-store:"
            store.save("s", MESSAGES)
            assert store.load("s").messages == MESSAGES
        finally:
            store.close()
    unreachable = open_store(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreError, match="cannot reach the server"):
        unreachable.load("s")
