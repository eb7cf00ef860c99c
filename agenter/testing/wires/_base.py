"""The small interface every wire implements; a new wire (Gemini, ...) is one module.

A wire knows which paths it serves, how to parse a model-turn request into a
:class:`ModelRequest`, and how to render a wire-neutral :class:`Reply` as a JSON body or as
a list of SSE frames, and an :class:`HttpError` in its error shape. The server does the HTTP.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..records import CacheResult, Headers, ModelRequest, PrefixBlock, PromptCache, estimate_tokens
from ..script import HttpError, Reply, TextPart, ThinkingPart, ToolCallPart, new_id

# Route kinds a wire can answer.
MODEL_TURN = "model"
COUNT_TOKENS = "count_tokens"
MODELS = "models"


@dataclass
class Turn:
    """A reply made concrete for one request: ids assigned, usage and stop reason decided."""

    reply: Reply
    request: ModelRequest
    parts: list[TextPart | ThinkingPart | ToolCallPart]
    stop_reason: str
    input_tokens: int
    """Uncached input tokens (Anthropic meaning: cache reads and writes not included)."""
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    reasoning_tokens: int
    message_id: str
    created: int

    @property
    def model(self) -> str:
        return self.request.model or "scripted-model"

    @property
    def prompt_tokens(self) -> int:
        """All input tokens, cached or not (OpenAI meaning)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_creation_tokens


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event frame."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def chunk_text(value: str, size: int = 24) -> list[str]:
    """Split text into small deltas so clients really exercise their stream assembly."""
    if not value:
        return []
    return [value[i : i + size] for i in range(0, len(value), size)]


class Wire:
    """Base class. Subclasses set the class attributes and implement the render methods."""

    name: str = ""
    tool_id_prefix: str = "call_"
    message_id_prefix: str = "msg_"
    explicit_cache: bool = False
    """True: only prefixes marked with cache_control are cached (Anthropic)."""

    def route(self, method: str, path: str, headers: Headers) -> str | None:
        """The route kind this wire answers for the request, or None."""
        raise NotImplementedError

    def parse(self, body: dict[str, Any], headers: Headers, path: str) -> ModelRequest:
        raise NotImplementedError

    def prompt_blocks(self, request: ModelRequest) -> list[PrefixBlock]:
        """The prompt in cache order (tools, system, messages), one entry per block."""
        raise NotImplementedError

    def render_json(self, turn: Turn) -> dict[str, Any]:
        raise NotImplementedError

    def render_events(self, turn: Turn) -> list[bytes]:
        raise NotImplementedError

    def render_error(self, error: HttpError) -> tuple[dict[str, str], dict[str, Any]]:
        """Headers and JSON body for an HTTP error."""
        raise NotImplementedError

    def answer_aux(self, kind: str, body: Any, headers: Headers) -> tuple[int, dict[str, Any]]:
        """Answer a non-model route (count_tokens, models)."""
        return 404, {"error": {"message": f"{kind} is not served by the {self.name} wire"}}

    def response_headers(self) -> dict[str, str]:
        return {}

    def default_stop_reason(self, parts: list[Any]) -> str:
        return "tool_use" if any(isinstance(part, ToolCallPart) for part in parts) else "end_turn"

    # -- shared logic ------------------------------------------------------------------------

    def make_turn(self, reply: Reply, request: ModelRequest, cache: PromptCache) -> Turn:
        parts: list[TextPart | ThinkingPart | ToolCallPart] = []
        for part in reply.parts:
            if isinstance(part, ToolCallPart) and not part.id:
                part = ToolCallPart(part.name, part.input, new_id(self.tool_id_prefix))
            parts.append(part)
        cached: CacheResult = cache.lookup_and_store(self.prompt_blocks(request), explicit=self.explicit_cache)
        override = reply.usage
        cache_read = cached.cache_read_tokens
        cache_creation = cached.cache_creation_tokens
        input_tokens = cached.uncached_tokens
        reasoning = sum(estimate_tokens(p.thinking) for p in parts if isinstance(p, ThinkingPart))
        output = sum(
            estimate_tokens(
                p.text if isinstance(p, TextPart) else p.thinking if isinstance(p, ThinkingPart) else p.input
            )
            + (estimate_tokens(p.name) if isinstance(p, ToolCallPart) else 0)
            for p in parts
        )
        if override is not None:
            if override.cache_read_input_tokens is not None:
                cache_read = override.cache_read_input_tokens
            if override.cache_creation_input_tokens is not None:
                cache_creation = override.cache_creation_input_tokens
            if override.input_tokens is not None:
                input_tokens = override.input_tokens
            if override.output_tokens is not None:
                output = override.output_tokens
            if override.reasoning_tokens is not None:
                reasoning = override.reasoning_tokens
        return Turn(
            reply=reply,
            request=request,
            parts=parts,
            stop_reason=reply.stop_reason or self.default_stop_reason(parts),
            input_tokens=max(0, input_tokens),
            output_tokens=max(1, output),
            cache_read_tokens=max(0, cache_read),
            cache_creation_tokens=max(0, cache_creation),
            reasoning_tokens=max(0, reasoning),
            message_id=new_id(self.message_id_prefix),
            created=int(time.time()),
        )


def tool_input_json(part: ToolCallPart) -> str:
    """JSON arguments for a function tool (a string input is wrapped as ``{"input": text}``)."""
    return json.dumps(tool_input_dict(part), ensure_ascii=False)


def tool_input_dict(part: ToolCallPart) -> dict[str, Any]:
    """The input as a dict; a free-form string input becomes ``{"input": text}``."""
    return part.input if isinstance(part.input, dict) else {"input": part.input}
