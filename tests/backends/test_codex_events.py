"""codex backend: the app-server's streaming and compaction notifications as BackendMessages,
on payloads recorded from Codex 0.169 (`codex app-server` against the scripted model server)."""

from __future__ import annotations

from typing import Any

from agenter.backends.agents.codex._events import ItemStream
from agenter.backends.base import MessageType

THREAD = "01a20539-9749-7f52-b540-d29170772f28"
TURN = "01a20539-976a-77d0-babf-a94c01dae9d6"
REASONING = "rs_858189e3b348078ee35d5bba"
MESSAGE = "msg_2905f71abd222189fa7dc870"
TEXT = "Hello there, the key is Bearer sk-abcdefghijklmnop and more words follow here."


def note(method: str, **params: Any) -> tuple[str, dict[str, Any]]:
    return method, {"threadId": THREAD, "turnId": TURN, **params}


def item(method: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return note(method, item=fields)


#: One reply with reasoning and text, as Codex 0.169 sent it (ids and fields as recorded).
RECORDED = [
    item("item/started", type="reasoning", id=REASONING, summary=[], content=[]),
    note("item/reasoning/summaryPartAdded", itemId=REASONING, summaryIndex=0),
    note("item/reasoning/summaryTextDelta", itemId=REASONING, delta="Let me think about the g", summaryIndex=0),
    note("item/reasoning/summaryTextDelta", itemId=REASONING, delta="reeting first.", summaryIndex=0),
    item("item/completed", type="reasoning", id=REASONING, summary=["Let me think about the greeting first."],
         content=[]),
    item("item/started", type="agentMessage", id=MESSAGE, text="", phase=None),
    note("item/agentMessage/delta", itemId=MESSAGE, delta="Hello there, the key is "),
    note("item/agentMessage/delta", itemId=MESSAGE, delta="Bearer sk-abcdefghijklmn"),
    note("item/agentMessage/delta", itemId=MESSAGE, delta="op and more words follow"),
    note("item/agentMessage/delta", itemId=MESSAGE, delta=" here."),
    item("item/completed", type="agentMessage", id=MESSAGE, text=TEXT, phase=None),
]


def run(stream: ItemStream, notes: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    return [message for method, data in notes for message in stream.messages(method, data)]


def test_deltas_stream_cut_at_whitespace_and_the_completed_item_closes_them():
    out = run(ItemStream(lambda s: s), RECORDED)
    assert [(m.type, m.content) for m in out] == [
        (MessageType.THINKING_DELTA, "Let me think about the "),
        (MessageType.THINKING_DELTA, "greeting "),
        (MessageType.THINKING_DELTA, "first."),
        (MessageType.THINKING, "Let me think about the greeting first."),
        (MessageType.TEXT_DELTA, "Hello there, the key is "),
        # "Bearer" and the key split over two notifications go out in one delta.
        (MessageType.TEXT_DELTA, "Bearer sk-abcdefghijklmnop and more words "),
        (MessageType.TEXT_DELTA, "follow "),
        (MessageType.TEXT_DELTA, "here."),
        (MessageType.TEXT, TEXT),
    ]


def test_reasoning_parts_are_joined_by_line_breaks_like_the_completed_item():
    stream = ItemStream(lambda s: s)
    out = run(stream, [
        note("item/reasoning/summaryTextDelta", itemId="rs", delta="First part.", summaryIndex=0),
        note("item/reasoning/summaryTextDelta", itemId="rs", delta="Second part.", summaryIndex=1),
        note("item/reasoning/textDelta", itemId="rs", delta="Raw thought.", contentIndex=0),
        item("item/completed", type="reasoning", id="rs", summary=["First part.", "Second part."],
             content=["Raw thought."]),
    ])
    deltas = [m.content for m in out if m.type is MessageType.THINKING_DELTA]
    whole = [m.content for m in out if m.type is MessageType.THINKING]
    assert whole == ["First part.\nSecond part.\nRaw thought."] and "".join(deltas) == whole[0]


def test_a_text_that_was_not_streamed_is_a_whole_text_and_held_text_is_flushed_at_turn_end():
    stream = ItemStream(lambda s: s)
    out = run(stream, [item("item/completed", type="agentMessage", id="m1", text="Done.")])
    assert [(m.type, m.content) for m in out] == [(MessageType.TEXT, "Done.")]
    run(stream, [note("item/agentMessage/delta", itemId="m2", delta="cut off mid-wo")])
    assert [(m.type, m.content) for m in stream.flush()] == [(MessageType.TEXT_DELTA, "mid-wo")]
    assert stream.flush() == []
    run(stream, [note("item/agentMessage/delta", itemId="m3", delta="left over")])
    stream.start_turn()  # an interrupted turn's held text is not carried into the next one
    assert stream.flush() == []


def test_a_context_compaction_item_is_compacted_with_the_context_size_before_it():
    stream = ItemStream(lambda s: s)
    # Recorded: the last model call before the compaction (5000 in, 3000 out), then the
    # compaction's own summary call, reported while its item runs.
    stream.observe_usage({"threadId": THREAD, "turnId": TURN, "tokenUsage": {
        "total": {"totalTokens": 8000, "inputTokens": 5000, "outputTokens": 3000},
        "last": {"totalTokens": 8000, "inputTokens": 5000, "outputTokens": 3000}, "modelContextWindow": None}})
    compaction = {"type": "contextCompaction", "id": "01a20539-b433-7f01-830d-3cde64aa0b07",
                  "startedAtMs": 1795383997491, "completedAtMs": None}
    assert run(stream, [note("item/started", item=compaction)]) == []
    stream.observe_usage({"tokenUsage": {"last": {"totalTokens": 110, "inputTokens": 100, "outputTokens": 10}}})
    out = run(stream, [note("item/completed", item={**compaction, "completedAtMs": 1795383997528})])
    assert [(m.type, m.details) for m in out] == [
        (MessageType.COMPACTED, {"tokens_before": 8000, "tokens_after": None})]
    assert out[0].raw["type"] == "contextCompaction"
    # Without a usage report before it, Codex gave no figure.
    fresh = ItemStream(lambda s: s)
    out = run(fresh, [note("item/started", item=compaction), note("item/completed", item=compaction)])
    assert out[0].details == {"tokens_before": None, "tokens_after": None}


def test_other_notifications_keep_their_stateless_mapping():
    stream = ItemStream(lambda s: s.replace("sk-secret", "[REDACTED]"))
    out = run(stream, [note("error", error={"message": "bad key sk-secret"}, willRetry=True),
                       note("item/agentMessage/delta", itemId="m", delta=""),
                       note("turn/plan/updated", plan=[{"step": "read", "status": "completed"}])])
    assert [(m.type, m.content) for m in out] == [
        (MessageType.ERROR, "bad key [REDACTED] (Codex retries)"), (MessageType.PLAN, "[completed] read")]
