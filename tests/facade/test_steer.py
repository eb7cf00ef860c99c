"""Steering a running request (session.steer, docs/sessions.md): the real anthropic-sdk backend
(agenter's own agent) against the scripted model server; the message reaches the model at the
next safe point and a `steered` event says where; what cannot be delivered says so."""

from __future__ import annotations

import json
from pathlib import Path

from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
from agenter.testing import FunctionBackend, ScriptedModelServer, reply, text, tool_call

KEY = "sk-ant-test-steer-000000"
NOTE = "The user sent this message while you were working"


def agent(server: ScriptedModelServer) -> AutonomousCodingAgent:
    # analysis: the tasks ask for answers, not changes (autonomous mode wants a changed file)
    return AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=KEY, mode="analysis")


def sent(request) -> str:
    return json.dumps(request.model_request.messages)


async def test_a_steer_during_a_tool_call_reaches_the_next_model_request(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("one\n")
    script = [reply(tool_call("read_file", {"path": "notes.txt"})), reply(text("Read it; done."))]
    with ScriptedModelServer(script) as server:
        async with agent(server).session(cwd=tmp_path) as session:
            events, receipts = [], []
            async for event in session.stream_execute("Read notes.txt."):
                events.append(event)
                if event.kind is CodingEventType.TOOL_CALL_STARTED and not receipts:
                    receipts.append(session.steer("Also mention the line count."))
            result = events[-1].result
        first, second = server.model_requests[:2]
        assert len(server.model_requests) == 2
    assert result.status is CodingStatus.COMPLETED, result.error
    assert receipts[0] and receipts[0].reason is None
    assert NOTE not in sent(first) and f"{NOTE}; take it into account:\\n\\nAlso mention the line count." in sent(second)
    # It went with the tool's result, in the same user message (the pairing stays intact).
    last = second.model_request.messages[-1]
    assert [block["type"] for block in last["content"]] == ["tool_result", "text"]
    steered = [e for e in events if e.kind is CodingEventType.STEERED]
    assert [(e.data["text"], e.data["where"]) for e in steered] == [
        ("Also mention the line count.", "after the tool calls, with their results")]
    kinds = [e.kind for e in events]
    assert kinds.index(CodingEventType.TOOL_CALL_FINISHED) < kinds.index(CodingEventType.STEERED)


async def test_a_steer_while_the_model_answers_keeps_the_turn_going(tmp_path: Path):
    script = [reply(text("Here is my first answer.")), reply(text("Revised as you asked."))]
    with ScriptedModelServer(script) as server:
        async with agent(server).session(cwd=tmp_path) as session:
            taken = None
            async for event in session.stream_execute("Explain the project."):
                if event.kind in (CodingEventType.TEXT_DELTA, CodingEventType.TEXT) and taken is None:
                    taken = session.steer("Keep it to one line.")
                if event.type is CodingEventType.SESSION_END:
                    result = event.result
        requests = server.model_requests
    assert taken and len(requests) == 2
    assert "Keep it to one line." in sent(requests[1]) and "Here is my first answer." in sent(requests[1])
    assert result.status is CodingStatus.COMPLETED and "Revised as you asked." in result.summary


async def test_what_cannot_be_delivered_says_why(tmp_path: Path):
    with ScriptedModelServer([reply(text("done"))]) as server:
        async with agent(server).session(cwd=tmp_path) as session:
            idle = session.steer("anyone there?")
            assert not idle and "no request is running" in (idle.reason or "")
            await session.execute("Say done.")
            assert not session.steer("late")
    # A backend without the capability says so by name.
    plain = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: "done")
    assert not plain.capabilities.steering
    async with plain.session(cwd=tmp_path) as session:
        receipt = None
        async for event in session.stream_execute("Go."):
            if receipt is None:
                receipt = session.steer("hello")
    assert receipt is not None and not receipt and "no steering capability" in (receipt.reason or "")


async def test_a_fallback_chain_passes_a_steer_to_its_running_member(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("one\n")
    script = [reply(tool_call("read_file", {"path": "notes.txt"})), reply(text("Read it; done."))]
    with ScriptedModelServer(script) as server:
        member = ("anthropic-sdk", {"base_url": server.base_url, "api_key": KEY})
        chain = AutonomousCodingAgent(backend=[member, member], mode="analysis")
        async with chain.session(cwd=tmp_path) as session:
            events, receipts = [], []
            async for event in session.stream_execute("Read notes.txt."):
                events.append(event)
                if event.kind is CodingEventType.TOOL_CALL_STARTED and not receipts:
                    receipts.append(session.steer("Also mention the line count."))
        second = server.model_requests[1]
    assert receipts[0] and "Also mention the line count." in sent(second)
    assert [e.data["where"] for e in events if e.kind is CodingEventType.STEERED] == [
        "after the tool calls, with their results"]
