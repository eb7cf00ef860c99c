"""README's runtime matrix is what the backends declare (regenerate: scripts/runtime_matrix.py --write)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "runtime_matrix.py"


def test_readme_matrix_matches_the_declared_capabilities():
    spec = importlib.util.spec_from_file_location("runtime_matrix", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.readme_block(module.README.read_text()) == module.matrix(), \
        "README's runtime matrix is stale: run `python scripts/runtime_matrix.py --write`"
