"""Approvals that can wait on codex (docs/approvals.md): the REAL Codex CLI (`codex app-server`)
against the scripted model server's Responses wire. A command the policy asks about with nobody
to answer is cancelled, which ends Codex's turn there, and the run pauses; a fresh agent (as
another process would build it, with the same store) restores the thread into its own private
CODEX_HOME, resumes it, the model is told the answer and makes an approved call again, and the
gate lets exactly that call through. The scripted model answers by what a request holds (which
commands ran, the answer it was told), never by arrival order."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.agents.codex._permissions import NOT_RUN, STOP, Approvals, Pausing, gate_call, gated_tool
from agenter.backends.agents.codex._rpc import Notification
from agenter.backends.agents.codex._threads import THREAD_KIND, keep_thread, restore_thread
from agenter.backends.base import ToolReply
from agenter.permissions import PermissionGate, PermissionPolicy
from agenter.testing import reply, text, tool_call
from agenter.tools import tool

from ...kit import TOKEN_ENV
from .cases import API_KEY, MODEL, patch, shell

agent_test = pytest.mark.agent

#: Everything allowed but the command that asks.
POLICY = {"rules": ["ask shell:touch b.txt"], "mode": "bypass"}
#: Fixed token counts per model response, so what the continued run carries is exact.
USAGE = {"input_tokens": 1000, "output_tokens": 100}
WRITE_A = "printf 'a\\n' > a.txt"
ASKING = "touch b.txt"
#: The command as Codex asks about it (and runs it).
ASKED = f"/bin/bash -lc '{ASKING}'"


def make_agent(server: Any, codex_path: str, home: Path, store: Path, token: str, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent, as this process or another one builds it (each with its own private CODEX_HOME)."""
    kwargs.setdefault("on_ask", "pause")
    kwargs.setdefault("permissions", POLICY)
    return AutonomousCodingAgent(backend="codex", model=MODEL, program_path=codex_path,
                                 base_url=server.openai_base_url, api_key=API_KEY, max_retries=0,
                                 env={"HOME": str(home), TOKEN_ENV: token}, sandbox=False,
                                 conversation_store=str(store), **kwargs)


def commands_that_ran(request: Any) -> list[str]:
    """The commands of the conversation that ran (exit code 0), by their calls' outputs."""
    calls = {item.get("call_id"): item for item in request.messages
             if isinstance(item, dict) and item.get("type") == "function_call"}
    ran = []
    for item in request.messages:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            call = calls.get(item.get("call_id")) or {}
            if call.get("name") == "exec_command" and "exited with code 0" in json.dumps(item.get("output")):
                ran.append(json.loads(call.get("arguments") or "{}").get("cmd"))
    return ran


def scripted_model(request: Any) -> Any:
    """Write a.txt, then run `touch b.txt`; told it was approved, run it again; told it was
    denied (or once it ran), finish."""
    if not request.tools:  # a side request (none is expected): not a turn of the task
        return reply(text("Notes"))
    said = json.dumps(request.messages)
    ran = commands_that_ran(request)
    answered = "The person has answered" in said
    if ASKING in ran or answered and ": denied." in said:
        return reply(text("Done."), usage=USAGE)
    if answered and ": approved" in said or WRITE_A in ran:
        return reply(shell(ASKING), usage=USAGE)
    return reply(shell(WRITE_A), usage=USAGE)


def outputs(server: Any, request: int) -> list[str]:
    """The function outputs a request carried, in order."""
    return [json.dumps(item.get("output")) for item in server.model_requests[request].body["input"]
            if item.get("type") == "function_call_output"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@agent_test
@pytest.mark.timeout(300)
async def test_an_ask_pauses_and_a_fresh_agent_resumes_the_codex_thread_to_run_the_approved_call(
        scripted_model_server, codex_path, repo, home, tmp_path, run_token):
    server = scripted_model_server(handler=scripted_model)
    store = tmp_path / "store"
    paused = await make_agent(server, codex_path, home, store, run_token).execute(
        "Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and not paused.ok, paused.error
    (waiting,) = paused.pending
    assert waiting.id.startswith("call_") and (waiting.tool, waiting.needs_approval) == ("shell", True)
    assert waiting.input == {"command": ASKED, "cwd": str(repo)}
    assert (waiting.rule, waiting.stage, waiting.command) == ("ask shell:touch b.txt", "ask_rule", ASKED)
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert (repo / "a.txt").read_text() == "a\n" and not (repo / "b.txt").exists()
    assert paused.files == {"a.txt": "a\n"}
    assert (paused.input_tokens, paused.output_tokens) == (2000, 200)  # two responses
    assert paused.total_cost_usd > 0
    turns = len(server.model_requests)
    assert turns == 2  # the turn ended at the call: no request after it
    # The thread is kept beside the record (the private CODEX_HOME is gone).
    kept = json.loads((store / f"{paused.session_id}.jsonl").read_text().splitlines()[0])
    assert kept["metadata"]["kind"] == THREAD_KIND and kept["metadata"]["path"].startswith("sessions/")

    # A fresh agent (another process would build the same) approves it.
    events = [event async for event in
              make_agent(server, codex_path, home, store, run_token).stream_approve(paused.resume_handle)]
    resumed = events[-1].result
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id  # the same Codex thread, resumed
    assert (repo / "b.txt").exists()
    assert resumed.files == {"a.txt": "a\n", "b.txt": ""}  # a.txt once, from before the pause
    # The resumed thread carried the conversation; the model was told the answer, made the same
    # call again, and it ran once, allowed by the answer.
    told = server.model_requests[turns].body["input"]
    said = json.dumps(told)
    assert WRITE_A.replace("\\", "\\\\") in said or "a.txt" in said
    assert "The person has answered" in said and f"(call {waiting.id}): approved" in said
    assert "aborted by user" in outputs(server, turns)[-1]  # how Codex ended the paused call
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    assert [(d["tool"], d["decision"], d["answered_by"]) for d in decisions] == [("shell", "allow", "approval")]
    assert "exited with code 0" in outputs(server, turns + 1)[-1]
    assert not resumed.permission_denials
    # Tokens and cost carry over: the paused run's plus the two responses after it (the resumed
    # thread's totals include the paused run's, which are not counted twice).
    assert (resumed.input_tokens, resumed.output_tokens) == (4000, 400)
    assert resumed.cache_read_tokens > paused.cache_read_tokens  # the server's prompt cache, also counted once
    assert resumed.total_cost_usd > paused.total_cost_usd > 0

    # The store keeps no secret; the handle was used once; an unknown one is a one-line error.
    assert API_KEY not in "".join(path.read_text() for path in store.iterdir())
    again = make_agent(server, codex_path, home, store, run_token)
    with pytest.raises(ConfigurationError, match="was already used"):
        await again.approve(paused.resume_handle)
    with pytest.raises(ConfigurationError) as unknown:
        await again.approve("pause-" + "0" * 32)
    assert "unknown resume handle 'pause-" in str(unknown.value) and "\n" not in str(unknown.value)


@agent_test
@pytest.mark.timeout(300)
async def test_deny_tells_the_model_why_and_names_the_denial_in_the_result(
        scripted_model_server, codex_path, repo, home, tmp_path, run_token):
    server = scripted_model_server(handler=scripted_model)
    store = tmp_path / "store"
    # on_permission answers "defer": the run pauses (on_ask is "deny" here).
    asked = make_agent(server, codex_path, home, store, run_token, on_ask="deny",
                       on_permission=lambda request: "defer")
    paused = await asked.execute("Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle, paused.error
    (waiting,) = paused.pending
    resumed = await make_agent(server, codex_path, home, store, run_token).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error  # a.txt was written before the pause
    assert not (repo / "b.txt").exists() and resumed.files == {"a.txt": "a\n"}
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["target"], denial["rule"]) == ("shell", ASKED, "ask shell:touch b.txt")
    assert "denied by a person" in denial["reason"]
    told = json.dumps(server.model_requests[-1].body["input"])
    assert f"(call {waiting.id}): denied. Permission denied by a person" in told and "Do not retry" in told
    assert len(server.model_requests) == 3  # told, the model finished without the command


@agent_test
@pytest.mark.timeout(300)
async def test_a_custom_tool_the_gate_defers_ends_the_turn_and_runs_once_approved(
        scripted_model_server, codex_path, repo, home, tmp_path, run_token):
    deployed: list[str] = []

    @tool
    def deploy(target: str) -> str:
        """Deploy the app."""
        deployed.append(target)
        return f"deployed to {target}"

    def model(request: Any) -> Any:
        if not request.tools:
            return reply(text("Notes"))
        said = json.dumps(request.messages)
        if "deployed to prod" in said:
            return reply(text("Done."))
        if "deploy" not in said.split("The person has answered")[-1] and "tool_search_output" not in said:
            return reply(tool_call("tool_search", {"query": "deploy", "limit": 4}))
        return reply(tool_call("mcp__agenter_tools.deploy", {"target": "prod"}))

    server = scripted_model_server(handler=model)
    store = tmp_path / "store"
    agent = make_agent(server, codex_path, home, store, run_token, tools=[deploy],
                       permissions={"rules": ["ask custom:deploy"], "mode": "bypass"})
    paused = await agent.execute("Deploy", cwd=repo, require_changes=False)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle, paused.error
    (waiting,) = paused.pending
    assert (waiting.tool, waiting.input, waiting.rule) == ("deploy", {"target": "prod"}, "ask custom:deploy")
    assert waiting.id.startswith("call_")  # Codex's id of the call (its mcpToolCall item)
    assert not deployed
    turns = len(server.model_requests)
    assert turns == 2  # tool_search, then the call: the turn was interrupted there

    again = make_agent(server, codex_path, home, store, run_token, tools=[deploy],
                       permissions={"rules": ["ask custom:deploy"], "mode": "bypass"})
    resumed = await again.approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert deployed == ["prod"]
    assert "aborted by user" in outputs(server, turns)[-1]  # the interrupt came before the tool's answer
    assert f"(call {waiting.id}): approved" in json.dumps(server.model_requests[turns].body["input"])


@agent_test
@pytest.mark.timeout(300)
async def test_a_patch_the_gate_defers_pauses_and_is_applied_once_approved(
        scripted_model_server, codex_path, repo, home, tmp_path, run_token):
    body = "*** Add File: .github/ci.yml\n+on: push\n"

    def model(request: Any) -> Any:
        if not request.tools:
            return reply(text("Notes"))
        said = json.dumps(request.messages)
        applied = [item for item in request.messages if isinstance(item, dict)
                   and item.get("type") == "custom_tool_call_output" and "Success" in json.dumps(item.get("output"))]
        asked_before = any(isinstance(item, dict) and item.get("type") == "custom_tool_call"
                           for item in request.messages)
        if applied:
            return reply(text("Done."))
        if not asked_before or "The person has answered" in said and ": approved" in said:
            return reply(patch(body))  # the first time, and again once told it was approved
        return reply(text("Gave up."))

    server = scripted_model_server(handler=model)
    store = tmp_path / "store"
    policy = {"rules": ["ask edit:.github/**"], "mode": "bypass"}
    paused = await make_agent(server, codex_path, home, store, run_token, permissions=policy).execute(
        "Add CI", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle, paused.error
    (waiting,) = paused.pending
    assert (waiting.tool, waiting.rule, waiting.paths) == ("apply_patch", "ask edit:.github/**",
                                                          [str(repo / ".github" / "ci.yml")])
    assert [change["diff"] for change in waiting.input["changes"]] == ["on: push\n"]
    assert not (repo / ".github").exists() and len(server.model_requests) == 1
    resumed = await make_agent(server, codex_path, home, store, run_token, permissions=policy).approve(
        paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / ".github" / "ci.yml").read_text() == "on: push\n" and resumed.files == {".github/ci.yml": "on: push\n"}


# ---------------------------------------------------------------------------------------------
# The approvals' part, without Codex


async def test_a_deferred_approval_is_cancelled_and_so_are_the_calls_after_it(tmp_path):
    gate = PermissionGate(PermissionPolicy.coerce(POLICY), tmp_path, on_ask="pause", can_pause=True)
    waiting: list[tuple[str, str, dict[str, Any], bool]] = []
    pausing = Pausing(gate.decide, lambda call_id, tool, data, call, asked: waiting.append((call_id, tool, data, asked)))
    approvals = Approvals(policy="never", sandbox=False, cwd=tmp_path, writable_roots=[tmp_path], permit=gate.decide,
                          pausing=pausing)
    command = "item/commandExecution/requestApproval"

    async def answer(cmd: str, item: str, **extra: Any) -> Any:
        result = approvals.answer(command, {"command": cmd, "cwd": str(tmp_path), "itemId": item, "threadId": "t",
                                            "turnId": "u", **extra})
        assert not isinstance(result, dict)
        return await result

    assert await answer("/bin/bash -lc ls", "c0") == {"decision": "accept"}
    assert await answer(ASKED, "c1") == STOP == {"decision": "cancel"}
    assert await answer("/bin/bash -lc ls", "c2") == STOP  # the turn ends: not asked, not run
    assert waiting == [("c1", "shell", {"command": ASKED, "cwd": str(tmp_path)}, True),
                       ("c2", "shell", {"command": "/bin/bash -lc ls", "cwd": str(tmp_path)}, False)]
    # A continued run: the approved call made again passes once (its justification may differ).
    pausing.begin_turn()
    pausing.repeated.expect("shell", {"command": ASKED, "cwd": str(tmp_path)}, allow=True)
    assert await answer(ASKED, "c3", reason="the task says so") == {"decision": "accept"}
    assert await answer(ASKED, "c4") == STOP  # a second time it asks (and pauses) again
    assert [d.answered_by for d in gate.decisions if "touch" in (d.summary or "")][-2:] == ["approval", "headless"]


async def test_a_deferred_custom_tool_stops_the_turn_and_later_ones_do_not_run(tmp_path):
    gate = PermissionGate(PermissionPolicy.coerce({"rules": ["ask custom:deploy"], "mode": "bypass"}), tmp_path,
                          on_ask="pause", can_pause=True)
    waiting: list[tuple[str, str, bool]] = []
    pausing = Pausing(gate.decide, lambda call_id, name, data, call, asked: waiting.append((call_id, name, asked)),
                      announce_wait=0.2)
    stopped: list[bool] = []
    ran: list[str] = []

    async def run_tool(the_tool: Any, arguments: dict[str, Any]) -> ToolReply:
        ran.append(the_tool.name)
        return ToolReply("ran")

    @tool
    def deploy(target: str) -> str:
        """Deploy."""
        return target

    @tool
    def lookup(term: str) -> str:
        """Look up."""
        return term

    def stop() -> None:  # what the backend does: turn/interrupt, and Codex ends the turn
        stopped.append(True)
        pausing.end_turn()

    run = gated_tool(run_tool, gate.decide, pausing=pausing, stop=stop)

    async def announce_late() -> None:  # Codex's item/started may reach agenter after the call itself
        await asyncio.sleep(0.05)
        pausing.observe(Notification("item/started", {"item": {"type": "mcpToolCall", "id": "call_9",
                                                                "server": "agenter_tools", "tool": "deploy",
                                                                "arguments": {"target": "prod"}}}))

    announcing = asyncio.create_task(announce_late())
    first = await run(deploy, {"target": "prod"})
    await announcing
    assert first.is_error and first.text.startswith("Paused:") and stopped == [True]
    later = await run(lookup, {"term": "x"})
    assert later.is_error and later.text == NOT_RUN and stopped == [True] and not ran
    assert waiting == [("call_9", "deploy", True), ("agenter-lookup-1", "lookup", False)]
    assert gate_call("deploy", {"target": "prod"}, {"deploy": deploy}) is not None
    assert gate_call("shell", {"command": ASKED}, {}).command == ASKED  # type: ignore[union-attr]
    assert gate_call("unknown", {}, {}) is None


def test_a_thread_is_kept_and_restored_only_under_codex_home_sessions(tmp_path):
    from agenter.store import FileConversationStore

    store = FileConversationStore(tmp_path / "store")
    home = tmp_path / "home"
    rollout = home / "sessions" / "2026" / "01" / "02" / "rollout-x-thread-1.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text('{"type":"session_meta","payload":{"id":"thread-1"}}\n{"type":"response_item"}\n{"partial')
    assert keep_thread(store, "thread-1", home, rollout)
    fresh = tmp_path / "fresh"
    assert restore_thread(store, "thread-1", fresh)
    restored = fresh / "sessions" / "2026" / "01" / "02" / "rollout-x-thread-1.jsonl"
    assert [json.loads(line)["type"] for line in restored.read_text().splitlines()] == ["session_meta",
                                                                                        "response_item"]
    assert not restore_thread(store, "thread-2", fresh)  # nothing kept under it
    assert not restore_thread(store, "../x", fresh)  # not an id
    store.save("thread-3", [], {"kind": THREAD_KIND, "path": "../../etc/x"})
    assert not restore_thread(store, "thread-3", fresh)  # never outside CODEX_HOME's sessions


def test_the_store_of_paused_runs_follows_the_option(tmp_path):
    from agenter.backends.agents.codex import CodexBackend, CodexOptions
    from agenter.backends.base import BackendSettings
    from agenter.store import FileConversationStore

    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="codex", api_key=API_KEY, on_ask="pause", conversation_store=False)
    assert "conversation_store=False keeps none" in str(caught.value)
    with pytest.raises(ConfigurationError, match="conversation_store takes a folder path"):
        AutonomousCodingAgent(backend="codex", api_key=API_KEY, on_ask="pause", conversation_store=3)

    def store(**options: Any) -> Any:
        settings = BackendSettings(model=None, tools=[], sandbox=False, options=CodexOptions(**options))
        return CodexBackend.pause_store(settings, tmp_path / "logs")

    beside = store()
    assert isinstance(beside, FileConversationStore) and beside.root == tmp_path / "logs" / "conversations"
    assert store(conversation_store=str(tmp_path / "runs")).root == tmp_path / "runs"


def _agenter(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`agenter ARGS` as a user runs it, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "agenter", *args], capture_output=True, text=True, timeout=240,
                          env=env)


@agent_test
@pytest.mark.timeout(600)
def test_agenter_run_pauses_and_agenter_approve_in_another_process_continues_the_codex_thread(
        scripted_model_server, codex_path, repo, home, tmp_path, run_token):
    """The command line, end to end: `agenter run --backend codex --on-ask pause` exits 3 with the
    handle; `agenter approve HANDLE --store ...` (a second process, given the key again) restores
    the thread Codex kept in the store and the approved command runs once."""
    server = scripted_model_server(handler=scripted_model)
    store = f"sqlite:///{tmp_path / 'shared' / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    options = ["--option", f"program_path={codex_path}", "--option", f"base_url={server.openai_base_url}",
               "--option", f"api_key={API_KEY}", "--option", "max_retries=0",
               "--option", "env=" + json.dumps({"HOME": str(home), TOKEN_ENV: run_token})]
    first = _agenter("run", "Write a.txt, then create b.txt", "--cwd", str(repo), "--backend", "codex",
                     "--model", MODEL, "--no-sandbox", "--json", "--on-ask", "pause",
                     "--permission", "mode bypass", "--permission", f"ask shell:{ASKING}",
                     "--option", f"conversation_store={store}", *options, env=env)
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout.splitlines()[-1])["data"]["result"]
    assert paused["status"] == "paused" and paused["files"] == {"a.txt": "a\n"}
    assert [(c["tool"], c["rule"]) for c in paused["pending"]] == [("shell", f"ask shell:{ASKING}")]
    assert not (repo / "b.txt").exists()

    second = _agenter("approve", paused["resume_handle"], "--store", store, "--json", *options, env=env)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout.splitlines()[-1])["data"]["result"]
    assert result["status"] == "completed", result
    assert result["files"] == {"a.txt": "a\n", "b.txt": ""} and (repo / "b.txt").exists()
    assert (result["input_tokens"], result["output_tokens"]) == (4000, 400)  # the paused run's once
    assert API_KEY not in first.stdout + first.stderr + second.stdout + second.stderr
