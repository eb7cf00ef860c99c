"""Anthropic Messages API: POST /v1/messages (JSON and SSE), count_tokens, GET /v1/models."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from ..records import Headers, ModelRequest, PrefixBlock, estimate_tokens
from ..script import HttpError, TextPart, ThinkingPart, new_id
from ._base import COUNT_TOKENS, MODEL_TURN, MODELS, Turn, Wire, chunk_text, sse, tool_input_dict

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

MODEL_IDS = ("claude-sonnet-5-5", "claude-haiku-5-5", "claude-opus-5")


def signature_for(thinking: str) -> str:
    """A stable fake signature (clients only pass it back)."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


class AnthropicWire(Wire):
    name = "anthropic"
    tool_id_prefix = "toolu_"
    message_id_prefix = "msg_"
    explicit_cache = True

    def route(self, method: str, path: str, headers: Headers) -> str | None:
        if method == "POST" and path.endswith("/messages/count_tokens"):
            return COUNT_TOKENS
        if method == "POST" and path.endswith("/messages"):
            return MODEL_TURN
        if method == "GET" and path.rstrip("/").endswith("/models") and "anthropic-version" in headers:
            return MODELS
        return None

    def parse(self, body: dict[str, Any], headers: Headers, path: str) -> ModelRequest:
        return ModelRequest(
            wire=self.name,
            model=body.get("model"),
            messages=list(body.get("messages") or []),
            tools=[t for t in body.get("tools") or [] if isinstance(t, dict)],
            system=body.get("system"),
            stream=bool(body.get("stream")),
            body=body,
            headers=headers,
            path=path,
        )

    def prompt_blocks(self, request: ModelRequest) -> list[PrefixBlock]:
        blocks: list[PrefixBlock] = []
        for tool in request.tools:
            blocks.append(PrefixBlock({"tool": tool}, "cache_control" in tool))
        system = request.system
        if isinstance(system, str):
            blocks.append(PrefixBlock({"system": system}))
        elif isinstance(system, list):
            for block in system:
                blocks.append(PrefixBlock({"system": block}, isinstance(block, dict) and "cache_control" in block))
        for message in request.messages:
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    marked = isinstance(block, dict) and "cache_control" in block
                    blocks.append(PrefixBlock({"role": role, "block": block}, marked))
            else:
                blocks.append(PrefixBlock({"role": role, "block": content}))
        return blocks

    # -- rendering -----------------------------------------------------------------------

    def _usage(self, turn: Turn, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": turn.input_tokens,
            "cache_creation_input_tokens": turn.cache_creation_tokens,
            "cache_read_input_tokens": turn.cache_read_tokens,
            "output_tokens": output_tokens,
        }

    def _block(self, part: Any) -> dict[str, Any]:
        if isinstance(part, TextPart):
            return {"type": "text", "text": part.text}
        if isinstance(part, ThinkingPart):
            return {
                "type": "thinking",
                "thinking": part.thinking,
                "signature": part.signature or signature_for(part.thinking),
            }
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": tool_input_dict(part)}

    def render_json(self, turn: Turn) -> dict[str, Any]:
        return {
            "id": turn.message_id,
            "type": "message",
            "role": "assistant",
            "model": turn.model,
            "content": [self._block(part) for part in turn.parts],
            "stop_reason": turn.stop_reason,
            "stop_sequence": None,
            "usage": self._usage(turn, turn.output_tokens),
        }

    def render_events(self, turn: Turn) -> list[bytes]:
        events = [
            sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": turn.message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": turn.model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": self._usage(turn, 1),
                    },
                },
                "message_start",
            )
        ]
        for index, part in enumerate(turn.parts):
            start: dict[str, Any]
            deltas: list[dict[str, Any]]
            if isinstance(part, TextPart):
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": piece} for piece in chunk_text(part.text)]
            elif isinstance(part, ThinkingPart):
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": piece} for piece in chunk_text(part.thinking)]
                deltas.append({"type": "signature_delta", "signature": part.signature or signature_for(part.thinking)})
            else:
                start = {"type": "tool_use", "id": part.id, "name": part.name, "input": {}}
                encoded = json.dumps(tool_input_dict(part), ensure_ascii=False)
                deltas = [{"type": "input_json_delta", "partial_json": ""}]
                deltas += [{"type": "input_json_delta", "partial_json": piece} for piece in chunk_text(encoded, 16)]
            events.append(
                sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")
            )
            if index == 0:
                events.append(sse({"type": "ping"}, "ping"))
            for delta in deltas:
                events.append(
                    sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
                )
            events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        if not turn.parts:
            events.append(sse({"type": "ping"}, "ping"))
        events.append(
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                    "usage": self._usage(turn, turn.output_tokens),
                },
                "message_delta",
            )
        )
        events.append(sse({"type": "message_stop"}, "message_stop"))
        return events

    def render_error(self, error: HttpError) -> tuple[dict[str, str], dict[str, Any]]:
        request_id = new_id("req_")
        error_type = error.error_type or ERROR_TYPES.get(error.status, "api_error")
        body = {"type": "error", "error": {"type": error_type, "message": error.message}, "request_id": request_id}
        return {"request-id": request_id, **dict(error.headers)}, body

    def response_headers(self) -> dict[str, str]:
        return {"request-id": new_id("req_"), "anthropic-organization-id": "scripted"}

    def answer_aux(self, kind: str, body: Any, headers: Headers) -> tuple[int, dict[str, Any]]:
        if kind == COUNT_TOKENS:
            request = self.parse(body if isinstance(body, dict) else {}, headers, "")
            total = sum(estimate_tokens(block.content) for block in self.prompt_blocks(request))
            return 200, {"input_tokens": max(1, total)}
        if kind == MODELS:
            data = [
                {"type": "model", "id": model, "display_name": model, "created_at": "2025-01-01T00:00:00Z"}
                for model in MODEL_IDS
            ]
            return 200, {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
        return super().answer_aux(kind, body, headers)
