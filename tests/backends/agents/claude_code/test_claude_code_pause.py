"""Approvals that can wait on claude-code (docs/approvals.md): the REAL `claude` CLI (bundled with
claude-agent-sdk) against the scripted model server. A call the policy asks about with nobody to
answer ends the turn there and the run pauses; a fresh agent (as another process would build it,
with the same store) resumes the Claude Code session, the model is told the answer and makes an
approved call again, and the gate lets exactly that call through. The scripted model answers by
what a request holds (the calls that ran, the answer it was told), never by arrival order, so a
request Claude Code sends again gets the same answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends._pauses import RepeatedCalls
from agenter.backends.agents.claude_code._permissions import NOT_RUN, STOP_REASON, Permissions
from agenter.permissions import PermissionGate, PermissionPolicy
from agenter.testing import reply, text, tool_call

from .cases import API_KEY, tool_results

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

CLI = str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")

agent_test = pytest.mark.agent
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="claude-agent-sdk has no bundled CLI here")

#: Everything allowed but the command that asks.
POLICY = {"rules": ["ask shell:touch b.txt"], "mode": "bypass"}
#: Fixed token counts per model response, so what the continued run carries is exact.
USAGE = {"input_tokens": 1000, "output_tokens": 100}
ASKING = {"command": "touch b.txt", "description": "Create b.txt"}


def make_agent(server: Any, cli_env: dict[str, str], store: Path, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent, as this process or another one builds it. IS_SANDBOX=1: the CLI bypasses its own
    prompts also as root, so only agenter's gate decides."""
    kwargs.setdefault("on_ask", "pause")
    return AutonomousCodingAgent(backend="claude-code", api_key=API_KEY, base_url=server.base_url,
                                 env={**cli_env, "IS_SANDBOX": "1"}, sandbox=False, permissions=POLICY,
                                 conversation_store=str(store), **kwargs)


def scripted_model(repo: Path) -> Any:
    """The model: write a.txt, then run `touch b.txt`; told it was approved, run it again; told
    it was denied (or once it ran), finish. Chosen by what the request holds."""

    def answer(request: Any) -> Any:
        if not request.tools:  # a side request of Claude Code's (a title): not a turn of the task
            return reply(text("Notes"))
        said = json.dumps(request.messages)
        calls = {block["id"]: block for message in request.messages if message["role"] == "assistant"
                 and isinstance(message["content"], list) for block in message["content"]
                 if block.get("type") == "tool_use"}
        ran = [calls.get(r["id"], {}).get("name") for r in request.tool_results if not r["is_error"]]
        if "Bash" in ran or "The person has answered" in said and ": denied." in said:
            return reply(text("Done."), usage=USAGE)
        if "The person has answered" in said and ": approved" in said:
            return reply(tool_call("Bash", ASKING), usage=USAGE)  # the same call again
        if "Write" in ran:
            return reply(tool_call("Bash", ASKING), usage=USAGE)
        return reply(tool_call("Write", {"file_path": str(repo / "a.txt"), "content": "a\n"}), usage=USAGE)

    return answer


def cli_cost(cli_env: dict[str, str], session_id: str) -> float:
    """The session's cost as Claude Code keeps it in its transcript (the last total it wrote)."""
    (transcript,) = Path(cli_env["HOME"], ".claude", "projects").glob(f"*/{session_id}.jsonl")
    totals = [json.loads(line).get("totalCostUSD") for line in transcript.read_text().splitlines()]
    return [t for t in totals if isinstance(t, int | float)][-1]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


@agent_test
@needs_cli
@pytest.mark.timeout(300)
async def test_an_ask_pauses_and_a_fresh_agent_resumes_claude_code_to_run_the_approved_call(
        scripted_model_server, repo, tmp_path, cli_env, no_leftover_cli):
    server = scripted_model_server(handler=scripted_model(repo))
    store = tmp_path / "store"
    paused = await make_agent(server, cli_env, store).execute("Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and not paused.ok, paused.error
    (waiting,) = paused.pending
    assert waiting.id.startswith("toolu_") and (waiting.tool, waiting.input, waiting.needs_approval) == (
        "Bash", ASKING, True)
    assert (waiting.rule, waiting.stage, waiting.command) == ("ask shell:touch b.txt", "ask_rule", "touch b.txt")
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert (repo / "a.txt").read_text() == "a\n" and not (repo / "b.txt").exists()
    assert paused.files == {"a.txt": "a\n"}
    assert (paused.input_tokens, paused.output_tokens) == (2000, 200)  # two responses
    turns = len(server.model_requests)  # the turn ended at the call: no request after it

    # A fresh agent (another process would build the same) approves it.
    events = [event async for event in make_agent(server, cli_env, store).stream_approve(paused.resume_handle)]
    resumed = events[-1].result
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id  # the same Claude Code session, resumed
    assert (repo / "b.txt").exists()
    assert resumed.files == {"a.txt": "a\n", "b.txt": ""}  # a.txt once, from before the pause
    # The model was told the answer, made the same call again, and it ran once, allowed by the answer.
    told = json.dumps(server.model_requests[turns].body["messages"])
    assert "The person has answered" in told and f"(call {waiting.id}): approved" in told and STOP_REASON in told
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    assert [(d["tool"], d["decision"], d["answered_by"]) for d in decisions] == [("Bash", "allow", "approval")]
    # The paused call was denied to Claude Code with the gate's reason; the repeated one ran.
    results = tool_results(server)
    assert [is_error for is_error, _ in results] == [False, True, False]
    assert "needs approval" in results[1][1] and "waits for a person's answer" in results[1][1]
    assert not resumed.permission_denials
    # Tokens and cost carry over: the paused run's plus the two responses after it, and the cost
    # is Claude Code's own total for the session (which it carries on when resumed), counted once
    # (it reports six decimals).
    assert (resumed.input_tokens, resumed.output_tokens) == (4000, 400)
    assert resumed.total_cost_usd == pytest.approx(cli_cost(cli_env, paused.session_id), abs=1e-6)
    assert resumed.total_cost_usd > paused.total_cost_usd > 0

    # The record keeps no secret; the handle was used once; an unknown one is a one-line error.
    assert API_KEY not in (store / f"{paused.resume_handle}.jsonl").read_text()
    again = make_agent(server, cli_env, store)
    with pytest.raises(ConfigurationError, match="was already used"):
        await again.approve(paused.resume_handle)
    with pytest.raises(ConfigurationError) as unknown:
        await again.approve("pause-" + "0" * 32)
    assert "unknown resume handle 'pause-" in str(unknown.value) and "\n" not in str(unknown.value)


@agent_test
@needs_cli
@pytest.mark.timeout(300)
async def test_deny_tells_the_model_why_and_names_the_denial_in_the_result(scripted_model_server, repo, tmp_path,
                                                                           cli_env, no_leftover_cli):
    server = scripted_model_server(handler=scripted_model(repo))
    store = tmp_path / "store"
    # on_permission answers "defer": the run pauses (on_ask is "deny" here).
    asked = make_agent(server, cli_env, store, on_ask="deny", on_permission=lambda request: "defer")
    paused = await asked.execute("Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    (waiting,) = paused.pending
    resumed = await make_agent(server, cli_env, store).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error  # a.txt was written before the pause
    assert not (repo / "b.txt").exists() and resumed.files == {"a.txt": "a\n"}
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["target"], denial["rule"]) == ("Bash", "touch b.txt", "ask shell:touch b.txt")
    assert "denied by a person" in denial["reason"]
    told = json.dumps(server.model_requests[-1].body["messages"])
    assert f"(call {waiting.id}): denied. Permission denied by a person" in told and "Do not retry" in told


# ---------------------------------------------------------------------------------------------
# The hook's part, without the CLI


async def test_the_hook_stops_the_turn_at_a_deferred_call_and_denies_the_calls_after_it(tmp_path):
    gate = PermissionGate(PermissionPolicy.coerce(POLICY), tmp_path, on_ask="pause", can_pause=True)
    waiting: list[tuple[str, str, bool]] = []

    async def permit(call: Any, **kwargs: Any) -> Any:
        return await gate.decide(call, **kwargs)

    permissions = Permissions(resolver=None, mode="bypassPermissions", sandbox=False, allowed=[], permit=permit,
                              waiting=lambda call_id, tool, data, call, asked: waiting.append((call_id, tool, asked)))
    bash = {"tool_name": "Bash", "tool_input": ASKING}
    assert await permissions.pre_tool_use({"tool_name": "Bash", "tool_input": {"command": "ls"}}, "t0", None) == {}
    stopped = await permissions.pre_tool_use(bash, "t1", None)
    assert stopped["continue_"] is False and stopped["stopReason"] == STOP_REASON
    assert stopped["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "needs approval" in stopped["hookSpecificOutput"]["permissionDecisionReason"]
    after = await permissions.pre_tool_use({"tool_name": "Bash", "tool_input": {"command": "ls"}}, "t2", None)
    assert after["hookSpecificOutput"]["permissionDecisionReason"] == NOT_RUN and "continue_" not in after
    assert waiting == [("t1", "Bash", True), ("t2", "Bash", False)]
    assert {"t1", "t2"} <= permissions.refused_ids  # not taken for Claude Code's own refusals
    # A continued run: the approved call made again passes once (its description may differ).
    permissions.begin_turn()
    permissions.repeated.expect("Bash", ASKING, allow=True)
    assert await permissions.pre_tool_use({"tool_name": "Bash", "tool_input": {"command": "touch b.txt"}}, "t3",
                                          None) == {}
    again = await permissions.pre_tool_use(bash, "t4", None)
    assert again.get("continue_") is False  # a second time it asks (and pauses) again
    assert [d.answered_by for d in gate.decisions if d.tool == "Bash"][-2:] == ["approval", "headless"]


def test_repeated_calls_match_the_same_tool_and_input():
    calls = RepeatedCalls({"description"})
    calls.expect("Bash", {"command": "make", "description": "build"}, allow=True)
    calls.expect("Write", {"file_path": "x", "content": "1"}, allow=False)
    assert calls.take("Bash", {"command": "make deploy"}) is None
    first = calls.take("Bash", {"command": "make", "description": "Build it"})
    assert first is not None and first.allow
    assert calls.take("Bash", {"command": "make"}) is None  # an approval is used once
    assert calls.take("Write", {"file_path": "x", "content": "2"}) is None
    for _ in range(2):  # a denial holds for every attempt
        denied = calls.take("Write", {"file_path": "x", "content": "1"})
        assert denied is not None and not denied.allow


def test_the_store_of_paused_runs_follows_the_option(tmp_path):
    from agenter.backends.agents.claude_code import ClaudeCodeBackend, ClaudeCodeOptions
    from agenter.backends.base import BackendSettings
    from agenter.store import FileConversationStore

    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="claude-code", on_ask="pause", sandbox=False, conversation_store=False)
    assert "conversation_store=False keeps none" in str(caught.value)
    with pytest.raises(ConfigurationError, match="conversation_store takes a folder path"):
        AutonomousCodingAgent(backend="claude-code", on_ask="pause", sandbox=False, conversation_store=3)

    def store(**options: Any) -> Any:
        settings = BackendSettings(model=None, tools=[], sandbox=False, options=ClaudeCodeOptions(**options))
        return ClaudeCodeBackend.pause_store(settings, tmp_path / "logs")

    beside = store()
    assert isinstance(beside, FileConversationStore) and beside.root == tmp_path / "logs" / "conversations"
    assert store(conversation_store=str(tmp_path / "runs")).root == tmp_path / "runs"


@agent_test
@needs_cli
@pytest.mark.timeout(600)
def test_agenter_run_pauses_and_agenter_approve_in_another_process_resumes_claude_code(
        scripted_model_server, repo, tmp_path, cli_env, no_leftover_cli):
    """The command line, end to end: `agenter run --backend claude-code --on-ask pause` exits 3
    with the handle; `agenter approve HANDLE --store ...` (a second process on the same host: the
    session file is under the CLI's HOME) resumes the session and the approved call runs once."""
    server = scripted_model_server(handler=scripted_model(repo))
    store = f"sqlite:///{tmp_path / 'shared' / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    options = ["--option", f"base_url={server.base_url}", "--option", f"api_key={API_KEY}",
               "--option", "env=" + json.dumps({**cli_env, "IS_SANDBOX": "1"})]

    def agenter(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agenter", *args], capture_output=True, text=True,
                              timeout=240, env=env)

    first = agenter("run", "Write a.txt, then create b.txt", "--cwd", str(repo), "--backend", "claude-code",
                    "--no-sandbox", "--json", "--on-ask", "pause", "--permission", "mode bypass",
                    "--permission", "ask shell:touch b.txt", "--option", f"conversation_store={store}", *options)
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout.splitlines()[-1])["data"]["result"]
    assert paused["status"] == "paused" and paused["files"] == {"a.txt": "a\n"}
    assert [(c["tool"], c["rule"]) for c in paused["pending"]] == [("Bash", "ask shell:touch b.txt")]
    assert not (repo / "b.txt").exists()

    second = agenter("approve", paused["resume_handle"], "--store", store, "--json", *options)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout.splitlines()[-1])["data"]["result"]
    assert result["status"] == "completed", result
    assert result["session_id"] == paused["session_id"]
    assert result["files"] == {"a.txt": "a\n", "b.txt": ""} and (repo / "b.txt").exists()
    assert API_KEY not in first.stdout + first.stderr + second.stdout + second.stderr


@agent_test
@needs_cli
@pytest.mark.timeout(300)
async def test_another_home_approves_from_the_session_kept_in_the_store(
        scripted_model_server, repo, tmp_path, cli_env, no_leftover_cli):
    """Claude Code resumes a session only from its transcript under ~/.claude: the paused run
    keeps that transcript in the store, and a process with another HOME (as on another host with
    the same store and the same checkout path) writes it back and resumes the session."""
    server = scripted_model_server(handler=scripted_model(repo))
    store = tmp_path / "store"
    paused = await make_agent(server, cli_env, store).execute("Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    kept = [json.loads(p.read_text().splitlines()[0]) for p in store.glob("*.jsonl")]
    (session,) = [k for k in kept if k["metadata"].get("kind") == "claude-session"]
    assert session["metadata"]["path"].startswith("projects/") and paused.session_id in session["metadata"]["path"]
    assert API_KEY not in "".join(p.read_text() for p in store.iterdir() if p.is_file())

    other = tmp_path / "other-host"
    (other / "home").mkdir(parents=True)
    (other / "tmp").mkdir()
    other_env = {**cli_env, "HOME": str(other / "home"), "TMPDIR": str(other / "tmp")}
    resumed = await make_agent(server, other_env, store).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id
    assert resumed.files == {"a.txt": "a\n", "b.txt": ""} and (repo / "b.txt").exists()
    # The model saw the conversation from before the pause, then the answer.
    told = json.dumps(server.model_requests[-2].body["messages"])
    assert "a.txt" in told and f"(call {paused.pending[0].id}): approved" in told
    assert list((other / "home" / ".claude" / "projects").glob(f"*/{paused.session_id}.jsonl"))
