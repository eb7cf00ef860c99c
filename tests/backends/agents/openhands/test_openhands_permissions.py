"""openhands permissions: the REAL OpenHands agent (openhands-sdk) against the scripted model
server, every action decided by agenter's permission gate before OpenHands runs it. Hostile calls
are denied with the reason in the model's next request, the run goes on, and nothing happened on
disk, in the git remote or on the network. The action mapping has plain unit tests at the end."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.agents.openhands import OpenHandsBackend
from agenter.backends.agents.openhands._permissions import ENFORCED_KINDS, action_fields, tool_call, use_home
from agenter.host.requirements import missing_requirements
from agenter.permissions import PermissionGate, PermissionPolicy, PermissionRequest
from agenter.testing import conformance, reply
from agenter.testing import tool_call as model_tool_call
from agenter.testing._scene import ASK_TOUCH, FAKE_KEY_LINE, private_home
from agenter.tools import tool
from agenter.tools.spec import ToolSpec

from ...kit import run_agent
from .cases import tool_results

MISSING = "; ".join(missing_requirements(OpenHandsBackend.requirements(None)))  # type: ignore[arg-type]
MODEL = "openai/gpt-4o"
API_KEY = "sk-test-openhands-perm-0123456789"

agent_test = [
    pytest.mark.agent,
    pytest.mark.py312,
    pytest.mark.skipif(bool(MISSING), reason=MISSING),
    pytest.mark.usefixtures("openhands_imported", "no_leftovers"),
    pytest.mark.timeout(180),
]

#: Every test here, the pure ones too, runs in the Python 3.12 environment (scripts/run-tests.sh).
pytestmark = pytest.mark.py312


def real_agent(test: Any) -> Any:
    for mark in reversed(agent_test):
        test = mark(test)
    return test


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private HOME for the terminal: the fake private key and no shell profile (OpenHands'
    bash -i gives a profile one second; see docs/backends/openhands.md)."""
    return private_home(tmp_path / "home")


def make_agent(server: Any, home: Path, **kwargs: Any) -> AutonomousCodingAgent:
    return AutonomousCodingAgent(backend="openhands", model=MODEL, sandbox=False, base_url=server.base_url + "/v1",
                                 api_key=API_KEY, max_retries=0, openhands_retry_min_wait=0, max_retry_wait=0,
                                 env={"HOME": str(home)}, openhands_persistence_dir=str(home / "conversations"),
                                 max_iterations=1, **kwargs)


def finish(message: str = "Done.") -> Any:
    return reply(model_tool_call("finish", {"message": message}))


# ---------------------------------------------------------------------------------------------
# The hostile attempts, with no policy (the default) and with permissions="bypass"


@real_agent
async def test_hostile_calls_are_refused_without_a_policy(kit, tmp_path):
    await conformance.check_hostile_calls_are_refused_and_the_turn_goes_on(kit.harness(), tmp_path, permissions=None)


@real_agent
async def test_the_terminal_cannot_read_the_key_either(scripted_model_server, git_repo, home):
    """The contract's key read is the file editor's; the terminal's `cat ~/.ssh/id_rsa` is refused too."""
    server = scripted_model_server([reply(model_tool_call("terminal", {"command": "cat ~/.ssh/id_rsa"})),
                                    finish("Done; the call was refused.")])
    result, events = await run_agent(make_agent(server, home, permissions="bypass"), git_repo, require_changes=False)
    assert FAKE_KEY_LINE not in json.dumps([r.body for r in server.model_requests])
    said = tool_results(server)
    assert said[0].startswith("Action rejected: Permission denied") and "holds credentials" in said[0]
    assert "safety check" in said[0]
    (denial,) = result.permission_denials
    assert denial["tool"] == "terminal" and "credentials" in denial["rule"].split(":")[1].split(",")
    assert [(e["tool"], e["decision"]) for e in events] == [("terminal", "deny")]
    assert result.status is CodingStatus.COMPLETED, result.error


@real_agent
async def test_without_a_policy_the_tools_may_still_leave_the_workspace(scripted_model_server, git_repo, home, tmp_path):
    """No policy: staying inside cwd is not enforced (the backend has no sandbox), as before the
    gate; with a policy, even bypass, a write outside needs someone's approval."""
    outside = tmp_path / "outside.txt"
    script = [reply(model_tool_call("file_editor", {"command": "create", "path": str(outside), "file_text": "x\n"})),
              finish()]
    agent = make_agent(scripted_model_server(script), home)
    result, events = await run_agent(agent, git_repo, require_changes=False)
    assert outside.read_text() == "x\n" and result.permission_denials == []
    assert [e["decision"] for e in events] == ["allow"]

    outside.unlink()
    agent = make_agent(scripted_model_server(script), home, permissions="bypass")
    result, _ = await run_agent(agent, git_repo, require_changes=False)
    assert not outside.exists()
    assert result.permission_denials[0]["rule"] == "safety:outside-workspace"


# ---------------------------------------------------------------------------------------------
# Asking: answered allow and deny by the callback, and a callback that never answers


@real_agent
async def test_the_time_budget_ends_a_run_waiting_for_an_answer(scripted_model_server, git_repo, home):
    """A question without a deadline must not hold the run past its time budget."""
    asked = threading.Event()

    async def never(request: PermissionRequest) -> bool:
        asked.set()
        await asyncio.Event().wait()
        return True

    server = scripted_model_server([reply(model_tool_call("terminal", {"command": "touch never.txt"})), finish()])
    agent = make_agent(server, home, permissions=ASK_TOUCH, on_permission=never, permission_timeout=None)
    started = time.monotonic()
    result, _ = await run_agent(agent, git_repo, budget=Budget(max_time_seconds=4.0))
    elapsed = time.monotonic() - started

    assert asked.is_set()
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert elapsed < 15, elapsed
    assert not (git_repo / "never.txt").exists()
    # The action blocked without a decision is named in the result (issue 25).
    assert [(d["target"], d["rule"]) for d in result.permission_denials] == [("touch never.txt", "stopped")]


# ---------------------------------------------------------------------------------------------
# Policies, custom tools


@real_agent
async def test_policy_rules_cover_custom_and_file_tools(scripted_model_server, git_repo, home):
    calls: list[str] = []

    @tool(spec=ToolSpec(read_only=True))
    def lookup(term: str) -> str:
        """Look a term up."""
        calls.append(term)
        return f"{term}: found"

    @tool
    def deploy(target: str) -> str:
        """Deploy."""
        calls.append(f"deploy {target}")
        return "deployed"

    (git_repo / "src").mkdir()  # OpenHands' editor creates files, not folders
    server = scripted_model_server([
        reply(model_tool_call("lookup", {"term": "greet"})),
        reply(model_tool_call("deploy", {"target": "prod"})),
        reply(model_tool_call("file_editor", {"command": "create", "path": str(git_repo / "src" / "new.py"),
                                              "file_text": "X = 1\n"})),
        reply(model_tool_call("file_editor", {"command": "create", "path": str(git_repo / "README.md"),
                                              "file_text": "no\n"})),
        reply(model_tool_call("file_editor", {"command": "view", "path": str(git_repo / "app.py")})),
        reply(model_tool_call("terminal", {"command": "ls"})),
        reply(model_tool_call("terminal", {"command": "rm app.py"})),
        finish(),
    ])
    agent = make_agent(server, home, tools=[lookup, deploy],
                       permissions={"rules": ["allow edit:src/**"], "mode": "default"})
    result, _ = await run_agent(agent, git_repo)

    assert calls == ["greet"]  # deploy declares nothing: it needs approval, and no one is asked
    assert (git_repo / "src" / "new.py").exists() and not (git_repo / "README.md").exists()
    assert (git_repo / "app.py").exists()
    said = tool_results(server)
    rejected = [s.startswith("Action rejected") for s in said]
    assert rejected == [False, True, False, True, False, False, True]
    assert all("needs approval" in s for s, r in zip(said, rejected, strict=True) if r)
    assert "def greet" in said[4] and "app.py" in said[5]
    assert [d["tool"] for d in result.permission_denials] == ["deploy", "file_editor", "terminal"]


def test_the_enforced_kinds_are_declared_and_others_fail_at_construction():
    assert OpenHandsBackend.permission_kinds == ENFORCED_KINDS == {"read", "edit", "shell", "custom"}
    common: dict[str, Any] = {"backend": "openhands", "model": MODEL, "sandbox": False, "api_key": API_KEY,
                              "openhands_persistence_dir": None}
    agent = AutonomousCodingAgent(**common, permissions=[
        "allow custom:lookup", "deny read:secrets/**", "ask shell:git push*", "allow edit:src/**"])
    assert agent.permissions is not None and len(agent.permissions.rules) == 4
    for rules in (["deny network"], ["deny mcp:github"]):
        with pytest.raises(ConfigurationError, match="cannot enforce"):
            AutonomousCodingAgent(**common, permissions=rules)


# ---------------------------------------------------------------------------------------------
# Pure logic: OpenHands actions as the gate sees them


def test_openhands_actions_map_onto_gate_calls():
    view = tool_call("file_editor", {"command": "view", "path": "/w/a.py"})
    assert view is not None and (view.kind, view.paths, view.read_only) == ("read", ("/w/a.py",), True)
    for command in ("create", "str_replace", "insert", "undo_edit", "some_new_command"):
        edit = tool_call("file_editor", {"command": command, "path": "/w/a.py", "file_text": "x"})
        assert edit is not None and (edit.kind, edit.paths, edit.name) == ("edit", ("/w/a.py",), "file_editor")
    shell = tool_call("terminal", {"command": "git push --force", "is_input": False, "timeout": None})
    assert shell is not None and (shell.kind, shell.command, shell.name) == ("shell", "git push --force", "terminal")
    assert tool_call("terminal", {"command": "", "is_input": False}) is None  # more output, please
    assert tool_call("terminal", {"command": "C-c", "is_input": True}) is None  # a key press
    assert tool_call("terminal", {"command": "ENTER", "is_input": True}) is None
    typed = tool_call("terminal", {"command": "rm -rf /", "is_input": True})  # text to a running program
    assert typed is not None and typed.command == "rm -rf /"
    reset = tool_call("terminal", {"command": "ls", "reset": True})
    assert reset is not None and reset.kind == "shell"
    for own in ("finish", "think", "refuse_task"):
        assert tool_call(own, {"message": "m"}) is None

    @tool(spec=ToolSpec(read_only=True))
    def lookup(term: str) -> str:
        """Look up."""
        return term

    custom = tool_call("lookup", {"term": "x"}, {"lookup": lookup})
    assert custom is not None and (custom.kind, custom.name, custom.read_only) == ("custom", "lookup", True)
    undeclared = tool_call("other", {"a": 1})
    assert undeclared is not None and (undeclared.kind, undeclared.requires_permission) == ("custom", True)


def test_action_fields_and_home():
    class Data:
        data = {"term": "x"}

    class Fields:
        def model_dump(self) -> dict[str, Any]:
            return {"command": "ls", "is_input": False}

    assert action_fields(Data()) == {"term": "x"}
    assert action_fields(Fields()) == {"command": "ls", "is_input": False}
    assert action_fields(object()) == {}


async def test_the_gate_knows_the_terminals_home(tmp_path):
    """~/.npmrc holds credentials only in the home the terminal has (the env option's HOME)."""
    home = tmp_path / "home"
    home.mkdir()
    gate = PermissionGate(PermissionPolicy(mode="bypass"), tmp_path, home="/nonexistent-home")
    read_npmrc = tool_call("terminal", {"command": f"cat {home}/.npmrc"})
    assert read_npmrc is not None
    assert (await gate.decide(read_npmrc)).allowed
    use_home(gate, str(home))
    decision = await gate.decide(read_npmrc)
    assert not decision.allowed and decision.rule == "safety:credentials"
