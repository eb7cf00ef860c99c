"""Approvals that can wait on acp (docs/approvals.md): the REAL claude-agent-acp (pinned in
node_modules) against the scripted model server. A call the policy asks about with nobody to
answer ends the turn there (session/cancel, the permission answered `cancelled`) and the run
pauses; a fresh agent (as another process would build it, with the same store and HOME) loads the
ACP session, the model is told the answer and makes an approved call again, and the gate lets
exactly that call through. The scripted model answers by what a request holds (the calls that ran,
the answer it was told), never by arrival order, so a request Claude Code sends again gets the
same answer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.testing import reply, text, tool_call

from .cases import claude_options, tool_results

pytest.importorskip("acp")

agent_test = pytest.mark.agent

#: Everything allowed but the command that asks.
POLICY = {"rules": ["ask shell:touch b.txt"], "mode": "bypass"}
#: Fixed token counts per model response.
USAGE = {"input_tokens": 1000, "output_tokens": 100}
ASKING = {"command": "touch b.txt", "description": "Create b.txt"}


def make_agent(server: Any, tmp_path: Path, mark: str, store: Path, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent, as this process or another one builds it (the same private HOME, where Claude
    Code keeps the session)."""
    kwargs.setdefault("on_ask", "pause")
    return AutonomousCodingAgent(backend="acp", sandbox=False, permissions=POLICY, conversation_store=str(store),
                                 **claude_options(server, tmp_path, mark), **kwargs)


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
        told = "The person has answered" in said
        if "Bash" in ran or told and ": denied." in said:
            return reply(text("Done."), usage=USAGE)
        if told and ": approved" in said:
            return reply(tool_call("Bash", ASKING), usage=USAGE)  # the same call again
        if "Write" in ran:
            return reply(tool_call("Bash", ASKING), usage=USAGE)
        return reply(tool_call("Write", {"file_path": str(repo / "a.txt"), "content": "a\n"}), usage=USAGE)

    return answer


def reported_cost(events: list[Any]) -> float:
    """The session's cumulative cost as claude-agent-acp last reported it (usage_update)."""
    costs = [e.data["raw"]["cost"]["amount"] for e in events if e.data.get("message_type") == "status"
             and isinstance(e.data.get("raw"), dict) and e.data["raw"].get("sessionUpdate") == "usage_update"]
    return float(costs[-1])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


@agent_test
@pytest.mark.timeout(300)
async def test_an_ask_pauses_and_a_fresh_agent_loads_the_session_to_run_the_approved_call(
        scripted_model_server, repo, tmp_path, mark):
    server = scripted_model_server(handler=scripted_model(repo))
    store = tmp_path / "store"
    first = [event async for event in make_agent(server, tmp_path, mark, store).stream_execute(
        "Write a.txt, then create b.txt", cwd=repo)]
    paused = first[-1].result
    assert paused.status is CodingStatus.PAUSED and not paused.ok, paused.error
    # session/cancel, then the permission answered `cancelled`: Claude Code ends the prompt cancelled.
    said = [str(e.data.get("content")) for e in first if e.data.get("message_type") == "status"]
    assert "the turn ended at a call that waits for a person's approval (stop_reason=cancelled)" in said
    assert paused.total_cost_usd == pytest.approx(reported_cost(first), abs=1e-6)
    (waiting,) = paused.pending
    assert waiting.id.startswith("toolu_") and (waiting.tool, waiting.input, waiting.needs_approval) == (
        "Bash", ASKING, True)
    assert (waiting.rule, waiting.stage, waiting.command) == ("ask shell:touch b.txt", "ask_rule", "touch b.txt")
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert (repo / "a.txt").read_text() == "a\n" and not (repo / "b.txt").exists()
    assert paused.files == {"a.txt": "a\n"}
    turns = len([r for r in server.model_requests if r.model_request.tools])
    assert turns == 2  # the turn ended at the call: no model request after it

    # A fresh agent (another process would build the same) approves it.
    events = [event async for event in make_agent(server, tmp_path, mark, store).stream_approve(
        paused.resume_handle)]
    resumed = events[-1].result
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id  # the same ACP session, loaded
    assert (repo / "b.txt").exists()
    assert resumed.files == {"a.txt": "a\n", "b.txt": ""}  # a.txt once, from before the pause
    tooled = [r for r in server.model_requests if r.model_request.tools]
    told = json.dumps(tooled[turns].body["messages"])
    assert "The person has answered" in told and f"(call {waiting.id}): approved" in told
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    assert [(d["tool"], d["decision"], d["answered_by"]) for d in decisions] == [("Bash", "allow", "approval")]
    assert not resumed.permission_denials
    # Usage carries over: the paused run's tokens plus the continued run's two responses (exact:
    # its prompt ended normally), and the cost is Claude Code's own total for the session, which it
    # carries on in the loaded session, counted once (it reports six decimals here).
    assert (resumed.input_tokens, resumed.output_tokens) == (paused.input_tokens + 2000, paused.output_tokens + 200)
    assert resumed.total_cost_usd == pytest.approx(reported_cost(events), abs=1e-6)
    assert resumed.total_cost_usd > paused.total_cost_usd > 0
    # The paused call did not run: Claude Code recorded it as aborted; the repeated one ran.
    results = tool_results(server)
    assert [is_error for is_error, _ in results] == [False, True, False] and "Abort" in results[1][1]

    # The record keeps no secret; the handle was used once; an unknown one is a one-line error.
    assert "sk-ant-test-0123456789abcdef" not in (store / f"{paused.resume_handle}.jsonl").read_text()
    again = make_agent(server, tmp_path, mark, store)
    with pytest.raises(ConfigurationError, match="was already used"):
        await again.approve(paused.resume_handle)
    with pytest.raises(ConfigurationError) as unknown:
        await again.approve("pause-" + "0" * 32)
    assert "unknown resume handle 'pause-" in str(unknown.value) and "\n" not in str(unknown.value)


@agent_test
@pytest.mark.timeout(300)
async def test_deny_tells_the_model_why_and_names_the_denial_in_the_result(scripted_model_server, repo, tmp_path,
                                                                           mark):
    server = scripted_model_server(handler=scripted_model(repo))
    store = tmp_path / "store"
    # on_permission answers "defer": the run pauses (on_ask is "deny" here).
    asked = make_agent(server, tmp_path, mark, store, on_ask="deny", on_permission=lambda request: "defer")
    paused = await asked.execute("Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    (waiting,) = paused.pending
    resumed = await make_agent(server, tmp_path, mark, store).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error  # a.txt was written before the pause
    assert not (repo / "b.txt").exists() and resumed.files == {"a.txt": "a\n"}
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["target"], denial["rule"]) == ("Bash", "touch b.txt", "ask shell:touch b.txt")
    assert "denied by a person" in denial["reason"]
    told = json.dumps(server.model_requests[-1].body["messages"])
    assert f"(call {waiting.id}): denied. Permission denied by a person" in told and "Do not retry" in told
    assert [is_error for is_error, _ in tool_results(server)][:2] == [False, True]  # the paused call did not run


def test_only_agents_that_can_continue_a_session_pause():
    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="acp", acp_command=sys.executable, on_ask="pause")
    assert "needs an agent known to continue a paused session (claude-agent-acp)" in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="conversation_store=False keeps none"):
        AutonomousCodingAgent(backend="acp", acp_command=sys.executable, on_ask="pause", conversation_store=False)
    with pytest.raises(ConfigurationError, match="conversation_store takes a folder path"):
        AutonomousCodingAgent(backend="acp", acp_command=sys.executable, conversation_store=3)


async def test_a_deferred_file_write_is_not_written_and_cancels_the_turn_once(tmp_path):
    """fs/write_text_file, which claude-agent-acp does not use (Claude Code writes itself): the
    client's part, with the gate, without an agent."""
    from acp import RequestError
    from acp.schema import PermissionOption, ToolCallUpdate

    from agenter.backends.agents.acp._client import NOT_WRITTEN, ACPClient
    from agenter.permissions import PermissionGate, PermissionPolicy
    from agenter.sandbox.paths import PathResolver

    gate = PermissionGate(PermissionPolicy.coerce({"rules": ["ask edit:ci.yml"], "mode": "bypass"}), tmp_path,
                          on_ask="pause", can_pause=True)
    waiting: list[tuple[str, str, bool]] = []
    cancels: list[bool] = []

    async def permit(call: Any, **kwargs: Any) -> Any:
        return await gate.decide(call, **kwargs)

    async def cancel() -> None:
        cancels.append(True)

    async def in_thread(fn: Any, *args: Any) -> Any:
        return fn(*args)

    client = ACPClient(resolver=PathResolver(tmp_path, None, sandbox=True), permission_policy="allow",
                       fs=["read", "write"], emit=lambda m: None, on_usage=lambda u: None, on_denied=lambda *a: None,
                       on_file=lambda *a, **k: None, in_thread=in_thread, permit=permit,
                       waiting=lambda call_id, tool, data, call, asked: waiting.append((call_id, tool, asked)),
                       cancel=cancel)
    client.can_defer = True
    client.start_turn()
    await client.write_text_file("s", str(tmp_path / "ok.txt"), "ok\n")
    with pytest.raises(RequestError) as deferred:
        await client.write_text_file("s", str(tmp_path / "ci.yml"), "on: push\n")
    assert "needs approval" in str(deferred.value)
    with pytest.raises(RequestError) as later:
        await client.write_text_file("s", str(tmp_path / "other.txt"), "x\n")
    assert NOT_WRITTEN in str(later.value)
    asked = await client.request_permission("s", ToolCallUpdate(tool_call_id="t1", kind="execute", title="ls",
                                                                raw_input={"command": "ls"}),
                                            [PermissionOption(option_id="a", kind="allow_once", name="Allow")])
    assert asked.outcome.outcome == "cancelled"
    assert (tmp_path / "ok.txt").exists() and not (tmp_path / "ci.yml").exists()
    assert not (tmp_path / "other.txt").exists()
    assert [(tool, was_asked) for _, tool, was_asked in waiting] == [
        ("fs/write_text_file", True), ("fs/write_text_file", False), ("execute", False)]
    assert cancels == [True]  # session/cancel once, at the first call that waits


@agent_test
@pytest.mark.timeout(300)
async def test_another_home_loads_the_session_kept_in_the_store(scripted_model_server, repo, tmp_path, mark):
    """claude-agent-acp loads a session from Claude Code's file under ~/.claude: the paused run
    keeps that file in the store, and an agent with another HOME (as on another host with the same
    store and checkout path) writes it back, loads the session and runs the approved call."""
    server = scripted_model_server(handler=scripted_model(repo))
    store = tmp_path / "store"
    paused = await make_agent(server, tmp_path, mark, store).execute("Write a.txt, then create b.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    kinds = [json.loads(p.read_text().splitlines()[0])["metadata"].get("kind") for p in store.glob("*.jsonl")]
    assert "claude-session" in kinds

    other = tmp_path / "other-host"
    other.mkdir()
    resumed = await make_agent(server, other, mark, store).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id
    assert resumed.files == {"a.txt": "a\n", "b.txt": ""} and (repo / "b.txt").exists()
    assert list((other / "claude-home" / ".claude" / "projects").glob(f"*/{paused.session_id}.jsonl"))
