from __future__ import annotations

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
