"""Fixtures for the openhands backend's tests (Python >= 3.12 with the 'openhands' extra; the
tests that need it are marked py312 and run in `.venv312`, see scripts/run-tests.sh)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ...kit import Case
from . import cases


@pytest.fixture(scope="session")
def openhands_imported() -> None:
    """Import OpenHands once up front (seconds on a busy machine) so time budgets measure runs."""
    cases.import_openhands()


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """After the test: no backend loop thread and no child process (bash) may survive."""
    yield
    cases.check_no_leftovers()


@pytest.fixture
def case(tmp_path: Path, openhands_imported: None) -> Case:
    return cases.openhands(tmp_path)
