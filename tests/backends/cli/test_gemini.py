"""gemini-cli: the real Gemini CLI (npm @google/gemini-cli, pinned in package.json) against the
scripted model server's Gemini wire. Its sandbox needs a container engine, so the runs here use
sandbox=False; sandbox=True without Docker or Podman is refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent
from agenter._errors import RequirementError
from agenter.backends.base import SessionSpec
from agenter.backends.cli.gemini import overlay_home
from agenter.testing import reply, text, tool_call

from ..kit import Case
from . import cases

pytestmark = pytest.mark.agent


def shell(command: str) -> Any:
    return reply(tool_call("run_shell_command", {"command": command}))


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return cases.gemini(tmp_path)


def test_sandbox_without_a_container_engine_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker, no podman
    monkeypatch.delenv("GEMINI_SANDBOX", raising=False)
    with pytest.raises(RequirementError) as caught:
        AutonomousCodingAgent(backend="gemini-cli", program_path=cases.GEMINI or "gemini", sandbox=True)
    assert "Docker or Podman" in str(caught.value) and "sandbox=False" in str(caught.value)


async def test_settings_go_to_an_overlay_home_and_never_change_yours(kit, tmp_path):
    """With the user's own home, agenter's settings live in an overlay whose entries link to it."""
    user = tmp_path / "user"
    (user / ".gemini").mkdir(parents=True)
    settings = {"ui": {"theme": "Dracula"}, "general": {"vimMode": True}}
    (user / ".gemini" / "settings.json").write_text(json.dumps(settings))
    (user / ".gemini" / "oauth_creds.json").write_text("{}")
    home = overlay_home(user / ".gemini", tmp_path / "overlay", {"general": {"maxAttempts": 1}})
    merged = json.loads((home / ".gemini" / "settings.json").read_text())
    assert merged == {"ui": {"theme": "Dracula"}, "general": {"vimMode": True, "maxAttempts": 1}}
    assert (home / ".gemini" / "oauth_creds.json").resolve() == (user / ".gemini" / "oauth_creds.json").resolve()
    assert json.loads((user / ".gemini" / "settings.json").read_text()) == settings

    server = kit.server([reply(text("Hello."))])
    backend = kit.backend(server)
    work = tmp_path / "work"
    work.mkdir()
    await backend.connect(SessionSpec(cwd=work))
    try:
        await kit.turn(backend, "Say hello.")
    finally:
        await backend.disconnect()
    assert not (kit.home / ".gemini" / "settings.json").exists()  # the run used its overlay
    (overlay,) = (kit.home / ".cache" / "agenter").iterdir()
    assert json.loads((overlay / ".gemini" / "settings.json").read_text())["general"] == {"maxAttempts": 1}


async def test_commands_and_file_edits_arrive_in_the_event_vocabulary(kit, tmp_path):
    (tmp_path / "old.txt").write_text("one\ntwo\nthree\n")
    messages = await kit.run(tmp_path, [
        reply(tool_call("write_file", {"file_path": "notes.md", "content": "hi\nthere\n"})),
        reply(tool_call("replace", {"file_path": str(tmp_path / "old.txt"), "old_string": "two\n",
                                    "new_string": "2\n2b\n", "instruction": "Change two"})),
        shell("echo hi; exit 3"), shell("echo ok"), reply(text("Done."))])
    assert kit.vocabulary(messages) == [("edit", "notes.md", 2, 0), ("edit", "old.txt", 2, 1),
                                        ("start", "echo hi; exit 3"), ("end", 3), ("start", "echo ok"), ("end", 0)]
    assert (tmp_path / "notes.md").read_text() == "hi\nthere\n"
    assert (tmp_path / "old.txt").read_text() == "one\n2\n2b\nthree\n"
