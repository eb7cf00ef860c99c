"""Approvals that can wait on openai-agents (docs/approvals.md): the REAL OpenAI Agents SDK and
openai client against the scripted model server, on both wires. A call the policy asks about with
nobody to answer stops the SDK's run there (its own interruption, decided by agenter's gate) and
the run pauses; a fresh agent (as another process would build it, with the same stores) reads the
SDK's RunState back from the pause record and continues it with the person's answer: the approved
call runs once, with its real result in the model's next request. The scripted model answers by
what a request holds (how many tool results it carries), never by arrival order."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
from agenter._errors import ConfigurationError
from agenter.testing import reply, text, tool_call

from .test_openai_agents import API_KEY, MODEL, WIRES, all_outputs

agent_test = pytest.mark.agent

#: Everything allowed but the write of secret.txt.
POLICY = {"rules": ["ask edit:secret.txt"], "mode": "bypass"}
#: Fixed token counts per model response, so what the continued run carries is exact.
USAGE = {"input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 0}
SECRET = {"path": "secret.txt", "content": "s\n"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


def make_agent(server: Any, tmp_path: Path, wire: str = "responses", conversations: str = "conversations",
               **kwargs: Any) -> AutonomousCodingAgent:
    """The agent, as this process or another one builds it: the same pause store and (unless
    `conversations` names another folder, as on another host) the same conversation store."""
    kwargs.setdefault("on_ask", "pause")
    kwargs.setdefault("permissions", POLICY)
    return AutonomousCodingAgent(
        backend="openai-agents", model=MODEL, api_key=API_KEY, base_url=server.openai_base_url,
        openai_agents_wire=wire, sandbox=False, max_retries=0, conversation_store=str(tmp_path / "store"),
        openai_agents_store_dir=str(tmp_path / conversations), **kwargs)


def scripted_model(request: Any) -> Any:
    """One response with three calls (a write that needs nothing, the write that asks, a read
    after it); once their results are in, the answer. Asked for something else, it writes
    other.txt, then answers."""
    if "Never mind" in json.dumps(request.messages):
        done = any(result["id"] == "call_other" for result in request.tool_results)
        return reply(text("Done.")) if done else reply(tool_call("write_file", {"path": "other.txt", "content": "o"},
                                                                 id="call_other"))
    if not request.tool_results:
        return reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"}, id="call_a"),
                     tool_call("write_file", SECRET, id="call_secret"),
                     tool_call("read_file", {"path": "a.txt"}, id="call_read"), usage=USAGE)
    return reply(text("Both written."), usage=USAGE)


def results(server: Any, index: int) -> dict[str, str]:
    """The tool results of model request `index`, by call id, on either wire."""
    body = server.model_requests[index].body
    if "input" in body:
        return {item["call_id"]: item["output"] for item in body["input"] if item.get("type") == "function_call_output"}
    return {message["tool_call_id"]: message["content"] for message in body["messages"] if message["role"] == "tool"}


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", WIRES)
async def test_an_ask_pauses_the_sdks_run_and_a_fresh_agent_runs_the_approved_call_once(
        scripted_model_server, repo, tmp_path, wire):
    server = scripted_model_server(handler=scripted_model)
    events = [event async for event in make_agent(server, tmp_path, wire).stream_execute(
        "Write a.txt and secret.txt", cwd=repo)]
    paused = events[-1].result
    assert paused.status is CodingStatus.PAUSED and not paused.ok and paused.error is None, paused.error
    assert [(c.id, c.tool, c.needs_approval) for c in paused.pending] == [
        ("call_secret", "write_file", True), ("call_read", "read_file", False)]
    asking = paused.pending[0]
    assert (asking.rule, asking.stage, asking.paths, asking.input) == (
        "ask edit:secret.txt", "ask_rule", ["secret.txt"], SECRET)
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert events[-2].type is CodingEventType.PAUSED and events[-2].data["resume_handle"] == paused.resume_handle
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    assert [(d["input"], d["decision"]) for d in decisions] == [("a.txt", "allow"), ("secret.txt", "defer")]
    # The call before the paused one ran; the paused one and the one after it did not.
    assert (repo / "a.txt").read_text() == "a\n" and not (repo / "secret.txt").exists()
    assert paused.files == {"a.txt": "a\n"} and len(server.model_requests) == 1
    assert (paused.input_tokens, paused.output_tokens) == (1000, 100)

    # A fresh agent (another process would build the same) approves it.
    events = [event async for event in make_agent(server, tmp_path, wire).stream_approve(paused.resume_handle)]
    resumed = events[-1].result
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id
    assert (repo / "secret.txt").read_text() == "s\n"
    assert resumed.files == {"a.txt": "a\n", "secret.txt": "s\n"}  # a.txt once, from before the pause
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    assert [(d["input"], d["decision"], d["answered_by"]) for d in decisions][0] == (
        "secret.txt", "allow", "approval")
    assert [d["input"] for d in decisions] == ["secret.txt", "a.txt"]  # the read decided as usual
    # Each call that runs now is announced again, then finished.
    calls = [(e.data["kind"], e.data["tool_call_id"]) for e in events if e.data.get("kind", "").startswith("tool_call")]
    assert sorted(calls) == [("tool_call_finished", "call_read"), ("tool_call_finished", "call_secret"),
                             ("tool_call_started", "call_read"), ("tool_call_started", "call_secret")]
    # The model's next request: the whole conversation, each call's real result once.
    assert len(server.model_requests) == 2
    told = results(server, 1)
    assert sorted(told) == ["call_a", "call_read", "call_secret"]
    assert told["call_secret"] == "Wrote secret.txt" and "a" in told["call_read"]
    assert len(all_outputs(server, 1)) == 3 and "Write a.txt and secret.txt" in json.dumps(
        server.model_requests[1].body)
    # Tokens carry over: the paused run's response plus the one after it, each counted once.
    assert (resumed.input_tokens, resumed.output_tokens) == (2000, 200)
    assert resumed.total_cost_usd == pytest.approx(2 * paused.total_cost_usd, rel=1e-3)
    assert resumed.iterations == paused.iterations == 1

    # The record keeps the SDK's state and no key; the handle was used once; an unknown one is a
    # one-line error.
    record = (tmp_path / "store" / f"{paused.resume_handle}.jsonl").read_text()
    assert '"run_state"' in record and API_KEY not in record
    assert not any(API_KEY in path.read_text() for path in (tmp_path / "conversations").iterdir())
    again = make_agent(server, tmp_path, wire)
    with pytest.raises(ConfigurationError, match="was already used"):
        await again.approve(paused.resume_handle)
    with pytest.raises(ConfigurationError) as unknown:
        await again.approve("pause-" + "0" * 32)
    assert "unknown resume handle 'pause-" in str(unknown.value) and "\n" not in str(unknown.value)
    assert len(server.model_requests) == 2


def stored(folder: Path, key: str) -> list[Any]:
    """The messages a file store keeps under `key` (it must keep some)."""
    from agenter.store import FileConversationStore

    found = FileConversationStore(folder).load(key)
    assert found is not None, f"{folder} keeps no {key}"
    return list(found.messages)


def outputs_of(items: list[Any], call_id: str) -> list[Any]:
    """The results of one call in a stored conversation (the SDK's items)."""
    return [item for item in items if item.get("type") == "function_call_output" and item.get("call_id") == call_id]


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", WIRES)
async def test_another_host_approves_from_the_conversation_kept_in_the_store(scripted_model_server, repo, tmp_path,
                                                                           wire):
    """The conversation is in openai_agents_store_dir (by default this host's cache): the paused
    run keeps a copy in the pause store, and an agent with another, empty openai_agents_store_dir
    (as on another host with the same pause store and checkout) writes it back and goes on."""
    from agenter.store import FileConversationStore

    server = scripted_model_server(handler=scripted_model)
    paused = await make_agent(server, tmp_path, wire).execute("Write a.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    here, store, other = tmp_path / "conversations", tmp_path / "store", tmp_path / "other-host"
    before = stored(here, paused.session_id)
    kept = FileConversationStore(store).load(f"{paused.session_id}.paused")
    assert kept is not None
    assert kept.metadata == {"kind": "openai-agents-conversation", "session_id": paused.session_id}
    assert kept.messages == before and "Write a.txt and secret.txt" in json.dumps(before)
    assert not outputs_of(before, "call_secret")
    assert not any(API_KEY in path.read_text() for path in store.iterdir())

    resumed = await make_agent(server, tmp_path, wire, conversations="other-host").approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id
    assert (repo / "secret.txt").read_text() == "s\n" and resumed.files == {"a.txt": "a\n", "secret.txt": "s\n"}
    # The paused call ran once, and the model's next request carries the conversation before it.
    assert len(server.model_requests) == 2
    told = results(server, 1)
    assert sorted(told) == ["call_a", "call_read", "call_secret"] and told["call_secret"] == "Wrote secret.txt"
    assert "Write a.txt and secret.txt" in json.dumps(server.model_requests[1].body)
    # The other host's conversation: the kept one, then what followed; this host's is untouched;
    # the copy is brought up to date when the approving session ends.
    there = stored(other, paused.session_id)
    assert there[:len(before)] == before and len(outputs_of(there, "call_secret")) == 1
    assert "Both written." in json.dumps(there)
    assert stored(here, paused.session_id) == before and stored(store, f"{paused.session_id}.paused") == there

    # A later request there continues the whole conversation from the other host's store.
    later = await make_agent(server, tmp_path, wire, conversations="other-host", on_ask="deny").execute(
        "Never mind; write other.txt.", cwd=repo, resume=paused.session_id)
    assert later.status is CodingStatus.COMPLETED, later.error
    carried = json.dumps(server.model_requests[2].body)
    assert "Write a.txt and secret.txt" in carried and "Both written." in carried and "Wrote secret.txt" in carried


def two_asks(request: Any) -> Any:
    """A write that asks, then (with its result) another one that asks, then the answer."""
    done = {result["id"] for result in request.tool_results}
    if "call_late" in done:
        return reply(text("Both written."))
    if "call_secret" in done:
        return reply(tool_call("write_file", {"path": "late.txt", "content": "l\n"}, id="call_late"))
    return reply(tool_call("write_file", SECRET, id="call_secret"))


@agent_test
@pytest.mark.timeout(300)
async def test_a_host_whose_conversation_is_behind_catches_up_from_the_store(scripted_model_server, repo, tmp_path):
    """Paused here, approved on another host where the run goes on and pauses again: approving
    that pause here brings this host's conversation up to it from the store's copy."""
    server = scripted_model_server(handler=two_asks)
    policy = {"rules": ["ask edit:secret.txt", "ask edit:late.txt"], "mode": "bypass"}
    paused = await make_agent(server, tmp_path, permissions=policy).execute("Write both", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    again = await make_agent(server, tmp_path, conversations="other-host", permissions=policy).approve(
        paused.resume_handle)
    assert again.status is CodingStatus.PAUSED and [c.id for c in again.pending] == ["call_late"], again.error
    behind = stored(tmp_path / "conversations", paused.session_id)
    ahead = stored(tmp_path / "other-host", paused.session_id)
    assert len(behind) < len(ahead) and ahead[:len(behind)] == behind

    resumed = await make_agent(server, tmp_path, permissions=policy).approve(again.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "secret.txt").read_text() == "s\n" and (repo / "late.txt").read_text() == "l\n"
    assert len(server.model_requests) == 3 and sorted(results(server, 2)) == ["call_late", "call_secret"]
    caught_up = stored(tmp_path / "conversations", paused.session_id)
    assert caught_up[:len(ahead)] == ahead and "Both written." in json.dumps(caught_up)
    assert [len(outputs_of(caught_up, call)) for call in ("call_secret", "call_late")] == [1, 1]


@agent_test
@pytest.mark.timeout(300)
async def test_a_conversation_in_neither_store_ends_the_approval_with_an_error(scripted_model_server, repo,
                                                                              tmp_path):
    server = scripted_model_server(handler=scripted_model)
    paused = await make_agent(server, tmp_path).execute("Write a.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    (tmp_path / "store" / f"{paused.session_id}.paused.jsonl").unlink()  # the copy lost (or never kept)
    gone = await make_agent(server, tmp_path, conversations="other-host").approve(paused.resume_handle)
    assert gone.status is CodingStatus.ERROR, gone.error
    assert f"no conversation {paused.session_id!r} to resume" in (gone.error or "")
    assert "nor in conversation_store" in (gone.error or "")
    assert not (repo / "secret.txt").exists() and len(server.model_requests) == 1
    # The run stays paused: the host that has the conversation approves it.
    resumed = await make_agent(server, tmp_path).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "secret.txt").read_text() == "s\n" and len(server.model_requests) == 2


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", WIRES)
async def test_deny_tells_the_model_a_person_refused_and_names_the_denial(scripted_model_server, repo, tmp_path,
                                                                          wire):
    server = scripted_model_server(handler=scripted_model)
    # on_permission answers "defer": the run pauses (on_ask is "deny" here).
    asked = make_agent(server, tmp_path, wire, on_ask="deny", on_permission=lambda request: "defer")
    paused = await asked.execute("Write a.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    resumed = await make_agent(server, tmp_path, wire).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error  # a.txt was written before the pause
    assert not (repo / "secret.txt").exists() and resumed.files == {"a.txt": "a\n"}
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["target"], denial["rule"]) == ("write_file", "secret.txt", "ask edit:secret.txt")
    assert "denied by a person" in denial["reason"]
    told = results(server, 1)
    assert "Permission denied by a person when the paused run was continued" in told["call_secret"]
    assert "Do not retry the same call" in told["call_secret"]
    assert "a" in told["call_read"]  # the read after it needed no approval: it ran


@agent_test
@pytest.mark.timeout(300)
async def test_a_call_left_unanswered_waits_again_without_a_model_request(scripted_model_server, repo, tmp_path):
    server = scripted_model_server(handler=scripted_model)
    paused = await make_agent(server, tmp_path).execute("Write a.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    # Only the read is answered: the write that asks is decided as usual, and nobody can answer
    # it, so the run pauses again at it (and the read after it waits with it).
    again = await make_agent(server, tmp_path).approve(paused.resume_handle, {"call_read": "allow"})
    assert again.status is CodingStatus.PAUSED, again.error
    assert [c.id for c in again.pending] == ["call_secret", "call_read"]
    assert again.resume_handle and again.resume_handle != paused.resume_handle
    assert len(server.model_requests) == 1 and not (repo / "secret.txt").exists()
    assert (again.input_tokens, again.output_tokens) == (1000, 100)
    resumed = await make_agent(server, tmp_path).approve(again.resume_handle, "always")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "secret.txt").read_text() == "s\n" and len(server.model_requests) == 2
    assert resumed.files == {"a.txt": "a\n", "secret.txt": "s\n"}
    assert (resumed.input_tokens, resumed.output_tokens) == (2000, 200)


@agent_test
@pytest.mark.timeout(300)
async def test_a_session_approves_its_own_paused_request_on_the_connected_agent(scripted_model_server, repo,
                                                                               tmp_path):
    server = scripted_model_server(handler=scripted_model)
    async with make_agent(server, tmp_path).session(cwd=repo) as session:
        paused = await session.execute("Write a.txt and secret.txt")
        assert paused.status is CodingStatus.PAUSED, paused.error
        resumed = await session.approve(paused.resume_handle)
        assert resumed.status is CodingStatus.COMPLETED, resumed.error
        assert (session.usage.input_tokens, session.usage.output_tokens) == (2000, 200)  # the paused part once
    assert (repo / "secret.txt").read_text() == "s\n" and len(server.model_requests) == 2
    assert sorted(results(server, 1)) == ["call_a", "call_read", "call_secret"]


@agent_test
@pytest.mark.timeout(300)
async def test_a_request_after_the_pause_moves_the_conversation_on_and_the_approval_says_so(
        scripted_model_server, repo, tmp_path):
    server = scripted_model_server(handler=scripted_model)
    async with make_agent(server, tmp_path).session(cwd=repo) as session:
        paused = await session.execute("Write a.txt and secret.txt")
        assert paused.status is CodingStatus.PAUSED, paused.error
        # The SDK leaves the calls without results out of the next request's history.
        later = await session.execute("Never mind; write other.txt.")
        assert later.status is CodingStatus.COMPLETED, later.error
        gone = await session.approve(paused.resume_handle)
    assert gone.status is CodingStatus.ERROR and "went on after the run paused" in (gone.error or "")
    assert not (repo / "secret.txt").exists()


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", WIRES)
async def test_a_new_request_resuming_a_paused_conversation_runs_none_of_its_waiting_calls(
        scripted_model_server, repo, tmp_path, wire):
    """`resume=` the paused conversation with a new prompt in a fresh agent (not approve): the
    SDK's RunState with the interruptions is only in the pause record, so the new run starts from
    the conversation, where the waiting calls have no result; they do not run, and the pause can
    no longer be approved."""
    server = scripted_model_server(handler=scripted_model)
    paused = await make_agent(server, tmp_path, wire).execute("Write a.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle, paused.error
    later = await make_agent(server, tmp_path, wire).execute("Never mind; write other.txt.", cwd=repo,
                                                             resume=paused.session_id)
    assert later.status is CodingStatus.COMPLETED, later.error
    assert later.files == {"other.txt": "o"} and not (repo / "secret.txt").exists()
    assert len(server.model_requests) == 3
    # The SDK kept only the call that ran in the conversation: the waiting calls are not in the
    # next request at all (neither the calls nor results).
    assert sorted(results(server, 1)) == ["call_a"]
    assert "call_secret" not in json.dumps(server.model_requests[1].body)
    gone = await make_agent(server, tmp_path, wire).approve(paused.resume_handle)
    assert gone.status is CodingStatus.ERROR and "went on after the run paused" in (gone.error or ""), gone.error
    assert not (repo / "secret.txt").exists() and len(server.model_requests) == 3


@agent_test
@pytest.mark.timeout(300)
async def test_a_call_the_sdk_cannot_read_runs_and_the_model_reads_what_is_wrong(scripted_model_server, repo,
                                                                                  tmp_path):
    # NaN is not JSON: the SDK stops at such a call before any check; the backend lets it run.
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "a.txt", "content": "a\n", "size": math.nan}, id="call_nan")),
        reply(text("done")),
    ])
    result = await make_agent(server, tmp_path).execute("Write a.txt", cwd=repo)
    assert result.status is CodingStatus.COMPLETED and not result.pending, result.error
    assert results(server, 1)["call_nan"] == "Wrote a.txt" and result.files == {"a.txt": "a\n"}


def test_the_store_of_paused_runs_follows_the_option(tmp_path):
    from agenter.backends.agents.openai_agents import OpenAIAgentsBackend, OpenAIAgentsOptions
    from agenter.backends.base import BackendSettings
    from agenter.store import FileConversationStore

    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="openai-agents", api_key=API_KEY, on_ask="pause", sandbox=False,
                              conversation_store=False)
    assert "conversation_store=False keeps none" in str(caught.value)
    with pytest.raises(ConfigurationError, match="conversation_store takes a folder path"):
        AutonomousCodingAgent(backend="openai-agents", api_key=API_KEY, on_ask="pause", sandbox=False,
                              conversation_store=3)

    def store(**options: Any) -> Any:
        settings = BackendSettings(model=None, tools=[], sandbox=False, options=OpenAIAgentsOptions(**options))
        return OpenAIAgentsBackend.pause_store(settings, tmp_path / "logs")

    beside = store()
    assert isinstance(beside, FileConversationStore) and beside.root == tmp_path / "logs" / "conversations"
    assert store(conversation_store=str(tmp_path / "runs")).root == tmp_path / "runs"
