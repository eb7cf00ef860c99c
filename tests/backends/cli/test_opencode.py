"""opencode-cli: the real OpenCode (npm opencode-ai) against the scripted model server's OpenAI
Responses wire. OpenCode has no sandbox: the runs use sandbox=False, and sandbox=True is refused
before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent
from agenter._errors import ConfigurationError
from agenter.backends.base import BackendSettings
from agenter.backends.cli.opencode import OpenCodeCliBackend, OpenCodeCliOptions
from agenter.testing import reply, text, tool_call

from ..kit import Case
from . import cases

pytestmark = pytest.mark.agent


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the module: OpenCode sets up its database on a home's first run (seconds)."""
    return tmp_path_factory.mktemp("opencode")


@pytest.fixture
def case(shared: Path) -> Case:
    return cases.opencode(shared)


def test_sandbox_is_refused_before_anything_runs():
    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="opencode-cli", program_path=cases.OPENCODE or "opencode", sandbox=True)
    assert "sandbox=False" in str(caught.value)


def test_base_url_needs_a_provider_in_the_model_name():
    with pytest.raises(ConfigurationError) as caught:
        OpenCodeCliBackend.validate_settings(_settings(model="gpt-4.1", base_url="http://127.0.0.1:9/v1"))
    assert "provider/model" in str(caught.value)


def test_the_config_carries_provider_permissions_and_mcp_servers():
    backend = OpenCodeCliBackend(_settings(model="openai/gpt-4.1", base_url="http://127.0.0.1:9/v1",
                                           api_key="sk-x-123456789",
                                           mcp_servers={"docs": {"type": "remote", "url": "http://127.0.0.1:9/mcp"}},
                                           opencode_config={"permission": {"webfetch": "deny"}}))
    config: dict[str, Any] = backend.config()
    assert config["provider"] == {"openai": {"options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "sk-x-123456789"}}}
    assert config["permission"] == {"edit": "allow", "bash": "allow", "webfetch": "deny"}
    assert config["mcp"]["docs"]["url"] == "http://127.0.0.1:9/mcp" and config["model"] == "openai/gpt-4.1"


def _settings(*, model: str | None, **options: Any) -> BackendSettings[Any]:
    return BackendSettings(model=model, tools=[], sandbox=False, options=OpenCodeCliOptions(**options))


async def test_commands_and_file_edits_arrive_in_the_event_vocabulary(kit, tmp_path):
    (tmp_path / "old.txt").write_text("one\ntwo\nthree\n")
    old = str(tmp_path / "old.txt")
    messages = await kit.run(tmp_path, [
        reply(tool_call("write", {"filePath": str(tmp_path / "notes.md"), "content": "hi\nthere\n"})),
        reply(tool_call("read", {"filePath": old})),
        reply(tool_call("edit", {"filePath": old, "oldString": "two\n", "newString": "2\n2b\n"})),
        reply(tool_call("bash", {"command": "echo hi; exit 3", "description": "Fail"})),
        reply(text("Done."))])
    assert kit.vocabulary(messages) == [("edit", "notes.md", 2, 0), ("edit", "old.txt", 2, 1),
                                        ("start", "echo hi; exit 3"), ("end", 3)]
    assert (tmp_path / "notes.md").read_text() == "hi\nthere\n"
    assert (tmp_path / "old.txt").read_text() == "one\n2\n2b\nthree\n"
