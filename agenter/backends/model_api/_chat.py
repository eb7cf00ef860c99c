"""The Chat Completions shape, written once for the two wires that speak it: the openai backend's
Chat Completions wire (the `openai` client) and the litellm backend's wire (`litellm.acompletion`,
which answers every provider in this shape). Pure conversions, no client and no import of either
package.

What is here:
- the conversation (the harness's Anthropic-shaped blocks) as Chat messages: an assistant's
  `tool_calls`, one `tool` message per result, thinking blocks left out unless the wire sends
  them back (`thinking_blocks`, LiteLLM's field for Anthropic's signed thinking);
- the request body both wires share (`chat_body`): messages, the output limit under the name the
  wire gives, function tools, tool_choice ("any" is "required"), `reasoning_effort`, stop
  sequences, a JSON schema as `response_format`;
- the stream read into one response (`ChatReader`): text, reasoning (`reasoning_content` or
  `reasoning`), refusals, tool-call arguments accumulated by index into tool_use blocks (the cut-off
  rule of `BlockStream`), usage (sent last; until it comes an estimate at 4 characters a token),
  the finish reason in the wire protocol's words; `StreamReader` is the part the Responses reader
  shares.

Limits: tool definitions with a "type" (provider-defined tools) are refused; images are not sent.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agenter._types import Usage
from agenter.backends.model_api._completion import CHARS_PER_TOKEN, OutputFormat, chat_usage
from agenter.backends.model_api._harness.wire import (
    Block,
    BlockDone,
    BlockStream,
    Delta,
    Message,
    Piece,
    Running,
    Stop,
    StreamedBlock,
    WireRequest,
    WireResponse,
)

__all__ = ["RUNNING_EVERY", "TOOL_CHOICE", "ChatReader", "StreamReader", "blocks_of", "chat_body", "chat_messages",
           "function_tool", "joined_text", "json_format", "plain_tools", "prompt_chars", "result_text"]

#: Output characters between two running usage estimates while a response streams.
RUNNING_EVERY = 400
#: Chat Completions finish reasons with a word of their own in the wire protocol (the rest: "end").
CHAT_STOPS: dict[str, Stop] = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
                               "content_filter": "refusal"}
#: The harness's tool_choice in the OpenAI APIs' words.
TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}
#: Thinking blocks an assistant message carries back (LiteLLM's `thinking_blocks`).
THINKING_TYPES = ("thinking", "redacted_thinking")


# ---------------------------------------------------------------------- requests


def chat_body(request: WireRequest, output: OutputFormat | None = None, *, max_tokens_key: str = "max_tokens",
              thinking_blocks: bool = False) -> dict[str, Any]:
    """What a Chat Completions request carries of `request` (the model, sampling, the client's
    own settings are the wire's). `max_tokens_key`: the limit's name (OpenAI's newer models take
    only max_completion_tokens); nothing is sent for a limit of 0 (the server's default).
    `output`: the context path's JSON format instead of `request.output_schema`."""
    body: dict[str, Any] = {"messages": chat_messages(request.system, request.messages,
                                                      thinking_blocks=thinking_blocks)}
    if request.max_tokens > 0:
        body[max_tokens_key] = request.max_tokens
    if request.tools:
        body["tools"] = [{"type": "function", "function": function_tool(tool)} for tool in plain_tools(request.tools)]
    if request.tool_choice is not None:
        body["tool_choice"] = TOOL_CHOICE[request.tool_choice]
    if request.effort is not None:
        body["reasoning_effort"] = request.effort
    if request.stop:
        body["stop"] = list(request.stop)
    wanted = json_format(request, output)
    if wanted is not None and wanted.mode == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": wanted.name, "schema": wanted.schema, "strict": True}}
    elif wanted is not None and wanted.mode == "json_object":
        body["response_format"] = {"type": "json_object"}
    return body


def chat_messages(system: str, messages: Sequence[Message], *, thinking_blocks: bool = False) -> list[dict[str, Any]]:
    """The system prompt and the conversation as Chat Completions messages: a user turn's tool
    results become `tool` messages (first, as the harness keeps them) and its text one user
    message; an assistant turn its text and its `tool_calls`. Thinking blocks are left out, or
    with `thinking_blocks` sent back as the assistant message's `thinking_blocks` (those with a
    signature: a provider that needs them back signed them)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        blocks = blocks_of(message.get("content"))
        if message.get("role") == "assistant":
            text = joined_text(blocks)
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})}}
                     for b in blocks if b.get("type") == "tool_use"]
            thoughts = [dict(b) for b in blocks if thinking_blocks and b.get("type") in THINKING_TYPES
                        and (b.get("signature") or b.get("data"))]
            if not text and not calls:
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            if thoughts:
                entry["thinking_blocks"] = thoughts
            out.append(entry)
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": result_text(block.get("content"))})
        text = joined_text(blocks)
        if text:
            out.append({"role": str(message.get("role") or "user"), "content": text})
    return out


def blocks_of(content: Any) -> list[Block]:
    """A message's content as blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


def joined_text(blocks: Sequence[Block]) -> str:
    return "\n\n".join(str(b["text"]) for b in blocks if b.get("type") == "text" and b.get("text"))


def result_text(content: Any) -> str:
    """A tool result's content as the text the OpenAI APIs take (a list of blocks: its texts)."""
    if isinstance(content, str):
        return content
    return joined_text(blocks_of(content))


def plain_tools(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tool definitions, refusing provider-defined ones (they have a "type")."""
    provided = [str(tool.get("name")) for tool in tools if "type" in tool]
    if provided:
        raise ValueError(f"the Chat Completions and Responses wires take no provider-defined tools: "
                         f"{', '.join(provided)}")
    return list(tools)


def function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool definition as a function's name, description and parameters."""
    return {"name": tool["name"], "description": tool.get("description", ""),
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}


def json_format(request: WireRequest, output: OutputFormat | None) -> OutputFormat | None:
    """The JSON asked for: the context path's format, else the request's schema (named by its
    title), else none."""
    if output is not None:
        return output
    schema = request.output_schema
    if schema is None:
        return None
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", str(schema.get("title") or "output"))[:64]
    return OutputFormat("json_schema", name, dict(schema))


def prompt_chars(request: WireRequest) -> int:
    """The request's size in characters, for the estimate of its input tokens."""
    return len(request.system) + len(json.dumps(list(request.messages), default=str)) + len(
        json.dumps(list(request.tools), default=str))


# ---------------------------------------------------------------------- responses


@dataclass
class StreamReader:
    """One response as it streams in: text, reasoning, tool calls (blocks by index), usage."""

    prompt_chars: int
    stream: BlockStream = field(default_factory=BlockStream)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    usage: Usage | None = None
    output_chars: int = 0
    reported_at: int = 0

    def estimate(self) -> Usage:
        """The running figure until usage is reported, marked as agenter's estimate."""
        return Usage(input_tokens=self.prompt_chars // CHARS_PER_TOKEN,
                     output_tokens=self.output_chars // CHARS_PER_TOKEN).as_estimate()

    def grew(self, chars: int) -> Iterator[Piece]:
        """A running estimate every RUNNING_EVERY characters (while no usage was reported)."""
        self.output_chars += chars
        if self.usage is None and self.output_chars - self.reported_at >= RUNNING_EVERY:
            self.reported_at = self.output_chars
            yield Running(self.estimate())

    def text_block(self, index: int) -> StreamedBlock:
        return self.stream.blocks.setdefault(index, StreamedBlock(type="text"))

    def tool_block(self, index: int) -> StreamedBlock:
        return self.stream.blocks.setdefault(index, StreamedBlock(type="tool_use"))

    def response(self, stop: Stop, detail: str | None) -> WireResponse:
        cut_off = stop in ("max_tokens", "context_length")
        for block in self.stream.blocks.values():
            if block.type == "tool_use" and not block.stopped and (block.json_buffer or not cut_off):
                block.finish()
            if block.type == "tool_use" and not block.tool_id:
                block.tool_id = f"call_{secrets.token_hex(8)}"  # a server that sent none
        content = self.stream.content(cut_off=cut_off)
        if self.refusal:
            content = [{"type": "text", "text": "".join(self.refusal)}, *content]
        if stop == "end" and any(b.get("type") == "tool_use" for b in content):
            stop = "tool_use"  # servers that answer a tool call with finish_reason "stop"
        return WireResponse(content=content, stop=stop, usage=self.usage or Usage(), stop_detail=detail,
                            input_errors=self.stream.input_errors(cut_off=cut_off))

    def done_blocks(self) -> list[BlockDone]:
        """The whole reasoning and text, reported once the response is complete."""
        done = [BlockDone({"type": "thinking", "thinking": "".join(self.reasoning)})] if self.reasoning else []
        text = self.stream.text()
        if text:
            done.append(BlockDone({"type": "text", "text": text}))
        return done


@dataclass
class ChatReader(StreamReader):
    """Chat Completions chunks: `delta.content`, `delta.reasoning_content` (or `reasoning`),
    `delta.refusal`, `delta.tool_calls` by index (the first piece carries id and name, the rest
    argument text), `finish_reason`, and a last chunk with the usage.

    With `keep_thinking` (LiteLLM), signed thinking blocks (`delta.thinking_blocks`: the thinking
    in pieces, then its signature; or a redacted block) are kept in the content, ahead of the
    text, to be sent back; a new thinking block starts where thinking follows a signature."""

    finish: str | None = None
    keep_thinking: bool = False
    thoughts: list[Block] = field(default_factory=list)

    def feed(self, chunk: Any) -> list[Piece]:
        pieces: list[Piece] = []
        if getattr(chunk, "usage", None) is not None:
            self.usage = chat_usage(chunk.usage)
        for choice in getattr(chunk, "choices", None) or []:
            delta = choice.delta
            if delta is not None:
                pieces += self.take(delta, raw=chunk)
                for call in getattr(delta, "tool_calls", None) or []:
                    pieces += self.take_call(getattr(call, "index", None), call)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        return pieces

    def take(self, delta: Any, raw: Any = None) -> list[Piece]:
        """Text, reasoning and refusal of a delta (or of an unstreamed message)."""
        pieces: list[Piece] = []
        thought = _reasoning(delta)
        if thought:
            self.reasoning.append(thought)
            pieces += [Delta(thought, thinking=True, raw=raw), *self.grew(len(thought))]
        if self.keep_thinking:
            for block in getattr(delta, "thinking_blocks", None) or []:
                self._take_thinking(block)
        content = getattr(delta, "content", None)
        if isinstance(content, str) and content:
            self.text_block(0).text += content
            pieces += [Delta(content, raw=raw), *self.grew(len(content))]
        refusal = getattr(delta, "refusal", None) or _specific(delta, "refusal")
        if isinstance(refusal, str) and refusal:
            self.refusal.append(refusal)
        return pieces

    def _take_thinking(self, piece: Any) -> None:
        get = piece.get if isinstance(piece, dict) else lambda name, default=None: getattr(piece, name, default)
        if get("type") == "redacted_thinking":
            self.thoughts.append({"type": "redacted_thinking", "data": str(get("data") or "")})
            return
        last = self.thoughts[-1] if self.thoughts else None
        text, signature = str(get("thinking") or ""), str(get("signature") or "")
        if last is None or last["type"] != "thinking" or (last["signature"] and text):
            last = {"type": "thinking", "thinking": "", "signature": ""}
            self.thoughts.append(last)
        last["thinking"] += text
        if signature:
            last["signature"] = signature

    def take_call(self, index: int | None, call: Any) -> list[Piece]:
        """A piece of a tool call (or a whole one, unstreamed); blocks 1.. are the calls by index."""
        function = getattr(call, "function", None)
        name = getattr(function, "name", None) if function is not None else None
        if not isinstance(index, int):  # a server that numbers no call: an id or a name starts one
            calls = [i for i, b in self.stream.blocks.items() if b.type == "tool_use"]
            starts = bool(getattr(call, "id", None) or name)
            index = (max(calls) if calls and not starts else len(calls) + 1) - 1
        block = self.tool_block(1 + index)
        if getattr(call, "id", None) and not block.tool_id:
            block.tool_id = call.id
        if name and name != block.tool_name:
            block.tool_name += name  # servers that stream the name in pieces
        arguments = getattr(function, "arguments", None) if function is not None else None
        if isinstance(arguments, str) and arguments:
            block.json_buffer += arguments
            return list(self.grew(len(arguments)))
        return []

    def take_answer(self, answer: Any) -> None:
        """An unstreamed answer (a ChatCompletion): its usage, message, calls and finish reason."""
        self.usage = chat_usage(getattr(answer, "usage", None))
        choices = getattr(answer, "choices", None) or []
        if not choices:
            self.finish = "stop"
            return
        choice = choices[0]
        message = choice.message
        self.take(message)
        for index, call in enumerate(getattr(message, "tool_calls", None) or []):
            self.take_call(index, call)
        self.finish = choice.finish_reason or "stop"

    def finished(self) -> list[Piece]:
        reason = self.finish or "stop"
        stop: Stop = "refusal" if self.refusal else CHAT_STOPS.get(reason, "end")
        detail = "refusal" if self.refusal and reason == "stop" else reason
        done = self.done_blocks()
        response = self.response(stop, detail)
        signed = [b for b in self.thoughts if b.get("signature") or b.get("data")]  # complete ones only
        response.content = [*signed, *response.content]
        return [*done, response]


def _specific(item: Any, name: str) -> Any:
    """A field LiteLLM moved into `provider_specific_fields` (an OpenAI refusal, unstreamed)."""
    fields = getattr(item, "provider_specific_fields", None)
    return fields.get(name) if isinstance(fields, dict) else None


def _reasoning(item: Any) -> str:
    """Reasoning text compatible servers send beside the content (reasoning_content, reasoning)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(item, name, None)
        if isinstance(value, str) and value:
            return value
    return ""
