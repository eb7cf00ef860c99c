"""acp's fixtures: `mark`, the run token its agents carry (see `run_token` in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def mark(run_token: str) -> str:
    """The token in the agent's environment (TOKEN_ENV); afterwards no process may carry it."""
    return run_token
