"""codex's fixtures: its case (cases.py) for the kit, and the Codex CLI's path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...kit import Case, need
from . import cases


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return cases.codex(tmp_path)


@pytest.fixture(scope="session")
def codex_path() -> str:
    return need(cases.codex_program(), "the Codex CLI (run `npm install` in the repository: package.json pins it)")
