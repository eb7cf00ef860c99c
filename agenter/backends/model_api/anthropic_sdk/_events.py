"""The Messages API's stream events, read into one response in the harness's neutral blocks, and
the cache marks of a request: what only the Anthropic wire knows. Pure, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agenter._types import Usage
from agenter.backends.model_api._harness.wire import BlockStream, Stop, StreamedBlock, WireResponse

CACHE_MARK = {"type": "ephemeral"}
#: Stop reasons that cut a response off: its last block may be incomplete.
CUT_OFF_STOPS = frozenset({"max_tokens", "model_context_window_exceeded"})
#: The stop reasons with a word of their own in the wire protocol.
_STOPS: dict[str, Stop] = {"tool_use": "tool_use", "max_tokens": "max_tokens",
                           "model_context_window_exceeded": "context_length", "refusal": "refusal"}


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Attribute or key access: SDK event objects and plain dicts (tests) alike."""
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


@dataclass
class StreamAccumulator:
    """Builds one assistant response from raw Messages stream events (the SDK's event objects
    or plain dicts)."""

    stream: BlockStream = field(default_factory=BlockStream)
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    finished: bool = False  # message_stop seen

    @property
    def blocks(self) -> dict[int, StreamedBlock]:
        return self.stream.blocks

    def reset(self) -> None:
        self.stream = BlockStream()
        self.stop_reason = None
        self.usage = Usage()
        self.finished = False

    def feed(self, event: Any) -> StreamedBlock | None:
        """Apply one event; returns the block that just completed (content_block_stop)."""
        kind = _get(event, "type")
        blocks = self.stream.blocks
        if kind == "message_start":
            self._take_usage(_get(_get(event, "message"), "usage"))
        elif kind == "content_block_start":
            blocks[int(_get(event, "index", len(blocks)))] = _started_block(_get(event, "content_block"))
        elif kind == "content_block_delta":
            block = blocks.get(int(_get(event, "index", -1)))
            delta = _get(event, "delta")
            if block is not None and delta is not None:
                _apply_delta(block, delta)
        elif kind == "content_block_stop":
            stopped = blocks.get(int(_get(event, "index", -1)))
            if stopped is not None:
                stopped.finish()
                return stopped
        elif kind == "message_delta":
            delta = _get(event, "delta")
            reason = _get(delta, "stop_reason") if delta is not None else None
            if reason:
                self.stop_reason = reason
            self._take_usage(_get(event, "usage"))
        elif kind == "message_stop":
            self.finished = True
        return None

    def _take_usage(self, usage: Any) -> None:
        if usage is not None:  # message_delta counts are cumulative for the message
            self.usage = api_usage(usage, self.usage)

    @property
    def cut_off(self) -> bool:
        return self.stop_reason in CUT_OFF_STOPS

    def content(self) -> list[dict[str, Any]]:
        """Assistant content to keep in the history (the cut-off rule: BlockStream.content)."""
        return self.stream.content(cut_off=self.cut_off)

    def input_errors(self) -> dict[str, str]:
        """tool_use id -> why its input could not be used (kept blocks only)."""
        return self.stream.input_errors(cut_off=self.cut_off)

    def text(self) -> str:
        return self.stream.text()

    def response(self) -> WireResponse:
        """The finished response in the harness's terms."""
        return WireResponse(content=self.content(), stop=neutral_stop(self.stop_reason), usage=self.usage,
                            stop_detail=self.stop_reason, input_errors=self.input_errors())


def neutral_stop(reason: str | None) -> Stop:
    """The Messages API's stop_reason in the wire protocol's vocabulary (end_turn, stop_sequence,
    pause_turn and reasons not known here are "end")."""
    return _STOPS.get(reason or "", "end")


def text_delta(event: Any) -> str | None:
    """The text of a text_delta stream event (None for any other event)."""
    if _get(event, "type") != "content_block_delta":
        return None
    delta = _get(event, "delta")
    if _get(delta, "type") != "text_delta":
        return None
    text = _get(delta, "text")
    return text if isinstance(text, str) else None


def api_usage(usage: Any, base: Usage | None = None) -> Usage:
    """The API's usage object (or dict) as agenter's Usage; counts it leaves out keep `base`'s."""
    values = (base or Usage()).model_dump()
    for ours, theirs in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                         ("cache_read_tokens", "cache_read_input_tokens"),
                         ("cache_write_tokens", "cache_creation_input_tokens")):
        value = _get(usage, theirs)
        if value is not None:
            values[ours] = int(value)
    return Usage(**values)


def _started_block(start: Any) -> StreamedBlock:
    """A block as content_block_start announces it."""
    block_type = _get(start, "type")
    block = StreamedBlock(type=block_type)
    if block_type == "text":
        block.text = _get(start, "text", "") or ""
    elif block_type == "thinking":
        block.thinking = _get(start, "thinking", "") or ""
        block.signature = _get(start, "signature", "") or ""
    elif block_type == "redacted_thinking":
        block.data = _get(start, "data", "") or ""
    elif block_type == "tool_use":
        block.tool_id = _get(start, "id", "")
        block.tool_name = _get(start, "name", "")
        initial = _get(start, "input")
        if isinstance(initial, dict) and initial:
            block.tool_input = dict(initial)
    else:
        dumped = start if isinstance(start, dict) else start.model_dump(exclude_none=True)
        block.extra = dict(dumped)
    return block


def _apply_delta(block: StreamedBlock, delta: Any) -> None:
    delta_type = _get(delta, "type")
    if delta_type == "text_delta":
        block.text += _get(delta, "text", "")
    elif delta_type == "input_json_delta":
        block.json_buffer += _get(delta, "partial_json", "")
    elif delta_type == "thinking_delta":
        block.thinking += _get(delta, "thinking", "")
    elif delta_type == "signature_delta":
        block.signature = _get(delta, "signature", "")


def with_cache_marks(messages: Sequence[dict[str, Any]], breakpoints: int = 2) -> list[dict[str, Any]]:
    """A copy of `messages` with cache_control on the last block of the last `breakpoints`
    user messages: the newest one is written to the cache, the one before it is read back."""
    marked = list(messages)
    placed = 0
    for index in range(len(marked) - 1, -1, -1):
        if placed >= breakpoints:
            break
        message = marked[index]
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list) or not content:
            continue
        last = content[-1]
        if last.get("type") not in ("text", "tool_result", "image", "document"):
            continue
        if last.get("type") == "text" and not last.get("text"):
            continue
        new_last = copy.copy(last)
        new_last["cache_control"] = dict(CACHE_MARK)
        marked[index] = {**message, "content": [*content[:-1], new_last]}
        placed += 1
    return marked


