"""What the backend benchmarks share to measure imports: fresh interpreters, bytecode cached
privately (as in a normal install, also where the environment forbids writing .pyc files), the
median of several runs after one that fills the cache, and which heavy modules a statement left
loaded (a backend must not load its SDK until it connects)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: Timed in the child: the setup first (untimed), then the statement.
IMPORT_SNIPPET = """
import sys, time
{setup}
t, c = time.perf_counter(), time.process_time()
{stmt}
wall, cpu = time.perf_counter() - t, time.process_time() - c
print(wall, cpu, ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def python_env(pycache: str, checkout: Path, drop: Sequence[str] = ()) -> dict[str, str]:
    """A child interpreter's environment: `checkout` first on the path, bytecode cached in
    `pycache`; the variables of `drop` left out (a key the measured code must not see)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE" and key not in drop}
    env["PYTHONPYCACHEPREFIX"] = pycache
    env["PYTHONPATH"] = str(checkout)
    return env


def measure_import(stmt: str, setup: str, env: dict[str, str], *, runs: int,
                   heavy: Sequence[str]) -> tuple[float, float, str]:
    """The median wall and CPU seconds of `stmt` in fresh interpreters, and the `heavy` modules
    it left loaded (comma-separated)."""
    code = IMPORT_SNIPPET.format(setup=setup, stmt=stmt, heavy=tuple(heavy))
    walls, cpus, loaded = [], [], ""
    for _ in range(runs + 1):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                              cwd=tempfile.gettempdir(), timeout=300)
        wall, cpu, *rest = done.stdout.split()
        walls.append(float(wall))
        cpus.append(float(cpu))
        loaded = rest[0] if rest else ""
    # The first run fills the bytecode cache.
    return statistics.median(walls[1:]), statistics.median(cpus[1:]), loaded
