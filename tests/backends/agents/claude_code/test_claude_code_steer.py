"""session.steer on claude-code (docs/sessions.md): the REAL `claude` CLI (bundled with
claude-agent-sdk) against the scripted Anthropic server. A steer is Claude Code's streaming input:
taken into the running turn with the next tool results, or, when the model was answering
without tool calls, in a turn the CLI starts for it, which the same request reads to its end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agenter import CodingEventType, CodingStatus
from agenter.backends.agents.claude_code._steering import IN_TURN, NEW_TURN
from agenter.testing import reply, text, tool_call

from .test_claude_code import agent_test, make_agent, needs_cli

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")


def last_user(request: Any) -> Any:
    return [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]


@agent_test
@needs_cli
async def test_a_steer_during_a_command_joins_the_running_turn(scripted_model_server, repo, cli_env,
                                                                no_leftover_cli):
    server = scripted_model_server([reply(tool_call("Bash", {"command": "sleep 3"})), reply(text("Slept; hello."))])
    agent = make_agent(server, cli_env, validators=[], sandbox=False)
    assert agent.capabilities.steering
    events, receipts = [], []
    async with agent.session(cwd=repo) as session:
        idle = session.steer("anyone there?")
        async for event in session.stream_execute("Sleep a little.", require_changes=False):
            events.append(event)
            if event.kind is CodingEventType.COMMAND_STARTED and not receipts:
                receipts.append(session.steer("Also say hello."))
        after = session.steer("too late")
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert receipts[0] and not idle and not after and "no request is running" in (after.reason or "")
    first, second = server.model_requests
    assert "Also say hello." not in json.dumps(first.body["messages"])
    # The same turn: the model read it in the user message holding the command's result.
    content = last_user(second)
    assert [block["type"] for block in content] == ["tool_result", "text"]
    assert "Also say hello." in content[1]["text"]
    steered = [e for e in events if e.kind is CodingEventType.STEERED]
    assert [(e.data["text"], e.data["where"]) for e in steered] == [("Also say hello.", IN_TURN)]
    kinds = [e.kind for e in events]
    assert kinds.index(CodingEventType.COMMAND_FINISHED) < kinds.index(CodingEventType.STEERED)
    assert result.summary == "Slept; hello."


@agent_test
@needs_cli
async def test_a_steer_after_the_answer_is_read_to_its_end_in_the_same_request(scripted_model_server, repo,
                                                                                cli_env, no_leftover_cli):
    """Sent while the model answers without tool calls: the CLI ends that turn, then answers the
    message in a turn of its own. Both are this request's (events, usage), and the next request
    gets the answer to its own prompt, not the steer's."""
    usage = {"input_tokens": 100, "output_tokens": 10}
    server = scripted_model_server([reply(text("My first answer."), delay=3, usage=usage),
                                    reply(text("One line, as you asked."), usage=usage),
                                    reply(text("The next request's answer."), usage=usage)])
    agent = make_agent(server, cli_env, validators=[], sandbox=False)
    async with agent.session(cwd=repo) as session:

        async def steer_once_asked() -> Any:
            while not server.model_requests:
                await asyncio.sleep(0.05)
            return session.steer("Keep it to one line.")

        steering = asyncio.ensure_future(steer_once_asked())
        try:
            events = [e async for e in session.stream_execute("Explain the project.", require_changes=False)]
        finally:
            receipt = await asyncio.wait_for(steering, 5)
        result = events[-1].result
        following = await session.execute("And now?", require_changes=False)
    assert receipt and result.status is CodingStatus.COMPLETED, result.error
    assert len(server.model_requests) == 3
    second = server.model_requests[1]
    assert "My first answer." in json.dumps(second.body["messages"]) and "Keep it to one line." in json.dumps(
        last_user(second))
    texts = [e.data["content"] for e in events if e.kind is CodingEventType.TEXT_DELTA]
    assert "".join(texts) == "My first answer.One line, as you asked."
    steered = [e for e in events if e.kind is CodingEventType.STEERED]
    assert [(e.data["text"], e.data["where"]) for e in steered] == [("Keep it to one line.", NEW_TURN)]
    assert result.summary == "One line, as you asked."
    assert result.output_tokens == 20  # both turns of the CLI count in this request
    assert following.status is CodingStatus.COMPLETED and following.summary == "The next request's answer."
    assert "And now?" in json.dumps(last_user(server.model_requests[2]))


async def test_a_message_the_cli_cannot_take_is_named():
    """The bookkeeping alone (no CLI): a write that fails, and a steer never taken in."""
    from claude_agent_sdk import CLIConnectionError

    from agenter.backends.agents.claude_code._steering import Steering

    class Gone:  # a client whose CLI has exited
        async def query(self, prompt: Any) -> None:
            raise CLIConnectionError("Cannot write to terminated process (exit code: 1)")

    class Listening:
        async def query(self, prompt: Any) -> None:
            self.sent = [message async for message in prompt]

    steering = Steering()
    steering.start(Gone())
    steering.send("lost on the way")
    assert not await steering.after_result() and not steering.open
    notes = steering.landed(object())
    assert [m.details for m in notes] == [{"steer_undelivered": "lost on the way"}]
    assert "could not be written to Claude Code" in notes[0].content and "terminated process" in notes[0].content
    client = Listening()
    steering.start(client)
    steering.send("never taken in")
    assert await steering.after_result()  # the CLI owes it a turn
    (sent,) = client.sent
    assert sent["message"] == {"role": "user", "content": "never taken in"} and sent["uuid"]
    assert [m.details for m in steering.close("the turn ended first")] == [{"steer_undelivered": "never taken in"}]
    assert steering.close("again") == []


@agent_test
@needs_cli
async def test_a_steer_the_cli_never_takes_up_ends_with_the_cli_stopped(scripted_model_server, repo, cli_env,
                                                                         no_leftover_cli, monkeypatch):
    """The guard against a stray turn: a message the CLI does not take in (here: one whose uuid
    it has seen already, which it skips) is named in a status after the wait, and the CLI is
    stopped; the next request resumes the conversation in a new one."""
    import types

    from agenter.backends.agents.claude_code import _steering

    monkeypatch.setattr(_steering, "uuid", types.SimpleNamespace(uuid4=lambda: "5b0e1c62-0000-4000-8000-000000000001"))
    monkeypatch.setattr(_steering, "FOLLOW_UP_TIMEOUT", 3.0)
    monkeypatch.setattr("agenter.backends.agents.claude_code._backend.FOLLOW_UP_TIMEOUT", 3.0)
    server = scripted_model_server([reply(tool_call("Bash", {"command": "sleep 3"})), reply(text("First done.")),
                                    reply(text("Second done."), delay=2), reply(text("Third done."))])
    agent = make_agent(server, cli_env, validators=[], sandbox=False)
    async with agent.session(cwd=repo) as session:
        first = []
        async for event in session.stream_execute("Sleep.", require_changes=False):
            first.append(event)
            if event.kind is CodingEventType.COMMAND_STARTED:
                assert session.steer("Taken in.")
        assert [e.data["text"] for e in first if e.kind is CodingEventType.STEERED] == ["Taken in."]

        async def steer_once_asked() -> Any:
            while len(server.model_requests) < 3:
                await asyncio.sleep(0.05)
            return session.steer("Skipped by the CLI.")

        steering = asyncio.ensure_future(steer_once_asked())
        try:
            second = [e async for e in session.stream_execute("Again.", require_changes=False)]
        finally:
            assert await asyncio.wait_for(steering, 5)
        third = await session.execute("Once more.", require_changes=False)
    result = second[-1].result
    assert result.status is CodingStatus.COMPLETED and result.summary == "Second done.", result.error
    notes = [e.data["content"] for e in second if e.kind is CodingEventType.STATUS and "not delivered" in e.data["content"]]
    assert len(notes) == 1 and "did not take it up within 3 s" in notes[0] and "Skipped by the CLI." in notes[0]
    assert not [e for e in second if e.kind is CodingEventType.STEERED]
    assert third.status is CodingStatus.COMPLETED and third.summary == "Third done."
    assert "First done." in json.dumps(server.model_requests[3].body["messages"])  # the same conversation
