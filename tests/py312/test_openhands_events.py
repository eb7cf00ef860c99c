"""The pure rules of the openhands backend's event mapping (no model, no agent run)."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from agenter.backends.agents.openhands._events import (
    RAW_TEXT_LIMIT,
    MetricsCursor,
    TokenStream,
    command_exit_code,
    line_changes,
    raw_event,
    reasoning_text,
)
from agenter.backends.agents.openhands._runtime import stored_conversation
from agenter.backends.base import MessageType

pytestmark = [pytest.mark.py312, pytest.mark.usefixtures("openhands_imported")]


def test_line_changes() -> None:
    assert line_changes(None, "a\nb\nc\n") == (3, 0)  # a new file
    assert line_changes("a\nb\nc\n", "a\nB1\nB2\nc\n") == (2, 1)
    assert line_changes("a\nb\n", "x\na\nb\n") == (1, 0)
    assert line_changes("x\na\nb\n", "a\nb\n") == (0, 1)
    assert line_changes("a\n", "a\n") == (0, 0)
    assert line_changes("", "") == (0, 0)
    assert line_changes("a\n", None) == (None, None)  # the content after is unknown


def test_command_exit_code() -> None:
    finished = SimpleNamespace(exit_code=2, timeout=False, metadata=SimpleNamespace(exit_code=2))
    from_metadata = SimpleNamespace(exit_code=None, timeout=False, metadata=SimpleNamespace(exit_code=0))
    still_running = SimpleNamespace(exit_code=-1, timeout=True, metadata=SimpleNamespace(exit_code=-1))
    assert command_exit_code(finished) == 2
    assert command_exit_code(from_metadata) == 0
    assert command_exit_code(still_running) is None
    assert command_exit_code(SimpleNamespace()) is None  # not a command's observation


def test_reasoning_text() -> None:
    from openhands.sdk.llm import ReasoningItemModel, RedactedThinkingBlock, ThinkingBlock

    source = SimpleNamespace(
        reasoning_content="plain",
        thinking_blocks=[ThinkingBlock(thinking="anthropic"), RedactedThinkingBlock(data="opaque")],
        responses_reasoning_item=ReasoningItemModel(summary=["summary"], content=["detail"],
                                                    encrypted_content="secret-blob"))
    assert reasoning_text(source) == "plain\nanthropic\nsummary\ndetail"
    assert reasoning_text(SimpleNamespace(reasoning_content=" ", thinking_blocks=[], responses_reasoning_item=None)) == ""


def test_raw_event_is_json_cut_and_without_encrypted_reasoning() -> None:
    from openhands.sdk.event import ActionEvent
    from openhands.sdk.llm import MessageToolCall, ReasoningItemModel, TextContent

    event = ActionEvent(
        thought=[TextContent(text="x" * (RAW_TEXT_LIMIT + 10))], tool_name="think", tool_call_id="c1",
        tool_call=MessageToolCall(id="c1", name="think", arguments="{}", origin="completion"),
        llm_response_id="r1", responses_reasoning_item=ReasoningItemModel(encrypted_content="blob"))
    raw = raw_event(event)
    assert raw is not None and raw["kind"] == "ActionEvent"
    assert raw["thought"][0]["text"].endswith("… [10 more characters]")
    assert "encrypted_content" not in raw["responses_reasoning_item"]
    assert raw_event(object()) is None


def test_metrics_cursor_counts_from_where_it_started() -> None:
    record = SimpleNamespace(prompt_tokens=100, completion_tokens=10, cache_read_tokens=0, cache_write_tokens=0)
    earlier = SimpleNamespace(token_usages=[record, record], accumulated_cost=0.5)
    cursor = MetricsCursor()
    cursor.start(earlier)  # a resumed conversation's metrics hold the earlier runs'
    assert cursor.take(earlier) == ([], None)
    later = SimpleNamespace(token_usages=[record, record, record], accumulated_cost=0.75)
    usages, cost = cursor.take(later)
    assert [(u.input_tokens, u.output_tokens) for u in usages] == [(100, 10)]
    assert cost == 0.25


def test_stored_conversation(tmp_path: Path) -> None:
    conversation_id = uuid.uuid4()
    assert not stored_conversation(tmp_path, conversation_id)
    (tmp_path / conversation_id.hex).mkdir()
    (tmp_path / conversation_id.hex / "base_state.json").write_text("{}")
    assert stored_conversation(tmp_path, conversation_id)


def chunk(content: str | None = None, reasoning: str | None = None, arguments: str | None = None) -> SimpleNamespace:
    """A Chat Completions stream chunk as LiteLLM hands it to OpenHands' token callback."""
    tool_calls = [SimpleNamespace(function=SimpleNamespace(arguments=arguments))] if arguments else None
    delta = SimpleNamespace(content=content, reasoning_content=reasoning, tool_calls=tool_calls)
    return SimpleNamespace(choices=[SimpleNamespace(index=0, delta=delta)])


def test_token_stream_cuts_at_whitespace_and_skips_tool_arguments() -> None:
    tokens = TokenStream()
    out = [*tokens.feed(chunk(reasoning="Check the ")), *tokens.feed(chunk(reasoning="file")),
           *tokens.feed(chunk(content="Bearer sk-ab")), *tokens.feed(chunk(content="cd")),
           *tokens.feed(chunk(arguments='{"path": "a b c"}'))]
    assert [(m.type, m.content) for m in out] == [(MessageType.THINKING_DELTA, "Check the ")]
    # the response's event says both: the rest goes out, no extra whole message
    closing = tokens.close(has_text=True, has_thinking=True)
    assert [(m.type, m.content) for m in closing] == [(MessageType.THINKING_DELTA, "file"),
                                                       (MessageType.TEXT_DELTA, "Bearer sk-abcd")]
    assert tokens.close(has_text=False, has_thinking=False) == []  # nothing streamed since


def test_token_stream_closes_a_stream_its_event_does_not_say() -> None:
    """Text the event does not carry (whitespace only) is closed by a whole text of its own, so the
    session does not take a later text (the finish message) as the end of these deltas."""
    tokens = TokenStream()
    assert tokens.feed(chunk(content="\n")) and not tokens.feed(chunk(content=None))
    closing = tokens.close(has_text=False, has_thinking=False)
    assert [(m.type, m.content) for m in closing] == [(MessageType.TEXT, "\n")]
