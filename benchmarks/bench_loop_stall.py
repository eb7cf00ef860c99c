"""The event loop's largest stall while 50 sessions each run a turn in a 100k-file tree
(goal: nothing blocks the loop for more than 5 ms), the cancellation path included.

A probe task sleeps 1 ms over and over and records how late it wakes. Meanwhile 50
FunctionBackend sessions run at once, each in its own 2k-file folder of one 100k-file tree
(built once in a temporary folder; one run per folder is agenter's rule, so sessions no longer
share a folder as they did before the folder lock): 40 stream a turn like an agent's (text deltas, ten file writes each announced as a tool
call and its result, usage, a closing text), 5 are cancelled mid-turn by their time budget and 5
by the caller (the task running `execute` is cancelled). Figures:

- the probe's largest and 99th-percentile lateness, with the idle loop's first (this machine's
  noise floor);
- the largest single step the loop ran (one callback: a task step, a timer, a thread's result)
  and the largest loop iteration (every callback between two polls): what the probe's lateness
  is made of, so a stall of many small steps is told from one step that blocks;
- the CPU each thread spent meanwhile (threads hold the GIL the loop waits for);
- all of it twice: cold (the first session walks the tree while the others run) and warm (the
  tree already watched: each session's own work and its turns' change detection);
- with `--profile` (or PROFILE=1), the functions the loop's thread spent its CPU in (cProfile),
  which is what dominates what remains.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

FILES = 100_000
PER_DIR = 100
SESSIONS = 50
BUDGET_CANCELLED = 5
CALLER_CANCELLED = 5
DELTAS = 20
WRITES = 10


def build_tree(root: Path) -> None:
    """FILES files, SESSIONS folders of them (part00 ... part49), PER_DIR to a package."""
    per_part = FILES // SESSIONS
    for i in range(FILES):
        directory = root / part(i // per_part) / f"pkg{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            directory.mkdir(parents=True)
        (directory / f"mod{i}.py").write_text("x = 1\n")


def part(n: int) -> str:
    return f"part{n:02d}"


def folders(root: Path, count: int) -> list[Path]:
    """A folder for each of `count` sessions: the tree's parts (made when missing, for the warm-up)."""
    found = [root / part(n) for n in range(count)]
    for folder in found:
        folder.mkdir(exist_ok=True)
    return found


def tree_parent() -> str | None:
    """/dev/shm when there is room (making 100k files on a busy VM's disk takes long), else the
    temporary directory; BENCH_TREE_DIR overrides."""
    chosen = os.environ.get("BENCH_TREE_DIR")
    if chosen:
        return chosen
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * 1024**3:
        return shm
    return None


class Steps:
    """Times every callback the loop runs (asyncio's Handle._run) and every loop iteration's
    callbacks together; the loop's own bookkeeping between them is not counted."""

    def __init__(self) -> None:
        self.largest = 0.0
        self.largest_name = ""
        self.iteration = 0.0
        self.largest_iteration = 0.0
        self.count = 0
        self.total = 0.0
        self.cpu = 0.0
        self.largest_cpu = 0.0
        self.largest_cpu_name = ""
        self.slow: list[tuple[float, float, str]] = []  # steps over 5 ms: wall, CPU, what
        self.gc_largest = 0.0
        self.gc_total = 0.0
        self._gc_started = 0.0
        self._saved: Any = None

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            spent = time.perf_counter() - self._gc_started
            self.gc_total += spent
            self.gc_largest = max(self.gc_largest, spent)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        handle_run = asyncio.events.Handle._run
        steps = self

        def timed_run(handle: asyncio.Handle) -> None:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                handle_run(handle)
            finally:
                spent, cpu = time.perf_counter() - started, time.thread_time() - cpu
                steps.count += 1
                steps.total += spent
                steps.cpu += cpu
                steps.iteration += spent
                if spent > steps.largest:
                    steps.largest = spent
                    steps.largest_name = _describe(handle)
                if cpu > steps.largest_cpu:
                    steps.largest_cpu = cpu
                    steps.largest_cpu_name = _describe(handle)
                if spent > 0.005:
                    steps.slow.append((spent, cpu, _describe(handle)))

        run_once = loop._run_once  # type: ignore[attr-defined]

        def timed_once() -> None:
            steps.iteration = 0.0
            run_once()
            steps.largest_iteration = max(steps.largest_iteration, steps.iteration)

        self._saved = (handle_run, loop)
        gc.callbacks.append(self._gc)
        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign,assignment]
        loop._run_once = timed_once  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        handle_run, loop = self._saved
        gc.callbacks.remove(self._gc)
        asyncio.events.Handle._run = handle_run  # type: ignore[method-assign]
        del loop._run_once


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread by its name's stem (Linux /proc; empty elsewhere)."""
    import threading

    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    by_name: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stem = "event loop" if thread is threading.main_thread() else thread.name.rsplit("_", 1)[0]
        by_name[stem] = by_name.get(stem, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return by_name


def _describe(handle: asyncio.Handle) -> str:
    callback = getattr(handle, "_callback", None)
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        where = f" at {frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}" if frame else ""
        return f"task {task.get_name()} ({getattr(coro, '__qualname__', coro)}{where})"
    return repr(callback)[:120]


async def lag_while(work: Awaitable[Any]) -> tuple[float, float, float, list[float]]:
    """Largest and 99th-percentile lateness of a 1 ms sleep while `work` runs, and its duration."""
    lags: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started - 0.001)

    probing = asyncio.ensure_future(probe())
    await asyncio.sleep(0.005)
    started = time.perf_counter()
    try:
        await work
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        await probing
    return max(lags), statistics.quantiles(lags, n=100)[98], elapsed, lags


def _write(ctx: Any, path: str) -> Any:
    return ctx.write(path, f"# written by {path}\nx = 2\n")


async def sessions(root: Path, count: int = SESSIONS) -> dict[str, int]:
    """`count` sessions at once, each in its own folder of `root`: the finishing ones, then those
    cancelled mid-turn."""
    from agenter import AutonomousCodingAgent, Budget
    from agenter.backends.base import BackendMessage, MessageType
    from agenter.testing import FunctionBackend, TurnContext

    async def turn(ctx: TurnContext) -> Any:
        me = f"s{id(ctx)}"
        for i in range(DELTAS):
            yield BackendMessage(MessageType.TEXT_DELTA, f"thinking aloud, part {i} of {me}; ")
            if i % 5 == 4:
                await asyncio.sleep(0.002)  # the model streams
        for j in range(WRITES):
            message = await asyncio.to_thread(_write, ctx, f"{me}_{j}.py")
            yield message
            yield BackendMessage(MessageType.TOOL_RESULT, f"wrote {me}_{j}.py", tool_name="write_file")
        ctx.use(input_tokens=1200, output_tokens=300)
        yield BackendMessage(MessageType.USAGE)
        yield "done: wrote the files"

    async def hang(ctx: TurnContext) -> Any:
        yield BackendMessage(MessageType.TEXT_DELTA, "starting")
        yield await asyncio.to_thread(_write, ctx, f"h{id(ctx)}.py")
        await asyncio.sleep(3600)

    finishing = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, validators=[])
    hanging = AutonomousCodingAgent(backend=FunctionBackend, turn=hang, validators=[], max_iterations=1)
    budget_cut = min(BUDGET_CANCELLED, count // 5)
    caller_cut = min(CALLER_CANCELLED, count // 5)
    where = iter(folders(root, count))
    runs = [asyncio.ensure_future(finishing.execute("go", cwd=next(where)))
            for _ in range(count - budget_cut - caller_cut)]
    runs += [asyncio.ensure_future(hanging.execute("go", cwd=next(where), budget=Budget(max_time_seconds=1.5)))
             for _ in range(budget_cut)]
    cancelled = [asyncio.ensure_future(hanging.execute("go", cwd=next(where))) for _ in range(caller_cut)]

    async def cancel_later() -> None:
        await asyncio.sleep(1.0)
        for task in cancelled:
            task.cancel()

    await asyncio.gather(cancel_later(), asyncio.wait(runs + cancelled))
    statuses: dict[str, int] = {}
    for task in runs + cancelled:
        status = "cancelled" if task.cancelled() else task.result().status.value
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


async def observed(root: Path, label: str) -> dict[str, float]:
    """One batch of sessions under the probe and the step timer; prints what it saw."""
    steps = Steps()
    steps.install(asyncio.get_running_loop())
    try:
        statuses: dict[str, int] = {}

        async def run() -> None:
            statuses.update(await sessions(root))

        cpu_before = thread_cpu()
        largest, p99, elapsed, lags = await lag_while(run())
        cpu_after = thread_cpu()
    finally:
        steps.uninstall()
    over = sum(1 for lag in lags if lag > 0.005)
    print(f"{SESSIONS} sessions on {FILES // 1000}k files, {label} ({statuses}) in {elapsed:.2f} s:")
    print(f"  probe lateness largest / p99 / median: {largest * 1000:.2f} / {p99 * 1000:.2f} / "
          f"{statistics.median(lags) * 1000:.2f} ms; {over} of {len(lags)} wake-ups later than 5 ms (goal: none)")
    print(f"  largest single step {steps.largest * 1000:.2f} ms: {steps.largest_name}")
    print(f"  largest single step in the loop thread's CPU time {steps.largest_cpu * 1000:.2f} ms: "
          f"{steps.largest_cpu_name} (the rest of a step's wall time is waiting for the GIL, held by "
          f"threads, or for a CPU)")
    print(f"  largest loop iteration (its steps together) {steps.largest_iteration * 1000:.2f} ms; "
          f"{steps.count} steps, {steps.total * 1000:.0f} ms in all ({steps.cpu * 1000:.0f} ms CPU) "
          f"({steps.total / max(steps.count, 1) * 1e6:.0f} us per step)")
    print(f"  garbage collection on the loop's thread: largest {steps.gc_largest * 1000:.2f} ms, "
          f"{steps.gc_total * 1000:.0f} ms in all")
    spent_by = {name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after}
    print("  CPU by thread (threads hold the GIL the loop waits for): "
          + ", ".join(f"{name} {spent * 1000:.0f} ms" for name, spent in sorted(spent_by.items(), key=lambda i: -i[1])
                      if spent > 0))
    for spent, cpu, name in sorted(steps.slow, reverse=True)[:5]:
        print(f"    step of {spent * 1000:.1f} ms ({cpu * 1000:.1f} ms CPU): {name}")
    return {"loop_stall_max_s": largest, "loop_stall_p99_s": p99, "loop_largest_step_s": steps.largest,
            "loop_largest_step_cpu_s": steps.largest_cpu, "loop_largest_iteration_s": steps.largest_iteration,
            "loop_cpu_s": steps.cpu}


async def measure(root: Path, profile: bool) -> dict[str, float]:
    from agenter.sandbox.changes import ChangeDetector

    idle = await lag_while(asyncio.sleep(1.0))
    print(f"idle loop: largest / p99 lateness {idle[0] * 1000:.2f} / {idle[1] * 1000:.2f} ms (noise floor)")
    figures = {"loop_stall_idle_max_s": idle[0], "loop_stall_idle_p99_s": idle[1]}
    warm = Path(tempfile.mkdtemp(prefix="agenter-bench-warm-"))
    try:
        await sessions(warm, 10)  # first imports, thread pools: once per process, not per turn
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    # Cold: each session walks its 2k files (in a thread) while the others run.
    cold = await observed(root, "the folders walked while they run")
    figures.update({f"cold_{k}": v for k, v in cold.items()})
    # Warm: the folders are already watched (detectors hold them), so what remains is each
    # session's own work and its turn's change detection.
    holders = [ChangeDetector(folder) for folder in folders(root, SESSIONS)]
    await asyncio.gather(*(holder.start() for holder in holders))
    try:
        hot = await observed(root, "the tree already watched")
        figures.update(hot)
        if profile:
            profiler = cProfile.Profile(time.thread_time)  # the loop thread's CPU, not GIL waits
            profiler.enable()
            try:
                await sessions(root)
            finally:
                profiler.disable()
            print("  where the loop's thread spends its CPU (cProfile, one more warm run):")
            stats = pstats.Stats(profiler)
            stats.sort_stats("tottime").print_stats(18)
            stats.sort_stats("cumulative").print_stats(r"agenter", 25)
    finally:
        for holder in holders:
            holder.close()
    return figures


async def main_async(profile: bool = False) -> dict[str, float]:
    began = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="agenter-bench-stall-", dir=tree_parent()))
    try:
        build_tree(root)
        print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {FILES // 1000}k-file tree in {root.parent} "
              f"built in {time.perf_counter() - began:.1f} s")
        return await measure(root, profile)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        print(f"({time.perf_counter() - began:.0f} s in all)")


def main() -> dict[str, float]:
    profile = "--profile" in sys.argv or os.environ.get("PROFILE") == "1"
    return asyncio.run(main_async(profile))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
