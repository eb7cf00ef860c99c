"""Offline testing: a scripted model server that speaks the wires coding agents use.

    from agenter.testing import ScriptedModelServer, reply, text, tool_call

    with ScriptedModelServer([reply(tool_call("write_file", {"path": "a.py", "content": "x"})),
                              reply(text("done"))]) as server:
        ...  # point an agent at server.base_url (OpenAI clients: server.openai_base_url)

`FunctionBackend` is an in-process backend double for pipeline tests, and
`agenter.testing.conformance` the backend contract as a reusable suite.

See docs/testing.md. Importing this package never imports anthropic or openai.
"""

from __future__ import annotations

from ._function import FunctionBackend, FunctionOptions, TurnContext
from .records import Headers, ModelRequest, RecordedRequest, estimate_tokens
from .script import (
    Disconnect,
    Hang,
    HttpError,
    Reply,
    ReplyUsage,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    disconnect,
    hang,
    http_error,
    refusal_reply,
    reply,
    text,
    thinking,
    tool_call,
)
from .server import ScriptedModelServer

__all__ = [
    "Disconnect",
    "FunctionBackend",
    "FunctionOptions",
    "TurnContext",
    "Hang",
    "Headers",
    "HttpError",
    "ModelRequest",
    "RecordedRequest",
    "Reply",
    "ReplyUsage",
    "ScriptedModelServer",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "disconnect",
    "estimate_tokens",
    "hang",
    "http_error",
    "refusal_reply",
    "reply",
    "text",
    "thinking",
    "tool_call",
]
