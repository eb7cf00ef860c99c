"""Batch runs: throughput at concurrency 16 against one at a time (goal >= 12x), and what the
batch adds to each task (goal <= 50 ms locally); the same batch on a local Ray cluster.

Every task is the real anthropic-sdk backend against the scripted model server, whose every
answer is held DELAY seconds (a model's latency): two model turns a task (write a file, then
say done), the syntax validator, a --shared clone of one git repository per task, its diff,
its removal, its row. `make bench NAMES=bench_batch`; Ray only when it is installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agenter import Budget
from agenter.batch import BatchRow, RayOptions, TaskDefaults, read_rows, run_batch
from agenter.testing import ModelRequest, ScriptedModelServer, reply, text, tool_call

DELAY = 0.5
TASKS = 100
CONCURRENCY = 16
SERIAL_TASKS = 12  # one at a time takes TASKS * 2 * DELAY otherwise; throughput is a rate
KEY = "sk-bench-not-a-key"


def model(request: ModelRequest) -> Any:
    time.sleep(DELAY)
    last = request.messages[-1] if request.messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return reply(text("Done."))
    number = str(request.messages[0]).split("task number ")[1].split(".")[0]
    return reply(tool_call("write_file", {"path": f"pkg/m{int(number) % 40}.py", "content": f"VALUE = {number}\n"}))


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    for index in range(40):
        (repo / "pkg" / f"m{index}.py").write_text(f"VALUE = -{index}\n" + "# filler\n" * 50)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "bench"]):
        subprocess.run(command, cwd=repo, env=env, check=True)
    return repo


def tasks(repo: Path, count: int, prefix: str) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "repository": str(repo), "prompt": f"Edit the file for task number {i}."}
            for i in range(count)]


async def batch(repo: Path, work: Path, name: str, count: int, concurrency: int, base_url: str,
                **options: Any) -> tuple[float, list[BatchRow]]:
    out = work / f"{name}.jsonl"
    defaults = TaskDefaults(backend="anthropic-sdk", options={"base_url": base_url, "api_key": KEY},
                            budget=Budget(max_time_seconds=300))
    started = time.perf_counter()
    summary = await run_batch(tasks(repo, count, name), out, defaults=defaults, concurrency=concurrency,
                              workspace_root=work / "ws", **options)
    wall = time.perf_counter() - started
    rows = list(read_rows(out)[0].values())
    assert summary.all_passed, summary
    return wall, rows


async def bare(repo: Path, work: Path, count: int, concurrency: int, base_url: str) -> float:
    """The same agent runs without the batch: pre-made clones, a semaphore, no diff, no rows."""
    from agenter import AutonomousCodingAgent

    agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=base_url, api_key=KEY)
    folders = []
    for index in range(count):
        folder = work / "bare" / str(index)
        subprocess.run(["git", "clone", "-q", "--shared", str(repo), str(folder)], check=True)
        folders.append(folder)
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            result = await agent.execute(f"Edit the file for task number {index}.", cwd=folders[index])
            assert result.ok, result

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - started


def outside_agent_ms(rows: list[BatchRow]) -> tuple[float, float]:
    """What the batch adds to a task (checkout, diff, row; the removal comes after), median and p95, in ms."""
    values = sorted((row.duration_seconds - row.agent_seconds) * 1000 for row in rows)
    return statistics.median(values), values[max(int(len(values) * 0.95 + 0.999) - 1, 0)]


async def main_async() -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp, \
            ScriptedModelServer(handler=model) as server:
        work = Path(tmp)
        repo = make_repo(work)
        serial_wall, serial_rows = await batch(repo, work, "serial", SERIAL_TASKS, 1, server.base_url)
        wall, rows = await batch(repo, work, "local", TASKS, CONCURRENCY, server.base_url)
        bare_wall = await bare(repo, work, TASKS, CONCURRENCY, server.base_url)
        serial_rate, rate = SERIAL_TASKS / serial_wall, TASKS / wall
        print(f"scripted model: {DELAY} s per answer, 2 answers per task ({2 * DELAY:.1f} s of model time a task)")
        print(f"one at a time ({SERIAL_TASKS} tasks): {serial_rate:.2f} tasks/s; {TASKS} tasks at concurrency "
              f"{CONCURRENCY}: {wall:.1f} s, {rate:.2f} tasks/s -> {rate / serial_rate:.1f}x (goal >= 12x)")
        median1, p95_1 = outside_agent_ms(serial_rows)
        median16, p95_16 = outside_agent_ms(rows)
        print(f"batch's own time per task (checkout + diff + row), one at a time: median "
              f"{median1:.0f} ms, p95 {p95_1:.0f} ms; at concurrency {CONCURRENCY}: median {median16:.0f} ms, "
              f"p95 {p95_16:.0f} ms")
        amortised = (wall - bare_wall) / TASKS * 1000
        print(f"the same {TASKS} agent runs without the batch (pre-made clones): {bare_wall:.1f} s -> "
              f"scheduling overhead {amortised:.1f} ms per task, amortised (goal <= 50 ms)")
        figures.update(speedup=rate / serial_rate, overhead_ms=amortised, outside_agent_ms=median1)
        try:
            import ray
        except ImportError:
            print("ray is not installed: the Ray figures are skipped (pip install 'agenter-sdk[ray]')")
            return figures
        started = time.perf_counter()
        # The cluster run_batch would start, started here to time it apart and to keep it for two batches.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _system_config={"num_workers_soft_limit": CONCURRENCY})
        try:
            print(f"local Ray cluster started in {time.perf_counter() - started:.1f} s (2 CPUs; "
                  f"{2 / CONCURRENCY:.3f} CPU per task, so {CONCURRENCY} run at once)")
            options = dict(engine="ray", ray=RayOptions(num_cpus_per_task=2 / CONCURRENCY))
            warm_wall, _ = await batch(repo, work, "ray-warm", CONCURRENCY, CONCURRENCY, server.base_url, **options)
            ray_wall, ray_rows = await batch(repo, work, "ray", TASKS, CONCURRENCY, server.base_url, **options)
        finally:
            ray.shutdown()
        median_ray, p95_ray = outside_agent_ms(ray_rows)
        per_task = (ray_wall - wall) / TASKS * 1000
        print(f"Ray: {CONCURRENCY} tasks to start the workers {warm_wall:.1f} s; then {TASKS} tasks {ray_wall:.1f} s "
              f"({TASKS / ray_wall:.2f} tasks/s, {TASKS / ray_wall / serial_rate:.1f}x one at a time); overhead per "
              f"task over the local engine {per_task:.1f} ms amortised; on the worker outside the agent: median "
              f"{median_ray:.0f} ms, p95 {p95_ray:.0f} ms")
        figures.update(ray_overhead_ms=per_task)
    return figures


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    print(json.dumps(main()), file=sys.stderr)
