"""Gemini API (Gemini CLI, google-genai): POST /v1beta/models/{model}:generateContent and friends.

``:generateContent`` answers JSON, ``:streamGenerateContent`` answers SSE (``?alt=sse``; the
JSON-array stream without it is not served). Each SSE event is a whole
``GenerateContentResponse``: text and thought parts arrive in small pieces, a function call
arrives whole in one event, and the last event carries ``finishReason`` and the full
``usageMetadata``. ``:countTokens`` and ``GET .../models`` do not consume the script. The
``/v1``, ``/v1beta`` and ``/v1alpha`` prefixes are all accepted (paths match by suffix).
"""

from __future__ import annotations

import re
from typing import Any

from ..records import Headers, ModelRequest, PrefixBlock, estimate_tokens
from ..script import HttpError, TextPart, ThinkingPart
from ._base import COUNT_TOKENS, MODEL_TURN, MODELS, Turn, Wire, chunk_text, sse, tool_input_dict
from .anthropic import signature_for

_MODEL_METHOD = re.compile(r"/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent|countTokens)$")
_MODEL_LIST = re.compile(r"/v1(?P<channel>alpha|beta)?/models/?$")
_DECLARATIONS = ("functionDeclarations", "function_declarations")

FINISH_REASONS = {
    "end_turn": "STOP",
    "tool_use": "STOP",
    "stop_sequence": "STOP",
    "pause_turn": "STOP",
    "max_tokens": "MAX_TOKENS",
    "refusal": "SAFETY",
}

# google.rpc status names the API puts in error.status.
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

MODEL_IDS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview")


def field(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    """A request field by its JSON name; the REST API also accepts the proto (snake_case) name."""
    return mapping[camel] if camel in mapping else mapping.get(snake)


def _retry_delay(error: HttpError) -> str | None:
    """The error's retry hint as a google.protobuf.Duration string ("0.001s"), if it has one."""
    hints = {key.lower(): value for key, value in error.headers}
    try:
        if "retry-after-ms" in hints:
            return f"{float(hints['retry-after-ms']) / 1000:g}s"
        if "retry-after" in hints:
            return f"{float(hints['retry-after']):g}s"
    except ValueError:
        return None
    return None


class GeminiWire(Wire):
    name = "gemini"
    tool_id_prefix = "call_"
    message_id_prefix = ""  # responseId is an opaque token; new_id("") gives 24 hex digits
    redacted_headers = ("x-goog-api-key",)
    """Where the API key travels: the server records these headers as ``[redacted]`` ..."""
    redacted_query = ("key",)
    """... and these query parameters (``?key=``)."""

    def route(self, method: str, path: str, headers: Headers) -> str | None:
        found = _MODEL_METHOD.search(path)
        if method == "POST" and found:
            return COUNT_TOKENS if found["method"] == "countTokens" else MODEL_TURN
        # GET /v1/models is also the OpenAI model list: only a Gemini version or key claims it.
        listing = _MODEL_LIST.search(path)
        if method == "GET" and listing and (listing["channel"] or "x-goog-api-key" in headers):
            return MODELS
        return None

    def parse(self, body: dict[str, Any], headers: Headers, path: str) -> ModelRequest:
        found = _MODEL_METHOD.search(path)
        tools: list[dict[str, Any]] = []
        for tool in body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            declarations = field(tool, *_DECLARATIONS)
            if isinstance(declarations, list):
                # One declaration per entry, so tool_names and the cache see each function.
                tools.extend(d for d in declarations if isinstance(d, dict))
            other = {key: value for key, value in tool.items() if key not in _DECLARATIONS}
            if other:  # googleSearch, codeExecution, ...
                tools.append(other)
        return ModelRequest(
            wire=self.name,
            model=found["model"] if found else body.get("model"),
            messages=[c for c in body.get("contents") or [] if isinstance(c, dict)],
            tools=tools,
            system=field(body, "systemInstruction", "system_instruction"),
            stream=bool(found and found["method"] == "streamGenerateContent"),
            body=body,
            headers=headers,
            path=path,
        )

    def prompt_blocks(self, request: ModelRequest) -> list[PrefixBlock]:
        blocks = [PrefixBlock({"tool": tool}) for tool in request.tools]
        if request.system:
            blocks.append(PrefixBlock({"system": request.system}))
        blocks.extend(PrefixBlock({"content": content}) for content in request.messages)
        return blocks

    # -- rendering -----------------------------------------------------------------------

    def _parts(self, turn: Turn) -> list[dict[str, Any]]:
        """The candidate's parts. The thinking's signature rides where the API puts it for
        thinking models: on the first function call, or, in a response without calls, on its
        last part (streamed, that part's last piece is an empty text holding only the signature:
        see render_events)."""
        signature = next(
            (p.signature or signature_for(p.thinking) for p in turn.parts if isinstance(p, ThinkingPart)), None
        )
        parts: list[dict[str, Any]] = []
        for part in turn.parts:
            if isinstance(part, TextPart):
                parts.append({"text": part.text})
            elif isinstance(part, ThinkingPart):
                parts.append({"text": part.thinking, "thought": True})
            else:
                call: dict[str, Any] = {
                    "functionCall": {"id": part.id, "name": part.name, "args": tool_input_dict(part)}
                }
                if signature is not None:
                    call["thoughtSignature"] = signature
                    signature = None
                parts.append(call)
        if signature is not None and parts:
            parts[-1]["thoughtSignature"] = signature
        return parts

    def _usage(self, turn: Turn, *, final: bool = True) -> dict[str, Any]:
        # Gemini counts thoughts apart from candidates; the turn's output includes them.
        candidates = max(0, turn.output_tokens - turn.reasoning_tokens) if final else 0
        thoughts = turn.reasoning_tokens if final else 0
        return {
            "promptTokenCount": turn.prompt_tokens,
            "candidatesTokenCount": candidates,
            "totalTokenCount": turn.prompt_tokens + candidates + thoughts,
            "cachedContentTokenCount": turn.cache_read_tokens,
            "thoughtsTokenCount": thoughts,
        }

    def _candidate(self, turn: Turn, parts: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if final:
            reason = FINISH_REASONS.get(turn.stop_reason, turn.stop_reason)
            candidate["finishReason"] = reason
            if reason == "SAFETY":
                candidate["safetyRatings"] = [
                    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
                ]
        return candidate

    def _response(self, turn: Turn, parts: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        return {
            "candidates": [self._candidate(turn, parts, final)],
            "usageMetadata": self._usage(turn, final=final),
            "modelVersion": turn.model,
            "responseId": turn.message_id,
        }

    def render_json(self, turn: Turn) -> dict[str, Any]:
        return self._response(turn, self._parts(turn), True)

    def render_events(self, turn: Turn) -> list[bytes]:
        pieces: list[dict[str, Any]] = []
        for part in self._parts(turn):
            if "functionCall" in part:
                pieces.append(part)  # the API sends a call whole, never in pieces
                continue
            signature = part.pop("thoughtSignature", None)
            pieces.extend({**part, "text": piece} for piece in chunk_text(part["text"]))
            if signature is not None:
                # A text's signature comes last, on an empty piece of its own.
                pieces.append({**part, "text": "", "thoughtSignature": signature})
        if not pieces:
            pieces.append({"text": ""})
        last = len(pieces) - 1
        return [sse(self._response(turn, [piece], index == last)) for index, piece in enumerate(pieces)]

    def render_error(self, error: HttpError) -> tuple[dict[str, str], dict[str, Any]]:
        body: dict[str, Any] = {
            "code": error.status,
            "message": error.message,
            "status": error.error_type or STATUSES.get(error.status, "INTERNAL" if error.status >= 500 else "UNKNOWN"),
        }
        delay = _retry_delay(error)
        if error.status == 429 and delay is not None:
            # Clients such as Gemini CLI read the retry hint from here rather than a header.
            body["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]
        return dict(error.headers), {"error": body}

    def answer_aux(self, kind: str, body: Any, headers: Headers) -> tuple[int, dict[str, Any]]:
        if kind == COUNT_TOKENS:
            body = body if isinstance(body, dict) else {}
            # Either {"contents": [...]} or a whole {"generateContentRequest": {...}}.
            inner = field(body, "generateContentRequest", "generate_content_request")
            request = self.parse(inner if isinstance(inner, dict) else body, headers, "")
            total = max(1, sum(estimate_tokens(block.content) for block in self.prompt_blocks(request)))
            return 200, {"totalTokens": total, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]}
        if kind == MODELS:
            models = [
                {
                    "name": f"models/{model}",
                    "version": "001",
                    "displayName": model,
                    "inputTokenLimit": 1048576,
                    "outputTokenLimit": 65536,
                    "supportedGenerationMethods": ["generateContent", "countTokens"],
                    "thinking": True,
                }
                for model in MODEL_IDS
            ]
            return 200, {"models": models}
        return super().answer_aux(kind, body, headers)
