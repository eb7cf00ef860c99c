"""examples/planning_example.py (documented in docs/planning.md) runs offline and completes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "planning_example.py"


async def test_the_planning_example_runs_and_completes(capsys):
    spec = importlib.util.spec_from_file_location("agenter_planning_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert await module.main() == 0
    out = capsys.readouterr().out
    assert "plan: 3 tasks, order ['1', '2', '3']" in out and out.count("[x]") == 3
    assert "passed   both functions are importable from the package" in out
