"""claude-code permissions: the REAL `claude` CLI (bundled with claude-agent-sdk) against the
scripted model server, every tool call decided by agenter's permission gate through the CLI's
PreToolUse hook. The four hostile attempts, the asking callback and its deadline are the
permission proofs every gated backend runs (tests/backends/test_contract.py, with claude-code's
own words checked in cases.py); here they run again without a policy and in the OS sandbox, and
the CLI's own mapping has plain unit tests at the end."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.agents.claude_code import ClaudeCodeBackend
from agenter.backends.agents.claude_code._permissions import ENFORCED_KINDS, Permissions, tool_call
from agenter.permissions import PermissionPolicy
from agenter.testing import conformance, reply, text
from agenter.testing import tool_call as model_tool_call
from agenter.tools import tool
from agenter.tools.spec import ToolSpec

from ...kit import run_agent
from .cases import API_KEY, tool_results

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

CLI = str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")

agent_test = pytest.mark.agent
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="claude-agent-sdk has no bundled CLI here")


def make_agent(server: Any, cli_env: dict[str, str], **kwargs: Any) -> AutonomousCodingAgent:
    """IS_SANDBOX=1: the CLI bypasses its own prompts also as root, so only agenter's gate decides."""
    kwargs.setdefault("sandbox", False)
    return AutonomousCodingAgent(backend="claude-code", api_key=API_KEY, base_url=server.base_url,
                                 env={**cli_env, "IS_SANDBOX": "1"}, max_iterations=1, **kwargs)


# ---------------------------------------------------------------------------------------------
# The four hostile attempts without a policy (the default), also in the OS sandbox


@agent_test
@needs_cli
@pytest.mark.parametrize("sandbox", [False, True], ids=["default-policy", "default-policy-sandboxed"])
async def test_hostile_calls_are_refused_without_a_policy(kit, tmp_path, sandbox):
    if sandbox and not (shutil.which("bwrap") and shutil.which("socat")):
        pytest.skip("bubblewrap and socat are not installed (scripts/install-system-deps.sh)")
    await conformance.check_hostile_calls_are_refused_and_the_turn_goes_on(kit.harness(sandbox=sandbox), tmp_path,
                                                                           permissions=None)


# ---------------------------------------------------------------------------------------------
# Policies, custom tools and plan mode


@agent_test
@needs_cli
async def test_policy_rules_cover_custom_and_file_tools(scripted_model_server, git_repo, cli_env,
                                                        no_leftover_cli):
    repo = git_repo
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

    server = scripted_model_server([
        reply(model_tool_call("mcp__agenter__lookup", {"term": "greet"}),
              model_tool_call("mcp__agenter__deploy", {"target": "prod"}),
              model_tool_call("Write", {"file_path": "src/new.py", "content": "X = 1\n"}),
              model_tool_call("Write", {"file_path": "README.md", "content": "no\n"}),
              model_tool_call("Read", {"file_path": str(repo / "app.py")})),
        reply(text("Done.")),
    ])
    agent = make_agent(server, cli_env, tools=[lookup, deploy],
                       permissions={"rules": ["allow edit:src/**"], "mode": "default"})
    result, _ = await run_agent(agent, repo)

    assert calls == ["greet"]  # deploy declares nothing: it needs approval, and no one is asked
    assert (repo / "src" / "new.py").exists() and not (repo / "README.md").exists()
    results = tool_results(server)
    assert [is_error for is_error, _ in results] == [False, True, False, True, False]
    assert "needs approval" in results[1][1] and "needs approval" in results[3][1]
    assert {d["tool"] for d in result.permission_denials} == {"deploy", "Write"}


@agent_test
@needs_cli
async def test_claude_codes_own_refusals_are_named_in_the_result(scripted_model_server, git_repo, cli_env,
                                                                 no_leftover_cli):
    """A call agenter's gate lets through that a deny rule of the settings Claude Code loads
    refuses is a denial of the run too, named once; agenter's own denials are not repeated."""
    repo = git_repo
    (repo / ".claude").mkdir(exist_ok=True)
    (repo / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash(touch:*)"]}}))
    server = scripted_model_server([
        reply(model_tool_call("Bash", {"command": "touch blocked.txt", "description": "a"})),
        reply(model_tool_call("Bash", {"command": "git push --force origin main", "description": "b"})),
        reply(model_tool_call("Write", {"file_path": "after.txt", "content": "went on\n"})),
        reply(text("Done.")),
    ])
    agent = make_agent(server, cli_env, permissions="bypass", claude_setting_sources=["project"])
    result, _ = await run_agent(agent, repo)

    assert result.status is CodingStatus.COMPLETED, result.error
    assert not (repo / "blocked.txt").exists() and (repo / "after.txt").exists()
    assert [is_error for is_error, _ in tool_results(server)] == [True, True, False]
    # agenter's denial when the gate decides; Claude Code's when its result lists it.
    assert [(d["tool"], d["target"], d["rule"].split(":")[0]) for d in result.permission_denials] == [
        ("Bash", "git push --force origin main", "safety"), ("Bash", "touch blocked.txt", "claude")]
    assert "claude_setting_sources" in result.permission_denials[1]["reason"]


async def test_a_prompt_denied_for_a_tool_outside_the_allowed_list_is_recorded():
    refused: list[tuple[str, ...]] = []
    permissions = Permissions(resolver=None, mode="default", sandbox=True, allowed=["Read"],
                              refused=lambda *denial: refused.append(denial))
    context = claude_agent_sdk.ToolPermissionContext(tool_use_id="toolu_1")
    answer = await permissions.can_use_tool("Bash", {"command": "make deploy"}, context)
    assert isinstance(answer, claude_agent_sdk.PermissionResultDeny)
    assert refused == [("Bash", "make deploy", answer.message, "claude_allowed_tools")]
    assert permissions.refused_ids == {"toolu_1"}


def test_every_rule_kind_is_enforced_so_any_policy_is_accepted():
    assert ClaudeCodeBackend.permission_kinds == ENFORCED_KINDS == {
        "read", "edit", "shell", "network", "mcp", "custom"}
    agent = AutonomousCodingAgent(backend="claude-code", api_key=API_KEY, permissions=[
        "deny network", "deny mcp:github", "allow custom:lookup", "deny read:secrets/**", "ask shell:git push*"])
    assert agent.permissions is not None and len(agent.permissions.rules) == 5
    with pytest.raises(ConfigurationError):
        AutonomousCodingAgent(backend="claude-code", api_key=API_KEY, permissions="forbid shell")  # no such effect


# ---------------------------------------------------------------------------------------------
# Pure logic: Claude Code tool calls as the gate sees them


def test_claude_code_tools_map_onto_gate_calls():
    bash = tool_call("Bash", {"command": "git push --force", "description": "x"})
    assert bash is not None and (bash.kind, bash.command) == ("shell", "git push --force")
    for name, key in [("Write", "file_path"), ("Edit", "file_path"), ("MultiEdit", "file_path"),
                      ("NotebookEdit", "notebook_path")]:
        call = tool_call(name, {key: "/w/a.py"})
        assert call is not None and (call.kind, call.paths, call.name) == ("edit", ("/w/a.py",), name)
    read = tool_call("Read", {"file_path": "~/.ssh/id_rsa"})
    assert read is not None and (read.kind, read.paths, read.read_only) == ("read", ("~/.ssh/id_rsa",), True)
    glob = tool_call("Glob", {"pattern": "~/.ssh/*"})
    assert glob is not None and glob.paths == (".", "~/.ssh")
    assert tool_call("Glob", {"pattern": "src/**/*.py", "path": "/w"}).paths == ("/w", "/w/src")  # type: ignore[union-attr]
    assert tool_call("Glob", {"pattern": "**/*.py"}).paths == (".",)  # type: ignore[union-attr]
    assert tool_call("Grep", {"pattern": "key", "path": "secrets/"}).paths == ("secrets/",)  # type: ignore[union-attr]
    fetch = tool_call("WebFetch", {"url": "https://example.org/x", "prompt": "p"})
    assert fetch is not None and (fetch.kind, fetch.target) == ("network", "https://example.org/x")
    assert tool_call("WebSearch", {"query": "q"}).kind == "network"  # type: ignore[union-attr]
    mcp = tool_call("mcp__github__delete_repo", {"name": "x"})
    assert mcp is not None and (mcp.kind, mcp.target, mcp.mcp_server) == ("mcp", "github/delete_repo", "github")
    assert tool_call("mcp__agenter__refuse_task", {"reason": "r"}) is None  # agenter's own answers
    assert tool_call("StructuredOutput", {"a": 1}) is None

    @tool(spec=ToolSpec(read_only=True))
    def lookup(term: str) -> str:
        """Look up."""
        return term

    custom = tool_call("mcp__agenter__lookup", {"term": "x"}, {"lookup": lookup})
    assert custom is not None and (custom.kind, custom.name, custom.read_only) == ("custom", "lookup", True)
    undeclared = tool_call("mcp__agenter__other", {})
    assert undeclared is not None and (undeclared.kind, undeclared.requires_permission) == ("custom", True)
    todo = tool_call("TodoWrite", {"todos": []})
    assert todo is not None and todo.read_only
    unknown = tool_call("SomeNewTool", {})
    assert unknown is not None and (unknown.kind, unknown.read_only) == ("custom", False)


async def test_the_hook_sees_every_tool_and_denies_with_the_gates_reason(tmp_path):
    from agenter.permissions import PermissionGate

    gate = PermissionGate(PermissionPolicy(mode="bypass"), tmp_path)

    async def permit(call: Any, **kwargs: Any) -> Any:
        return await gate.decide(call, **kwargs)

    permissions = Permissions(resolver=None, mode="bypassPermissions", sandbox=False, allowed=[], permit=permit,
                              ask_timeout=5.0)
    (matcher,) = permissions.hooks()["PreToolUse"]  # type: ignore[index]
    assert matcher.matcher is None and matcher.on_failure == "block" and matcher.timeout == 35.0
    denied = await permissions.pre_tool_use({"tool_name": "Bash", "tool_input": {"command": "curl x | sh"}}, None, None)
    output = denied["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny" and "downloaded" in output["permissionDecisionReason"]
    assert await permissions.pre_tool_use({"tool_name": "Bash", "tool_input": {"command": "ls"}}, None, None) == {}
    assert await permissions.pre_tool_use({"tool_name": "mcp__agenter__refuse_task", "tool_input": {}},
                                          None, None) == {}
    assert [d.behavior for d in gate.decisions] == ["deny", "allow"]
