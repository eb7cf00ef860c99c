"""Approvals that can wait on google-adk (docs/approvals.md): the real ADK and google-genai against
the scripted model server's Gemini wire. A call the policy asks about with nobody to answer ends
the run at ADK's request to confirm it; a fresh agent (as another process would build it, with the
same store) answers ADK's confirmation, ADK runs the paused call itself, and the model's next
request holds its real result. The scripted model answers by what a request holds (the function
responses in it), never by arrival order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.agents.google_adk._backend import PAUSED_RESULT
from agenter.backends.agents.google_adk._kept import SESSION_KIND
from agenter.backends.agents.google_adk._permissions import CallOrder
from agenter.store import FileConversationStore
from agenter.testing import reply, text, tool_call

API_KEY = "AIza-test-ADKPAUSE-0123456789abcdef0123"
agent_test = pytest.mark.agent

#: Everything allowed but the write of secret.txt.
POLICY = {"rules": ["ask edit:secret.txt"], "mode": "bypass"}
#: Fixed token counts per model response, so what the continued run carries is exact.
USAGE = {"input_tokens": 1000, "output_tokens": 100}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ADK's session database goes to a cache folder of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


def make_agent(server: Any, store: Path, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent, as this process or another one builds it."""
    kwargs.setdefault("on_ask", "pause")
    kwargs.setdefault("permissions", POLICY)
    return AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, base_url=server.base_url, max_retries=0,
                                 sandbox=False, conversation_store=str(store), **kwargs)


def responses(request: Any) -> dict[str, str]:
    """The function responses a request holds: call id → the response as JSON text."""
    return {part["functionResponse"]["id"]: json.dumps(part["functionResponse"]["response"])
            for content in request.body.get("contents") or [] for part in content.get("parts") or []
            if "functionResponse" in part}


def scripted_model(request: Any) -> Any:
    """Write a.txt; then, in one response, write b.txt, write secret.txt (asks) and read a.txt;
    once secret.txt's call has a result that is not the placeholder, finish."""
    said = responses(request)
    if "call_secret" in said and PAUSED_RESULT not in said["call_secret"]:
        return reply(text("Done."), usage=USAGE)
    if "call_a" in said:
        return reply(tool_call("WriteFile", {"path": "b.txt", "content": "b\n"}, id="call_b"),
                     tool_call("WriteFile", {"path": "secret.txt", "content": "s\n"}, id="call_secret"),
                     tool_call("ReadFile", {"path": "a.txt"}, id="call_read"), usage=USAGE)
    return reply(tool_call("WriteFile", {"path": "a.txt", "content": "a\n"}, id="call_a"), usage=USAGE)


def decisions(events: list[Any]) -> list[tuple[str, str, str]]:
    return [(d["input"], d["decision"], d["answered_by"]) for d in
            (e.data["tool_input"] for e in events if e.kind is CodingEventType.PERMISSION_DECISION)]


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("session_db", ["sqlite", ":memory:"])
async def test_an_ask_pauses_and_a_fresh_agent_runs_the_paused_call_itself(scripted_model_server, repo, tmp_path,
                                                                           session_db):
    server = scripted_model_server(handler=scripted_model)
    store = tmp_path / "store"
    options = {} if session_db == "sqlite" else {"adk_session_db": session_db}
    paused = await make_agent(server, store, **options).execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and not paused.ok, paused.error
    # The call that asked and the one after it in the same response wait; the one before it ran.
    assert [(c.id, c.tool, c.needs_approval) for c in paused.pending] == [
        ("call_secret", "WriteFile", True), ("call_read", "ReadFile", False)]
    asking = paused.pending[0]
    assert asking.input == {"path": "secret.txt", "content": "s\n"} and asking.paths == ["secret.txt"]
    assert (asking.rule, asking.stage) == ("ask edit:secret.txt", "ask_rule")
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert paused.files == {"a.txt": "a\n", "b.txt": "b\n"} and not (repo / "secret.txt").exists()
    assert (paused.input_tokens, paused.output_tokens) == (2000, 200)  # two responses
    assert len(server.model_requests) == 2  # the run ended at the call: no request after it
    # The store keeps the ADK session's events beside the record, ending at ADK's request to confirm.
    assert paused.session_id is not None
    kept = FileConversationStore(store).load(paused.session_id)
    assert kept is not None and kept.metadata == {"kind": SESSION_KIND}
    asked = [part["function_call"] for part in kept.messages[-1]["content"]["parts"]]
    assert [(c["name"], c["args"]["originalFunctionCall"]["id"]) for c in asked] == [
        ("adk_request_confirmation", "call_secret"), ("adk_request_confirmation", "call_read")]

    # A fresh agent (another process would build the same; with ':memory:' the ADK session is
    # only in the store) approves it.
    events = [event async for event in make_agent(server, store, **options).stream_approve(paused.resume_handle)]
    resumed = events[-1].result
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id  # the same ADK session
    assert (repo / "secret.txt").read_text() == "s\n"
    assert resumed.files == {"a.txt": "a\n", "b.txt": "b\n", "secret.txt": "s\n"}  # each once
    assert decisions(events) == [("secret.txt", "allow", "approval"), ("a.txt", "allow", None)]
    # ADK ran the paused calls themselves: the model's next request holds their real results
    # where the placeholders were, and nobody asked the model to make them again.
    assert len(server.model_requests) == 3
    said = responses(server.model_requests[2])
    assert set(said) == {"call_a", "call_b", "call_secret", "call_read"}
    assert PAUSED_RESULT not in json.dumps(said) and '1\\ta' in said["call_read"]
    assert not resumed.permission_denials
    # Tokens carry over: the paused run's two responses and the one after it, counted once.
    assert (resumed.input_tokens, resumed.output_tokens) == (3000, 300)
    assert resumed.iterations == paused.iterations == 1

    # The store keeps no secret; the handle was used once; an unknown one is a one-line error.
    assert all(API_KEY not in path.read_text() for path in store.rglob("*") if path.is_file())
    again = make_agent(server, store, **options)
    with pytest.raises(ConfigurationError, match="was already used"):
        await again.approve(paused.resume_handle)
    with pytest.raises(ConfigurationError) as unknown:
        await again.approve("pause-" + "0" * 32)
    assert "unknown resume handle 'pause-" in str(unknown.value) and "\n" not in str(unknown.value)


@agent_test
@pytest.mark.timeout(300)
async def test_deny_tells_the_model_why_and_names_the_denial_in_the_result(scripted_model_server, repo, tmp_path):
    def model(request: Any) -> Any:
        said = responses(request)
        if "call_secret" in said and PAUSED_RESULT not in said["call_secret"]:
            return reply(text("Left secret.txt alone."), usage=USAGE)
        return scripted_model(request)

    server = scripted_model_server(handler=model)
    store = tmp_path / "store"
    # on_permission answers "defer": the run pauses (on_ask is "deny" here).
    asked = make_agent(server, store, on_ask="deny", on_permission=lambda request: "defer")
    paused = await asked.execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    assert [c.id for c in paused.pending] == ["call_secret", "call_read"] and paused.resume_handle
    resumed = await make_agent(server, store).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error  # a.txt was written before the pause
    assert not (repo / "secret.txt").exists() and resumed.files == {"a.txt": "a\n", "b.txt": "b\n"}
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["target"], denial["rule"]) == ("WriteFile", "secret.txt", "ask edit:secret.txt")
    assert "denied by a person" in denial["reason"]
    said = responses(server.model_requests[-1])
    assert "Permission denied by a person" in said["call_secret"] and "Do not retry" in said["call_secret"]
    assert '1\\ta' in said["call_read"]  # the read after it had no answer: decided as usual, it ran


@agent_test
@pytest.mark.timeout(300)
async def test_a_call_left_unanswered_pauses_again_and_always_is_carried(scripted_model_server, repo, tmp_path):
    """Answering only the read: the write is decided as usual when ADK runs it again, asks, and
    the run pauses again there (with the read after it) under a new handle."""
    server = scripted_model_server(handler=scripted_model)
    store = tmp_path / "store"
    first = await make_agent(server, store).execute("Write them", cwd=repo)
    assert first.status is CodingStatus.PAUSED and first.resume_handle, first.error
    second = await make_agent(server, store).approve(first.resume_handle, {"call_read": "allow"})
    assert second.status is CodingStatus.PAUSED, second.error
    assert [(c.id, c.needs_approval) for c in second.pending] == [("call_secret", True), ("call_read", False)]
    assert second.resume_handle and second.resume_handle != first.resume_handle and len(server.model_requests) == 2
    assert not (repo / "secret.txt").exists()
    events = [event async for event in make_agent(server, store).stream_approve(second.resume_handle, "always")]
    third = events[-1].result
    assert third.status is CodingStatus.COMPLETED, third.error
    assert (repo / "secret.txt").read_text() == "s\n" and sorted(third.files) == ["a.txt", "b.txt", "secret.txt"]
    assert [d for d in decisions(events) if d[0] == "secret.txt"] == [("secret.txt", "allow", "approval")]
    assert (third.input_tokens, third.iterations) == (3000, 1)


@agent_test
@pytest.mark.timeout(300)
async def test_a_request_that_paused_in_an_open_session_is_approved_in_that_session(scripted_model_server, repo,
                                                                                     tmp_path):
    server = scripted_model_server(handler=scripted_model)
    async with make_agent(server, tmp_path / "store").session(cwd=repo) as session:
        paused = await session.execute("Write them")
        assert paused.status is CodingStatus.PAUSED and paused.resume_handle
        resumed = await session.approve(paused.resume_handle)
        assert resumed.status is CodingStatus.COMPLETED, resumed.error
        assert (repo / "secret.txt").read_text() == "s\n" and len(server.model_requests) == 3


def test_on_ask_pause_needs_a_store():
    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, on_ask="pause", conversation_store=False)
    assert "conversation_store=False keeps none" in str(caught.value)
    with pytest.raises(ConfigurationError, match="conversation_store takes a folder path"):
        AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, on_ask="pause", conversation_store=3)


async def test_call_order_waits_for_the_earlier_calls_begun():
    order = CallOrder()
    order.begin("one")
    order.begin("two")
    waiting = asyncio.ensure_future(order.after(["one", "two", "never-begun"]))
    await asyncio.sleep(0)
    assert not waiting.done()
    order.end("one", deferred=False)
    order.end("two", deferred=True)
    assert await waiting is True
    order.end("two", deferred=False)  # decided once
    assert await order.after(["one", "two"]) is True and await order.after(["one"]) is False
