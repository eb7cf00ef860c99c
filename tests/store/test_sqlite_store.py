"""The SQLite conversation store: the store conformance suite, then what is particular to a
database file (its mode, a file that is not a database, another format, sharing the database)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

import pytest

from agenter.store import ConversationStore, SQLiteConversationStore, StoreError
from agenter.testing import store_conformance as sc


@pytest.mark.parametrize("check", sc.CHECKS, ids=sc.check_id)
def test_store_contract(check, tmp_path):
    check(sc.SQLITE_STORE, tmp_path)


def _conversation(count: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"m{i}"}]}
            for i in range(count)]


def test_is_a_conversation_store(tmp_path):
    assert isinstance(SQLiteConversationStore(tmp_path / "c.db"), ConversationStore)


# Only the check that fails it every time: with each statement its own transaction, a reader
# meets a save between its delete and its insert (the naive store waits 5 ms there, so this does
# not hang on the scheduler: a loaded machine once let every load fall outside the gap).
@pytest.mark.parametrize("check", [sc.check_concurrent_saves_one_id], ids=sc.check_id)
def test_the_suite_fails_a_sqlite_store_without_transactions(check, tmp_path):
    broken = sc.StoreHarness(factory="naive_stores:sqlite_autocommit", raw=sc.file_store_bytes)
    with pytest.raises((AssertionError, StoreError)):
        check(broken, tmp_path)


def test_database_0600_and_new_folder_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        store = SQLiteConversationStore(tmp_path / "new" / "deeper" / "c.db")
        store.save("s", _conversation(2))
    finally:
        os.umask(old)
    folder = tmp_path / "new" / "deeper"
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["c.db", "c.db-shm", "c.db-wal"]
    for name in files:
        assert (folder / name).stat().st_mode & 0o777 == 0o600, name
    store.close()


def test_reading_a_store_never_written_creates_nothing(tmp_path):
    store = SQLiteConversationStore(tmp_path / "c.db")
    assert store.load("s") is None and store.session_ids() == [] and store.delete("s") is False
    assert list(tmp_path.iterdir()) == []


def test_wal_mode_and_synchronous_by_durable(tmp_path):
    for durable, level in ((True, 2), (False, 1)):  # FULL, NORMAL
        store = SQLiteConversationStore(tmp_path / f"{durable}.db", durable=durable)
        store.save("s", _conversation(1))
        db = store._handle().connection
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == level
        store.close()


def test_one_row_per_message_and_an_append_writes_only_its_rows(tmp_path):
    path = tmp_path / "c.db"
    store = SQLiteConversationStore(path)
    revision = store.save("s", _conversation(4), {"model": "m"})
    store.append("s", [_conversation(6)[5]], at=3, revision=revision)
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT position, body FROM agenter_messages WHERE session_id = 's' ORDER BY position")
        assert [p for p, _ in rows] == [0, 1, 2, 3]
        head = db.execute("SELECT revision, count, metadata FROM agenter_conversations").fetchone()
    assert head == (2, 4, b'{"model":"m"}')
    store.close()


def test_a_file_that_is_not_a_database_is_a_one_line_error_naming_the_store(tmp_path):
    path = tmp_path / "c.db"
    path.write_bytes(b"this is a text file, not a database\n" * 200)
    store = SQLiteConversationStore(path)
    for call in (lambda: store.load("s"), lambda: store.save("s", _conversation(1)), store.session_ids):
        with pytest.raises(StoreError) as caught:
            call()
        assert repr(store) in str(caught.value) and "\n" not in str(caught.value)
        assert "not a database" in str(caught.value)
    assert b"this is a text file" in path.read_bytes()[:40]


def test_a_database_of_another_format_version_is_refused(tmp_path):
    path = tmp_path / "c.db"
    store = SQLiteConversationStore(path)
    store.save("s", _conversation(1))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE agenter_store SET version = 99")
    again = SQLiteConversationStore(path)
    with pytest.raises(StoreError, match="version 99"):
        again.load("s")
    with pytest.raises(StoreError, match="version 99"):
        again.save("t", _conversation(1))


def test_shares_a_database_with_other_tables(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, note TEXT)")
        db.execute("INSERT INTO conversations (note) VALUES ('the application owns this')")
    store = SQLiteConversationStore(path)
    store.save("s", _conversation(2))
    assert store.load("s").messages == _conversation(2)
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT note FROM conversations").fetchall() == [("the application owns this",)]


def test_close_then_use_again_and_threads_have_their_own_connections(tmp_path):
    import threading

    store = SQLiteConversationStore(tmp_path / "c.db")
    store.save("s", _conversation(1))
    seen = []

    def work():
        store.append("s", [_conversation(2)[1]], at=1)
        seen.append(id(store._handle().connection))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen and seen[0] != id(store._handle().connection)
    store.close()
    assert store.load("s").messages == _conversation(2)
    store.close()


def test_a_writer_waits_for_another_then_gives_a_store_error_after_its_timeout(tmp_path):
    path = tmp_path / "c.db"
    store = SQLiteConversationStore(path, timeout=0.2)
    store.save("s", _conversation(1))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        assert store.load("s").messages == _conversation(1), "a reader does not wait for a writer (WAL)"
        with pytest.raises(StoreError, match="locked") as caught:
            store.save("s", _conversation(2))
        assert repr(store) in str(caught.value)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert store.save("s", _conversation(2)) == 2
    store.close()


def _locked_for_another_process(path) -> bool:
    probe = ("import sqlite3, sys\n"
             "db = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
             "try:\n    db.execute('BEGIN IMMEDIATE')\nexcept sqlite3.OperationalError as e:\n"
             "    print('locked' if 'locked' in str(e) else e)\nelse:\n    print('free')\n")
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "locked"


def test_creating_the_file_in_one_thread_keeps_the_locks_another_thread_holds(tmp_path):
    """Two threads of one process both found no database; one made it and holds the write lock
    when the other creates it too. Closing a descriptor of the database would drop the lock (POSIX
    locks are per process), and another process could write beside the holder: the store once
    answered three threads and three processes with "database disk image is malformed"."""
    store = SQLiteConversationStore(tmp_path / "c.db")
    store.save("s", _conversation(2))
    with store._write("write"):  # this thread's connection holds the write lock
        assert _locked_for_another_process(store.path)
        worker = threading.Thread(target=store._create_file)  # the other thread's late creation
        worker.start()
        worker.join()
        assert _locked_for_another_process(store.path), "creating the file dropped the write lock"
    assert not _locked_for_another_process(store.path)
    assert store.load("s").messages == _conversation(2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db", "c.db-shm", "c.db-wal"]
    store.close()
