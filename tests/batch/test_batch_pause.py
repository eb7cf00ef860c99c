"""Batches whose tasks pause for approval (on_ask="pause" and an ask rule): a paused task's row
says so, keeps its workspace and its handle; a later pass (another process: `agenter batch
--approve` in a subprocess, or a fresh run_batch) continues it there from the shared SQLite
store, and its new row is the task's row. The real anthropic-sdk backend against the scripted
model server; the Ray engine in the last test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter import Budget
from agenter._errors import ConfigurationError
from agenter.batch import TaskDefaults, read_rows, run_batch
from agenter.testing import ModelRequest

from .scripted import PROMPT, task_model
from .test_batch_scripted import CLI

KEY = "sk-batch-pause-test-0123456789"
RULE = "ask edit:ci/**"


def _tasks(repo: Path, count: int, pausing: set[int]) -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "repository": str(repo),
             "prompt": PROMPT.format(path=f"ci/conf{i}.py" if i in pausing else "calc.py", value=i)}
            for i in range(count)]


def _options(base_url: str, store: str) -> dict[str, Any]:
    return {"base_url": base_url, "api_key": KEY, "on_ask": "pause", "conversation_store": store,
            "permissions": {"rules": [RULE], "mode": "accept_edits"}}


def _turns(server: Any) -> list[ModelRequest]:
    return [r.model_request for r in server.model_requests if r.model_request is not None]


def _first_requests(server: Any, value: int) -> int:
    """The requests that began task `value` (no tool result in them yet)."""
    marker = f"to {value}."
    return sum(1 for r in _turns(server) if marker in str(r.messages[0]) and "tool_result" not in str(r.messages[1:]))


def _approve_cli(tasks: Path, out: Path, root: Path, base_url: str, store: str,
                 *approve: str) -> subprocess.CompletedProcess[str]:
    options = _options(base_url, store)
    argv = [sys.executable, "-c", CLI, "batch", str(tasks), "--out", str(out), "--no-progress", "--json",
            "--workspace-root", str(root), *approve]
    for key, value in options.items():
        argv += ["--option", f"{key}={json.dumps(value) if isinstance(value, dict) else value}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


@pytest.mark.timeout(300)
async def test_paused_tasks_are_approved_by_another_process_and_by_a_fresh_run_batch(
        git_repo: Path, tmp_path: Path, scripted_model_server):
    server = scripted_model_server(handler=task_model())
    store = f"sqlite:///{tmp_path / 'shared' / 'runs.db'}"
    tasks_file, out, root = tmp_path / "tasks.jsonl", tmp_path / "results.jsonl", tmp_path / "ws"
    tasks = _tasks(git_repo, 5, pausing={1, 3, 4})
    tasks_file.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    defaults = TaskDefaults(options=_options(server.base_url, store), budget=Budget(max_time_seconds=60))

    summary = await run_batch(tasks_file, out, defaults=defaults, concurrency=3, workspace_root=root)
    rows, _ = read_rows(out)
    assert {i: r.status for i, r in rows.items()} == {"t0": "completed", "t1": "paused", "t2": "completed",
                                                      "t3": "paused", "t4": "paused"}
    assert summary.paused == 3 and summary.passed == 2 and summary.pass_rate == 1.0 and not summary.all_passed
    for name in ("t1", "t3", "t4"):
        row = rows[name]
        assert row.resume_handle and not row.passed and row.files == []
        assert [(c["tool"], c["paths"], c["rule"]) for c in row.pending] == [
            ("write_file", [f"ci/conf{name[1]}.py"], RULE)]
        assert row.workspace and Path(row.workspace).is_dir()  # kept without keep_workspaces
        assert not (Path(row.workspace) / "ci").exists()
    assert sorted(p.name for p in root.iterdir()) and len(list(next(root.iterdir()).iterdir())) == 3
    before = len(server.model_requests)
    assert before == 2 * 2 + 3
    first_handles = {i: rows[i].resume_handle for i in ("t1", "t3", "t4")}
    first_workspaces = {i: str(rows[i].workspace) for i in ("t1", "t3", "t4")}

    # Another process: `agenter batch --approve` continues t1 (allow) and t3 (deny).
    done = _approve_cli(tasks_file, out, root, server.base_url, store, "--approve", "t1", "--approve", "t3=deny")
    assert done.returncode == 3, done.stderr  # t3 and t4 wait, every other task passed
    assert json.loads(done.stdout)["ran"] == 2 and "2 task(s) wait for approval" in done.stderr
    rows, _ = read_rows(out)
    t1, t3 = rows["t1"], rows["t3"]
    assert t1.status == "completed" and t1.files == ["ci/conf1.py"] and "+VALUE = 1" in t1.diff
    assert t1.resume_handle is None and t1.pending == [] and t1.worker["pid"] != rows["t0"].worker["pid"]
    # Denied: the model read the refusal, said it was done, and in its next iteration (no file
    # changed) tried the write again, which waits again: a new handle, the same workspace.
    assert t3.status == "paused" and t3.iterations == 2 and t3.permission_denials[0]["target"] == "ci/conf3.py"
    assert t3.resume_handle not in (None, first_handles["t3"]) and t3.workspace == first_workspaces["t3"]
    # Not run again from the start: one first request per task, and the continued request
    # carries the earlier conversation with the write's real result.
    assert all(_first_requests(server, value) == 1 for value in range(5))
    continued = next(r for r in _turns(server)[before:] if "to 1." in str(r.messages[0]))
    assert "ci/conf1.py" in str(continued.messages[1]) and "ci/conf1.py" in str(continued.messages[2])
    assert not Path(first_workspaces["t1"]).exists() and Path(first_workspaces["t3"]).is_dir()

    # Errors, one line each, before anything runs.
    bad = _approve_cli(tasks_file, out, root, server.base_url, store, "--approve", "t0")
    assert bad.returncode == 2 and "task 't0' is not paused (its row's status: completed)" in bad.stderr
    bad = _approve_cli(tasks_file, out, root, server.base_url, store, "--approve", "nope")
    assert bad.returncode == 2 and "'nope' is not a task of this batch" in bad.stderr
    with pytest.raises(ConfigurationError, match="call 'x' is not pending in task 't4'"):
        await run_batch(tasks_file, out, defaults=defaults, approve={"t4": {"x": "allow"}})

    # A fresh run_batch approves the rest.
    summary = await run_batch(tasks_file, out, defaults=defaults, approve="allow", workspace_root=root)
    rows, _ = read_rows(out)
    assert summary.ran == 2 and summary.all_passed and summary.paused == 0
    assert rows["t4"].files == ["ci/conf4.py"] and "+VALUE = 4" in rows["t4"].diff
    assert rows["t3"].files == ["ci/conf3.py"] and rows["t3"].iterations == 2
    assert all(_first_requests(server, value) == 1 for value in range(5))
    lines = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(lines) == sorted(["t0", "t1", "t2", "t3", "t4", "t1", "t3", "t3", "t4"])  # the last row wins
    assert sorted(rows) == ["t0", "t1", "t2", "t3", "t4"]
    assert not root.exists() or not any(root.iterdir())  # every kept workspace gone with its approval
    assert KEY not in out.read_text()


def test_read_rows_keeps_the_last_row_of_an_id(tmp_path: Path):
    out = tmp_path / "results.jsonl"
    out.write_text(json.dumps({"id": "a", "status": "paused", "resume_handle": "pause-1"}) + "\n"
                   + json.dumps({"id": "b", "status": "failed"}) + "\n"
                   + json.dumps({"id": "a", "status": "completed"}) + "\n")
    rows, bad = read_rows(out)
    assert bad == 0 and {i: r.status for i, r in rows.items()} == {"a": "completed", "b": "failed"}
    assert rows["a"].resume_handle is None


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_ray_batch_pauses_and_a_fresh_run_batch_approves_on_ray(git_repo: Path, tmp_path: Path,
                                                                       scripted_model_server):
    ray = pytest.importorskip("ray")
    from agenter.batch import RayOptions

    server = scripted_model_server(handler=task_model())
    store = f"sqlite:///{tmp_path / 'shared' / 'runs.db'}"
    out, root = tmp_path / "results.jsonl", tmp_path / "ws"
    tasks = _tasks(git_repo, 3, pausing={0, 2})
    defaults = TaskDefaults(options=_options(server.base_url, store), budget=Budget(max_time_seconds=60))
    options = RayOptions(num_cpus_per_task=1, max_retries=0)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        first = await run_batch(tasks, out, defaults=defaults, concurrency=2, workspace_root=root, engine="ray",
                                ray=options)
        paused = read_rows(out)[0]
        assert first.paused == 2 and paused["t1"].status == "completed"
        assert all(paused[i].worker.get("node") and Path(paused[i].workspace or "").is_dir() for i in ("t0", "t2"))
        second = await run_batch(tasks, out, defaults=defaults, concurrency=2, workspace_root=root, engine="ray",
                                 ray=options, approve={"t0": "allow", "t2": "allow"})
    finally:
        ray.shutdown()
    rows, _ = read_rows(out)
    assert second.ran == 2 and second.all_passed, {i: (r.status, r.error) for i, r in rows.items()}
    assert rows["t0"].files == ["ci/conf0.py"] and "+VALUE = 2" in rows["t2"].diff
    assert rows["t0"].worker["node"] == paused["t0"].worker["node"]  # where its workspace is
    assert all(_first_requests(server, value) == 1 for value in range(3))
    assert len(server.model_requests) == 6
    assert not root.exists() or not any(root.iterdir())
