"""Batches with the real anthropic-sdk backend against the scripted model server, through the
Python API and through `agenter batch` (the subcommand's parser and run)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from agenter import Budget
from agenter.batch import TaskDefaults, read_rows, run_batch
from agenter.batch import cli as batch_cli

from .scripted import PROMPT, task_model

KEY = "sk-batch-test-secret-key-0123456789"


def _check(value: int) -> str:
    return f"{sys.executable} -c 'import calc; assert calc.VALUE == {value}, calc.VALUE'"


async def test_batch_with_the_real_backend(git_repo: Path, plain_folder: Path, tmp_path: Path,
                                           scripted_model_server):
    server = scripted_model_server(handler=task_model())
    tasks = [
        {"id": "git-1", "repository": str(git_repo), "prompt": PROMPT.format(path="calc.py", value=1),
         "test_command": _check(1)},
        {"id": "plain-2", "repository": str(plain_folder), "prompt": PROMPT.format(path="calc.py", value=2),
         "test_command": _check(2)},
        {"id": "wrong-3", "repository": str(git_repo), "prompt": PROMPT.format(path="calc.py", value=3),
         "test_command": _check(4), "budget": {"max_iterations": 2}, "metadata": {"kind": "hopeless"}},
    ]
    out = tmp_path / "results.jsonl"
    defaults = TaskDefaults(backend="anthropic-sdk", options={"base_url": server.base_url, "api_key": KEY},
                            budget=Budget(max_time_seconds=60))
    summary = await run_batch(tasks, out, defaults=defaults, concurrency=3)
    rows, _ = read_rows(out)
    assert rows["git-1"].status == "completed" and "+VALUE = 1" in rows["git-1"].diff
    assert rows["plain-2"].status == "completed" and "+VALUE = 2" in rows["plain-2"].diff
    wrong = rows["wrong-3"]
    assert wrong.status == "failed" and wrong.iterations == 2 and wrong.metadata == {"kind": "hopeless"}
    assert any("AssertionError" in error for error in wrong.validation["errors"])
    assert wrong.usage["total_tokens"] > 0 and wrong.model == "claude-sonnet-5-5"
    assert summary.passed == 2 and summary.statuses == {"completed": 2, "failed": 1}
    assert KEY not in out.read_text()
    assert "VALUE" not in (git_repo / "calc.py").read_text() and "VALUE" not in (plain_folder / "calc.py").read_text()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenter")
    batch_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_batch_resume_and_swebench_export(git_repo: Path, tmp_path: Path, scripted_model_server, capsys):
    server = scripted_model_server(handler=task_model())
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"repo__repo-{i}", "repository": str(git_repo),
                                         "prompt": PROMPT.format(path="calc.py", value=i)}) + "\n" for i in range(3)))
    out, preds = tmp_path / "results.jsonl", tmp_path / "preds.jsonl"
    argv = ["batch", str(tasks), "--out", str(out), "--concurrency", "2", "--option", f"base_url={server.base_url}",
            "--option", f"api_key={KEY}", "--max-time", "60", "--swebench", str(preds), "--swebench-model", "mine",
            "--json", "--no-progress"]
    assert batch_cli.run(_parser().parse_args(argv)) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ran"] == 3 and summary["pass_rate"] == 1.0
    predictions = [json.loads(line) for line in preds.read_text().splitlines()]
    assert sorted(p["instance_id"] for p in predictions) == ["repo__repo-0", "repo__repo-1", "repo__repo-2"]
    assert all(p["model_name_or_path"] == "mine" and "+VALUE =" in p["model_patch"] for p in predictions)
    requests = len(server.model_requests)

    # The same command again: every id has a row, nothing runs.
    assert batch_cli.run(_parser().parse_args(argv)) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == 3
    assert len(server.model_requests) == requests and len(read_rows(out)[0]) == 3


def test_cli_usage_errors(tmp_path: Path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "repository": ".", "prompt": "p", "colour": 1}\n')
    run = batch_cli.run
    assert run(_parser().parse_args(["batch", str(tasks), "--out", "o.jsonl", "--concurrency", "0"])) == 2
    assert "--concurrency must be >= 1" in capsys.readouterr().err
    assert run(_parser().parse_args(["batch", str(tasks), "--out", str(tmp_path / "o.jsonl"), "--no-progress"])) == 2
    assert "line 1 (id 'a'): unknown task field 'colour'" in capsys.readouterr().err
    assert run(_parser().parse_args(["batch", str(tasks), "--out", "o", "--address", "auto"])) == 2
    assert "need --engine ray" in capsys.readouterr().err


CLI = ("import argparse, sys\n"
       "from agenter.batch import cli\n"
       "parser = argparse.ArgumentParser(prog='agenter')\n"
       "cli.add_parser(parser.add_subparsers(dest='command'))\n"
       "sys.exit(cli.run(parser.parse_args(sys.argv[1:])))\n")


@pytest.mark.slow
def test_ctrl_c_stops_the_batch_and_the_next_run_resumes(git_repo: Path, tmp_path: Path, scripted_model_server):
    import signal
    import subprocess
    import threading
    import time

    fast, release = task_model(), threading.Event()

    def handler(request):
        if "to 1." not in str(request.messages[0]):
            release.wait(60)  # the other tasks are still waiting for the model when Ctrl-C comes
        return fast(request)

    server = scripted_model_server(handler=handler)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "repository": str(git_repo),
                                         "prompt": PROMPT.format(path="calc.py", value=i)}) + "\n" for i in range(3)))
    out = tmp_path / "results.jsonl"
    argv = [sys.executable, "-c", CLI, "batch", str(tasks), "--out", str(out), "--concurrency", "3",
            "--option", f"base_url={server.base_url}", "--option", f"api_key={KEY}", "--option", "max_retries=0",
            "--workspace-root", str(tmp_path / "ws")]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
        release.set()
    assert process.returncode == 130, err
    assert "interrupted; run the same command again to resume" in err
    assert "1/3 tasks have a row" in err  # the summary, printed on the way out
    assert list(read_rows(out)[0]) == ["t1"]
    assert not any((tmp_path / "ws").iterdir())

    again = subprocess.run(argv, stderr=subprocess.PIPE, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "1 of 3 tasks already have a row: skipped" in again.stderr
    assert sorted(read_rows(out)[0]) == ["t0", "t1", "t2"]
