"""`agenter batch` as a user runs it (a real `python -m agenter` process): a tasks file that is
not text, and usage errors, end in one line per problem and exit 2, and leave nothing behind."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENTER = [sys.executable, "-m", "agenter"]
TASK = {"id": "t1", "repository": ".", "prompt": "do it"}


def run_cli(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([*AGENTER, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env)


def _one_line_usage_error(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "pydantic" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agenter: "), proc.stderr
    for words in expected:
        assert words in lines[0], proc.stderr


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("tasks.jsonl.gz", gzip.compress(json.dumps(TASK).encode()), "it is gzip-compressed, not text"),
    ("tasks.jsonl", bytes(range(256)) * 4, "not UTF-8 text (byte 0x80 at offset 128)"),
    ("tasks.jsonl", b'{"id": "a"}\x00\x00\x00', "it holds NUL bytes"),
])
def test_a_tasks_file_that_is_not_text_is_one_line_and_exit_2(tmp_path: Path, name: str, content: bytes,
                                                              expected: str):
    (tmp_path / name).write_bytes(content)
    proc = run_cli("batch", name, "--out", "out/results.jsonl", "--no-progress", cwd=tmp_path)
    _one_line_usage_error(proc, f"cannot read the tasks file {name!r}", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no results file, no folder


def test_invalid_tasks_are_one_line_each(tmp_path: Path):
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "repository": ".", "prompt": "p", "colour": 1}\nnot json\n')
    proc = run_cli("batch", "tasks.jsonl", "--out", "r.jsonl", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["agenter: invalid tasks:", "line 1 (id 'a'): unknown task field 'colour'",
                                        "line 2: not JSON (Expecting value)"]


def test_usage_errors_create_no_results_file_nor_its_folder(tmp_path: Path):
    (tmp_path / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
    # An unknown backend (found when the defaults are checked, after the tasks file is read).
    proc = run_cli("batch", "tasks.jsonl", "--out", "new/dir/r.jsonl", "--backend", "no-such", "--no-progress",
                   cwd=tmp_path)
    _one_line_usage_error(proc, "no-such")
    assert not (tmp_path / "new").exists()
    # A results file that is a folder, or under a file.
    (tmp_path / "folder").mkdir()
    _one_line_usage_error(run_cli("batch", "tasks.jsonl", "--out", "folder", "--no-progress", cwd=tmp_path),
                          "'folder' is a directory")
    _one_line_usage_error(run_cli("batch", "tasks.jsonl", "--out", "tasks.jsonl/r.jsonl", "--no-progress",
                                  cwd=tmp_path), "is not a directory")
    # Predictions that could not be written after the batch: said before it starts.
    _one_line_usage_error(run_cli("batch", "tasks.jsonl", "--out", "r.jsonl", "--swebench", "tasks.jsonl/p.jsonl",
                                  "--no-progress", cwd=tmp_path), "cannot make the predictions file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "tasks.jsonl"]
    assert not any((tmp_path / "folder").iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_results_file_in_a_folder_that_cannot_be_made_is_a_usage_error(tmp_path: Path):
    (tmp_path / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
    proc = run_cli("batch", "tasks.jsonl", "--out", "/nonexistent/dir/r.jsonl", "--no-progress", cwd=tmp_path)
    _one_line_usage_error(proc, "cannot write the results file '/nonexistent/dir/r.jsonl': permission denied")
    assert not Path("/nonexistent").exists()


def test_the_ray_engine_without_ray_creates_nothing(tmp_path: Path):
    # Ray is hidden from the process (a `ray` that cannot be imported comes first on its path).
    hidden = tmp_path / "hide-ray"
    hidden.mkdir()
    (hidden / "ray.py").write_text("raise ImportError('ray is not installed')\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
    proc = run_cli("batch", "tasks.jsonl", "--out", "new/r.jsonl", "--engine", "ray", "--no-progress", cwd=work,
                   pythonpath=hidden)
    _one_line_usage_error(proc, "the Ray engine needs ray: pip install 'agenter-sdk[ray]'")
    assert sorted(p.name for p in work.iterdir()) == ["tasks.jsonl"]
