"""The Messages API's stream events, read into one response in the harness's neutral blocks, and
the cache marks of a request: what only the Anthropic wire knows. Pure, no I/O.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from agenter._types import Usage

CACHE_MARK = {"type": "ephemeral"}
#: Stop reasons that cut a response off: its last block may be incomplete.
CUT_OFF_STOPS = frozenset({"max_tokens", "model_context_window_exceeded"})


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Attribute or key access: SDK event objects and plain dicts (tests) alike."""
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


@dataclass
class StreamedBlock:
    type: str
    text: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""  # redacted_thinking
    tool_id: str = ""
    tool_name: str = ""
    json_buffer: str = ""
    tool_input: dict[str, Any] | None = None
    input_error: str | None = None
    stopped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def finish(self) -> None:
        self.stopped = True
        if self.type == "tool_use":
            if self.tool_input is not None and not self.json_buffer:
                return
            try:
                parsed = json.loads(self.json_buffer) if self.json_buffer.strip() else {}
            except json.JSONDecodeError as exc:
                self.input_error = f"tool input is not valid JSON ({exc.msg})"
                parsed = {}
            if not isinstance(parsed, dict):
                self.input_error = "tool input must be a JSON object"
                parsed = {}
            self.tool_input = parsed

    @property
    def complete(self) -> bool:
        return self.stopped and (self.type != "tool_use" or self.input_error is None)

    def to_param(self) -> dict[str, Any] | None:
        """The block as it goes back to the API in the assistant message (None: leave it out)."""
        if self.type == "text":
            return {"type": "text", "text": self.text} if self.text else None
        if self.type == "thinking":
            return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}
        if self.type == "redacted_thinking":
            return {"type": "redacted_thinking", "data": self.data}
        if self.type == "tool_use":
            return {"type": "tool_use", "id": self.tool_id, "name": self.tool_name,
                    "input": self.tool_input or {}}
        return self.extra or None


@dataclass
class StreamAccumulator:
    """Builds one assistant response from raw Messages stream events."""

    blocks: dict[int, StreamedBlock] = field(default_factory=dict)
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    finished: bool = False  # message_stop seen

    def reset(self) -> None:
        self.blocks = {}
        self.stop_reason = None
        self.usage = Usage()
        self.finished = False

    def feed(self, event: Any) -> StreamedBlock | None:
        """Apply one event; returns the block that just completed (content_block_stop)."""
        kind = _get(event, "type")
        if kind == "message_start":
            self._take_usage(_get(_get(event, "message"), "usage"))
        elif kind == "content_block_start":
            self.blocks[int(_get(event, "index", len(self.blocks)))] = _started_block(_get(event, "content_block"))
        elif kind == "content_block_delta":
            block = self.blocks.get(int(_get(event, "index", -1)))
            delta = _get(event, "delta")
            if block is not None and delta is not None:
                _apply_delta(block, delta)
        elif kind == "content_block_stop":
            stopped = self.blocks.get(int(_get(event, "index", -1)))
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

    def content(self) -> list[dict[str, Any]]:
        """Assistant content to keep in the history.

        A tool_use block cut off at the output limit or the context window (never stopped, or
        its JSON incomplete) is dropped: the model never finished asking for it, so there is
        nothing to answer.
        """
        params: list[dict[str, Any]] = []
        cut_off = self.stop_reason in CUT_OFF_STOPS
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.type == "tool_use" and not block.complete and cut_off:
                continue
            if block.type == "thinking" and not block.signature and cut_off:
                continue  # cut off before its signature: the API would refuse it back
            if not block.stopped and block.type != "tool_use":
                block.finish()
            param = block.to_param()
            if param is not None:
                params.append(param)
        return params

    def input_errors(self) -> dict[str, str]:
        """tool_use id -> why its input could not be used (kept blocks only)."""
        return {b.tool_id: b.input_error for b in self.blocks.values()
                if b.type == "tool_use" and b.input_error and self.stop_reason not in CUT_OFF_STOPS}

    def text(self) -> str:
        return "".join(self.blocks[i].text for i in sorted(self.blocks) if self.blocks[i].type == "text")


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



def with_cache_marks(messages: list[dict[str, Any]], breakpoints: int = 2) -> list[dict[str, Any]]:
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


