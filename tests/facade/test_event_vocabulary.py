"""The event vocabulary: every backend message becomes a BACKEND_MESSAGE event whose `kind` names
what the agent did, with the backend's raw payload kept (redacted) and streamed text not repeated."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, CodingEvent, CodingRequest
from agenter import CodingEventType as E
from agenter._events import MESSAGE_KINDS
from agenter.backends import BackendMessage, MessageType
from agenter.testing import FunctionBackend, ScriptedModelServer, TurnContext, reply, text, tool_call

SECRET = "sk-test-VOCABULARY-0123456789"


def messages_of(events: list[CodingEvent]) -> list[CodingEvent]:
    return [e for e in events if e.type is E.BACKEND_MESSAGE]


async def run(tmp_path, turn, **kwargs) -> list[CodingEvent]:
    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, **kwargs)
    request = CodingRequest(prompt="p", cwd=tmp_path, require_changes=False)
    return [e async for e in agent.stream_execute(request)]


@pytest.mark.parametrize("message_type", list(MessageType), ids=lambda m: m.value)
async def test_every_message_type_has_a_kind(tmp_path, message_type):
    events = await run(tmp_path, lambda ctx: [BackendMessage(message_type, "x", tool_name="t", tool_call_id="1")])
    kinds = [e.kind for e in messages_of(events)]
    assert len(kinds) == 1
    assert kinds[0] in MESSAGE_KINDS
    assert messages_of(events)[0].data["message_type"] == message_type.value  # the old field stays


async def test_existing_message_types_map_to_their_kinds(tmp_path):
    events = await run(tmp_path, lambda ctx: [
        BackendMessage(MessageType.THINKING, "hmm"),
        BackendMessage(MessageType.TOOL_CALL, tool_name="Read", tool_input={"path": "a"}, tool_call_id="c1"),
        BackendMessage(MessageType.TOOL_RESULT, "contents", tool_name="Read", tool_call_id="c1"),
        BackendMessage(MessageType.PERMISSION, "denied by rule", tool_name="Bash", is_error=True),
        BackendMessage(MessageType.STATUS, "retrying after 529"),
        BackendMessage(MessageType.PLAN, "1. read 2. write"),
        BackendMessage(MessageType.ERROR, "tool crashed", is_error=True),
        "done",
    ])
    assert [e.kind for e in messages_of(events)] == [
        E.THINKING, E.TOOL_CALL_STARTED, E.TOOL_CALL_FINISHED, E.PERMISSION_DECISION, E.STATUS, E.PLAN,
        E.ERROR, E.TEXT]
    started = messages_of(events)[1].data
    assert started["tool_call_id"] == "c1" and started["tool_input"] == {"path": "a"}


async def test_lifecycle_events_are_their_own_kind(tmp_path):
    events = await run(tmp_path, lambda ctx: "done")
    for event in events:
        if event.type is not E.BACKEND_MESSAGE:
            assert event.kind is event.type
    # An event from elsewhere without a kind (an older transcript) is still a backend message.
    assert CodingEvent(type=E.BACKEND_MESSAGE, data={"message_type": "text"}).kind is E.BACKEND_MESSAGE
    assert CodingEvent(type=E.BACKEND_MESSAGE, data={"kind": "from-the-future"}).kind is E.BACKEND_MESSAGE


async def test_streamed_text_arrives_in_deltas_and_is_not_repeated_whole(tmp_path):
    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: [
        BackendMessage(MessageType.THINKING_DELTA, "let me "),
        BackendMessage(MessageType.THINKING_DELTA, "think"),
        BackendMessage(MessageType.THINKING, "let me think"),
        BackendMessage(MessageType.TEXT_DELTA, "Hel"),
        BackendMessage(MessageType.TEXT_DELTA, "lo, "),
        BackendMessage(MessageType.TEXT_DELTA, "world."),
        BackendMessage(MessageType.TEXT, "Hello, world."),
        BackendMessage(MessageType.TEXT, "Not streamed."),
    ])
    events = [e async for e in agent.stream_execute(CodingRequest(prompt="p", cwd=tmp_path, require_changes=False))]
    streamed = messages_of(events)
    assert [e.kind for e in streamed] == [E.THINKING_DELTA, E.THINKING_DELTA, E.TEXT_DELTA, E.TEXT_DELTA,
                                          E.TEXT_DELTA, E.TEXT]
    assert "".join(e.data["content"] for e in streamed if e.kind is E.TEXT_DELTA) == "Hello, world."
    assert streamed[-1].data["content"] == "Not streamed."
    assert events[-1].result.summary == "Not streamed."


async def test_deltas_without_a_closing_text_still_make_the_summary(tmp_path):
    events = await run(tmp_path, lambda ctx: [BackendMessage(MessageType.TEXT_DELTA, "All "),
                                              BackendMessage(MessageType.TEXT_DELTA, "done.")])
    assert events[-1].result.summary == "All done."


async def test_commands_file_edits_and_compaction_carry_their_details(tmp_path):
    events = await run(tmp_path, lambda ctx: [
        BackendMessage(MessageType.COMMAND_START, tool_name="Bash", tool_call_id="c9",
                       tool_input={"command": "pytest -q"}, details={"command": "pytest -q"}),
        BackendMessage(MessageType.COMMAND_END, "1 failed", tool_name="Bash", tool_call_id="c9", is_error=True,
                       details={"exit_code": 1}),
        BackendMessage(MessageType.FILE_EDIT, tool_name="Edit",
                       details={"path": "app.py", "lines_added": 3, "lines_removed": 1}),
        BackendMessage(MessageType.COMPACTED, "context compacted",
                       details={"tokens_before": 150_000, "tokens_after": 20_000, "trigger": "auto"}),
    ])
    started, finished, edited, compacted = messages_of(events)
    assert started.kind is E.COMMAND_STARTED and started.data["command"] == "pytest -q"
    assert finished.kind is E.COMMAND_FINISHED and finished.data["exit_code"] == 1 and finished.data["is_error"]
    assert finished.data["tool_call_id"] == "c9"
    assert edited.kind is E.FILE_EDITED
    assert (edited.data["path"], edited.data["lines_added"], edited.data["lines_removed"]) == ("app.py", 3, 1)
    assert compacted.kind is E.CONTEXT_COMPACTED and compacted.data["tokens_after"] == 20_000


async def test_details_cannot_replace_the_event_fields(tmp_path):
    events = await run(tmp_path, lambda ctx: [
        BackendMessage(MessageType.STATUS, "real", details={"content": "fake", "kind": "text", "extra": 1})])
    data = messages_of(events)[0].data
    assert data["content"] == "real" and data["kind"] == "status" and data["extra"] == 1


class WirePayload(BaseModel):
    type: str
    token: str


async def test_raw_payload_is_kept_as_json_and_redacted(tmp_path):
    events = await run(tmp_path, lambda ctx: [
        BackendMessage(MessageType.TOOL_CALL, tool_name="Read", raw={"id": "toolu_1", "headers": {"key": SECRET}}),
        BackendMessage(MessageType.STATUS, "obj", raw=WirePayload(type="system", token=SECRET)),
        BackendMessage(MessageType.STATUS, "odd", raw={"value": object()}),
    ])
    first, second, third = messages_of(events)
    assert first.data["raw"]["id"] == "toolu_1"
    assert second.data["raw"] == {"type": "system", "token": "[REDACTED]"}
    assert isinstance(third.data["raw"]["value"], str)  # not JSON: its repr
    dumped = "".join(e.to_json() for e in events)
    assert SECRET not in dumped
    assert json.loads(first.to_json())["data"]["kind"] == "tool_call_started"


async def test_usage_updates_carry_the_requests_running_totals(tmp_path):
    def turn(ctx: TurnContext):
        ctx.use(input_tokens=100, output_tokens=10, cost_usd=0.01)
        yield BackendMessage(MessageType.USAGE)
        ctx.use(input_tokens=50, output_tokens=5, cost_usd=0.005)
        yield BackendMessage(MessageType.USAGE, details={"usage": {"input_tokens": 50, "output_tokens": 5}})

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn)
    async with agent.session(cwd=tmp_path) as session:
        for request in range(2):
            events = [e async for e in session.stream_execute("p", require_changes=False)]
            usages = [e.data["usage"] for e in messages_of(events) if e.kind is E.USAGE_UPDATED]
            # Each request counts from its own start, though the backend's figure is cumulative.
            assert [u["total_tokens"] for u in usages] == [110, 165], request
            assert usages[-1]["cost_usd"] == pytest.approx(0.015)
            # What the backend said it settled stays beside the totals.
            assert messages_of(events)[-1].data["settled"] == {"input_tokens": 50, "output_tokens": 5}


async def test_the_real_anthropic_sdk_backend_speaks_the_vocabulary(tmp_path):
    (tmp_path / "b.txt").write_text("one\ntwo\nthree\n")
    script = [reply(text("Writing the module now, then checking it."), tool_call("write_file", {"path": "a.py", "content": "a = 1\n"})),
              reply(tool_call("edit_file", {"path": "b.txt", "old_string": "two\n", "new_string": "2\n2b\n"}),
                    tool_call("bash", {"command": "echo checked; exit 4"})),
              reply(text("Done."))]
    with ScriptedModelServer(script) as server:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=SECRET)
        events = [e async for e in agent.stream_execute(CodingRequest(prompt="write a.py", cwd=tmp_path))]
    messages = messages_of(events)
    kinds = [e.kind for e in messages]
    assert E.TOOL_CALL_STARTED in kinds and E.TOOL_CALL_FINISHED in kinds
    assert E.PERMISSION_DECISION in kinds  # every call passes the gate, and says so
    assert kinds.index(E.TOOL_CALL_STARTED) < kinds.index(E.TOOL_CALL_FINISHED)
    # A response's usage is reported before the tools it asked for run (a status line drawn
    # while a long command runs shows the response's tokens).
    assert kinds.index(E.USAGE_UPDATED) < kinds.index(E.TOOL_CALL_STARTED)
    assert events[-1].result.ok
    # Text streams in deltas (several pieces, each with the stream event as raw) and is not repeated whole.
    deltas = [e for e in messages if e.kind is E.TEXT_DELTA]
    assert len(deltas) > 2 and E.TEXT not in kinds
    assert "".join(e.data["content"] for e in deltas) == "Writing the module now, then checking it.Done."
    assert deltas[0].data["raw"]["type"] == "content_block_delta"
    assert events[-1].result.summary == "Done."
    # Each edit says which file and how many lines; the bash tool is a command with its exit code.
    edits = [(e.data["path"], e.data["lines_added"], e.data["lines_removed"]) for e in messages
             if e.kind is E.FILE_EDITED]
    assert edits == [("a.py", 1, 0), ("b.txt", 2, 1)]
    started, finished = [e for e in messages if e.kind in (E.COMMAND_STARTED, E.COMMAND_FINISHED)]
    assert started.data["command"] == "echo checked; exit 4" and started.data["tool_name"] == "bash"
    assert finished.data["exit_code"] == 4 and finished.data["is_error"]
    assert "checked" in finished.data["content"]
    assert kinds.index(E.COMMAND_STARTED) < kinds.index(E.COMMAND_FINISHED)


async def test_usage_is_reported_once_per_settlement_whether_or_not_the_backend_says_so(tmp_path):
    from typing import Any, ClassVar

    from agenter._types import Usage
    from agenter.backends import BackendCapabilities, BaseBackend

    class Settling(BaseBackend[Any]):
        name: ClassVar[str] = "settling"
        capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
            native_tool_loop=True, filesystem_read=True, filesystem_edit=True, resume=True, sandbox=True)

        async def _connect(self, spec: Any) -> None:
            pass

        async def _turn(self, prompt: str) -> Any:
            self.ledger.settle(Usage(input_tokens=10, output_tokens=5), cost=0.01)
            yield BackendMessage(MessageType.TEXT, "one")  # the base reports the settlement after it
            yield BackendMessage(MessageType.USAGE, details={"usage": {}})  # ... so this one is not repeated
            self.ledger.settle(Usage(input_tokens=1, output_tokens=1), cost=0.001)
            yield BackendMessage(MessageType.USAGE, details={"usage": {"input_tokens": 1}})  # its own: kept
            self.ledger.settle(Usage(input_tokens=2, output_tokens=2), cost=0.002)  # said by no message

        async def _disconnect(self) -> None:
            pass

    events = [e async for e in AutonomousCodingAgent(backend=Settling, max_iterations=1).stream_execute(
        CodingRequest(prompt="p", cwd=tmp_path, require_changes=False))]
    usage = [e.data for e in messages_of(events) if e.kind == "usage_updated"]
    assert [u["usage"]["input_tokens"] for u in usage] == [10, 11, 13]  # running totals, one per settlement
    assert [u["settled"]["input_tokens"] for u in usage] == [10, 1, 2]
