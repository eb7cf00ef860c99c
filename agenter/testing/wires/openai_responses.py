"""OpenAI Responses API (Codex, codex-acp): POST /v1/responses (SSE and JSON), GET /v1/models.

Tool calls render by the type the request declared for that tool: ``custom`` tools (Codex's
free-form ``apply_patch``) become ``custom_tool_call`` items with a string ``input``;
everything else becomes a ``function_call`` item with JSON ``arguments``. Two Codex extras:
a call of a declared ``tool_search`` tool becomes a client-executed ``tool_search_call``, and
``tool_call("namespace.name", ...)`` (a dot never appears in a tool name) becomes a
``function_call`` with ``namespace`` set, which is how Codex's deferred MCP tools are called.
"""

from __future__ import annotations

import json
from typing import Any

from ..records import Headers, ModelRequest, PrefixBlock
from ..script import HttpError, TextPart, ThinkingPart, ToolCallPart, new_id
from . import _openai_common
from ._base import MODEL_TURN, MODELS, Turn, Wire, chunk_text, sse, tool_input_dict, tool_input_json


def custom_input(part: ToolCallPart) -> str:
    """A free-form tool's input text: the string itself, or the dict's single string value."""
    if isinstance(part.input, str):
        return part.input
    if len(part.input) == 1:
        (value,) = part.input.values()
        if isinstance(value, str):
            return value
    return json.dumps(part.input, ensure_ascii=False)


class OpenAIResponsesWire(Wire):
    name = "openai-responses"
    tool_id_prefix = "call_"
    message_id_prefix = "resp_"

    def route(self, method: str, path: str, headers: Headers) -> str | None:
        if method == "POST" and path.rstrip("/").endswith("/responses"):
            return MODEL_TURN
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return MODELS
        return None

    def parse(self, body: dict[str, Any], headers: Headers, path: str) -> ModelRequest:
        items = body.get("input")
        if isinstance(items, str):
            messages: list[Any] = [{"role": "user", "content": items}]
        else:
            messages = list(items or [])
        return ModelRequest(
            wire=self.name,
            model=body.get("model"),
            messages=messages,
            tools=[t for t in body.get("tools") or [] if isinstance(t, dict)],
            system=body.get("instructions"),
            stream=bool(body.get("stream")),
            body=body,
            headers=headers,
            path=path,
        )

    def prompt_blocks(self, request: ModelRequest) -> list[PrefixBlock]:
        blocks = [PrefixBlock({"tool": tool}) for tool in request.tools]
        if request.system:
            blocks.append(PrefixBlock({"instructions": request.system}))
        blocks.extend(PrefixBlock({"item": item}) for item in request.messages)
        return blocks

    # -- rendering -----------------------------------------------------------------------

    def _items(self, turn: Turn) -> list[dict[str, Any]]:
        """Completed output items, one per part."""
        refusal = turn.stop_reason == "refusal"
        items: list[dict[str, Any]] = []
        for part in turn.parts:
            if isinstance(part, TextPart):
                content = (
                    {"type": "refusal", "refusal": part.text}
                    if refusal
                    else {"type": "output_text", "text": part.text, "annotations": [], "logprobs": []}
                )
                items.append(
                    {
                        "id": new_id("msg_"),
                        "type": "message",
                        "status": "completed",
                        "role": "assistant",
                        "content": [content],
                    }
                )
            elif isinstance(part, ThinkingPart):
                items.append(
                    {
                        "id": new_id("rs_"),
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": part.thinking}],
                    }
                )
            elif part.name == "tool_search" and any(t.get("type") == "tool_search" for t in turn.request.tools):
                items.append(
                    {
                        "id": new_id("ts_"),
                        "type": "tool_search_call",
                        "status": "completed",
                        "call_id": part.id,
                        "execution": "client",
                        "arguments": tool_input_dict(part),
                    }
                )
            elif turn.request.tool_type(part.name) == "custom":
                items.append(
                    {
                        "id": new_id("ctc_"),
                        "type": "custom_tool_call",
                        "status": "completed",
                        "call_id": part.id,
                        "name": part.name,
                        "input": custom_input(part),
                    }
                )
            else:
                namespace, _, name = part.name.rpartition(".")
                call = {
                    "id": new_id("fc_"),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": part.id,
                    "name": name,
                    "arguments": tool_input_json(part),
                }
                if namespace:
                    call["namespace"] = namespace
                items.append(call)
        return items

    def _usage(self, turn: Turn) -> dict[str, Any]:
        return {
            "input_tokens": turn.prompt_tokens,
            "input_tokens_details": {"cached_tokens": turn.cache_read_tokens},
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
            "total_tokens": turn.prompt_tokens + turn.output_tokens,
        }

    def _response(self, turn: Turn, status: str, output: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        body = turn.request.body
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": turn.message_id,
            "object": "response",
            "created_at": turn.created,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": turn.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", False),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        }

    def _final_status(self, turn: Turn) -> str:
        return "incomplete" if turn.stop_reason in ("max_tokens", "max_output_tokens", "length") else "completed"

    def render_json(self, turn: Turn) -> dict[str, Any]:
        return self._response(turn, self._final_status(turn), self._items(turn), self._usage(turn))

    def render_events(self, turn: Turn) -> list[bytes]:
        events: list[bytes] = []

        def emit(kind: str, **fields: Any) -> None:
            events.append(sse({"type": kind, "sequence_number": len(events), **fields}, kind))

        emit("response.created", response=self._response(turn, "in_progress", [], None))
        emit("response.in_progress", response=self._response(turn, "in_progress", [], None))
        items = self._items(turn)
        for index, item in enumerate(items):
            item_id = item["id"]
            kind = item["type"]
            if kind == "message":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                part = item["content"][0]
                if part["type"] == "refusal":
                    emit(
                        "response.content_part.added",
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        part={"type": "refusal", "refusal": ""},
                    )
                    for piece in chunk_text(part["refusal"]):
                        emit(
                            "response.refusal.delta", item_id=item_id, output_index=index, content_index=0, delta=piece
                        )
                    emit(
                        "response.refusal.done",
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        refusal=part["refusal"],
                    )
                else:
                    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    emit(
                        "response.content_part.added", item_id=item_id, output_index=index, content_index=0, part=empty
                    )
                    for piece in chunk_text(part["text"]):
                        emit(
                            "response.output_text.delta",
                            item_id=item_id,
                            output_index=index,
                            content_index=0,
                            delta=piece,
                            logprobs=[],
                        )
                    emit(
                        "response.output_text.done",
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        text=part["text"],
                        logprobs=[],
                    )
                emit("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part)
            elif kind == "reasoning":
                emit("response.output_item.added", output_index=index, item={**item, "summary": []})
                summary = item["summary"][0]
                emit(
                    "response.reasoning_summary_part.added",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
                for piece in chunk_text(summary["text"]):
                    emit(
                        "response.reasoning_summary_text.delta",
                        item_id=item_id,
                        output_index=index,
                        summary_index=0,
                        delta=piece,
                    )
                emit(
                    "response.reasoning_summary_text.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    text=summary["text"],
                )
                emit(
                    "response.reasoning_summary_part.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part=summary,
                )
            elif kind == "function_call":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in chunk_text(item["arguments"], 16):
                    emit("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=piece)
                emit(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            elif kind == "tool_search_call":
                emit("response.output_item.added", output_index=index, item=item)
            elif kind == "custom_tool_call":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "input": ""},
                )
                for piece in chunk_text(item["input"], 32):
                    emit("response.custom_tool_call_input.delta", item_id=item_id, output_index=index, delta=piece)
                emit("response.custom_tool_call_input.done", item_id=item_id, output_index=index, input=item["input"])
            emit("response.output_item.done", output_index=index, item=item)
        status = self._final_status(turn)
        emit(f"response.{status}", response=self._response(turn, status, items, self._usage(turn)))
        return events

    def render_error(self, error: HttpError) -> tuple[dict[str, str], dict[str, Any]]:
        return _openai_common.render_error(error)

    def response_headers(self) -> dict[str, str]:
        return {"x-request-id": new_id("req_"), "openai-processing-ms": "1"}

    def answer_aux(self, kind: str, body: Any, headers: Headers) -> tuple[int, dict[str, Any]]:
        if kind == MODELS:
            return 200, _openai_common.models_list()
        return super().answer_aux(kind, body, headers)
