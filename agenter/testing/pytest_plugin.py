"""pytest fixture ``scripted_model_server``: a factory that starts servers and stops them.

Enable with ``pytest_plugins = ["agenter.testing.pytest_plugin"]`` in conftest.py::

    def test_agent(scripted_model_server):
        server = scripted_model_server([reply(text("hi"))])
        ...  # server is running; it is stopped after the test, also on failure
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .server import ScriptedModelServer


@pytest.fixture
def scripted_model_server() -> Iterator[Any]:
    servers: list[ScriptedModelServer] = []

    def start(script: Any = None, **kwargs: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(script, **kwargs).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
