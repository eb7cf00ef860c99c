"""session.steer on codex (docs/sessions.md): the real Codex CLI (`codex app-server`) against the
scripted model server's Responses wire. A steer goes to Codex as `turn/steer` for the running
turn; the model reads it with its next request, and a `steered` event says where it landed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
from agenter.backends.agents.codex._steering import Steering
from agenter.backends.base import MessageType
from agenter.testing import reply, text

from .cases import MODEL, shell
from .test_codex import options

agent_test = pytest.mark.agent


def user_texts(request: Any) -> list[str]:
    """The user messages' texts in a Responses request's input, in order."""
    return [part.get("text", "") for item in request.body["input"]
            if item.get("type") == "message" and item.get("role") == "user" for part in item.get("content") or []]


@agent_test
async def test_a_steer_during_a_command_reaches_the_next_model_request(scripted_model_server, codex_path, repo):
    server = scripted_model_server([reply(shell("sleep 3")), reply(text("Slept; hello."))])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, validators=[], **options(server, codex_path))
    assert agent.capabilities.steering
    events, receipts = [], []
    async with agent.session(cwd=repo) as session:
        async for event in session.stream_execute("Sleep a little.", require_changes=False):
            events.append(event)
            if event.kind is CodingEventType.COMMAND_STARTED and not receipts:
                receipts.append(session.steer("Also say hello."))
        after = session.steer("too late")
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert receipts[0] and receipts[0].reason is None
    assert not after and "no request is running" in (after.reason or "")
    first, second = server.model_requests
    assert "Also say hello." not in user_texts(first)
    # In the same turn, after the command's result: the next request's last input is the steer.
    items = second.body["input"]
    assert items[-1]["role"] == "user" and items[-1]["content"][0]["text"] == "Also say hello."
    assert items[-2]["type"] == "function_call_output" and "sleep 3" in json.dumps(items[-3])
    steered = [e for e in events if e.kind is CodingEventType.STEERED]
    assert [(e.data["text"], e.data["where"]) for e in steered] == [
        ("Also say hello.", "codex turn/steer: after the tool calls, with their results")]
    kinds = [e.kind for e in events]
    assert kinds.index(CodingEventType.COMMAND_FINISHED) < kinds.index(CodingEventType.STEERED)
    assert "hello" in result.summary


@agent_test
async def test_a_steer_before_the_first_answer_joins_the_task(scripted_model_server, codex_path, repo):
    """Sent while Codex waits for the model's first response: Codex asks the model again with
    the task and the steer (Codex 0.169 drops the request in flight), so the answer heeds it."""
    server = scripted_model_server([reply(text("An answer that never counts."), delay=3),
                                    reply(text("One line, as you asked."))])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, validators=[], **options(server, codex_path))
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
    assert receipt and result.status is CodingStatus.COMPLETED, result.error
    first, second = server.model_requests
    assert "Keep it to one line." not in user_texts(first)
    assert user_texts(second)[-2:] == ["Explain the project.", "Keep it to one line."]
    steered = [e.data["where"] for e in events if e.kind is CodingEventType.STEERED]
    assert steered == ["codex turn/steer: with the task, before the model's first answer"]
    assert result.summary == "One line, as you asked."
    kinds = [e.kind for e in events]
    assert kinds.index(CodingEventType.STEERED) < kinds.index(CodingEventType.TEXT_DELTA)


def test_what_codex_never_read_is_named_at_the_end_of_the_turn():
    steering = Steering()
    steering.start_turn()
    steering.waiting.append("not sent")
    sent = steering.request("thread", "turn", "taken, never recorded")
    refused = steering.request("thread", "turn", "refused")
    steering.refused(refused)
    recorded = steering.request("thread", "turn", "recorded")
    assert sent["clientUserMessageId"] != recorded["clientUserMessageId"]
    steering.completed({"type": "userMessage", "clientId": None})  # the task itself
    steering.completed({"type": "commandExecution"})
    steering.completed({"type": "userMessage", "clientId": recorded["clientUserMessageId"]})
    landed = steering.model_moved()
    assert [(m.type, m.details) for m in landed] == [
        (MessageType.STEERED, {"text": "recorded", "where": "codex turn/steer: after the tool calls, with their results"})]
    late = steering.request("thread", "turn", "recorded as the turn ended")
    steering.completed({"type": "agentMessage"})
    steering.completed({"type": "userMessage", "clientId": late["clientUserMessageId"]})
    notes = steering.unrecorded()
    assert [m.details for m in notes] == [{"steer_undelivered": "not sent"},
                                          {"steer_undelivered": "taken, never recorded"},
                                          {"steer_late": "recorded as the turn ended"}]
    assert "the turn ended first" in notes[0].content and "before the model read it" in notes[1].content
    assert "the model has not read it" in notes[2].content
    assert steering.unrecorded() == [] and steering.model_moved() == []
