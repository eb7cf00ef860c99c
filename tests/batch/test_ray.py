"""The Ray engine: a local cluster started by the test, a batch against the scripted model
server, one worker process killed mid-task, and still every row."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from agenter import Budget
from agenter.batch import RayOptions, TaskDefaults, read_rows, run_batch

from .scripted import PROMPT, task_model

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _check(value: int) -> str:
    return f'test "$(cat calc.py)" = "VALUE = {value}"'


def _victim_check(value: int, marks: Path) -> str:
    """The first time: note the worker's pid ($PPID: the validator's shell is the worker's child)
    and our own process group, then wait to be killed. After the retry: the real check."""
    return (f"if [ -e {marks}/killed ]; then {_check(value)}; "
            f"else echo \"$PPID $$\" > {marks}/pid.tmp && mv {marks}/pid.tmp {marks}/pid && sleep 60; fi")


async def test_ray_batch_survives_a_killed_worker(git_repo: Path, tmp_path: Path, scripted_model_server):
    server = scripted_model_server(handler=task_model())
    marks = tmp_path / "marks"
    marks.mkdir()
    tasks = [{"id": f"t{i}", "repository": str(git_repo), "prompt": PROMPT.format(path="calc.py", value=i),
              "test_command": _victim_check(i, marks) if i == 0 else _check(i)} for i in range(3)]
    out, root = tmp_path / "results.jsonl", tmp_path / "ws"
    defaults = TaskDefaults(backend="anthropic-sdk", options={"base_url": server.base_url, "api_key": "sk-ray-test"},
                            budget=Budget(max_time_seconds=90))
    victim_group = None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        batch = asyncio.create_task(run_batch(
            tasks, out, defaults=defaults, concurrency=2, workspace_root=root, engine="ray",
            ray=RayOptions(num_cpus_per_task=1, max_retries=2)))
        deadline = time.monotonic() + 90
        while not (marks / "pid").exists():
            assert time.monotonic() < deadline, "the victim task never reached its validator"
            assert not batch.done(), batch
            await asyncio.sleep(0.1)
        worker, victim_group = (int(part) for part in (marks / "pid").read_text().split())
        (marks / "killed").touch()
        os.kill(worker, signal.SIGKILL)  # the Ray worker process, mid-task
        summary = await asyncio.wait_for(batch, 90)
    finally:
        if victim_group is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim_group, signal.SIGKILL)  # the orphaned `sleep` of the killed attempt
        ray.shutdown()
    rows, _ = read_rows(out)
    assert sorted(rows) == ["t0", "t1", "t2"]
    assert {row.status for row in rows.values()} == {"completed"}, {r.id: (r.status, r.error) for r in rows.values()}
    assert rows["t0"].worker["pid"] != worker and "+VALUE = 0" in rows["t0"].diff
    assert all(row.worker.get("node") for row in rows.values())
    assert summary.all_passed and summary.ran == 3
    assert not root.exists() or not any(root.iterdir())  # the killed attempt's workspace too
