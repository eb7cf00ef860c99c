"""Event order and event data through the facade with the real anthropic-sdk backend."""

from __future__ import annotations

import re

from agenter import AutonomousCodingAgent, CodingRequest
from agenter import CodingEventType as E
from agenter.testing import ScriptedModelServer, reply, text, tool_call

LIFECYCLE = re.compile(
    r"S(IM*VR*N)+(C|F|X)Z"  # start, iterations (messages, validation), outcome, end
)
LETTER = {E.SESSION_START: "S", E.ITERATION_START: "I", E.BACKEND_MESSAGE: "M",
          E.VALIDATION_START: "V", E.VALIDATION_RESULT: "R", E.ITERATION_END: "N",
          E.COMPLETED: "C", E.FAILED: "F", E.REFUSED: "X", E.SESSION_END: "Z"}


async def run(tmp_path, script, **request):
    with ScriptedModelServer(script) as server:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url,
                                      api_key="sk-test-events-123456")
        events = [e async for e in agent.stream_execute(CodingRequest(prompt="task", cwd=tmp_path, **request))]
    return events, "".join(LETTER[e.type] for e in events)


async def test_retry_then_completed(tmp_path):
    events, letters = await run(tmp_path, [
        reply(tool_call("write_file", {"path": "m.py", "content": "def f(:\n"})), reply(text("first")),
        reply(tool_call("write_file", {"path": "m.py", "content": "def f():\n    pass\n"})), reply(text("fixed")),
    ])
    assert LIFECYCLE.fullmatch(letters), letters
    assert letters.count("I") == 2 and letters.endswith("CZ")
    start, end = events[0].data, events[-1].data
    assert {"cwd", "model", "max_iterations"} <= start.keys()
    assert end["status"] == "completed" and end["iterations"] == 2 and end["tokens"] > 0
    results = [e.data for e in events if e.type is E.VALIDATION_RESULT]
    assert results[0]["validator"] == "syntax" and results[0]["passed"] is False and results[0]["errors"]
    assert results[-1]["passed"] is True
    messages = [e.data for e in events if e.type is E.BACKEND_MESSAGE]
    assert any(m["message_type"] == "tool_call" and m["tool_name"] == "write_file" for m in messages)
    ends = [e.data for e in events if e.type is E.ITERATION_END]
    assert ends[0]["files_modified"] == ["m.py"] and {"tokens", "cost", "passed"} <= ends[0].keys()
    completed = events[-2].data
    assert completed["files"] == ["m.py"] and completed["summary"] == "fixed"
    assert "sk-test-events-123456" not in "".join(e.to_json() for e in events)


async def test_refused(tmp_path):
    events, letters = await run(tmp_path, [reply(tool_call("refuse_task", {"reason": "unsafe", "category": "harmful"}))])
    # A refusal is not validated: the iteration ends, then REFUSED, then SESSION_END.
    assert re.fullmatch(r"SIM+NXZ", letters), letters
    assert events[-2].data["reason"] == "unsafe" and events[-2].data["category"] == "harmful"


async def test_error_ends_with_failed_then_session_end(tmp_path):
    from agenter.testing import http_error

    events, letters = await run(tmp_path, [http_error(400, "bad request")])
    assert re.fullmatch(r"SIM*NFZ", letters), letters
    assert events[-1].data["status"] == "error"
    assert "400" in events[-2].data["error"]
