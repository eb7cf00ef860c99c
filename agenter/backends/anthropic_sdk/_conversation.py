"""Pure conversation logic: stream accumulation, the tool_use/tool_result invariant, caching marks.

Kept free of I/O so each rule can be unit-tested on plain message dicts.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from agenter._types import Usage

CACHE_MARK = {"type": "ephemeral"}
INTERRUPTED_RESULT = "Not run: the turn was interrupted before this tool call was executed."
SKIPPED_RESULT = "Not run: the turn ended with an earlier tool call in the same response."


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
        if usage is None:
            return
        values = self.usage.model_dump()
        for ours, theirs in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                             ("cache_read_tokens", "cache_read_input_tokens"),
                             ("cache_write_tokens", "cache_creation_input_tokens")):
            value = _get(usage, theirs)
            if value is not None:  # message_delta counts are cumulative for the message
                values[ours] = int(value)
        self.usage = Usage(**values)

    def content(self) -> list[dict[str, Any]]:
        """Assistant content to keep in the history.

        A tool_use block cut off at the output limit (never stopped, or its JSON incomplete)
        is dropped: the model never finished asking for it, so there is nothing to answer.
        """
        params: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.type == "tool_use" and not block.complete and self.stop_reason == "max_tokens":
                continue
            if not block.stopped and block.type != "tool_use":
                block.finish()
            param = block.to_param()
            if param is not None:
                params.append(param)
        return params

    def input_errors(self) -> dict[str, str]:
        """tool_use id -> why its input could not be used (kept blocks only)."""
        return {b.tool_id: b.input_error for b in self.blocks.values()
                if b.type == "tool_use" and b.input_error and self.stop_reason != "max_tokens"}

    def text(self) -> str:
        return "".join(self.blocks[i].text for i in sorted(self.blocks) if self.blocks[i].type == "text")


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


# ------------------------------------------------------------------ history rules


def tool_result(tool_use_id: str, content: str, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def tool_use_ids(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def append_user_content(messages: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Add blocks to the conversation as the user: merged into a trailing user message.

    tool_result blocks are kept ahead of text, as the API requires.
    """
    if not blocks:
        return
    if messages and messages[-1]["role"] == "user":
        content = messages[-1]["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        merged = content + list(blocks)
        results = [b for b in merged if b.get("type") == "tool_result"]
        others = [b for b in merged if b.get("type") != "tool_result"]
        messages[-1] = {"role": "user", "content": results + others}
    else:
        messages.append({"role": "user", "content": list(blocks)})


def close_open_tool_uses(messages: list[dict[str, Any]], partial_results: list[dict[str, Any]] | None = None,
                         reason: str = INTERRUPTED_RESULT) -> int:
    """Give every unanswered tool_use of the last assistant message an is_error result.

    `partial_results` are results already computed for that message (kept, in order).
    Returns how many results were synthesized.
    """
    if not messages or messages[-1]["role"] != "assistant":
        return 0
    ids = tool_use_ids(messages[-1])
    if not ids:
        return 0
    results = [r for r in (partial_results or []) if r.get("tool_use_id") in ids]
    answered = {r["tool_use_id"] for r in results}
    missing = [tool_result(i, reason, is_error=True) for i in ids if i not in answered]
    messages.append({"role": "user", "content": results + missing})
    return len(missing)


def invariant_violations(messages: list[dict[str, Any]]) -> list[str]:
    """Every tool_use answered exactly once, in the next (user) message. Empty list = holds."""
    problems: list[str] = []
    for index, message in enumerate(messages):
        if index and messages[index - 1]["role"] == message["role"]:
            problems.append(f"message {index}: two {message['role']} messages in a row")
        ids = tool_use_ids(message)
        if not ids:
            continue
        if index + 1 >= len(messages):
            problems.append(f"message {index}: tool_use without a following user message")
            continue
        following = messages[index + 1]
        content = following.get("content") if following["role"] == "user" else None
        found = [b.get("tool_use_id") for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
        for tool_id in ids:
            if found.count(tool_id) != 1:
                problems.append(f"message {index}: tool_use {tool_id} has {found.count(tool_id)} results")
        extra = {str(tool_id) for tool_id in found} - set(ids)
        if extra:
            problems.append(f"message {index + 1}: results for unknown tool_use ids {sorted(extra)}")
        if content:
            kinds = [b.get("type") for b in content if isinstance(b, dict)]
            if "tool_result" in kinds and "text" in kinds:
                last_result = max(i for i, kind in enumerate(kinds) if kind == "tool_result")
                if kinds.index("text") < last_result:
                    problems.append(f"message {index + 1}: text before tool_result blocks")
    return problems


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
