"""Parallel plan execution (goal: four independent tasks with parallel=4 take <= 1.5x one task).

Each task is one run of the real anthropic-sdk backend against the scripted model server, whose
every answer comes after a fixed delay (a model's latency): a write_file call, then "done". The
tasks run in git worktrees of a small repository and are merged back. Measured: one task alone,
the four tasks one after another (parallel=1, in place), and the four with parallel=4.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agenter import AutonomousCodingAgent
from agenter.planner import Plan, PlanAndExecute
from agenter.testing import ModelRequest, ScriptedModelServer, reply, text, tool_call

DELAY = 1.0   # seconds before each model answer (real models take longer)
ROUNDS = 3
TASKS = 4


def answer(request: ModelRequest) -> Any:
    if request.tool_results:
        return reply(text("done"), delay=DELAY)
    match = re.search(r"Your task \((\d+)\)", request.last_user_text or "")
    number = match.group(1) if match else "x"
    return reply(tool_call("write_file", {"path": f"part_{number}.py", "content": f"PART = {number}\n"}),
                 delay=DELAY)


def plan(count: int) -> Plan:
    return Plan.model_validate({"root_task_description": "write the parts", "tasks": [
        {"id": str(i), "description": f"write part_{i}.py with PART = {i}"} for i in range(1, count + 1)]})


def repository() -> Path:
    root = Path(tempfile.mkdtemp(prefix="bench-planner-"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


async def timed(base_url: str, count: int, parallel: int) -> float:
    executor = AutonomousCodingAgent(backend="anthropic-sdk", base_url=base_url, api_key="sk-bench")
    runner = PlanAndExecute(executor=executor, parallel=parallel)
    cwd = repository()
    try:
        started = time.perf_counter()
        result = await runner.execute("write the parts", cwd, plan=plan(count))
        elapsed = time.perf_counter() - started
        assert result.ok, result.summary()
        assert sorted(p.name for p in cwd.glob("part_*.py")) == [f"part_{i}.py" for i in range(1, count + 1)]
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    return elapsed


async def main_async() -> dict[str, float]:
    one, parallel = [], []
    with ScriptedModelServer(handler=answer) as server:
        await timed(server.base_url, 1, 1)  # warm-up: imports, first connection
        for _ in range(ROUNDS):
            one.append(await timed(server.base_url, 1, 1))
            parallel.append(await timed(server.base_url, TASKS, TASKS))
        serial = await timed(server.base_url, TASKS, 1)
    o, p = statistics.median(one), statistics.median(parallel)
    print(f"one task (2 model answers of {DELAY:g} s each): {o:.2f} s (median of {ROUNDS})")
    print(f"{TASKS} independent tasks, parallel=1 (in place): {serial:.2f} s ({serial / o:.2f}x one task)")
    print(f"{TASKS} independent tasks, parallel={TASKS} (git worktrees, merged back): {p:.2f} s "
          f"({p / o:.2f}x one task, {p - o:+.2f} s; goal <= 1.5x); rounds: "
          + ", ".join(f"{x:.2f}" for x in parallel))
    return {"one_task_s": o, "serial_s": serial, "parallel_s": p, "parallel_ratio": p / o}


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
