"""A batch whose tasks pause for approval: 100 tasks, 10 of them wait (an ask rule on ci/**),
then a second pass approves those 10. Prints the batch's wall time, the approve pass's, that
every task has one row (the last of its lines), that the approved tasks' files are in their
diffs, and that no paused task ran again from the start (one first model request per task).

The real anthropic-sdk backend against the scripted model server (every answer held DELAY
seconds), on_ask="pause", one SQLite conversation store, the local engine; the approve pass is
a fresh run_batch, as another process would run it. `make bench NAMES=bench_batch_pause`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agenter import Budget
from agenter.batch import TaskDefaults, read_rows, run_batch
from agenter.testing import ModelRequest, ScriptedModelServer, reply, text, tool_call

DELAY = 0.05
TASKS = 100
PAUSING = 10  #: every TASKS // PAUSING-th task writes under ci/, which asks
CONCURRENCY = 16
KEY = "sk-bench-not-a-key"


def _answers_a_tool_call(request: ModelRequest) -> bool:
    last = request.messages[-1] if request.messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def model(request: ModelRequest) -> Any:
    time.sleep(DELAY)
    if _answers_a_tool_call(request):
        return reply(text("Done."))
    number = int(str(request.messages[0]).split("task number ")[1].split(".")[0])
    folder = "ci" if number % (TASKS // PAUSING) == 0 else "pkg"
    return reply(tool_call("write_file", {"path": f"{folder}/m{number}.py", "content": f"VALUE = {number}\n"}))


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "bench"]):
        subprocess.run(command, cwd=repo, env=env, check=True)
    return repo


def first_requests(server: ScriptedModelServer, number: int) -> int:
    """The model requests that began task `number` (none of its tool results in them yet)."""
    marker = f"task number {number}."
    return sum(1 for r in server.model_requests if r.model_request is not None
               and marker in str(r.model_request.messages[0]) and "tool_result" not in str(r.model_request.messages[1:]))


async def main_async() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-batch-pause-") as tmp, \
            ScriptedModelServer(handler=model) as server:
        work = Path(tmp)
        repo = make_repo(work)
        out = work / "results.jsonl"
        tasks = [{"id": f"t{i}", "repository": str(repo), "prompt": f"Edit the file for task number {i}."}
                 for i in range(TASKS)]
        defaults = TaskDefaults(backend="anthropic-sdk", budget=Budget(max_time_seconds=300), options={
            "base_url": server.base_url, "api_key": KEY, "on_ask": "pause",
            "conversation_store": f"sqlite:///{work / 'runs.db'}",
            "permissions": {"rules": ["ask edit:ci/**"], "mode": "accept_edits"}})
        started = time.perf_counter()
        first = await run_batch(tasks, out, defaults=defaults, concurrency=CONCURRENCY, workspace_root=work / "ws")
        batch_wall = time.perf_counter() - started
        paused = sorted(row.id for row in read_rows(out)[0].values() if row.paused)
        requests = len(server.model_requests)

        started = time.perf_counter()
        second = await run_batch(tasks, out, defaults=defaults, concurrency=CONCURRENCY, workspace_root=work / "ws",
                                 approve="allow")
        approve_wall = time.perf_counter() - started
        rows = read_rows(out)[0]
        lines = len(out.read_text().splitlines())
        approved_ok = all(f"+VALUE = {name[1:]}" in rows[name].diff and rows[name].files == [f"ci/m{name[1:]}.py"]
                          for name in paused)
        restarted = [name for name in paused if first_requests(server, int(name[1:])) != 1]
        print(f"scripted model: {DELAY} s per answer; {TASKS} tasks at concurrency {CONCURRENCY}, "
              f"{len(paused)} pause ({first.paused} in the summary)")
        print(f"batch: {batch_wall:.2f} s ({first.passed} passed, {first.paused} paused, {requests} model requests)")
        print(f"approve pass ({second.ran} tasks continued): {approve_wall:.2f} s "
              f"({len(server.model_requests) - requests} model requests: one each)")
        print(f"rows: {len(rows)} tasks with a row, {lines} lines (the {len(paused)} approved tasks have 2, "
              f"the last wins); all passed: {second.all_passed}; approved files in their diffs: {approved_ok}")
        print(f"paused tasks run again from the start: {len(restarted)} (each has one first model request)")
        assert len(paused) == PAUSING and second.all_passed and len(rows) == TASKS and approved_ok and not restarted
        assert lines == TASKS + PAUSING and len(server.model_requests) == 2 * TASKS
    return {"batch_seconds": batch_wall, "approve_seconds": approve_wall}


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    print(json.dumps(main()), file=sys.stderr)
