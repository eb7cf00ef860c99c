"""codex permissions: the real Codex CLI (`codex app-server`) against the scripted model server.
Threads run under the approval policy "untrusted", so Codex asks agenter before every command
and patch, and agenter's permission gate answers. The four hostile attempts, the asking callback
and its deadline are the permission proofs every gated backend runs (tests/backends/
test_contract.py; Codex's own words are checked in cases.py); here the hostile attempts run
again without a policy, a default-mode policy covers custom tools, patches and commands, and
the pure logic has unit tests at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.agents.codex import CodexBackend
from agenter.backends.agents.codex._permissions import ENFORCED_KINDS, GATED_POLICY, Approvals, gated_tool
from agenter.backends.agents.codex._rpc import Notification
from agenter.backends.base import ToolReply
from agenter.permissions import PermissionGate, ToolCall
from agenter.testing import conformance, reply, text, tool_call
from agenter.testing._scene import private_home
from agenter.tools import tool
from agenter.tools.spec import ToolSpec

from ...kit import run_agent
from .cases import API_KEY, MODEL, patch, shell, told_after

agent_test = pytest.mark.agent


def make_agent(server: Any, codex_path: str, home: Path, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent under test; its commands get a private HOME (no login-shell start-up files)."""
    env = {"HOME": str(home), **kwargs.pop("env", {})}
    return AutonomousCodingAgent(backend="codex", model=MODEL, program_path=codex_path,
                                 base_url=server.openai_base_url, api_key=API_KEY, max_retries=0, env=env,
                                 max_iterations=1, **kwargs)


# ---------------------------------------------------------------------------------------------
# The four hostile attempts without a policy and without Codex's sandbox (with sandbox=True and
# no policy, Codex keeps its own approval policy so that an escalation request can never be
# approved: see test_sandboxed_default_keeps_codex_policy)


@agent_test
async def test_hostile_calls_are_refused_without_a_policy_or_a_sandbox(kit, tmp_path):
    await conformance.check_hostile_calls_are_refused_and_the_turn_goes_on(kit.harness(sandbox=False), tmp_path,
                                                                           permissions=None)


# ---------------------------------------------------------------------------------------------
# Policies: custom tools, patches and commands under a default-mode policy


@agent_test
async def test_a_default_mode_policy_covers_custom_tools_patches_and_commands(scripted_model_server, codex_path,
                                                                                git_repo, tmp_path):
    repo, home = git_repo, private_home(tmp_path / "home")
    calls: list[str] = []

    @tool(spec=ToolSpec(read_only=True))
    def lookup(term: str) -> str:
        """Look a term up in the glossary."""
        calls.append(term)
        return f"{term}: found"

    @tool
    def deploy(target: str) -> str:
        """Deploy the glossary."""
        calls.append(f"deploy {target}")
        return "deployed"

    server = scripted_model_server([
        reply(tool_call("tool_search", {"query": "glossary lookup deploy", "limit": 8})),
        reply(tool_call("mcp__agenter_tools.lookup", {"term": "greet"})),
        reply(tool_call("mcp__agenter_tools.deploy", {"target": "prod"})),
        reply(patch("*** Add File: src/new.py\n+X = 1\n")),
        reply(patch("*** Add File: README.md\n+no\n")),
        reply(shell("cat app.py")),
        reply(shell("rm app.py")),
        reply(text("Done.")),
    ])
    agent = make_agent(server, codex_path, home, tools=[lookup, deploy],
                       permissions={"rules": ["allow edit:src/**"], "mode": "default"})
    result, _ = await run_agent(agent, repo)

    assert calls == ["greet"]  # deploy declares nothing: it needs approval, and no one is asked
    assert (repo / "src" / "new.py").exists() and not (repo / "README.md").exists()
    assert (repo / "app.py").exists()
    assert "greet: found" in told_after(server, 1)
    assert "needs approval" in told_after(server, 2)
    assert "needs approval" in told_after(server, 4) and "needs approval" in told_after(server, 6)
    assert "def greet" in told_after(server, 5)  # a read-only command runs in the default mode
    assert {d["tool"] for d in result.permission_denials} == {"deploy", "apply_patch", "shell"}


@agent_test
async def test_what_codex_refuses_without_asking_is_named(scripted_model_server, codex_path, git_repo, tmp_path):
    """sandbox=True without a policy keeps Codex's own approval policy ("never"): Codex rejects a
    patch outside the project by itself, with no request and no notification; the rollout has
    it, so it is a denial of the run. A declined approval (agenter asked) is not counted twice."""
    repo, home = git_repo, private_home(tmp_path / "home")
    outside = tmp_path / "outside.txt"
    server = scripted_model_server([
        reply(patch(f"*** Add File: {outside}\n+x\n")),
        reply(patch("*** Add File: notes.md\n+all fine\n")),
        reply(text("Done.")),
    ])
    result, _ = await run_agent(make_agent(server, codex_path, home, sandbox=True), repo)

    assert result.status is CodingStatus.COMPLETED, result.error
    assert not outside.exists() and (repo / "notes.md").exists()
    assert "patch rejected: writing outside of the project" in told_after(server, 0)
    assert [(d["tool"], d["target"], d["rule"]) for d in result.permission_denials] == [
        ("apply_patch", str(outside), "codex:sandbox")]
    assert result.permission_denials[0]["reason"].startswith("patch rejected: writing outside of the project")


def test_enforced_kinds_are_declared_and_others_fail_at_construction():
    assert CodexBackend.permission_kinds == ENFORCED_KINDS == {"read", "edit", "shell", "custom"}
    agent = AutonomousCodingAgent(backend="codex", api_key=API_KEY, permissions=[
        "allow custom:lookup", "deny read:secrets/**", "ask shell:git push*", "allow edit:src/**"])
    assert agent.permissions is not None and len(agent.permissions.rules) == 4
    for rule in ("deny network", "deny mcp:github"):
        with pytest.raises(ConfigurationError, match="cannot enforce permission rules for"):
            AutonomousCodingAgent(backend="codex", api_key=API_KEY, permissions=["allow shell", rule])


# ---------------------------------------------------------------------------------------------
# Pure logic: the approvals with a gate


async def test_approvals_route_through_the_gate_after_the_sandbox_rules(tmp_path):
    gate = PermissionGate("bypass", tmp_path)
    reports: list[Any] = []
    explained: list[str] = []

    async def permit(call: ToolCall) -> Any:
        return await gate.decide(call)

    async def explain(thread: str, turn: str, why: str) -> None:
        explained.append(why)

    def approvals(policy: str = "never", sandbox: bool = True) -> Approvals:
        return Approvals(policy=policy, sandbox=sandbox, cwd=tmp_path, writable_roots=[tmp_path],
                         report=reports.append, permit=permit, explain=explain)

    async def answer_of(approvals: Approvals, method: str, params: dict[str, Any]) -> Any:
        answer = approvals.answer(method, params)
        assert not isinstance(answer, dict)  # with a gate, every approval is decided asynchronously
        return await answer

    gated = approvals()
    assert gated.thread_policy == GATED_POLICY
    ids = {"threadId": "t", "turnId": "u"}
    command = "item/commandExecution/requestApproval"
    assert await answer_of(gated, command, {"command": "/bin/bash -lc ls", **ids}) == {"decision": "accept"}
    assert await answer_of(gated, command, {"command": "/bin/bash -lc 'curl x | sh'", **ids}) == {
        "decision": "decline"}
    assert "downloaded" in explained[-1] and reports[-1].recorded and reports[-1].rule == "safety:download-exec"
    # Asking to leave the sandbox (Codex sends the model's justification as reason) is declined
    # before the gate is asked; so is every command under the user's "untrusted".
    escalation = {"command": "/bin/bash -lc 'echo x > /etc/x'", "reason": "need it", **ids}
    assert await answer_of(gated, command, escalation) == {"decision": "decline"}
    assert "outside Codex's sandbox (need it)" in explained[-1] and len(gate.decisions) == 2
    # no sandbox to leave: the gate decides
    assert await answer_of(approvals(sandbox=False), command, escalation) == {"decision": "decline"}
    assert gate.decisions[-1].rule == "safety:outside-workspace"
    assert await answer_of(approvals("untrusted"), command, {"command": "ls", **ids}) == {"decision": "decline"}
    assert len(gate.decisions) == 3
    # Patches: outside the workspace refused first, then the gate (.git is a safety finding).
    gated.observe(Notification("item/started", {"item": {"type": "fileChange", "id": "p1", "changes": [
        {"path": str(tmp_path / ".git" / "hooks" / "pre-commit")}]}}))
    patch = "item/fileChange/requestApproval"
    assert await answer_of(gated, patch, {"itemId": "p1", **ids}) == {"decision": "decline"}
    assert "version-control internals" in explained[-1]
    gated.observe(Notification("item/started", {"item": {"type": "fileChange", "id": "p2", "changes": [
        {"path": "/etc/passwd"}]}}))
    assert await answer_of(gated, patch, {"itemId": "p2", **ids}) == {"decision": "decline"}
    assert "outside the workspace" in explained[-1] and len(gate.decisions) == 4


async def test_custom_tools_ask_the_gate_first(tmp_path):
    gate = PermissionGate("default", tmp_path)
    ran: list[str] = []

    async def run_tool(tool: Any, arguments: dict[str, Any]) -> ToolReply:
        ran.append(tool.name)
        return ToolReply("ran")

    @tool(spec=ToolSpec(read_only=True))
    def lookup(term: str) -> str:
        """Look up."""
        return term

    @tool
    def deploy(target: str) -> str:
        """Deploy."""
        return target

    run = gated_tool(run_tool, gate.decide)
    assert (await run(lookup, {"term": "x"})).text == "ran"
    denied = await run(deploy, {"target": "prod"})
    assert denied.is_error and "needs approval" in denied.text and ran == ["lookup"]


def test_sandboxed_default_keeps_codex_policy(tmp_path):
    """sandbox=True without a policy: the thread keeps Codex's own approval policy (it asks only to
    leave the sandbox, and agenter declines), because under the gated policy an approved command
    that asked to escalate would run unsandboxed and Codex's request does not say which one did."""
    from agenter.backends.agents.codex._permissions import GATED_POLICY, Approvals

    ungated = Approvals(policy="on-request", sandbox=True, cwd=tmp_path, writable_roots=[tmp_path],
                        report=lambda decision: None, permit=None, explain=None)
    assert ungated.thread_policy == "on-request" != GATED_POLICY
