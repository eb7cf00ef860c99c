"""The Gemini API's side of the harness's neutral conversation, as pure functions (no I/O, no
SDK import): the request (messages as `Content`s, tool definitions as function declarations,
the generation config) written as the google-genai SDK's dicts, and the streamed
`GenerateContentResponse` chunks read back into neutral blocks, a stop reason and usage.

Thought signatures. A Gemini thinking model signs its reasoning: a part of a response (a
function call, text, a thought) may carry an opaque `thought_signature`, and Gemini 3 refuses
(400) a conversation whose function-call steps of the current turn come back without theirs.
The rule kept here is the SDK's own chat history: every signed part goes back as it came, with
its signature, in its place. A neutral block keeps its part's signature under "signature"
(base64 text, so the conversation stays JSON): text and tool_use blocks as well as thinking.
Thought summaries without a signature are not sent back (the model reads nothing from them).
While streaming, text arrives in pieces and a signature often on the last piece of a run, or on
a part of its own with empty text: pieces of one kind are joined into one block until a
signature closes it; a signature on a part of its own goes to the response's first function
call when no call has one (where the API puts it for a step with calls), else to the block
before it when that is unsigned, else into a block of its own.

Function call ids. A call that comes with an id is answered by a function response with that
id; a model that sends none (and an API version without the field) matches calls by name and
order. A call without an id gets one here ("synthetic_id" marks it), so that the harness can
pair its result, and it is sent back without it, as the model wrote it: an id goes to the API
only where the API gave it.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agenter._types import Usage
from agenter.backends.model_api._harness.wire import Block, BlockDone, Delta, Message, Stop, WireRequest, WireResponse

#: Finish reasons that mean the provider stopped the answer for its content (the turn ends refused).
REFUSAL_REASONS = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                             "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"})
#: The neutral tool_choice as Gemini's function calling mode.
CALLING_MODES = {"auto": "AUTO", "any": "ANY", "none": "NONE"}
#: Prefix of the ids given to calls the model sent without one.
SYNTHETIC_ID_PREFIX = "gemini_call_"


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Attribute or key access: the SDK's pydantic objects and plain dicts (tests) alike."""
    if isinstance(obj, Mapping):
        value = obj.get(key, default)
    else:
        value = getattr(obj, key, default)
    return default if value is None else value


def _enum_name(value: Any) -> str | None:
    """An SDK enum (or its string) as its name ("STOP")."""
    if value is None:
        return None
    name = getattr(value, "value", value)
    return str(name) if name else None


# ---------------------------------------------------------------------- signatures


def signature_text(value: Any) -> str:
    """A thought signature as the conversation keeps it: base64 text ("" when none)."""
    if not value:
        return ""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def signature_bytes(text: str) -> bytes:
    """A kept signature as the SDK sends it (it base64-encodes bytes on the wire)."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return text.encode()


# ---------------------------------------------------------------------- the request


def contents(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Gemini `Content`s (the SDK's dicts): user -> "user", assistant ->
    "model"; tool_result blocks become function responses named after the call they answer.
    Messages of one role in a row (a model message left with no part) are joined."""
    calls: dict[str, tuple[str, bool]] = {}  # tool_use id -> (name, its id was the model's)
    result: list[dict[str, Any]] = []
    for message in messages:
        role = "model" if message.get("role") == "assistant" else "user"
        parts = [part for block in _blocks(message.get("content")) if (part := _part(block, calls)) is not None]
        if not parts:
            continue
        if result and result[-1]["role"] == role:
            result[-1]["parts"].extend(parts)
        else:
            result.append({"role": role, "parts": parts})
    return result


def _blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _part(block: Block, calls: dict[str, tuple[str, bool]]) -> dict[str, Any] | None:
    """One neutral block as a Gemini part (None: nothing to send)."""
    kind = block.get("type")
    signature = str(block.get("signature") or "")
    part: dict[str, Any]
    if kind == "text":
        if not block.get("text") and not signature:
            return None
        part = {"text": str(block.get("text", ""))}
    elif kind == "thinking":
        if not signature:
            return None  # an unsigned thought summary: the model reads nothing from it
        part = {"text": str(block.get("thinking", "")), "thought": True}
    elif kind == "redacted_thinking":
        return None  # Anthropic's; never in a Gemini conversation
    elif kind == "tool_use":
        own_id = not block.get("synthetic_id")
        calls[str(block["id"])] = (str(block["name"]), own_id)
        call: dict[str, Any] = {"name": block["name"], "args": dict(block.get("input") or {})}
        if own_id:
            call["id"] = block["id"]
        part = {"function_call": call}
    elif kind == "tool_result":
        return _function_response(block, calls)
    else:
        raise ValueError(f"the Gemini wire cannot send a {kind!r} block")
    if signature:
        part["thought_signature"] = signature_bytes(signature)
    return part


def _function_response(block: Block, calls: dict[str, tuple[str, bool]]) -> dict[str, Any]:
    tool_id = str(block.get("tool_use_id", ""))
    name, own_id = calls.get(tool_id, ("", False))
    key = "error" if block.get("is_error") else "output"
    response: dict[str, Any] = {"name": name, "response": {key: _result_text(block.get("content"))}}
    if own_id:
        response["id"] = tool_id
    return {"function_response": response}


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else json.dumps(content)


def function_declarations(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions as function declarations, their input schema as `parameters_json_schema`
    (full JSON Schema: $defs, $ref and anyOf are taken as they are)."""
    declarations = []
    for tool in tools:
        if "type" in tool:
            raise ValueError(f"the Gemini wire takes no provider-defined tool ({tool.get('type')!r})")
        declarations.append({"name": tool["name"], "description": tool.get("description", ""),
                             "parameters_json_schema": dict(tool.get("input_schema") or {"type": "object"})})
    return declarations


def generation_config(request: WireRequest, *, include_thoughts: bool) -> dict[str, Any]:
    """The request's `GenerateContentConfig` (the SDK's dict); the SDK's own function calling is
    off: the harness runs every call."""
    config: dict[str, Any] = {"max_output_tokens": request.max_tokens,
                              "automatic_function_calling": {"disable": True}}
    if request.system:
        config["system_instruction"] = request.system
    if request.tools:
        config["tools"] = [{"function_declarations": function_declarations(request.tools)}]
    if request.tool_choice is not None:
        config["tool_config"] = {"function_calling_config": {"mode": CALLING_MODES[request.tool_choice]}}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    thinking = thinking_config(request.thinking, request.effort, include_thoughts=include_thoughts)
    if thinking:
        config["thinking_config"] = thinking
    if request.output_schema is not None:
        config["response_mime_type"] = "application/json"
        config["response_json_schema"] = dict(request.output_schema)
    if request.timeout is not None:
        config["http_options"] = {"timeout": max(1, int(request.timeout * 1000))}
    return config


def thinking_config(thinking: str | int | None, effort: str | None, *, include_thoughts: bool) -> dict[str, Any]:
    """`thinking` ("adaptive", "disabled", a budget) and `effort` (Gemini 3's thinking level) as
    a ThinkingConfig dict; empty: send none (the model's default)."""
    if thinking == "disabled":
        return {"thinking_budget": 0}
    config: dict[str, Any] = {"include_thoughts": True} if include_thoughts else {}
    if thinking == "adaptive":
        config["thinking_budget"] = -1
    elif isinstance(thinking, int):
        config["thinking_budget"] = thinking
    elif thinking is not None:
        raise ValueError(f"the Gemini wire does not know thinking={thinking!r}")
    if effort is not None:
        config["thinking_level"] = effort.upper()
    return config


# ---------------------------------------------------------------------- the response


def api_usage(metadata: Any) -> Usage:
    """Gemini's usage_metadata as agenter's Usage: input is the prompt less its cached part (plus
    the tool-use prompt), output the candidates and the thoughts (billed as output)."""
    prompt = int(_get(metadata, "prompt_token_count", 0))
    cached = int(_get(metadata, "cached_content_token_count", 0))
    tool_prompt = int(_get(metadata, "tool_use_prompt_token_count", 0))
    output = int(_get(metadata, "candidates_token_count", 0)) + int(_get(metadata, "thoughts_token_count", 0))
    return Usage(input_tokens=max(prompt - cached, 0) + tool_prompt, output_tokens=output, cache_read_tokens=cached)


@dataclass
class _Run:
    """Text or thought pieces joined into one block until a signature closes it."""

    thought: bool
    text: str = ""
    signature: str = ""
    #: Reported whole (BlockDone) and closed to more text; a signature may still come for it.
    closed: bool = False

    def block(self) -> Block:
        if self.thought:
            return {"type": "thinking", "thinking": self.text, "signature": self.signature}
        block: Block = {"type": "text", "text": self.text}
        if self.signature:
            block["signature"] = self.signature
        return block


@dataclass
class ResponseReader:
    """One response read from its stream chunks (the SDK's `GenerateContentResponse`s or dicts
    of the same shape): `feed` each chunk, then `response()`."""

    blocks: list[_Run | Block] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    finish_message: str | None = None
    blocked: str | None = None
    #: tool_use id -> why its arguments could not be used (kept with input {}).
    input_errors: dict[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """The API said the response is complete (a finish reason, or the prompt was blocked)."""
        return self.finish_reason is not None or self.blocked is not None

    def feed(self, chunk: Any) -> list[Delta | BlockDone]:
        """Take one chunk: the text and thinking deltas it streams and the blocks it completes."""
        pieces: list[Delta | BlockDone] = []
        metadata = _get(chunk, "usage_metadata")
        if metadata is not None:
            self.usage = api_usage(metadata)
        feedback = _get(chunk, "prompt_feedback")
        if feedback is not None and _get(feedback, "block_reason") is not None:
            self.blocked = _enum_name(_get(feedback, "block_reason"))
        candidates = _get(chunk, "candidates", [])
        if not candidates:
            return pieces
        candidate = candidates[0]
        for part in _get(_get(candidate, "content"), "parts", []):
            pieces.extend(self._take(part))
        reason = _enum_name(_get(candidate, "finish_reason"))
        if reason is not None:
            self.finish_reason = reason
            self.finish_message = _get(candidate, "finish_message") or None
            pieces.extend(self._close())
        return pieces

    def _take(self, part: Any) -> list[Delta | BlockDone]:
        signature = signature_text(_get(part, "thought_signature"))
        call = _get(part, "function_call")
        if call is not None:
            done = self._close()
            block = _tool_use(call, signature)
            if not isinstance(_get(call, "args", {}), Mapping):
                self.input_errors[block["id"]] = "tool input must be a JSON object"
            self.blocks.append(block)
            return done
        text = _get(part, "text", "")
        if not isinstance(text, str) or (not text and not signature):
            return []  # a part of a kind the harness does not use (code execution, inline data)
        thought = bool(_get(part, "thought", False))
        if not text:
            return self._place_signature(signature, thought)
        pieces: list[Delta | BlockDone] = []
        current = self.blocks[-1] if self.blocks else None
        if not isinstance(current, _Run) or current.closed or current.thought != thought or current.signature:
            pieces.extend(self._close())
            current = _Run(thought)
            self.blocks.append(current)
        current.text += text
        pieces.append(Delta(text, thinking=thought))
        if signature:
            current.signature = signature
            pieces.extend(self._close())
        return pieces

    def _place_signature(self, signature: str, thought: bool) -> list[Delta | BlockDone]:
        """A signature on a part of its own (see the module docstring)."""
        calls = [b for b in self.blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        if calls and not any(c.get("signature") for c in calls):
            calls[0]["signature"] = signature
            return []
        last = self.blocks[-1] if self.blocks else None
        if isinstance(last, _Run) and not last.signature:
            last.signature = signature
            return self._close()
        done = self._close()
        self.blocks.append(_Run(thought, signature=signature, closed=True))
        return done

    def _close(self) -> list[Delta | BlockDone]:
        """Complete the open text or thought run (the harness reports it whole)."""
        last = self.blocks[-1] if self.blocks else None
        if not isinstance(last, _Run) or last.closed:
            return []
        last.closed = True
        return [BlockDone(last.block())] if last.text else []

    def content(self) -> list[Block]:
        return [b.block() if isinstance(b, _Run) else b for b in self.blocks]

    def response(self) -> WireResponse:
        """The finished response in the harness's terms (call after the last chunk)."""
        self._close()
        content = self.content()
        detail = self.finish_reason or (f"prompt blocked: {self.blocked}" if self.blocked else None)
        if self.finish_message:
            detail = f"{detail}: {self.finish_message}"
        return WireResponse(content=content, stop=self.stop(content), usage=self.usage, stop_detail=detail,
                            input_errors=dict(self.input_errors))

    def stop(self, content: list[Block]) -> Stop:
        """Gemini's finish reason in the wire protocol's words (it says STOP also after calls)."""
        reason = self.finish_reason
        if self.blocked is not None or reason in REFUSAL_REASONS:
            return "refusal"
        if reason == "MAX_TOKENS":
            return "max_tokens"
        return "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end"


def _tool_use(call: Any, signature: str) -> Block:
    call_id = _get(call, "id")
    args = _get(call, "args", {})
    block: Block = {"type": "tool_use", "id": str(call_id or f"{SYNTHETIC_ID_PREFIX}{uuid.uuid4().hex[:24]}"),
                    "name": str(_get(call, "name", "")), "input": dict(args) if isinstance(args, Mapping) else {}}
    if not call_id:
        block["synthetic_id"] = True
    if signature:
        block["signature"] = signature
    return block
