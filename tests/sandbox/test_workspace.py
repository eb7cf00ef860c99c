"""WorkspaceSnapshot: every change counts, ignored folders do not."""

from __future__ import annotations

import os
import time
import tracemalloc

import pytest

from agenter.sandbox.workspace import WorkspaceSnapshot, _digest


def test_written_deleted_and_ignored(tmp_path):
    (tmp_path / "keep.py").write_text("a")
    (tmp_path / "gone.py").write_text("b")
    (tmp_path / "sub").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "venvdir").mkdir()
    (tmp_path / "venvdir" / "pyvenv.cfg").write_text("")
    before = WorkspaceSnapshot.take(tmp_path)
    (tmp_path / "gone.py").unlink()
    (tmp_path / "sub" / "new.py").write_text("c")
    (tmp_path / ".git" / "HEAD").write_text("x")
    (tmp_path / "node_modules" / "x.js").write_text("x")
    (tmp_path / "venvdir" / "lib.py").write_text("x")
    changes = before.changes_since()
    assert changes.written == {"sub/new.py"}
    assert changes.deleted == {"gone.py"}


def test_same_size_same_timestamp_rewrite_is_detected(tmp_path):
    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    stat = target.stat()
    before = WorkspaceSnapshot.take(tmp_path)
    target.write_text("x = 2\n")  # same size
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same timestamp
    assert before.changes_since().written == {"f.py"}


def test_unchanged_tree_reports_nothing(tmp_path):
    for i in range(50):
        (tmp_path / f"m{i}.py").write_text("x")
    before = WorkspaceSnapshot.take(tmp_path)
    assert not before.changes_since()


@pytest.mark.timeout(10, method="signal")  # a regression blocks in open(): fail, do not hang
def test_fifo_is_listed_but_never_opened(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    now = time.time_ns()
    os.utime(fifo, ns=(now, now + 10**10))  # modified "just now": the racy-file hashing applies
    (tmp_path / "f.py").write_text("x = 1\n")
    before = WorkspaceSnapshot.take(tmp_path)
    assert "pipe" in before.entries and "pipe" not in before.racy_digests
    assert before.racy_digests["f.py"] is not None
    (tmp_path / "f.py").write_text("x = 2\n")
    assert before.changes_since().written == {"f.py"}


@pytest.mark.timeout(10, method="signal")
def test_regular_file_swapped_for_a_fifo_is_not_opened(tmp_path):
    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    assert _digest(target) is not None
    target.unlink()
    os.mkfifo(target)
    assert _digest(target) is None  # returns at once: open_regular refuses, never blocks


def test_racy_digest_reads_in_bounded_chunks(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    tracemalloc.start()
    try:
        WorkspaceSnapshot.take(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak  # the whole 8 MB hash window was one read before
