"""Planner runs that resume (docs/planning.md, "Resuming a run"): a plan run in a child process
is killed with SIGKILL mid-task, or while a finished task waits to be merged; a new process
resumes it from its state folder, runs only what had not finished, merges nothing twice, and
ends with the report a clean run gives."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agenter import ConfigurationError
from agenter._types import CodingStatus
from agenter.planner import PlanAndExecute, PlanResult

from .conftest import git, writing_executor

CHILD = Path(__file__).with_name("resume_child.py")
ROOT = Path(__file__).resolve().parents[2]


def child(cwd: Path, state: Path, parallel: int, kill: str, resume: bool = False) -> subprocess.CompletedProcess:
    args = [sys.executable, str(CHILD), str(cwd), str(state), str(parallel), kill, *(["resume"] if resume else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def runs(state: Path) -> list[str]:
    return (state.parent / "runs.log").read_text().split()


def report_tree(result: PlanResult) -> list[tuple[str, str, list[str], str | None]]:
    return [(r.id, r.status.value, r.files, r.merge) for r in result.walk()]


def finish(cwd: Path, state: Path, parallel: int) -> PlanResult:
    done = child(cwd, state, parallel, "none", resume=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return PlanResult.model_validate_json(done.stdout.strip().splitlines()[-1])


def test_a_run_killed_mid_task_resumes_with_only_the_unfinished_tasks(tmp_path: Path):
    cwd, state = tmp_path / "work", tmp_path / "state"
    cwd.mkdir()
    killed = child(cwd, state, 1, "task:b")
    assert killed.returncode == -9
    assert runs(state) == ["a", "b"]
    recorded = json.loads((state / "state.json").read_text())
    assert recorded["status"] == "running" and recorded["tasks"] == {"a": "merged", "b": "running", "c": "pending"}
    assert stat.S_IMODE((state / "state.json").stat().st_mode) == 0o600

    result = finish(cwd, state, 1)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert runs(state) == ["a", "b", "b", "c"]  # a is not run again
    assert {p: (cwd / p).read_text() for p in ("a.txt", "b.txt", "c.txt")} == {
        "a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"}
    # The report a clean run gives, and the usage of every run counted once (four runs).
    clean_cwd, clean_state = tmp_path / "clean", tmp_path / "clean-state" / "s"
    clean_cwd.mkdir()
    clean_state.parent.mkdir()
    clean = finish_clean(clean_cwd, clean_state)
    assert report_tree(result) == report_tree(clean)
    assert result.phases["execution"].runs == 3 and result.total_tokens == clean.total_tokens
    assert [o.passed for o in result.integration] == [True]

    # A finished run resumed again runs nothing and returns the same result.
    again = finish(cwd, state, 1)
    assert runs(state) == ["a", "b", "b", "c"] and report_tree(again) == report_tree(result)


def finish_clean(cwd: Path, state: Path) -> PlanResult:
    done = child(cwd, state, 1, "none")
    assert done.returncode == 0, done.stderr[-3000:]
    return PlanResult.model_validate_json(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("in_git", [True, False], ids=["repository", "plain-folder"])
def test_a_finished_task_waiting_to_merge_is_merged_from_its_commit_not_run_again(tmp_path: Path, in_git: bool):
    cwd, state = tmp_path / "work", tmp_path / "state"
    cwd.mkdir()
    if in_git:
        git(cwd, "init", "-q", "-b", "main")
        (cwd / "README.md").write_text("project\n")
        git(cwd, "add", "-A")
        git(cwd, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    killed = child(cwd, state, 2, "after-finish:a")
    assert killed.returncode == -9
    recorded = json.loads((state / "state.json").read_text())
    assert recorded["tasks"]["b"] == "finished" and recorded["commits"]["b"]
    assert not (cwd / "b.txt").exists()  # nothing was copied back yet

    result = finish(cwd, state, 2)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert sorted(runs(state)) == ["a", "a", "b", "c"]  # b ran once: merged from its commit
    assert [r.merge for r in result.tasks] == ["merged", "merged", "merged"]
    assert (cwd / "b.txt").read_text() == "beta\n" and (cwd / "c.txt").read_text() == "gamma\n"
    if in_git:
        assert git(cwd, "worktree", "list").count("\n") == 1  # the killed run's worktrees are gone
        assert git(cwd, "status", "--porcelain").split() == ["??", "a.txt", "??", "b.txt", "??", "c.txt"]
    assert not (state / "store").exists()  # the private repository goes when the run ends


async def test_bad_resume_input_is_a_one_line_configuration_error(tmp_path: Path):
    runner = PlanAndExecute(executor=writing_executor(), decomposition="none")
    with pytest.raises(ConfigurationError, match="no plan run was recorded"):
        await runner.execute(resume=tmp_path)
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="is not a plan state"):
        await runner.execute(resume=tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(ConfigurationError, match="another version"):
        await runner.execute(resume=tmp_path)


async def test_the_recorded_prompt_and_cwd_must_match(tmp_path: Path):
    cwd, state = tmp_path / "work", tmp_path / "state"
    cwd.mkdir()
    runner = PlanAndExecute(executor=writing_executor(), decomposition="none")
    result = await runner.execute("write x.txt containing x", cwd, state_dir=state)
    assert result.ok, result.summary()
    with pytest.raises(ConfigurationError, match="prompt differs"):
        await runner.execute("another task", resume=state)
    with pytest.raises(ConfigurationError, match="worked in"):
        await runner.execute(cwd=tmp_path, resume=state)
    assert (await runner.execute(resume=state)).ok
