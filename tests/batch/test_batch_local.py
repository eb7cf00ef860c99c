"""The local engine with FunctionBackend turns: rows, concurrency, resume, crashes, limits,
interruption. (The real anthropic-sdk backend against the scripted server: test_batch_scripted.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from agenter import BackendError, CodingResult, ConfigurationError
from agenter.batch import BatchLimits, TaskDefaults, read_rows, run_batch
from agenter.testing import FunctionBackend, TurnContext


def _tasks(repo: Path, count: int, **extra) -> list[dict]:
    return [{"id": f"t{i}", "repository": str(repo), "prompt": f"set VALUE to {i}", **extra} for i in range(count)]


def _writer(cost: float = 0.01, delay: float = 0.0):
    async def turn(ctx: TurnContext):
        if delay:
            await asyncio.sleep(delay)
        value = ctx.prompt.split("set VALUE to ")[1].split()[0]
        ctx.write("calc.py", f"VALUE = {value}\n")
        ctx.use(input_tokens=100, output_tokens=20, cost_usd=cost)
        return f"VALUE is {value}"
    return turn


def _defaults(turn, **kwargs) -> TaskDefaults:
    return TaskDefaults(backend=FunctionBackend, options={"turn": turn}, **kwargs)


async def test_every_task_gets_its_row_within_the_concurrency(git_repo: Path, tmp_path: Path):
    running = peak = 0
    full = asyncio.Event()

    async def turn(ctx: TurnContext):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 3:
            full.set()
        # Wait for the other runs instead of sleeping a fixed time: on a loaded machine the
        # workspaces take long to set up, and a fixed sleep would measure the machine.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(full.wait(), 10)
        running -= 1
        return await _writer()(ctx)

    out, root = tmp_path / "results.jsonl", tmp_path / "workspaces"
    summary = await run_batch(_tasks(git_repo, 7), out, defaults=_defaults(turn), concurrency=3, workspace_root=root)
    assert peak == 3
    rows, bad = read_rows(out)
    assert sorted(rows) == [f"t{i}" for i in range(7)] and bad == 0
    row = rows["t4"]
    assert row.status == "completed" and row.files == ["calc.py"] and row.validation == {"passed": True, "errors": []}
    assert "-def add(a, b):" in row.diff and "+VALUE = 4" in row.diff
    assert row.usage["input_tokens"] == 100 and row.usage["total_tokens"] == 120 and row.cost_usd == 0.01
    assert row.commit and row.backend == "function" and row.worker["pid"] > 0
    assert row.duration_seconds >= row.agent_seconds > 0
    assert summary.all_passed and summary.pass_rate == 1.0 and summary.ran == 7 and summary.cost_usd == 0.07
    assert not any(root.iterdir())  # workspaces removed
    assert "VALUE" not in (git_repo / "calc.py").read_text()


async def test_resume_skips_finished_ids_and_retry_reruns_errors(git_repo: Path, tmp_path: Path):
    calls: list[str] = []

    def flaky(ctx: TurnContext):
        calls.append(ctx.prompt)
        if "to 1" in ctx.prompt:
            raise BackendError("the model API is overloaded", kind="rate_limit")
        return _writer()(ctx)

    out = tmp_path / "results.jsonl"
    first = await run_batch(_tasks(git_repo, 3), out, defaults=_defaults(flaky))
    assert first.statuses == {"completed": 2, "error": 1} and not first.all_passed
    rows, _ = read_rows(out)
    expected_kind = "rate_limit" if "error_kind" in CodingResult.model_fields else "unknown"
    assert rows["t1"].error_kind == expected_kind and "overloaded" in (rows["t1"].error or "")

    calls.clear()
    again = await run_batch(_tasks(git_repo, 3), out, defaults=_defaults(flaky))
    assert calls == [] and again.skipped == 3 and again.ran == 0 and again.with_row == 3

    retried = await run_batch(_tasks(git_repo, 3), out, defaults=_defaults(_writer()), retry={"error"})
    assert retried.ran == 1 and retried.all_passed
    assert len(out.read_text().splitlines()) == 4  # appended; the last row of t1 wins


async def test_a_crashed_task_is_a_row_and_the_batch_goes_on(git_repo: Path, tmp_path: Path):
    def turn(ctx: TurnContext):
        if "to 2" in ctx.prompt:
            raise RuntimeError("bug in the agent")
        return _writer()(ctx)

    tasks = _tasks(git_repo, 3) + [
        {"id": "missing", "repository": str(tmp_path / "nowhere"), "prompt": "p"},
        {"id": "bad-option", "repository": str(git_repo), "prompt": "set VALUE to 9", "options": {"nope": 1}},
        {"id": "secret-url", "repository": "https://me:tok3n-very-secret@127.0.0.1:9/r.git", "prompt": "p"},
    ]
    out = tmp_path / "results.jsonl"
    summary = await run_batch(tasks, out, defaults=_defaults(turn), concurrency=2, git_cache=tmp_path / "cache")
    rows, _ = read_rows(out)
    assert len(rows) == 6 and summary.complete
    assert rows["t0"].status == "completed" and rows["t1"].status == "completed"
    assert rows["t2"].status == "error" and "RuntimeError: bug in the agent" in (rows["t2"].error or "")
    assert rows["missing"].error_kind == "workspace" and "not a directory" in (rows["missing"].error or "")
    assert rows["bad-option"].error_kind == "config" and "nope" in (rows["bad-option"].error or "")
    assert rows["secret-url"].error_kind == "workspace"
    assert "tok3n" not in out.read_text()


async def test_interrupted_batch_writes_no_row_for_stopped_tasks_and_resumes(git_repo: Path, tmp_path: Path):
    async def turn(ctx: TurnContext):
        if "to 0" not in ctx.prompt:
            await asyncio.sleep(3600)  # still running when the batch is stopped
        return await _writer()(ctx)

    out, root = tmp_path / "results.jsonl", tmp_path / "ws"
    batch = asyncio.create_task(run_batch(_tasks(git_repo, 3), out, defaults=_defaults(turn), concurrency=3,
                                          workspace_root=root))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if out.exists() and out.read_text():
            break
    await asyncio.sleep(0.2)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    rows, _ = read_rows(out)
    assert list(rows) == ["t0"]
    assert not any(root.iterdir())  # the stopped tasks' workspaces are gone too
    resumed = await run_batch(_tasks(git_repo, 3), out, defaults=_defaults(_writer()))
    assert resumed.ran == 2 and resumed.skipped == 1 and resumed.all_passed


async def test_batch_cost_budget_caps_the_last_task_and_stops(git_repo: Path, tmp_path: Path):
    out = tmp_path / "results.jsonl"
    summary = await run_batch(_tasks(git_repo, 5), out, defaults=_defaults(_writer(cost=0.4)), concurrency=1,
                              limits=BatchLimits(max_cost_usd=1.0))
    rows, _ = read_rows(out)
    assert sorted(rows) == ["t0", "t1", "t2"]
    assert rows["t2"].status == "budget_exceeded" and rows["t2"].exceeded_limit == "cost"
    assert rows["t2"].capped_by_batch == ["cost"] and rows["t0"].capped_by_batch == ["cost"]
    assert summary.not_run == 2 and "cost budget" in (summary.stopped or "")


async def test_batch_time_budget(git_repo: Path, tmp_path: Path):
    out = tmp_path / "results.jsonl"
    summary = await run_batch(_tasks(git_repo, 4), out, defaults=_defaults(_writer(delay=0.6)), concurrency=2,
                              limits=BatchLimits(max_time_seconds=0.4))
    rows, _ = read_rows(out)
    assert sorted(rows) == ["t0", "t1"]
    assert {row.status for row in rows.values()} == {"budget_exceeded"}
    assert {row.exceeded_limit for row in rows.values()} == {"time"}
    assert "time budget" in (summary.stopped or "") and summary.not_run == 2


async def test_kept_workspaces_and_on_row(git_repo: Path, tmp_path: Path):
    seen: list[str] = []

    def on_row(row):
        seen.append(row.id)
        raise ValueError("a broken callback does not lose the batch")

    out = tmp_path / "results.jsonl"
    await run_batch(_tasks(git_repo, 2), out, defaults=_defaults(_writer()), keep_workspaces=True,
                    workspace_root=tmp_path / "ws", on_row=on_row)
    rows, _ = read_rows(out)
    assert sorted(seen) == ["t0", "t1"] and len(rows) == 2
    kept = Path(rows["t1"].workspace or "")
    assert (kept / "calc.py").read_text() == "VALUE = 1\n"


async def test_bad_defaults_fail_before_any_task_runs(git_repo: Path, tmp_path: Path):
    out = tmp_path / "results.jsonl"
    with pytest.raises(ConfigurationError, match="the batch's defaults: unknown option 'colour'"):
        await run_batch(_tasks(git_repo, 2), out, defaults=TaskDefaults(backend=FunctionBackend,
                                                                         options={"turn": _writer(), "colour": 1}))
    assert not read_rows(out)[0]
    with pytest.raises(ConfigurationError, match="concurrency"):
        await run_batch(_tasks(git_repo, 1), out, concurrency=0)
    with pytest.raises(ConfigurationError, match="unknown status to retry: done"):
        await run_batch(_tasks(git_repo, 1), out, retry={"done"})


async def test_plain_folder_rows_carry_a_patch(plain_folder: Path, tmp_path: Path):
    out = tmp_path / "results.jsonl"
    await run_batch(_tasks(plain_folder, 1), out, defaults=_defaults(_writer()))
    row = json.loads(out.read_text())
    assert row["status"] == "completed" and row["commit"] is None
    assert "+VALUE = 0" in row["diff"] and "--- a/calc.py" in row["diff"]
