"""anthropic-sdk backend, long context (issue 16 item 6): the output-limit recovery (max_tokens
raised once, then at most three "continue" nudges) and compaction when the conversation no
longer fits the context window (HTTP 400 "prompt is too long", or stop_reason
model_context_window_exceeded): older turns become one summary, every tool_use keeps its one
tool_result, at most two compactions in a row (with no model response between them).

The backend runs for real against the scripted model server; a handler plays a context window
(requests over a size get the API's 400 body). The compaction rules have plain unit tests."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import BackendError
from agenter._events import CodingEventType
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.model_api._harness.compaction import SUMMARY_MAX_TOKENS, SUMMARY_SYSTEM
from agenter.backends.model_api._harness.conversation import (
    SUMMARY_MARK,
    compact,
    compaction_boundary,
    invariant_violations,
    mechanical_summary,
    message_chars,
    render_transcript,
    split_first_message,
    summarized_part,
    tool_result,
)
from agenter.backends.model_api._harness.prompts import CONTEXT_NUDGE, CUTOFF_NUDGE
from agenter.backends.model_api.anthropic_sdk import AnthropicSDKBackend, AnthropicSDKOptions
from agenter.backends.model_api.anthropic_sdk._events import StreamAccumulator
from agenter.testing import http_error, reply, text, tool_call

API_KEY = "sk-test-CONTEXT-0123456789abcdef"
agent_test = pytest.mark.agent
TOO_LONG = "prompt is too long: 212000 tokens > 200000 maximum"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("big1.txt", "big2.txt"):
        (root / name).write_text("".join(f"{name} line {i:04d}: lorem ipsum dolor sit amet\n" for i in range(600)))
    return root


def make_backend(server: Any, **options: Any) -> AnthropicSDKBackend:
    settings = BackendSettings(model=options.pop("model", None), tools=[], sandbox=True,
                               options=AnthropicSDKOptions(api_key=API_KEY, base_url=server.base_url, **options))
    AnthropicSDKBackend.check_settings(settings)
    return AnthropicSDKBackend(settings)


def is_summary_request(request: Any) -> bool:
    """A compaction's summary request (a ModelRequest, or a RecordedRequest of model_requests)."""
    return SUMMARY_SYSTEM in json.dumps(request.body.get("system"))


def agent_requests(server: Any) -> list[Any]:
    """The tool loop's requests (summary requests left out)."""
    return [r for r in server.model_requests if not is_summary_request(r)]


def size(request: Any) -> int:
    return len(json.dumps(request.body["messages"]))


def context_window(limit: int, summary: str):
    """A handler playing a model whose context window holds `limit` characters of messages: a
    request over it gets the API's 400 prompt-too-long body; summary requests get `summary`."""
    def handle(request: Any) -> Any:
        if is_summary_request(request):
            return reply(text(summary))
        if size(request) > limit:
            return http_error(400, f"prompt is too long: {size(request) // 4} tokens > {limit // 4} maximum")
        return None  # the script answers
    return handle


def assert_every_call_answered(server: Any) -> None:
    for request in agent_requests(server):
        assert invariant_violations(request.body["messages"]) == [], request.index
        assert request.body["messages"][0]["role"] == "user"


# ---------------------------------------------------------------------------------------------
# Prompt too long: compaction through real HTTP


@agent_test
async def test_prompt_too_long_once_is_compacted_and_the_run_completes(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("read_file", {"path": "big1.txt"})),
        reply(tool_call("read_file", {"path": "big2.txt"})),
        reply(tool_call("write_file", {"path": "notes.txt", "content": "both files read\n"})),
        reply(tool_call("edit_file", {"path": "notes.txt", "old_string": "read", "new_string": "read and noted"})),
        reply(text("done")),
    ], handler=context_window(50_000, "SUMMARY-7f3: read big1.txt in full; the next step is big2.txt."))
    agent = AutonomousCodingAgent(backend="anthropic-sdk", api_key=API_KEY, base_url=server.base_url)
    events = [event async for event in agent.stream_execute("Read both big files, then write notes.txt", cwd=repo)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "notes.txt").read_text() == "both files read and noted\n"

    compacted = [e for e in events if e.kind is CodingEventType.CONTEXT_COMPACTED]
    assert len(compacted) == 1 and compacted[0].data["content"].startswith("context compacted:")
    assert compacted[0].data["tokens_after"] < compacted[0].data["tokens_before"]
    assert compacted[0].data["summary"] == "model"

    requests = server.model_requests
    overflow = next(i for i, r in enumerate(requests) if size(r) > 50_000)
    summary_request, after = requests[overflow + 1], requests[overflow + 2]
    assert is_summary_request(summary_request) and summary_request.body["max_tokens"] == SUMMARY_MAX_TOKENS
    asked = summary_request.model_request.last_user_text
    assert "read_file" in asked and "big1.txt" in asked
    # The same request, compacted: the task first, the summary, the newest exchange verbatim.
    first = after.body["messages"][0]["content"]
    assert first[0]["text"] == "Read both big files, then write notes.txt"
    assert first[1]["text"].startswith(SUMMARY_MARK) and "SUMMARY-7f3" in first[1]["text"]
    assert size(after) < size(requests[overflow]) and size(after) <= 50_000
    assert after.model_request.tool_results[-1]["output"].count("big2.txt line") == 600
    assert_every_call_answered(server)
    print(f"\nprompt-too-long compaction: request of {size(requests[overflow])} chars -> {size(after)} chars; "
          f"{len(requests)} requests in all (1 summary)")


@agent_test
async def test_failed_summary_request_falls_back_to_a_mechanical_summary(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "a.py", "content": "A = 1\n"})),
        reply(tool_call("grep", {"pattern": "A", "path": "."})),
        http_error(400, TOO_LONG),
        http_error(500, "summary service down"),  # the summary request: not retried
        reply(tool_call("write_file", {"path": "b.py", "content": "B = 2\n"})),
        reply(text("done")),
    ])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = [m async for m in backend.execute("write a.py and b.py")]
    finally:
        await backend.disconnect()
    assert (repo / "a.py").exists() and (repo / "b.py").exists()
    notes = [m for m in messages if m.type is MessageType.COMPACTED]
    assert len(notes) == 1 and notes[0].content.startswith("context compacted:")
    assert "mechanical summary (the summary request failed: 500" in notes[0].content
    after = server.model_requests[4].body["messages"]
    summary = after[0]["content"][1]["text"]
    assert summary.startswith(SUMMARY_MARK) and "a.py" in summary and "write_file x1" in summary
    assert_every_call_answered(server)
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_context_window_stop_reason_compacts_and_continues(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("read_file", {"path": "big1.txt"})),
        reply(tool_call("read_file", {"path": "big2.txt"})),
        reply(text("Now I write the notes"), tool_call("write_file", {"path": "notes.txt", "content": "n\n"}),
              stop_reason="model_context_window_exceeded"),
        reply(text("SUMMARY-ctx: both files read, notes.txt written")),  # the summary request
        reply(text("done")),
    ])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = [m async for m in backend.execute("read and note")]
    finally:
        await backend.disconnect()
    # The complete tool call of the response that filled the window still ran.
    assert (repo / "notes.txt").read_text() == "n\n"
    assert [m.type for m in messages].count(MessageType.COMPACTED) == 1
    assert is_summary_request(server.model_requests[3])
    last = server.model_requests[4].body["messages"]
    assert "SUMMARY-ctx" in last[0]["content"][1]["text"]
    assert CONTEXT_NUDGE in json.dumps(last)
    assert size(server.model_requests[4]) < size(server.model_requests[2])
    assert_every_call_answered(server)
    assert not any(m.type is MessageType.ERROR for m in messages)


async def _failing_run(server: Any, repo: Path) -> tuple[BackendError, list[Any], AnthropicSDKBackend]:
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    messages: list[Any] = []
    try:
        with pytest.raises(BackendError) as caught:
            async for message in backend.execute("go"):
                messages.append(message)
    finally:
        await backend.disconnect()
    return caught.value, messages, backend


@agent_test
async def test_compactions_in_a_row_are_bounded(scripted_model_server, repo):
    server = scripted_model_server([reply(tool_call("list_directory", {})), reply(tool_call("glob", {"pattern": "*"}))],
                                   default=http_error(400, TOO_LONG))
    error, messages, backend = await _failing_run(server, repo)
    assert error.kind == "context_length" and error.status_code == 400
    assert "even after 2 compactions in a row" in str(error) and TOO_LONG in str(error)
    assert [m.type for m in messages].count(MessageType.COMPACTED) == 2
    # 2 answered, then: too long, summary (fails), too long, summary (fails), too long.
    assert [is_summary_request(r) for r in server.model_requests] == [False, False, False, True, False, True, False]
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_a_long_iteration_compacts_each_time_it_outgrows_the_window(scripted_model_server, repo):
    """Eight 31 KB reads in one iteration through a 50 KB window: it is compacted again and again
    (each time after the model answered), every request fits, and the run completes."""
    reads = [reply(tool_call("read_file", {"path": f"big{1 + n % 2}.txt"})) for n in range(8)]
    server = scripted_model_server([*reads, reply(tool_call("write_file", {"path": "done.txt", "content": "ok\n"})),
                                    reply(text("done"))],
                                   handler=context_window(50_000, "SUMMARY: reading the big files in turn."))
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = [m async for m in backend.execute("read the big files eight times, then write done.txt")]
    finally:
        await backend.disconnect()
    assert (repo / "done.txt").read_text() == "ok\n"
    compactions = [m for m in messages if m.type is MessageType.COMPACTED]
    assert len(compactions) >= 3 and all("1/2 in a row" in m.content for m in compactions)
    answered = [r for r in agent_requests(server) if r.status == 200]
    assert all(size(r) <= 50_000 for r in answered) and len(answered) == 10
    assert_every_call_answered(server)
    assert invariant_violations(backend.messages) == []
    print(f"\nlong iteration: {len(compactions)} compactions, largest request sent "
          f"{max(size(r) for r in answered)} chars of a 50000 window")


@agent_test
async def test_a_compacted_conversation_that_still_does_not_fit_is_a_context_length_error(scripted_model_server,
                                                                                           repo):
    server = scripted_model_server([reply(tool_call("list_directory", {}))], default=http_error(400, TOO_LONG))
    error, messages, backend = await _failing_run(server, repo)
    # The one exchange went into the summary; the task and the summary alone are still too long.
    assert error.kind == "context_length" and "even after 1 compaction in a row" in str(error)
    assert [m.type for m in messages].count(MessageType.COMPACTED) == 1
    assert [is_summary_request(r) for r in server.model_requests] == [False, False, True, False]
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_prompt_too_long_with_only_the_task_is_the_api_error(scripted_model_server, repo):
    server = scripted_model_server([http_error(400, TOO_LONG)])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            [m async for m in backend.execute("go")]
    finally:
        await backend.disconnect()
    assert caught.value.kind == "context_length" and TOO_LONG in str(caught.value)
    assert len(server.model_requests) == 1  # no summary request: there is nothing to summarize


# ---------------------------------------------------------------------------------------------
# Output limit: raised once, then at most three nudges


@agent_test
@pytest.mark.parametrize(("model", "limits"), [
    ("claude-sonnet-5-5", [16384, 32768, 32768, 32768]),  # a known 128k-output model: raised once
    ("claude-unknown-model", [16384, 16384, 16384, 16384]),  # no known ceiling: never raised
])
async def test_max_tokens_raised_once_then_three_nudges_then_stop(scripted_model_server, repo, model, limits):
    server = scripted_model_server([
        reply(text(f"part {n}"), tool_call("write_file", {"path": f"p{n}.txt", "content": f"{n}\n"}),
              stop_reason="max_tokens")
        for n in range(1, 6)
    ])
    backend = make_backend(server, model=model)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = [m async for m in backend.execute("write the parts")]
    finally:
        await backend.disconnect()
    bodies = [r.body for r in server.model_requests]
    assert [b["max_tokens"] for b in bodies] == limits
    for body in bodies[1:]:  # each follow-up: the results first, then the nudge
        last = body["messages"][-1]["content"]
        assert last[0]["type"] == "tool_result" and last[-1]["text"] == CUTOFF_NUDGE
    statuses = [m.content for m in messages if m.type is MessageType.STATUS and "max_tokens" in m.content]
    assert len(statuses) == 3 and ("raised to 32768" in statuses[0]) == (limits[1] == 32768)
    assert messages[-1].type is MessageType.ERROR and "cut off at the output limit 4 times" in messages[-1].content
    # The complete calls of the cut-off responses ran and were answered; the fifth never came.
    assert sorted(p.name for p in repo.glob("p*.txt")) == ["p1.txt", "p2.txt", "p3.txt", "p4.txt"]
    assert invariant_violations(backend.messages) == []
    assert_every_call_answered(server)


def _stream(blocks: list[dict[str, Any]], stop: str) -> StreamAccumulator:
    accumulator = StreamAccumulator()
    accumulator.feed({"type": "message_start", "message": {"usage": {"input_tokens": 10}}})
    for index, block in enumerate(blocks):
        accumulator.feed({"type": "content_block_start", "index": index, "content_block": block["start"]})
        for delta in block.get("deltas", []):
            accumulator.feed({"type": "content_block_delta", "index": index, "delta": delta})
        if block.get("stop", True):
            accumulator.feed({"type": "content_block_stop", "index": index})
    accumulator.feed({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}})
    accumulator.feed({"type": "message_stop"})
    return accumulator


@pytest.mark.parametrize("stop", ["max_tokens", "model_context_window_exceeded"])
def test_cut_off_tool_use_and_unsigned_thinking_are_withheld(stop):
    accumulator = _stream([
        {"start": {"type": "tool_use", "id": "done", "name": "read_file", "input": {}},
         "deltas": [{"type": "input_json_delta", "partial_json": '{"path": "a"}'}]},
        {"start": {"type": "thinking", "thinking": "", "signature": ""},
         "deltas": [{"type": "thinking_delta", "thinking": "hmm"}], "stop": False},
        {"start": {"type": "tool_use", "id": "cut", "name": "write_file", "input": {}},
         "deltas": [{"type": "input_json_delta", "partial_json": '{"path": "b", "cont'}], "stop": False},
    ], stop)
    content = accumulator.content()
    assert [b.get("id") for b in content] == ["done"]
    assert accumulator.input_errors() == {}
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}, {"role": "assistant", "content": content},
               {"role": "user", "content": [tool_result("done", "x")]}]
    assert invariant_violations(history) == []


# ---------------------------------------------------------------------------------------------
# Compaction rules (pure)


def _use(tool_id: str, name: str = "read_file", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments or {"path": f"{tool_id}.py"}}


def _conversation(rng: random.Random, exchanges: int) -> list[dict[str, Any]]:
    """A legal history: the task, then assistant turns with 0-3 tool calls (and text/thinking),
    each answered by a user turn (results first, sometimes a note after them)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "THE TASK"}]}]
    for n in range(exchanges):
        calls = [_use(f"t{n}_{k}") for k in range(rng.randint(0, 3))]
        content: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            content.append({"type": "thinking", "thinking": "why", "signature": "sig"})
        content.append({"type": "text", "text": "x" * rng.randint(1, 400)})
        messages.append({"role": "assistant", "content": content + calls})
        answer = [tool_result(c["id"], "r" * rng.randint(0, 3000), is_error=rng.random() < 0.2) for c in calls]
        if not calls or rng.random() < 0.3:
            answer.append({"type": "text", "text": f"note {n}"})
        messages.append({"role": "user", "content": answer})
    return messages


def test_compaction_keeps_every_pair_legal_on_generated_conversations():
    rng = random.Random(16)
    checked = 0
    for _ in range(300):
        messages = _conversation(rng, rng.randint(1, 12))
        assert invariant_violations(messages) == []
        for fraction in (0.0, 0.1, 0.3, 0.9):
            boundary = compaction_boundary(messages, fraction)
            assert boundary is not None and boundary >= 2 and messages[boundary]["role"] == "user"
            once = compact(messages, boundary, "S1")
            # A second compaction of the compacted history replaces the first summary.
            again_at = compaction_boundary(once, fraction)
            twice = compact(once, again_at, "S2") if again_at is not None else once
            for result in (once, twice):
                assert invariant_violations(result) == [], (boundary, result)
                assert result[0]["role"] == "user" and result[0]["content"][0]["text"] == "THE TASK"
                summaries = [b for b in result[0]["content"] if b.get("text", "").startswith(SUMMARY_MARK)]
                assert len(summaries) == 1
                assert len(result) < len(messages)
                assert result[1:] == messages[len(messages) - len(result) + 1:]  # the kept turns verbatim
            checked += 1
    assert checked == 1200


def test_nothing_to_compact_with_only_the_task():
    assert compaction_boundary([{"role": "user", "content": "task"}], 0.3) is None
    assert compaction_boundary([], 0.3) is None


def test_boundary_keeps_what_fits_else_the_last_exchange():
    big, small = "r" * 10_000, "r" * 10
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for n, body in enumerate([big, big, small, small]):
        messages.append({"role": "assistant", "content": [_use(f"u{n}")]})
        messages.append({"role": "user", "content": [tool_result(f"u{n}", body)]})
    # The two small exchanges fit in 10 % of the rest: they are kept (from assistant 5 on), the
    # big results of user 4 go into the summary with their call.
    assert compaction_boundary(messages, 0.1) == 4
    # Nothing fits in 0 %: the newest exchange (assistant 7, user 8) stays all the same.
    assert compaction_boundary(messages, 0.0) == 6
    # With a single exchange the results themselves go into the summary.
    assert compaction_boundary(messages[:3], 0.0) == 2
    single = compact(messages[:3], 2, "S")
    assert len(single) == 1 and invariant_violations(single) == []


def test_summarized_part_has_the_results_whose_call_is_summarized_and_the_earlier_summary():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [_use("a")]},
        {"role": "user", "content": [tool_result("a", "A-RESULT"), {"type": "text", "text": "keep me"}]},
        {"role": "assistant", "content": [_use("b")]},
        {"role": "user", "content": [tool_result("b", "B-RESULT")]},
    ]
    once = compact(messages, 2, "FIRST SUMMARY")
    assert [b.get("text", "")[:4] for b in once[0]["content"]] == ["task", "[age", "keep"]
    part = summarized_part(once, 2)
    dumped = json.dumps(part)
    assert "FIRST SUMMARY" in dumped and "keep me" in dumped and "B-RESULT" in dumped
    task, earlier = split_first_message(once[0])
    assert task == [{"type": "text", "text": "task"}] and len(earlier) == 2
    twice = compact(once, 2, "SECOND SUMMARY")
    assert json.dumps(twice).count(SUMMARY_MARK) == 1 and "FIRST SUMMARY" not in json.dumps(twice)
    assert "keep me" not in json.dumps(twice)  # it was summarized with the rest


def test_mechanical_summary_names_the_calls_and_the_files():
    messages = [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking around first."},
            _use("1", "read_file", path="src/app.py"), _use("2", "grep", pattern="TODO"),
            _use("3", "write_file", path="src/new.py", content="x"),
            _use("4", "str_replace_based_edit_tool", command="str_replace", path="src/app.py"),
            _use("5", "bash", command="pytest -q tests/"),
        ]},
        {"role": "user", "content": [tool_result("1", "..."), tool_result("2", "..."), tool_result("3", "ok"),
                                     tool_result("4", "ok"), tool_result("5", "1 failed", is_error=True),
                                     {"type": "text", "text": "Validation failed: test_app"}]},
    ]
    summary = mechanical_summary(messages)
    assert "bash x1" in summary and "read_file x1" in summary and "(1 failed)" in summary
    assert "src/new.py, src/app.py" in summary and "Files and folders read or searched: src/app.py, ." in summary
    assert "pytest -q tests/" in summary and "Validation failed: test_app" in summary
    assert "Looking around first." in summary


def test_transcript_is_clipped_per_block_and_in_all():
    messages = [{"role": "assistant", "content": [_use("a", "read_file", path="a.py")]},
                {"role": "user", "content": [tool_result("a", "y" * 50_000)]}] * 10
    transcript = render_transcript(messages, block_chars=1_000, total_chars=5_000)
    assert "RESULT of read_file: " in transcript and "more characters]" in transcript
    assert len(transcript) < 5_100 and transcript.startswith("[... the oldest part is left out]")
    assert message_chars(messages) > 500_000
