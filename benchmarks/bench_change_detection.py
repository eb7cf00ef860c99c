"""Change detection per turn, against `git status --porcelain` on the same tree, and the event
loop's lag with 50 sessions at once.

Trees of 20k, 100k and 200k files (100 to a folder), each with a 20k-file node_modules that must
cost nothing, indexed by git (node_modules in .gitignore, as a real project has it). A turn
changes 10 files. Figures:

- the detector's work per turn (begin_turn + end_turn, threads included) vs `git status` on the
  same tree with the same 10 changes (goal: at most 50 ms at 200k, and below git status);
- what a turn cost before: a snapshot walk before it and one after it (once per size);
- the event loop's lag (lateness of a 1 ms timer; goal 5 ms) on the 100k tree: with 50 change
  detectors alone (their shared first walk, 3 turns each, a cancelled end of turn), and with 50
  FunctionBackend sessions, each in a package folder of the tree (one run per folder is
  agenter's rule; 10 cancelled mid-turn by their time budget), beside the same sessions in empty
  folders, whose lag is the session machinery's own; with the idle loop's lag first,
  this machine's noise floor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agenter.sandbox.changes import ChangeDetector
from agenter.sandbox.workspace import WorkspaceSnapshot

SIZES = (20_000, 100_000, 200_000)
PER_DIR = 100
NODE_MODULES = 20_000
CHANGED = 10
ROUNDS = 5
SESSIONS = 50
STALL_SIZE = 100_000
GIT = shutil.which("git")


def grow_tree(root: Path, start: int, stop: int) -> None:
    for i in range(start, stop):
        directory = root / f"pkg{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            directory.mkdir()
        (directory / f"mod{i}.py").write_text("x = 1\n")


def add_node_modules(root: Path) -> None:
    for i in range(NODE_MODULES):
        directory = root / "node_modules" / f"dep{i // PER_DIR:03d}" / "lib"
        if i % PER_DIR == 0:
            directory.mkdir(parents=True)
        (directory / f"f{i}.js").write_text("module.exports = 1;\n")


def git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([GIT or "git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
                          cwd=root, check=True, capture_output=True)


def git_status(root: Path) -> float:
    started = time.perf_counter()
    git(root, "status", "--porcelain")
    return time.perf_counter() - started


def change(root: Path, files: int, round_: int) -> set[str]:
    paths = set()
    for k in range(CHANGED):
        i = (round_ * 7919 + k * 104729) % files
        rel = f"pkg{i // PER_DIR:04d}/mod{i}.py"
        (root / rel).write_text(f"x = {round_ + 2}  # changed\n")
        paths.add(rel)
    return paths


async def per_turn(root: Path, files: int) -> dict[str, float]:
    detector = ChangeDetector(root)
    started = time.perf_counter()
    await detector.start()
    first_walk = time.perf_counter() - started
    work, git_times = [], []
    try:
        for round_ in range(ROUNDS):
            started = time.perf_counter()
            await detector.begin_turn()
            begun = time.perf_counter() - started
            expected = change(root, files, round_)
            started = time.perf_counter()
            changes = await detector.end_turn()
            work.append(begun + time.perf_counter() - started)
            assert changes.written == expected and not changes.deleted, changes
            git_times.append(git_status(root))  # same tree, same 10 changes
        assert detector.mode == "watching", detector.fallback
    finally:
        detector.close()
    # What a turn cost before: a walk before it and a walk after it (the snapshot diff).
    started = time.perf_counter()
    before = WorkspaceSnapshot.take(root)
    expected = change(root, files, ROUNDS)
    assert before.diff(WorkspaceSnapshot.take(root)).written == expected
    walks = time.perf_counter() - started
    ours, theirs = statistics.median(work), statistics.median(git_times)
    print(f"{files // 1000:>4}k files (+{NODE_MODULES // 1000}k in node_modules), {CHANGED} changed: "
          f"detector {ours * 1000:7.2f} ms per turn vs git status {theirs * 1000:7.1f} ms "
          f"(ratio {ours / theirs:.3f}); two walks per turn before: {walks * 1000:7.1f} ms "
          f"(ratio to git status {walks / theirs:.2f}); first walk at connect {first_walk * 1000:.0f} ms")
    return {f"detector_{files}_s": ours, f"git_status_{files}_s": theirs, f"two_walks_{files}_s": walks,
            f"first_walk_{files}_s": first_walk}


async def _lag_while(work: Any) -> tuple[float, float, float]:
    """Largest and 99th-percentile lag of a 1 ms timer while `work` runs, and how long it ran."""
    lags: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started - 0.001)

    beating = asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0.005)
    started = time.perf_counter()
    await work
    elapsed = time.perf_counter() - started
    done.set()
    await beating
    return max(lags), statistics.quantiles(lags, n=100)[98], elapsed


def _write(paths: list[Path]) -> None:
    for path in paths:
        path.write_text("y = 2\n")


async def _detector_turns(detector: ChangeDetector, root: Path, n: int) -> None:
    for t in range(3):
        await detector.begin_turn()
        # Written in a thread, as an agent's own process writes: the loop has nothing to do with it.
        await asyncio.to_thread(_write, [root / f"pkg{(n * 3 + t) % 500:04d}/d{n}_{t}_{j}.py" for j in range(CHANGED)])
        await asyncio.sleep(0.02 + 0.08 * ((n * 7 + t * 13) % 10) / 10)  # the agent thinks
        changes = await detector.end_turn()
        assert len(changes.written) >= CHANGED, changes
    # The cancellation path: the await is cancelled mid-flight, the work finishes in its thread.
    await detector.begin_turn()
    await asyncio.to_thread(_write, [root / f"pkg0003/c{n}.py"])
    pending = asyncio.ensure_future(detector.end_turn() if n % 2 else detector.changes_so_far())
    await asyncio.sleep(0.0005 * (n % 5))
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pending


async def _sessions(root: Path) -> None:
    from agenter import AutonomousCodingAgent, Budget
    from agenter.testing import FunctionBackend, TurnContext

    async def turn(ctx: TurnContext):
        await asyncio.to_thread(_write, [ctx.cwd / f"s{id(ctx)}_{j}.py" for j in range(CHANGED)])
        await asyncio.sleep(0.02)
        return "done"

    async def hang(ctx: TurnContext):
        await asyncio.to_thread(_write, [ctx.cwd / f"h{id(ctx)}.py"])
        await asyncio.sleep(3600)

    finishing = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, validators=[])
    cancelled = AutonomousCodingAgent(backend=FunctionBackend, turn=hang, validators=[], max_iterations=1)
    # One run per folder (agenter's rule): each session works in a package folder of the tree.
    where = [root / f"pkg{n:04d}" for n in range(SESSIONS)]
    for folder in where:
        folder.mkdir(exist_ok=True)
    runs = [finishing.execute("go", cwd=where[n]) for n in range(SESSIONS - 10)]
    runs += [cancelled.execute("go", cwd=where[n], budget=Budget(max_time_seconds=1.5))
             for n in range(SESSIONS - 10, SESSIONS)]
    statuses = [r.status.value for r in await asyncio.gather(*runs)]
    assert statuses.count("completed") == SESSIONS - 10 and statuses.count("budget_exceeded") == 10, statuses


async def loop_stalls(root: Path) -> dict[str, float]:
    """The event loop's lag (a 1 ms timer's lateness): on a shared machine the idle loop lags too,
    and 50 sessions make the loop busy by themselves, so each figure comes with its floor."""
    idle = await _lag_while(asyncio.sleep(1.0))
    print(f"event-loop lag, largest / p99: idle loop {idle[0] * 1000:.1f} / {idle[1] * 1000:.2f} ms "
          f"(this machine's noise floor)")
    detectors = [ChangeDetector(root) for _ in range(SESSIONS)]
    starting = await _lag_while(asyncio.gather(*(d.start() for d in detectors)))
    turns = await _lag_while(asyncio.gather(*(_detector_turns(d, root, n) for n, d in enumerate(detectors))))
    for detector in detectors:
        detector.close()
    print(f"  {SESSIONS} detectors on {STALL_SIZE // 1000}k files: first walk {starting[0] * 1000:.1f} / "
          f"{starting[1] * 1000:.2f} ms ({starting[2]:.2f} s); 3 turns each + a cancelled end "
          f"{turns[0] * 1000:.1f} / {turns[1] * 1000:.2f} ms ({turns[2]:.2f} s); goal <= 5 ms")
    empty = Path(tempfile.mkdtemp(prefix="agenter-bench-empty-"))
    try:
        await _sessions(empty)  # warm-up: first imports
        floor = await _lag_while(_sessions(empty))
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    full = await _lag_while(_sessions(root))
    print(f"  {SESSIONS} FunctionBackend sessions (10 cancelled mid-turn) on the "
          f"{STALL_SIZE // 1000}k tree: {full[0] * 1000:.1f} / {full[1] * 1000:.2f} ms ({full[2]:.2f} s); "
          f"the same in an empty folder (the session machinery's own lag): {floor[0] * 1000:.1f} / "
          f"{floor[1] * 1000:.2f} ms")
    return {"loop_lag_idle_max_s": idle[0], "loop_lag_detectors_max_s": max(starting[0], turns[0]),
            "loop_lag_detectors_p99_s": max(starting[1], turns[1]), "loop_lag_sessions_max_s": full[0],
            "loop_lag_sessions_empty_max_s": floor[0]}


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} CPUs, load {load:.1f}"


def tree_parent() -> str | None:
    """Where the trees go: BENCH_TREE_DIR, else /dev/shm (creating and deleting 240k files on a
    busy VM's disk takes minutes, and the figures are about cached metadata either way), else
    the temporary directory."""
    chosen = os.environ.get("BENCH_TREE_DIR")
    if chosen:
        return chosen
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 4 * 1024**3:
        return shm
    return None


async def main_async() -> dict[str, float]:
    figures: dict[str, float] = {}
    root = Path(tempfile.mkdtemp(prefix="agenter-bench-", dir=tree_parent()))
    began = time.perf_counter()
    try:
        print(f"machine: {machine()}; trees in {root.parent}")
        add_node_modules(root)
        (root / ".gitignore").write_text("node_modules/\n")
        git(root, "init", "-q")
        built = 0
        for size in SIZES:
            grow_tree(root, built, size)
            built = size
            git(root, "add", "-A")
            git(root, "commit", "-qm", f"{size} files")
            git_status(root)  # the first status after a commit rewrites the index: not a turn's cost
            figures.update(await per_turn(root, size))
            if size == STALL_SIZE:
                figures.update(await loop_stalls(root))
                git(root, "reset", "-q", "--hard")
                git(root, "clean", "-qfd")
        print(f"({time.perf_counter() - began:.0f} s in all, most of it making the trees)")
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
