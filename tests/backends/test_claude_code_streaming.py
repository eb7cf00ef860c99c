"""claude-code token streaming: the REAL `claude` CLI (bundled with claude-agent-sdk) streams the
scripted server's Anthropic SSE as partial messages, which the backend turns into text and thinking
deltas; the whole text that follows closes them and is not shown twice. The translator's rules
have plain unit tests with the SDK's own message classes at the end."""

from __future__ import annotations

from typing import Any

import pytest

from agenter import CodingEventType, CodingStatus
from agenter.backends._deltas import DeltaBuffer
from agenter.backends.agents.claude_code._events import TurnTranslator
from agenter.backends.base import MessageType, SessionSpec
from agenter.testing import reply, text, thinking, tool_call

from .test_claude_code import (  # noqa: F401  (fixtures)
    API_KEY,
    agent_test,
    cli_env,
    make_agent,
    make_backend,
    needs_cli,
    no_leftover_cli,
    repo,
    run_turn,
)

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

PLAN = "I will add a changelog that names the greet function."
DONE = "Added CHANGELOG.md with one entry for greet; nothing else changed."


def backend_events(events: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type is CodingEventType.BACKEND_MESSAGE]


def deltas(messages: list[dict[str, Any]], kind: str = "text_delta") -> str:
    return "".join(m["content"] for m in messages if m["kind"] == kind)


@agent_test
@needs_cli
async def test_text_and_thinking_stream_as_deltas_and_the_whole_text_is_not_repeated(
        scripted_model_server, repo, cli_env, no_leftover_cli):  # noqa: F811  (the shared fixtures)
    server = scripted_model_server([
        reply(thinking("The changelog is missing; write it."), text(PLAN),
              tool_call("Write", {"file_path": "CHANGELOG.md", "content": "- greet\n"})),
        reply(text(DONE)),
    ])
    agent = make_agent(server, cli_env, validators=[], sandbox=False)
    events = [e async for e in agent.stream_execute("Add a changelog", cwd=repo)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "CHANGELOG.md").read_text() == "- greet\n"
    messages = backend_events(events)
    kinds = [m["kind"] for m in messages]
    # Each text arrived in pieces (the server sends 24-character deltas) and never whole.
    assert kinds.count("text_delta") > 2 and "text" not in kinds
    assert "thinking_delta" in kinds and "thinking" not in kinds
    assert deltas(messages) == PLAN + DONE
    assert deltas(messages, "thinking_delta") == "The changelog is missing; write it."
    # The plan streams before the tool runs, the final text after the file was edited.
    edited = kinds.index("file_edited")
    assert deltas(messages[:edited]) == PLAN and deltas(messages[edited:]) == DONE
    assert [m["path"] for m in messages if m["kind"] == "file_edited"] == ["CHANGELOG.md"]
    assert {"tool_call_started", "tool_call_finished"} <= set(kinds)
    assert result.summary == DONE
    assert result.output_tokens > 0


@agent_test
@needs_cli
async def test_a_key_split_over_deltas_is_still_redacted(scripted_model_server, repo, cli_env,  # noqa: F811
                                                         no_leftover_cli):  # noqa: F811
    said = f"The configured key is {API_KEY} and Bearer {API_KEY[::-1]} too."
    server = scripted_model_server([reply(text(said))])
    backend = make_backend(server, cli_env, sandbox=False)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Which key is configured?")
    finally:
        await backend.disconnect()
    streamed = [m.content for m in messages if m.type is MessageType.TEXT_DELTA]
    assert len(streamed) > 1
    joined = "".join(streamed)
    assert API_KEY not in joined and API_KEY[::-1] not in joined
    assert joined == "The configured key is [REDACTED] and Bearer [REDACTED] too."
    (whole,) = [m.content for m in messages if m.type is MessageType.TEXT]
    assert whole == joined


# ---------------------------------------------------------------------------------------------
# Pure logic


def stream(event: dict[str, Any], parent: str | None = None) -> Any:
    from claude_agent_sdk import StreamEvent

    return StreamEvent(uuid="u", session_id="s", event=event, parent_tool_use_id=parent)


def block_start(index: int, kind: str) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": {"type": kind}}


def text_delta(index: int, piece: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}


def test_delta_buffer_cuts_only_at_whitespace_and_keeps_key_lead_ins_with_their_key():
    buffer = DeltaBuffer(lambda s: s.replace("sk-secret", "[REDACTED]"))
    assert buffer.feed("Use sk-se") == "Use "
    assert buffer.feed("cret now") == "[REDACTED] "
    assert buffer.feed(" Bearer ") == "now "  # "Bearer" waits for what follows it
    assert buffer.feed("tok x-api-key: ") == "Bearer tok "
    assert buffer.feed("k") == ""
    assert buffer.flush() == "x-api-key: k"
    assert buffer.flush() == ""


def test_translator_streams_the_main_agents_blocks_and_the_whole_text_closes_them():
    from claude_agent_sdk import AssistantMessage, TextBlock, ThinkingBlock

    events = TurnTranslator(lambda s: s)
    out = []
    for event in [{"type": "message_start", "message": {}}, block_start(0, "thinking"),
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm, "}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}},
                  {"type": "content_block_stop", "index": 0}, block_start(1, "text"),
                  text_delta(1, "Hello "), text_delta(1, "world")]:
        out += events.translate(stream(event))
    # The CLI's whole message may come before the block's stop: the held-back rest goes first.
    out += events.translate(AssistantMessage(content=[ThinkingBlock("Hm, ", "x"), TextBlock("Hello world")],
                                             model="m"))
    out += events.translate(stream({"type": "content_block_stop", "index": 1}))
    assert [(m.type, m.content) for m in out] == [
        (MessageType.THINKING_DELTA, "Hm, "), (MessageType.TEXT_DELTA, "Hello "), (MessageType.TEXT_DELTA, "world"),
        (MessageType.THINKING, "Hm, "), (MessageType.TEXT, "Hello world")]
    assert events.last_text == "Hello world"
    # Tool input and a subagent's stream events are not deltas (the subagent's texts stay whole).
    assert events.translate(stream(block_start(2, "tool_use"))) == []
    assert events.translate(stream({"type": "content_block_delta", "index": 2,
                                    "delta": {"type": "input_json_delta", "partial_json": "{}"}})) == []
    assert events.translate(stream(block_start(0, "text"), parent="task1")) == []
    assert events.translate(stream(text_delta(0, "sub "), parent="task1")) == []


def test_a_streamed_text_flagged_as_an_error_still_closes_its_deltas():
    from claude_agent_sdk import AssistantMessage, TextBlock

    events = TurnTranslator(lambda s: s)
    out = events.translate(stream(block_start(0, "text"))) + events.translate(stream(text_delta(0, "Over quota")))
    out += events.translate(AssistantMessage(content=[TextBlock("Over quota")], model="m", error="rate_limit"))
    assert [m.type for m in out] == [MessageType.TEXT_DELTA, MessageType.TEXT_DELTA, MessageType.TEXT,
                                     MessageType.ERROR]
    # Not streamed: the error alone, as before.
    again = events.translate(AssistantMessage(content=[TextBlock("Still over")], model="m", error="rate_limit"))
    assert [m.type for m in again] == [MessageType.ERROR]



def test_translator_maps_a_compaction_to_context_compacted():
    from claude_agent_sdk import SystemMessage

    events = TurnTranslator(lambda s: s)
    data = {"type": "system", "subtype": "compact_boundary", "session_id": "s",
            "compact_metadata": {"trigger": "auto", "pre_tokens": 150000, "post_tokens": 9000}}
    (message,) = events.translate(SystemMessage("compact_boundary", data))
    assert message.type is MessageType.COMPACTED and message.raw is data
    assert message.details == {"tokens_before": 150000, "tokens_after": 9000, "trigger": "auto"}
