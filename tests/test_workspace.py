"""WorkspaceSnapshot: every change counts, ignored folders do not."""

from __future__ import annotations

import os

from agenter.sandbox.workspace import WorkspaceSnapshot


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
