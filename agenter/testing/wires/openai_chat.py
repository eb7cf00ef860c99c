"""OpenAI Chat Completions (OpenHands via LiteLLM, opencode): POST /v1/chat/completions.

Non-streaming JSON, or SSE ``data: {chunk}`` lines ending with ``data: [DONE]``. Tool calls
stream as ``delta.tool_calls`` entries with an ``index``: the first carries id and name,
the rest carry argument pieces. Thinking parts become ``reasoning_content`` (the
DeepSeek/LiteLLM convention).
"""

from __future__ import annotations

from typing import Any

from ..records import Headers, ModelRequest, PrefixBlock
from ..script import HttpError, TextPart, ThinkingPart, ToolCallPart, new_id
from . import _openai_common
from ._base import MODEL_TURN, Turn, Wire, chunk_text, sse, tool_input_json

FINISH_REASONS = {
    "tool_use": "tool_calls",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "stop",
    "pause_turn": "stop",
}


class OpenAIChatWire(Wire):
    name = "openai-chat"
    tool_id_prefix = "call_"
    message_id_prefix = "chatcmpl-"

    def route(self, method: str, path: str, headers: Headers) -> str | None:
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            return MODEL_TURN
        return None

    def parse(self, body: dict[str, Any], headers: Headers, path: str) -> ModelRequest:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        system = [m.get("content") for m in messages if m.get("role") in ("system", "developer")]
        return ModelRequest(
            wire=self.name,
            model=body.get("model"),
            messages=messages,
            tools=[t for t in body.get("tools") or [] if isinstance(t, dict)],
            system=system[0] if len(system) == 1 else (system or None),
            stream=bool(body.get("stream")),
            body=body,
            headers=headers,
            path=path,
        )

    def prompt_blocks(self, request: ModelRequest) -> list[PrefixBlock]:
        blocks = [PrefixBlock({"tool": tool}) for tool in request.tools]
        blocks.extend(PrefixBlock({"message": message}) for message in request.messages)
        return blocks

    # -- rendering -----------------------------------------------------------------------

    def _finish_reason(self, turn: Turn) -> str:
        return FINISH_REASONS.get(turn.stop_reason, turn.stop_reason)

    def _usage(self, turn: Turn) -> dict[str, Any]:
        return {
            "prompt_tokens": turn.prompt_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.prompt_tokens + turn.output_tokens,
            "prompt_tokens_details": {"cached_tokens": turn.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        }

    def _tool_calls(self, turn: Turn) -> list[dict[str, Any]]:
        return [
            {"id": part.id, "type": "function", "function": {"name": part.name, "arguments": tool_input_json(part)}}
            for part in turn.parts
            if isinstance(part, ToolCallPart)
        ]

    def _text(self, turn: Turn) -> str:
        return "".join(part.text for part in turn.parts if isinstance(part, TextPart))

    def _reasoning(self, turn: Turn) -> str:
        return "".join(part.thinking for part in turn.parts if isinstance(part, ThinkingPart))

    def render_json(self, turn: Turn) -> dict[str, Any]:
        refusal = turn.stop_reason == "refusal"
        text = self._text(turn)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if refusal or not text else text,
            "refusal": text if refusal else None,
        }
        tool_calls = self._tool_calls(turn)
        if tool_calls:
            message["tool_calls"] = tool_calls
        reasoning = self._reasoning(turn)
        if reasoning:
            message["reasoning_content"] = reasoning
        return {
            "id": turn.message_id,
            "object": "chat.completion",
            "created": turn.created,
            "model": turn.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason(turn), "logprobs": None}],
            "usage": self._usage(turn),
            "system_fingerprint": "fp_scripted",
        }

    def render_events(self, turn: Turn) -> list[bytes]:
        events: list[bytes] = []

        def emit(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            events.append(
                sse(
                    {
                        "id": turn.message_id,
                        "object": "chat.completion.chunk",
                        "created": turn.created,
                        "model": turn.model,
                        "system_fingerprint": "fp_scripted",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
                    }
                )
            )

        refusal = turn.stop_reason == "refusal"
        emit({"role": "assistant", "content": "", "refusal": None})
        tool_index = 0
        for part in turn.parts:
            if isinstance(part, ThinkingPart):
                for piece in chunk_text(part.thinking):
                    emit({"reasoning_content": piece})
            elif isinstance(part, TextPart):
                for piece in chunk_text(part.text):
                    emit({"refusal": piece} if refusal else {"content": piece})
            else:
                arguments = tool_input_json(part)
                emit(
                    {
                        "tool_calls": [
                            {
                                "index": tool_index,
                                "id": part.id,
                                "type": "function",
                                "function": {"name": part.name, "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in chunk_text(arguments, 16):
                    emit({"tool_calls": [{"index": tool_index, "function": {"arguments": piece}}]})
                tool_index += 1
        emit({}, self._finish_reason(turn))
        if (turn.request.body.get("stream_options") or {}).get("include_usage"):
            events.append(
                sse(
                    {
                        "id": turn.message_id,
                        "object": "chat.completion.chunk",
                        "created": turn.created,
                        "model": turn.model,
                        "system_fingerprint": "fp_scripted",
                        "choices": [],
                        "usage": self._usage(turn),
                    }
                )
            )
        events.append(sse("[DONE]"))
        return events

    def render_error(self, error: HttpError) -> tuple[dict[str, str], dict[str, Any]]:
        return _openai_common.render_error(error)

    def response_headers(self) -> dict[str, str]:
        return {"x-request-id": new_id("req_"), "openai-processing-ms": "1"}
