"""The Redis conversation store against a real redis-server this module starts (Debian's package,
installed by scripts/install-system-deps.sh) on a free port in a temporary folder and ends by its
pid: the store conformance suite, the suite failing a store without the server-side script, then
what is particular to Redis (keys, prefixes, URLs, a password, a server killed and restarted,
a retried write, the optional package)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from agenter._errors import ConfigurationError
from agenter.store import ConversationStore, RedisConversationStore, StoreError
from agenter.testing import store_conformance as sc
from agenter.testing.redis_server import RedisServer, free_port, redis_server_binary

SECRET_PASSWORD = "redis-pass-never-shown-5c1e"


@pytest.fixture(scope="module")
def server():
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs it: scripts/install-system-deps.sh)")
    with RedisServer() as running:
        yield running


@pytest.fixture
def store(server):
    opened = RedisConversationStore(server.url, prefix=f"t-{time.monotonic_ns()}:")
    yield opened
    opened.close()


def _conversation(count: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"m{i}"}]}
            for i in range(count)]


@pytest.mark.parametrize("check", sc.CHECKS, ids=sc.check_id)
def test_store_contract(check, server, tmp_path):
    check(sc.redis_harness(server.url), tmp_path)


# Only the check that fails it every time (writers' appends overlap only now and then).
@pytest.mark.parametrize("check", [sc.check_concurrent_saves_one_id], ids=sc.check_id)
def test_the_suite_fails_a_redis_store_without_its_script(check, server, tmp_path):
    harness = sc.redis_harness(server.url)
    broken = sc.StoreHarness(factory="naive_stores:redis_unscripted", raw=harness.raw, location=harness.location)
    with pytest.raises((AssertionError, StoreError)):
        check(broken, tmp_path)


def test_is_a_conversation_store(store):
    assert isinstance(store, ConversationStore)


def test_keys_one_list_element_per_message_and_an_index(store):
    revision = store.save("s", _conversation(3), {"model": "m"})
    store.append("s", _conversation(5)[3:], at=3, revision=revision)
    client = store._client
    head, messages = store.keys("s")
    assert head == f"{store.prefix}c:s" and messages == f"{store.prefix}m:s"
    assert client.llen(messages) == 5
    assert client.hget(head, "n") == b"5" and client.hget(head, "rev") == b"2"
    assert client.hget(head, "meta") == b'{"model":"m"}'
    assert client.smembers(store.index_key) == {b"s"}
    assert sorted(k.decode() for k in client.scan_iter(match=store.prefix + "*")) == sorted(
        [head, messages, store.index_key])
    assert store.delete("s") is True
    assert list(client.scan_iter(match=store.prefix + "*")) == []


def test_prefixes_keep_stores_apart_and_the_url_can_give_one(server):
    first = RedisConversationStore(server.url + "?prefix=team-a:")
    second = RedisConversationStore(server.url, prefix="team-b:")
    try:
        assert first.prefix == "team-a:" and "prefix" not in first.url
        first.save("s", _conversation(1))
        assert second.load("s") is None and second.session_ids() == []
        second.save("s", _conversation(2))
        assert first.load("s").messages == _conversation(1)
        assert first.delete("s") and second.load("s").messages == _conversation(2)
        second.delete("s")
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(("url", "prefix", "says"), [
    ("http://localhost:6379/0", None, "redis://"),
    ("localhost:6379", None, "redis://"),
    ("redis://localhost:notaport/0", None, "invalid Redis URL"),
    ("redis://localhost:6379/0", "has space", "prefix"),
    ("redis://localhost:6379/0?prefix=a*b", None, "prefix"),
])
def test_bad_urls_and_prefixes_are_configuration_errors(url, prefix, says):
    with pytest.raises(ConfigurationError, match=says):
        RedisConversationStore(url, prefix=prefix)


def test_a_password_is_used_and_never_shown(tmp_path):
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs it: scripts/install-system-deps.sh)")
    with RedisServer("--requirepass", SECRET_PASSWORD) as locked:
        url = f"redis://:{SECRET_PASSWORD}@127.0.0.1:{locked.port}/0"
        good = RedisConversationStore(url)
        wrong = RedisConversationStore(url.replace(SECRET_PASSWORD, "not-the-password"))
        anonymous = RedisConversationStore(locked.url)
        try:
            assert good.save("s", _conversation(1)) == 1
            assert SECRET_PASSWORD not in repr(good) and "***" in repr(good)
            for other in (wrong, anonymous):
                with pytest.raises(StoreError) as caught:
                    other.load("s")
                message = str(caught.value)
                assert repr(other) in message and "\n" not in message and "cannot log in" in message
                assert SECRET_PASSWORD not in message and "not-the-password" not in message
        finally:
            for opened in (good, wrong, anonymous):
                opened.close()


def test_a_server_killed_is_a_store_error_and_with_appendfsync_always_nothing_is_lost(tmp_path):
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs it: scripts/install-system-deps.sh)")
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as durable:
        store = RedisConversationStore(durable.url, connect_timeout=1.0, timeout=2.0)
        try:
            revision = store.save("s", _conversation(3), {"model": "m"})
            store.append("s", _conversation(4)[3:], at=3, revision=revision)
            durable.kill()
            began = time.monotonic()
            with pytest.raises(StoreError, match="cannot reach the server") as caught:
                store.append("s", _conversation(5)[4:], at=4)
            assert time.monotonic() - began < 10 and repr(store) in str(caught.value)
            durable.start()
            loaded = store.load("s")
            assert loaded is not None and loaded.messages == _conversation(4) and loaded.revision == 2
            assert loaded.metadata == {"model": "m"}
        finally:
            store.close()


def test_a_write_retried_after_it_landed_is_not_written_twice(store):
    store.save("s", _conversation(2))
    body = [b'{"role":"user","content":"again"}']
    first = store._write("s", "append", 2, 1, b"{}", body, given=False, token="retried-token")
    second = store._write("s", "append", 2, 1, b"{}", body, given=False, token="retried-token")
    assert first == second == 2
    loaded = store.load("s")
    assert loaded.revision == 2 and len(loaded.messages) == 3


def test_unreachable_is_one_line_naming_the_store_quickly():
    store = RedisConversationStore(f"redis://127.0.0.1:{free_port()}/3", prefix="p:")
    began = time.monotonic()
    with pytest.raises(StoreError) as caught:
        store.session_ids()
    assert time.monotonic() - began < 5
    assert str(caught.value).startswith(f"{store!r} cannot reach the server (to list): ")
    assert "Connection refused" in str(caught.value) and "\n" not in str(caught.value)


def test_the_redis_package_is_imported_only_by_the_store_and_its_absence_names_the_extra():
    code = ("import sys\n"
            "import agenter.store\n"
            "assert 'redis' not in sys.modules and 'sqlite3' not in sys.modules, 'imported by agenter.store'\n"
            "sys.modules['redis'] = None\n"
            "from agenter._errors import ConfigurationError\n"
            "try:\n"
            "    agenter.store.RedisConversationStore('redis://localhost:6379/0')\n"
            "except ConfigurationError as exc:\n"
            "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install 'agenter-sdk[redis]'" in done.stdout
