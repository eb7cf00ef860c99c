"""Transcript cost and the memory of idle open sessions (goals: transcript <= 2 % of a 20-turn
scripted session; <= 5 MB per idle open session beyond the agent process).

1. The same 20-turn session (anthropic-sdk backend against the scripted server, a file tool per
   turn, validation) runs with and without log_dir, interleaved; the difference of the medians
   is the transcript's share. Because two medians of a noisy machine can differ by more than the
   transcript costs, the direct figure is printed too: the time the session spent writing its
   transcript lines, measured by replaying the run's own events through a TranscriptWriter.
2. N sessions are opened (connected, idle) on a workspace of 100 small files each; the growth of
   this process's resident memory and of Python's traced heap, divided by N, is the cost of one.
   anthropic-sdk runs in this process; claude-code's CLI is a process of its own (not counted).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from agenter import AutonomousCodingAgent, CodingRequest
from agenter.host.redact import Redactor
from agenter.session.transcript import TranscriptWriter
from agenter.testing import FunctionBackend, ScriptedModelServer, reply, text, tool_call

TURNS = 20
ROUNDS = 7
SESSIONS = 20


def script() -> list:
    items = [reply(text(f"step {i}"), tool_call("write_file", {"path": f"m{i % 3}.py", "content": f"x = {i}\n"}))
             for i in range(TURNS - 1)]
    return items + [reply(text("done"))]


async def one_run(log_dir: Path | None) -> tuple[float, list]:
    with ScriptedModelServer(script()) as server, tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-bench",
                                      log_dir=log_dir)
        started = time.perf_counter()
        events = [e async for e in agent.stream_execute(CodingRequest(prompt="go", cwd=Path(cwd)))]
        elapsed = time.perf_counter() - started
        assert len(server.model_requests) == TURNS
    assert events[-1].data["status"] == "completed", events[-1].data
    return elapsed, events


def replay_cost(events: list, folder: Path, repeats: int = 50) -> float:
    """Seconds one session spends writing its transcript: its events written again and again."""
    best = float("inf")
    for _ in range(repeats):
        writer = TranscriptWriter.create(folder, backend="anthropic-sdk", model="m", mode="autonomous",
                                         cwd=folder, redact=Redactor())
        started = time.perf_counter()
        for event in events:
            writer.agent_session("session-1")
            writer.event(1, event)
        best = min(best, time.perf_counter() - started)
        writer.close()
        writer.path.unlink()
    return best


async def transcript_overhead() -> dict[str, float]:
    await one_run(None)  # warm up: imports, price table
    without, with_log = [], []
    events: list = []
    with tempfile.TemporaryDirectory() as logs:
        for _ in range(ROUNDS):
            without.append((await one_run(None))[0])
            elapsed, events = await one_run(Path(logs))
            with_log.append(elapsed)
        direct = replay_cost(events, Path(logs))
        size = sum(p.stat().st_size for p in Path(logs).glob("*.jsonl")) / ROUNDS
    base, logged = statistics.median(without), statistics.median(with_log)
    print(f"{TURNS}-turn scripted session (anthropic-sdk): {base * 1000:.1f} ms without a transcript, "
          f"{logged * 1000:.1f} ms with one (median of {ROUNDS}; difference {(logged - base) / base * 100:+.1f} %, "
          "mostly noise)")
    print(f"transcript writing itself: {len(events)} events, {size / 1024:.1f} KB, {direct * 1000:.2f} ms per session "
          f"= {direct / base * 100:.2f} % of the session (goal <= 2 %)")
    return {"transcript_share": direct / base, "median_difference": (logged - base) / base}


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def workspace(root: Path) -> Path:
    root.mkdir()
    for i in range(100):
        (root / f"mod_{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    return root


async def idle_sessions(label: str, make_agent, count: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        repos = [workspace(Path(tmp) / f"repo{i}") for i in range(count)]
        agent = make_agent()
        # One session opened and closed first: what is loaded once (modules, pools) is not per session.
        async with agent.session(cwd=repos[0]):
            pass
        gc.collect()
        before, heap_before = rss(), tracemalloc.get_traced_memory()[0]
        sessions = [agent.session(cwd=repo) for repo in repos]
        for session in sessions:
            await session.open()
        gc.collect()
        after, heap_after = rss(), tracemalloc.get_traced_memory()[0]
        for session in sessions:
            await session.close()
    per_rss = (after - before) / count / 2**20
    per_heap = (heap_after - heap_before) / count / 2**20
    print(f"idle open {label} session: {per_rss:.2f} MB resident, {per_heap:.2f} MB Python heap each "
          f"({count} sessions, 100-file workspaces; goal <= 5 MB)")
    return per_rss


async def memory() -> dict[str, float]:
    tracemalloc.start()
    try:
        figures = {"function": await idle_sessions(
            "FunctionBackend", lambda: AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: None),
            SESSIONS)}
        with ScriptedModelServer([]) as server:
            figures["anthropic-sdk"] = await idle_sessions(
                "anthropic-sdk", lambda: AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url,
                                                               api_key="sk-bench"), SESSIONS)
        if os.environ.get("BENCH_CLAUDE"):  # a CLI process per session: heavy, so only when asked
            with ScriptedModelServer([]) as server, tempfile.TemporaryDirectory() as home:
                env = {"HOME": home, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # not your ~/.claude
                figures["claude-code"] = await idle_sessions(
                    "claude-code (this process only)",
                    lambda: AutonomousCodingAgent(backend="claude-code", base_url=server.base_url,
                                                  api_key="sk-bench", env=env), 3)
    finally:
        tracemalloc.stop()
    return figures


def main() -> dict[str, float]:
    figures = asyncio.run(transcript_overhead())
    figures.update({f"idle_session_mb_{k}": v for k, v in asyncio.run(memory()).items()})
    return figures


if __name__ == "__main__":
    main()
