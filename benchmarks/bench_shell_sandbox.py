"""Start-up cost of one bash tool command: unconfined, under Landlock, under bubblewrap.

Each round runs `true` once per way through `run_shell` (the bash tool's own runner: a process
in its own session, drained pipes, the process-group clean-up), the ways interleaved so machine
load hits them alike. The figure is the wall time per command (median, p90, best).
BENCH_SHELL_RUNS (default 30) sets the rounds. A way this machine lacks is left out.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agenter.backends.model_api._harness.shell import run_shell, shell_env
from agenter.sandbox._landlock import MIN_ABI
from agenter.sandbox.confine import Confinement, landlock_abi

RUNS = int(os.environ.get("BENCH_SHELL_RUNS", "30"))


def _ways(root: Path) -> dict[str, Confinement | None]:
    workspace, tmpdir = root / "ws", root / "tmp"
    workspace.mkdir()
    tmpdir.mkdir()
    home = os.path.expanduser("~")
    hidden = tuple(os.path.join(home, name) for name in (".ssh", ".aws", ".netrc", ".bash_history"))
    ways: dict[str, Confinement | None] = {"unconfined": None}
    if landlock_abi() >= MIN_ABI:
        ways["landlock"] = Confinement(cwd=workspace, mechanism="landlock", tmpdir=str(tmpdir), hidden=hidden)
    bwrap = shutil.which("bwrap")
    if bwrap:
        ways["bubblewrap"] = Confinement(cwd=workspace, mechanism="bubblewrap", program=bwrap, hidden=hidden)
    return ways


async def _time(way: Confinement | None, cwd: Path) -> float:
    start = time.perf_counter()
    result = await run_shell("true", cwd=cwd, timeout=60, sandbox=way, env=shell_env())
    elapsed = time.perf_counter() - start
    if result.is_error:
        raise RuntimeError(f"`true` failed: {result.text}")
    return elapsed


async def _run(root: Path) -> dict[str, list[float]]:
    ways = _ways(root)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(2):  # warm the page cache and the interpreter's bytecode
        for way in ways.values():
            await _time(way, root / "ws")
    for _ in range(RUNS):
        for name, way in ways.items():
            times[name].append(await _time(way, root / "ws"))
    return times


def main() -> None:
    print(f"Landlock ABI here: {landlock_abi()} (used from {MIN_ABI}); bwrap: {shutil.which('bwrap') or 'absent'}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {RUNS} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        times = asyncio.run(_run(Path(tmp)))
    base = statistics.median(times["unconfined"])
    for name, values in times.items():
        ordered = sorted(values)
        median = statistics.median(ordered)
        p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
        extra = "" if name == "unconfined" else f"  (+{(median - base) * 1e3:.1f} ms over unconfined)"
        print(f"  {name:<11} median {median * 1e3:6.1f} ms  p90 {p90 * 1e3:6.1f} ms  best {ordered[0] * 1e3:6.1f} ms{extra}")


if __name__ == "__main__":
    main()
