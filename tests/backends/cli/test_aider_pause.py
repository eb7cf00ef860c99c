"""Approvals that can wait on aider-cli (docs/approvals.md): the REAL Aider against the scripted
model server. An edit of a file an `ask` rule covers, with nobody to answer, is answered "no" to
Aider and the run pauses with the edit pending; a fresh agent with the same store (and another
home: another host) writes the chat history back, resumes Aider's chat with the person's answer,
and the edit the model makes again lands once approved and stays out when denied. The scripted
model answers by what a request holds, never by arrival order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.cli.aider import HISTORY_KIND, AiderCliBackend
from agenter.testing import reply, text

from ..kit import Case
from . import cases

pytestmark = pytest.mark.agent

POLICY = {"rules": ["ask edit:config.py"]}
TASK = "Set DEBUG to True in config.py."
EDIT = "Setting DEBUG.\n\nconfig.py\n```\nDEBUG = True\n```\n"


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return cases.aider(tmp_path)


def scripted_model(request: Any) -> Any:
    """Edit config.py; told it was approved, edit it again; told it was denied, finish."""
    said = json.dumps(request.body.get("messages"))
    if "summarize this partial conversation" in said.lower():
        return reply(text("A summary of the chat."))  # Aider's weak-model summary of a long history
    if "The person has answered" in said and ": approved" in said:
        return reply(text(EDIT))
    if "The person has answered" in said:
        return reply(text("Understood: config.py stays as it is."))
    return reply(text(EDIT))


def make_agent(kit: Any, server: Any, store: Path, home: Path | None = None, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent as this process (or another host, with another `home`) builds it."""
    kwargs.setdefault("on_ask", "pause")
    return AutonomousCodingAgent(backend=AiderCliBackend, model=kit.case.model, sandbox=False, permissions=POLICY,
                                 conversation_store=str(store), **kit.options(server, home=home), **kwargs)


def workspace(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.py").write_text("DEBUG = False\n")
    return repo


@pytest.mark.timeout(300)  # two runs of Aider
async def test_an_ask_pauses_aider_and_another_host_approves_the_edit(kit, tmp_path):
    repo, store = workspace(tmp_path), tmp_path / "store"
    server = kit.server(handler=scripted_model)
    paused = await make_agent(kit, server, store).execute(TASK, cwd=repo, require_changes=False)
    assert paused.status is CodingStatus.PAUSED and not paused.ok, paused.error
    assert (repo / "config.py").read_text() == "DEBUG = False\n"  # Aider was told no
    (waiting,) = paused.pending
    assert (waiting.tool, waiting.input, waiting.needs_approval) == ("aider", {"path": "config.py"}, True)
    assert (waiting.rule, waiting.stage) == ("ask edit:config.py", "ask_rule")
    assert [Path(p).name for p in waiting.paths] == ["config.py"]
    assert not paused.permission_denials and paused.resume_handle.startswith("pause-")
    # The chat history went into the store beside the record.
    kept = (store / f"{paused.session_id}.jsonl").read_text()
    assert HISTORY_KIND in kept and "DEBUG = True" in kept
    asked = len(server.model_requests)

    # Another host (another home, so no chat history of its own) with the same store approves.
    other = kit.fresh_dir()
    events = [event async for event in make_agent(kit, server, store, home=other).stream_approve(paused.resume_handle)]
    resumed = events[-1].result
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id  # the same chat, restored there
    assert (repo / "config.py").read_text() == "DEBUG = True\n" and resumed.files == {"config.py": "DEBUG = True\n"}
    assert (other / ".cache" / "agenter" / "aider-sessions" / f"{paused.session_id}.chat.md").is_file()
    told = json.dumps(server.model_requests[asked].body["messages"])
    assert "The person has answered" in told and f"(call {waiting.id}): approved" in told
    assert "Setting DEBUG" in told  # Aider restored the paused chat: the first reply is in it
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    assert [(d["decision"], d["answered_by"]) for d in decisions] == [("allow", "approval")]
    assert not resumed.permission_denials
    with pytest.raises(ConfigurationError, match="was already used"):
        await make_agent(kit, server, store).approve(paused.resume_handle)


@pytest.mark.timeout(300)  # two runs of Aider
async def test_a_denied_edit_stays_out_and_is_named(kit, tmp_path):
    repo, store = workspace(tmp_path), tmp_path / "store"
    server = kit.server(handler=scripted_model)
    paused = await make_agent(kit, server, store).execute(TASK, cwd=repo, require_changes=False)
    assert paused.status is CodingStatus.PAUSED, paused.error
    (waiting,) = paused.pending
    resumed = await make_agent(kit, server, store).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "config.py").read_text() == "DEBUG = False\n" and not resumed.files
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["rule"]) == ("aider", "ask edit:config.py") and "denied by a person" in denial["reason"]
    told = json.dumps(server.model_requests[-1].body["messages"])
    assert f"(call {waiting.id}): denied." in told


def test_only_aider_cli_of_the_agent_clis_can_pause():
    from agenter.backends import load_backend

    assert AiderCliBackend.capabilities.pause
    for name in ("claude-cli", "codex-cli", "gemini-cli", "opencode-cli"):
        assert not load_backend(name).capabilities.pause, name
        with pytest.raises(ConfigurationError, match="on_ask='pause' needs a backend that can pause"):
            AutonomousCodingAgent(backend=name, on_ask="pause")
    with pytest.raises(ConfigurationError, match="conversation_store=False keeps none"):
        AutonomousCodingAgent(backend="aider-cli", program_path=cases.AIDER or "aider", sandbox=False,
                              on_ask="pause", conversation_store=False)
