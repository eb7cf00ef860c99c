"""Approvals that can wait, on agenter's own agent (docs/approvals.md): an ask nobody can answer
now pauses the run (on_ask="pause", or on_permission's "defer"), and a fresh agent (as in another
process, with the same store) continues it with the person's answer, on every wire of the harness
against the scripted model server: the model's next request holds the earlier conversation and
the paused calls' real results, files written before the pause are there and counted once, the
tokens, cost and iterations go on from the recorded ones. What is refused, and how."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.model_api._harness.dispatch import PAUSED_RESULT
from agenter.permissions import PermissionRequest
from agenter.sandbox.folder_lock import FolderBusyError, claim_folder
from agenter.store import FileConversationStore, StoreError
from agenter.testing import reply, text, tool_call

from .test_harness_resume import KEYS, WIRES, agent_kwargs

agent_test = pytest.mark.agent

#: The policy of these runs: everything allowed but the writes of secret.txt and other.txt.
POLICY = {"rules": ["ask edit:secret.txt", "ask edit:other.txt"], "mode": "bypass"}
#: Fixed token counts per model response, so what a continued run carries is exact.
USAGE = {"input_tokens": 1000, "output_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


def make_agent(server: Any, wire: str = "anthropic-sdk", **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("on_ask", "pause")
    kwargs.setdefault("permissions", POLICY)
    return AutonomousCodingAgent(**agent_kwargs(server, wire), **kwargs)


def three_calls() -> Any:
    """One response: a write that needs nothing, the write that asks, a read after it."""
    return reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"}, id="call_a"),
                 tool_call("write_file", {"path": "secret.txt", "content": "s\n"}, id="call_secret"),
                 tool_call("read_file", {"path": "a.txt"}, id="call_read"), usage=USAGE)


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", WIRES)
async def test_an_ask_rule_pauses_headless_and_a_fresh_agent_continues_from_the_paused_call(
        scripted_model_server, repo, wire):
    server = scripted_model_server([three_calls(), reply(text("Both written."), usage=USAGE)])
    events = [event async for event in make_agent(server, wire).stream_execute("Write a.txt and secret.txt",
                                                                                cwd=repo)]
    paused = events[-1].result
    assert paused.status is CodingStatus.PAUSED and not paused.ok and paused.error is None
    assert [(c.id, c.tool, c.needs_approval) for c in paused.pending] == [
        ("call_secret", "write_file", True), ("call_read", "read_file", False)]
    asking = paused.pending[0]
    assert (asking.rule, asking.stage, asking.paths, asking.input) == (
        "ask edit:secret.txt", "ask_rule", ["secret.txt"], {"path": "secret.txt", "content": "s\n"})
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert events[-2].type is CodingEventType.PAUSED
    assert events[-2].data["resume_handle"] == paused.resume_handle
    assert [c["id"] for c in events[-2].data["pending"]] == ["call_secret", "call_read"]
    # The call before the paused one ran; the paused one and the one after it did not.
    assert (repo / "a.txt").read_text() == "a\n" and not (repo / "secret.txt").exists()
    assert paused.files == {"a.txt": "a\n"} and len(server.model_requests) == 1
    assert paused.total_tokens == 1100 and paused.iterations == 1

    # A fresh agent (another process would build the same) continues it with "allow".
    resumed = await make_agent(server, wire).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "secret.txt").read_text() == "s\n"
    assert resumed.files == {"a.txt": "a\n", "secret.txt": "s\n"}  # a.txt once, from before the pause
    assert resumed.total_tokens == 2200 and resumed.input_tokens == 2000  # carried, plus the one new response
    assert resumed.total_cost_usd == pytest.approx(2 * paused.total_cost_usd, rel=1e-3)
    assert resumed.iterations == paused.iterations == 1  # the paused iteration went on
    assert resumed.duration_seconds >= paused.duration_seconds
    assert resumed.session_id == paused.session_id
    # The model's next request: the earlier conversation, the three calls and their real results.
    assert len(server.model_requests) == 2
    body = json.dumps(server.model_requests[1].body)
    assert "Write a.txt and secret.txt" in body and PAUSED_RESULT not in body
    assert "secret.txt" in body and body.count("call_secret") >= 2 and body.count("call_read") >= 2
    if wire == "anthropic-sdk":
        messages = server.model_requests[1].body["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        results = {b["tool_use_id"]: b for b in messages[2]["content"] if b["type"] == "tool_result"}
        assert list(results) == ["call_a", "call_secret", "call_read"]
        assert "secret.txt" in str(results["call_secret"]["content"]) and not results["call_secret"].get("is_error")
        assert "a" in str(results["call_read"]["content"]) and not results["call_read"].get("is_error")


@agent_test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", ["anthropic-sdk", "openai-chat"])
async def test_deny_tells_the_model_a_person_refused_and_the_run_goes_on(scripted_model_server, repo, wire):
    server = scripted_model_server([three_calls(), reply(text("I left secret.txt alone."), usage=USAGE)])
    paused = await make_agent(server, wire).execute("Write a.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    resumed = await make_agent(server, wire).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error  # a.txt was written before the pause
    assert not (repo / "secret.txt").exists() and resumed.files == {"a.txt": "a\n"}
    denial = next(d for d in resumed.permission_denials if d["target"] == "secret.txt")
    assert "denied by a person" in denial["reason"] and denial["rule"] == "ask edit:secret.txt"
    body = json.dumps(server.model_requests[1].body)
    assert "denied by a person when the paused run was continued" in body
    assert "Do not retry the same call" in body and PAUSED_RESULT not in body
    assert body.count("call_read") >= 2  # the read after it needed no approval: it ran


@agent_test
@pytest.mark.timeout(300)
async def test_tool_calls_written_in_the_reply_pause_and_continue_in_text_mode(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text('Writing both.\n```json\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "a\\n"}}'
                   '\n```\n```json\n{"name": "write_file", "arguments": {"path": "secret.txt", "content": "s\\n"}}\n```')),
        reply(text("Both written.")),
    ])
    paused = await make_agent(server, "openai-chat", openai_tool_calls="text").execute("Write them", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    assert [c.input["path"] for c in paused.pending] == ["secret.txt"] and (repo / "a.txt").exists()
    resumed = await make_agent(server, "openai-chat", openai_tool_calls="text").approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "secret.txt").read_text() == "s\n"
    body = server.model_requests[1].body
    assert "tools" not in body and PAUSED_RESULT not in json.dumps(body)
    assert "secret.txt" in body["messages"][-1]["content"]  # the results, as text


@agent_test
@pytest.mark.timeout(300)
async def test_always_is_carried_and_a_later_ask_pauses_again_with_a_new_handle(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "secret.txt", "content": "1\n"})),
        # Continued: the same write again (allowed by "always"), then one that asks.
        reply(tool_call("write_file", {"path": "secret.txt", "content": "2\n"}),
              tool_call("write_file", {"path": "other.txt", "content": "o\n"}, id="call_other")),
        # Continued again: "always" still holds in the third agent.
        reply(tool_call("write_file", {"path": "secret.txt", "content": "3\n"})),
        reply(text("Done.")),
    ])
    first = await make_agent(server).execute("Write them", cwd=repo)
    assert first.status is CodingStatus.PAUSED
    events = [event async for event in make_agent(server).stream_approve(first.resume_handle, "always")]
    second = events[-1].result
    assert second.status is CodingStatus.PAUSED, second.error
    assert [c.id for c in second.pending] == ["call_other"] and second.resume_handle != first.resume_handle
    decisions = [e.data["tool_input"] for e in events if e.kind is CodingEventType.PERMISSION_DECISION]
    assert [d["answered_by"] for d in decisions if d["input"] == "secret.txt"] == ["approval", "always"]
    assert (repo / "secret.txt").read_text() == "2\n" and not (repo / "other.txt").exists()
    starts = [e for e in events if e.type is CodingEventType.ITERATION_START]
    assert [(e.data["iteration"], e.data.get("continues")) for e in starts] == [(1, first.resume_handle)]
    third = await make_agent(server).approve(second.resume_handle, {"call_other": "allow"})
    assert third.status is CodingStatus.COMPLETED, third.error
    assert (repo / "secret.txt").read_text() == "3\n" and (repo / "other.txt").read_text() == "o\n"
    assert sorted(third.files) == ["other.txt", "secret.txt"] and third.iterations == 1


@agent_test
@pytest.mark.timeout(300)
async def test_on_permission_answering_defer_pauses_and_an_answer_is_used_as_before(scripted_model_server, repo):
    asked: list[str] = []

    def answer(request: PermissionRequest) -> Any:
        asked.append(request.call.summary())
        return "defer" if "secret" in request.call.summary() else True

    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "other.txt", "content": "o\n"}),
              tool_call("write_file", {"path": "secret.txt", "content": "s\n"})),
        reply(text("Done.")),
    ])
    agent = make_agent(server, on_ask="deny", on_permission=answer)
    paused = await agent.execute("Write them", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and asked == ["other.txt", "secret.txt"]
    assert (repo / "other.txt").exists() and [c.tool for c in paused.pending] == ["write_file"]
    resumed = await asyncio.to_thread(agent.approve_sync, paused.resume_handle)  # the same agent object too
    assert resumed.status is CodingStatus.COMPLETED and (repo / "secret.txt").exists()
    assert asked == ["other.txt", "secret.txt"]  # the answer given was used: nobody was asked again


@agent_test
@pytest.mark.timeout(300)
async def test_bad_answers_are_one_line_errors_that_leave_the_run_paused(scripted_model_server, repo, tmp_path):
    store = tmp_path / "store"
    server = scripted_model_server([three_calls(), reply(text("Done."))])
    agent = make_agent(server, conversation_store=str(store))
    paused = await agent.execute("Write a.txt and secret.txt", cwd=repo)
    handle = paused.resume_handle
    assert paused.status is CodingStatus.PAUSED and handle

    async def refused(call: Any, match: str) -> None:
        with pytest.raises(ConfigurationError, match=match) as caught:
            await call
        assert "\n" not in str(caught.value)

    await refused(agent.approve("pause-" + "0" * 32), "unknown resume handle 'pause-0+': .*holds no paused run")
    await refused(agent.approve("../etc/passwd"), "unknown resume handle")
    await refused(agent.approve(handle, {"call_nope": "allow"}),
                  r"call 'call_nope' is not pending in this paused run \(pending: call_secret, call_read\)")
    await refused(agent.approve(handle, "maybe"), "must be 'allow', 'deny' or 'always'")
    other = AutonomousCodingAgent(**agent_kwargs(server, "openai-chat"), on_ask="pause", conversation_store=str(store))
    await refused(other.approve(handle), "is a paused anthropic-sdk run: approve it with an agent of that backend")
    # A conversation id is not a handle, nor a handle a conversation.
    await refused(agent.approve(paused.session_id), "unknown resume handle")
    wrong = await make_agent(server, conversation_store=str(store)).execute("x", cwd=repo, resume=handle)
    assert wrong.status is CodingStatus.ERROR and "is the handle of a paused run" in (wrong.error or "")
    # A run that cannot begin (another run works in the folder) gives the handle back.
    busy = claim_folder(repo, "autonomous")
    busy.acquire()
    try:
        with pytest.raises(FolderBusyError):
            await agent.approve(handle)
    finally:
        busy.release()
    assert len(server.model_requests) == 1 and not (repo / "secret.txt").exists()
    # None of that used the handle: it still continues the run, once.
    resumed = await agent.approve(handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    await refused(agent.approve(handle), f"resume handle '{handle}' was already used at .*: a paused run is continued once")


@agent_test
@pytest.mark.timeout(300)
async def test_a_store_that_cannot_be_reached_is_named_and_the_run_stays_paused(scripted_model_server, repo):
    from agenter.testing.redis_server import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs it: scripts/install-system-deps.sh)")
    server = scripted_model_server([three_calls(), reply(text("Done."))])
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as redis:
        paused = await make_agent(server, conversation_store=redis.url).execute("Write them", cwd=repo)
        assert paused.status is CodingStatus.PAUSED, paused.error
        redis.kill()  # the store goes away while the run waits
        with pytest.raises(StoreError, match="could not be used") as caught:
            await make_agent(server, conversation_store=redis.url).approve(paused.resume_handle)
        message = str(caught.value)
        assert "\n" not in message and redis.url.split("//")[1] in message and "the run stays paused" in message
        redis.start()  # back, with what it kept
        resumed = await make_agent(server, conversation_store=redis.url).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.files == {"a.txt": "a\n", "secret.txt": "s\n"}


class _NoPauseRecords(FileConversationStore):
    """A store that keeps conversations but fails to keep a pause record."""

    def save(self, session_id: str, *args: Any, **kwargs: Any) -> int:
        if session_id.startswith("pause-"):
            raise StoreError(f"{self!r} is full")
        return super().save(session_id, *args, **kwargs)


@agent_test
@pytest.mark.timeout(300)
async def test_a_pause_that_cannot_be_kept_is_an_error_naming_the_store(scripted_model_server, repo, tmp_path):
    server = scripted_model_server([three_calls()])
    result = await make_agent(server, conversation_store=_NoPauseRecords(tmp_path / "s")).execute("Write", cwd=repo)
    assert result.status is CodingStatus.ERROR and result.resume_handle is None and result.pending == []
    assert "paused at 2 call(s) waiting for approval, but it could not be kept" in (result.error or "")
    assert "is full" in (result.error or "") and not (repo / "secret.txt").exists()


# ---------------------------------------------------------------------------------------------
# Refused when the agent is built


def test_a_backend_without_the_pause_capability_refuses_on_ask_pause(tmp_path):
    from agenter.backends.fallback import fallback_chain
    from agenter.testing import FunctionBackend

    def turn(context: Any) -> None:
        return None

    for backend, options in (("codex-cli", {}), ("claude-cli", {}), (FunctionBackend, {"turn": turn}),
                             (["anthropic-sdk", "openai"], {})):
        with pytest.raises(ConfigurationError) as caught:
            AutonomousCodingAgent(backend=backend, on_ask="pause", **options)
        message = str(caught.value)
        assert "on_ask='pause' needs a backend that can pause a run" in message and "\n" not in message
        assert ("backends that can: acp, aider-cli, anthropic-sdk, claude-code, codex, gemini, google-adk, litellm, "
                "openai, openai-agents, openhands") in message
    assert not fallback_chain("anthropic-sdk", "gemini").capabilities.pause
    with pytest.raises(ConfigurationError, match="on_ask must be 'deny' or 'pause'"):
        AutonomousCodingAgent(backend="anthropic-sdk", on_ask="ask", api_key="sk-test")
    with pytest.raises(ConfigurationError, match="conversation_store=False keeps none"):
        AutonomousCodingAgent(backend="anthropic-sdk", on_ask="pause", api_key="sk-test", conversation_store=False)
    with pytest.raises(ConfigurationError, match="not the context path of analysis mode"):
        AutonomousCodingAgent(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                              mode="analysis", on_ask="pause")
    # The default is today's behaviour on every backend.
    assert AutonomousCodingAgent(backend=FunctionBackend, turn=turn).on_ask == "deny"


def test_the_pause_capability_is_declared_by_the_harness_backends_and_the_agent_runtimes_that_can():
    from agenter.backends import backend_names, load_backend

    pausing = [name for name in backend_names() if load_backend(name).capabilities.pause]
    assert pausing == ["acp", "aider-cli", "anthropic-sdk", "claude-code", "codex", "gemini", "google-adk", "litellm",
                       "openai", "openai-agents", "openhands"]


async def test_the_record_keeps_no_secret(scripted_model_server, repo, tmp_path):
    server = scripted_model_server([three_calls()])
    store = tmp_path / "store"
    paused = await make_agent(server, conversation_store=str(store)).execute("Write them", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    record = (store / f"{paused.resume_handle}.jsonl").read_text()
    assert KEYS["anthropic-sdk"] not in record
    described = json.loads(record.splitlines()[0])["metadata"]["agent"]
    assert described["backend"] == "anthropic-sdk" and described["on_ask"] == "pause"
    assert described["options"]["base_url"] == server.base_url and "api_key" not in described["options"]
    assert described["permissions"]["rules"] == POLICY["rules"]




@agent_test
@pytest.mark.timeout(300)
async def test_a_request_that_paused_in_an_open_session_is_approved_in_that_session(scripted_model_server, repo):
    """session.approve: the connected agent goes on from the paused calls (no new process, no
    conversation loaded again); the session counts the paused run's tokens once; a handle of
    another session is refused with a one-line error and stays usable."""
    server = scripted_model_server([three_calls(), reply(text("Both written."), usage=USAGE),
                                    three_calls()])
    agent = make_agent(server)
    async with agent.session(cwd=repo) as session:
        paused = await session.execute("Write a.txt and secret.txt")
        assert paused.status is CodingStatus.PAUSED and paused.resume_handle
        resumed = await session.approve(paused.resume_handle)
        assert resumed.status is CodingStatus.COMPLETED, resumed.error
        assert (repo / "secret.txt").read_text() == "s\n"
        assert resumed.files == {"a.txt": "a\n", "secret.txt": "s\n"}
        assert resumed.total_tokens == 2200 and session.usage.total_tokens == 2200
        assert [r.status for r in session.results] == [CodingStatus.PAUSED, CodingStatus.COMPLETED]
        body = json.dumps(server.model_requests[1].body)
        assert PAUSED_RESULT not in body and body.count("call_secret") >= 2
        with pytest.raises(ConfigurationError, match="already used"):
            await session.approve(paused.resume_handle)
    (repo / "secret.txt").unlink()
    other = await make_agent(server).execute("Write a.txt and secret.txt", cwd=repo)
    assert other.status is CodingStatus.PAUSED
    async with agent.session(cwd=repo) as session:
        with pytest.raises(ConfigurationError, match="paused in another session than this one: approve it with "
                                                     r"agent.approve\(handle\)"):
            await session.approve(other.resume_handle)
    assert (await make_agent(server, permissions={"rules": [], "mode": "bypass"}).approve(
        other.resume_handle, "deny")).status is not CodingStatus.PAUSED
