"""Fixtures for the openhands backend's tests (Python >= 3.12 with the 'openhands' extra)."""

from __future__ import annotations

import pytest

from agenter.backends.openhands import runtime_problem


@pytest.fixture(scope="session")
def openhands_imported() -> None:
    """Import OpenHands once up front (seconds on a busy machine) so time budgets measure runs."""
    problem = runtime_problem()
    if problem:
        pytest.skip(problem)
    from agenter.backends.openhands import _runtime

    _runtime.prepare_environment()
    import openhands.sdk  # noqa: F401
    import openhands.tools.file_editor  # noqa: F401
    import openhands.tools.terminal  # noqa: F401

    from agenter.backends.openhands import _tools  # noqa: F401
