"""The tables the docs take from the code are what the code says (regenerate them:
scripts/runtime_matrix.py --write): README's runtime matrix, docs/architecture.md's layers,
backend families and modes, and docs/backends/cli.md's options of every CLI backend."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "runtime_matrix.py"


def _script():
    spec = importlib.util.spec_from_file_location("runtime_matrix", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("index", range(5), ids=["readme-matrix", "layers", "families", "modes", "cli-options"])
def test_generated_tables_match_the_code(index):
    module = _script()
    path, name, make = module.BLOCKS[index]
    assert module.block(path.read_text(), name) == make(), \
        f"{path.name}'s {name} table is stale: run `python scripts/runtime_matrix.py --write`"
