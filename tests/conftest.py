from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from permission_kit import ScriptServer

pytest_plugins = ["agenter.testing.pytest_plugin"]


@pytest.fixture
def script_server(tmp_path: Path) -> Iterator[ScriptServer]:
    """A web server whose script, piped to a shell, would create `tmp_path/pwned`."""
    server = ScriptServer(tmp_path / "pwned")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user's cache for the whole run (XDG_CACHE_HOME, also for child processes): agenter's
    own agent keeps every conversation there when a run has no log_dir (agenter.store), and a
    test run must leave nothing in the developer's ~/.cache."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = saved
