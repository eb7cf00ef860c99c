"""A batch of coding tasks, offline: `python examples/batch_example.py`.

Four tasks on two repositories (a git repository with two bugs, a plain folder), each in a
workspace of its own, run by the real anthropic-sdk backend against agenter's scripted model
server (it plays a model that reads each task's prompt). Each task's test command checks the
work; one task cannot pass and shows what a failed row looks like. Then the same batch again:
every task already has a row, so nothing runs (an interrupted batch resumes this way). Last,
the rows as SWE-bench predictions. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from agenter import Budget
from agenter.batch import RichProgress, TaskDefaults, export_swebench, read_rows, run_batch
from agenter.testing import ModelRequest, ScriptedModelServer, reply, text, tool_call

CALC = textwrap.dedent("""\
    def add(a, b):
        return a - b


    def mul(a, b):
        return a + b
""")


def make_sources(root: Path) -> tuple[Path, Path]:
    repo = root / "calc-repo"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    env = {"GIT_AUTHOR_NAME": "example", "GIT_AUTHOR_EMAIL": "example@example.com",
           "GIT_COMMITTER_NAME": "example", "GIT_COMMITTER_EMAIL": "example@example.com", "PATH": "/usr/bin:/bin"}
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "calc with two bugs"]):
        subprocess.run(command, cwd=repo, env=env, check=True)
    notes = root / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("# Notes\n")
    return repo, notes


def check(expression: str) -> str:
    return f"{sys.executable} -c 'from calc import add, mul; assert {expression}'"


def write_tasks(path: Path, repo: Path, notes: Path) -> None:
    tasks = [
        {"id": "fix-add", "repository": str(repo), "prompt": "add() subtracts; make it return a + b.",
         "test_command": check("add(2, 3) == 5")},
        {"id": "fix-mul", "repository": str(repo), "prompt": "mul() adds; make it return a * b.",
         "test_command": check("mul(2, 3) == 6")},
        {"id": "notes", "repository": str(notes), "prompt": "Add a line saying the notes are offline-only.",
         "metadata": {"team": "docs"}},
        {"id": "impossible", "repository": str(repo), "prompt": "add() subtracts; make it return a + b.",
         "test_command": check("add(2, 2) == 5"), "budget": {"max_iterations": 2}},
    ]
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def scripted_model(request: ModelRequest):
    """Plays the model: one edit for the task it is sent, then a closing message."""
    last = request.messages[-1]
    if isinstance(last["content"], list) and any(b.get("type") == "tool_result" for b in last["content"]):
        return reply(text("Done."))
    prompt = str(request.messages[0]["content"])
    if "add()" in prompt:
        return reply(text("Fixing add()."), tool_call("edit_file", {
            "path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}))
    if "mul()" in prompt:
        return reply(text("Fixing mul()."), tool_call("edit_file", {
            "path": "calc.py", "old_string": "def mul(a, b):\n    return a + b",
            "new_string": "def mul(a, b):\n    return a * b"}))
    return reply(text("Adding the line."), tool_call("write_file", {
        "path": "README.md", "content": "# Notes\n\nThese notes are offline-only.\n"}))


async def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="agenter-batch-example-"))
    try:
        repo, notes = make_sources(root)
        tasks, results = root / "tasks.jsonl", root / "results.jsonl"
        write_tasks(tasks, repo, notes)
        with ScriptedModelServer(handler=scripted_model) as server:
            defaults = TaskDefaults(backend="anthropic-sdk",
                                    options={"base_url": server.base_url, "api_key": "sk-example-not-a-real-key"},
                                    budget=Budget(max_cost_usd=0.5, max_time_seconds=120))
            summary = await run_batch(tasks, results, defaults=defaults, concurrency=4, progress=RichProgress())
            print(f"\nfirst run: {summary.ran} tasks ran, pass rate {summary.pass_rate:.0%}")

            again = await run_batch(tasks, results, defaults=defaults, concurrency=4)
            print(f"second run: {again.skipped} tasks already had a row, {again.ran} ran "
                  f"(the model answered {len(server.model_requests)} requests in all)")

        rows, _ = read_rows(results)
        print(f"\nthe row of fix-mul: status {rows['fix-mul'].status}, files {rows['fix-mul'].files}, diff:")
        print(rows["fix-mul"].diff)
        print(f"the row of impossible: {rows['impossible'].status}: {rows['impossible'].error}")
        count = export_swebench(results, root / "predictions.jsonl", model_name="agenter-example")
        print(f"\n{count} SWE-bench predictions written; the source repository is untouched: "
              f"{'return a - b' in (repo / 'calc.py').read_text()}")
        return 0 if summary.passed == 3 and rows["impossible"].status == "failed" else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
