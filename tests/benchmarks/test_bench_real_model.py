"""benchmarks/bench_real_model.py, kept working without a real model: its task set (each task
fails as given and passes with its solution), and a whole run of the script against the scripted
model server, through its recording proxy, to its report, journal and JSON rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter.testing import ModelRequest, ScriptedModelServer, reply, text

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_real_model.py"
TASKS = REPO / "benchmarks" / "real_model_tasks"
AIDER = REPO / ".venv-aider" / "bin" / "aider"


def run_script(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The script as a program in its own process group, ended (by pid) also on a timeout."""
    process = subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, out, "")


@pytest.mark.slow
def test_every_task_fails_as_given_and_passes_with_its_solution():
    result = run_script("--check-tasks")
    assert result.returncode == 0, result.stdout
    names = sorted(p.name for p in TASKS.iterdir() if (p / "README.md").is_file())
    assert len(names) >= 12
    for name in names:
        assert f"{name} " in result.stdout and "stub fails, solution passes" in result.stdout


def _solution(task: str) -> tuple[str, str]:
    (path,) = (TASKS / task / "solution").iterdir()
    return path.name, path.read_text()


def _answer(task: str):
    """The scripted model: the task's solution in the form each system asks for (patch mode's
    JSON proposal when the request carries a response format; else a path line and a block)."""
    name, content = _solution(task)

    def handler(request: ModelRequest) -> Any:
        if "response_format" in request.body:
            return reply(text(json.dumps({"summary": "fix", "files": [
                {"path": name, "operation": "modify", "new_path": None, "diff": None, "search_replace": None,
                 "content": content}]})))
        return reply(text(f"{name}\n```\n{content}```\n"))
    return handler


@pytest.mark.slow
def test_a_run_on_the_scripted_model_solves_the_task_and_writes_its_journal_and_rows(tmp_path):
    systems = "autonomous,patch" + (",aider-cli,aider" if AIDER.exists() else "")
    with ScriptedModelServer(handler=_answer("count_vowels")) as server:
        result = run_script("--base-url", server.base_url + "/v1", "--model", "local", "--systems", systems,
                            "--tool-calls", "text", "--tasks", "count_vowels", "--timeout", "120",
                            "--aider", str(AIDER), "--journal", str(tmp_path / "runs.jsonl"),
                            "--record", str(tmp_path / "rec"), "--out", str(tmp_path / "runs.json"))
    assert result.returncode == 0, result.stdout
    rows = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert {row["system"] for row in rows} == set(systems.split(","))
    for row in rows:
        assert row["solved"] and row["first_attempt"], (row, result.stdout)
        assert row["requests"] >= 1, row
        if row["system"] in ("autonomous", "patch"):  # (Aider asks for no usage in its stream)
            assert row["prompt_tokens"] > 0, row
        if row["system"] != "aider":
            assert row["truthful"] is True and row["status"] == "completed", row
    # The journal holds each run; the report reads it back without a model.
    journal = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert sorted(row["system"] for row in journal) == sorted(systems.split(","))
    report = run_script("--report", "--journal", str(tmp_path / "runs.jsonl"), "--systems", systems,
                        "--tasks", "count_vowels")
    assert report.returncode == 0 and "1/1" in report.stdout, report.stdout
    assert any((tmp_path / "rec").rglob("001-request.json"))
