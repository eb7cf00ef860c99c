"""Fixtures for the openhands backend's tests (Python >= 3.12 with the 'openhands' extra)."""

from __future__ import annotations

import pytest

from agenter.backends.agents.openhands import OpenHandsBackend
from agenter.host.requirements import missing_requirements


def openhands_missing() -> str | None:
    """Why the OpenHands SDK cannot run here, or None."""
    missing = missing_requirements(OpenHandsBackend.requirements(None))  # type: ignore[arg-type]
    return "; ".join(missing) or None


@pytest.fixture(scope="session")
def openhands_imported() -> None:
    """Import OpenHands once up front (seconds on a busy machine) so time budgets measure runs."""
    problem = openhands_missing()
    if problem:
        pytest.skip(problem)
    from agenter.backends.agents.openhands import _runtime

    _runtime.prepare_environment()
    import openhands.sdk
    import openhands.tools.file_editor
    import openhands.tools.terminal  # noqa: F401

    from agenter.backends.agents.openhands import _tools  # noqa: F401
