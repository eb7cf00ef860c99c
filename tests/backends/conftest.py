"""The `kit` fixture: a Kit (tests/backends/kit.py) for the `case` fixture of the test's module
or folder, checked for leftover processes when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .kit import Case, Kit, no_leftovers


@pytest.fixture
def kit(case: Case, scripted_model_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    made = Kit(case, scripted_model_server, tmp_path_factory.mktemp("kit"))
    with no_leftovers(made.token):
        yield made
    if case.check_after is not None:
        case.check_after()
