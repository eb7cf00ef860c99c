"""`python -m agenter.testing`: the scripted model server in the foreground, for trying
agenter (or any agent program) by hand without an API key.

    python -m agenter.testing [--port N] [--wire anthropic|openai] [--script FILE.json]

It prints its base URL and the environment variables to export, logs each model turn on
stderr, and serves until Ctrl-C. Without --script every turn gets a short text reply; with
one, the turns play the script in order and then fall back to that text reply.

A script file is a JSON list; each item answers one model turn (see docs/cli.md):

    "some text"                                   a reply with that text
    {"reply": [PART, ...], "delay": 2, "stop_reason": "end_turn", "usage": {"input_tokens": 10}}
    {"http_error": 529, "message": "overloaded"}  an HTTP error in the wire's shape
    {"hang": 30}                                  never answer (null: until the server stops)
    {"disconnect": 2}                             drop the connection after 2 stream events

where a PART is "text", {"text": "..."}, {"thinking": "..."} or
{"tool_call": "write_file", "input": {"path": "a.py", "content": "..."}}.
Only "reply" is required in a reply item; "reply" may also be a single part.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from . import ModelRequest, ScriptedModelServer
from .script import (
    Disconnect,
    Hang,
    HttpError,
    Reply,
    ScriptItem,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    disconnect,
    hang,
    http_error,
    reply,
    text,
    thinking,
    tool_call,
)

DEFAULT_REPLY = "This is agenter's scripted model server: no script, so every turn gets this reply."
DUMMY_KEY = "sk-scripted-not-a-real-key"  # any key is accepted; clients only need one set

EXIT_USAGE = 2


class ScriptError(ValueError):
    """A script file that does not follow the documented format."""


def parse_script(data: Any) -> list[ScriptItem]:
    """Script items from the JSON form described in this module's docstring."""
    if not isinstance(data, list):
        raise ScriptError("the script must be a JSON list of items, one per model turn")
    items = []
    for number, value in enumerate(data, 1):
        try:
            items.append(_item(value))
        except (ScriptError, TypeError, ValueError) as exc:
            raise ScriptError(f"item {number}: {exc}") from None
    return items


def _keys(value: dict[str, Any], kind: str, allowed: set[str]) -> None:
    unknown = sorted(set(value) - allowed - {kind})
    if unknown:
        raise ScriptError(f"unknown key(s) {', '.join(map(repr, unknown))} in a {kind!r} item "
                          f"(allowed: {', '.join(sorted(allowed | {kind}))})")


def _item(value: Any) -> ScriptItem:
    if isinstance(value, str):
        return reply(text(value))
    if not isinstance(value, dict):
        raise ScriptError(f"expected a string or an object, got {json.dumps(value)}")
    if "reply" in value:
        _keys(value, "reply", {"delay", "stop_reason", "usage"})
        parts = value["reply"] if isinstance(value["reply"], list) else [value["reply"]]
        if not parts:
            raise ScriptError("a reply needs at least one part")
        return reply(*(_part(part) for part in parts), stop_reason=value.get("stop_reason"),
                     usage=value.get("usage"), delay=float(value.get("delay", 0)))
    if "http_error" in value:
        _keys(value, "http_error", {"message", "error_type", "headers", "delay", "body"})
        return http_error(int(value["http_error"]), value.get("message"), error_type=value.get("error_type"),
                          headers=value.get("headers"), delay=float(value.get("delay", 0)), body=value.get("body"))
    if "hang" in value:
        _keys(value, "hang", set())
        seconds = value["hang"]
        return hang(None if seconds is None else float(seconds))
    if "disconnect" in value:
        _keys(value, "disconnect", {"delay"})
        return disconnect(int(value["disconnect"]), delay=float(value.get("delay", 0)))
    raise ScriptError(f"an item needs one of 'reply', 'http_error', 'hang', 'disconnect'; got {json.dumps(value)}")


def _part(value: Any) -> TextPart | ThinkingPart | ToolCallPart:
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        if "text" in value:
            _keys(value, "text", set())
            return text(value["text"])
        if "thinking" in value:
            _keys(value, "thinking", set())
            return thinking(value["thinking"])
        if "tool_call" in value:
            _keys(value, "tool_call", {"input", "id"})
            tool_input = value.get("input")
            if tool_input is not None and not isinstance(tool_input, dict | str):
                raise ScriptError("a tool_call's input must be an object or a string")
            return tool_call(str(value["tool_call"]), tool_input, value.get("id"))
    raise ScriptError(f"a part must be a string or an object with 'text', 'thinking' or 'tool_call'; "
                      f"got {json.dumps(value)}")


def describe(item: ScriptItem) -> str:
    """A short account of an answer, for the turn log."""
    if isinstance(item, Reply):
        parts = []
        for part in item.parts:
            if isinstance(part, ToolCallPart):
                parts.append(f"tool_call {part.name}")
            elif isinstance(part, ThinkingPart):
                parts.append("thinking")
            else:
                parts.append(f"text {part.text[:40]!r}")
        return "reply: " + ", ".join(parts) + (f" (after {item.delay:g} s)" if item.delay else "")
    if isinstance(item, HttpError):
        return f"HTTP {item.status} {item.message!r}"
    if isinstance(item, Hang):
        return "hang" + (f" {item.seconds:g} s" if item.seconds is not None else " until stopped")
    if isinstance(item, Disconnect):
        return f"disconnect after {item.after_events} events"
    return repr(item)


class _Player:
    """Answers turns from the script, then with the default reply; logs each turn on stderr."""

    def __init__(self, script: list[ScriptItem]) -> None:
        self.script = script
        self.next = 0
        self.lock = threading.Lock()  # the server answers each connection in its own thread

    def __call__(self, request: ModelRequest) -> ScriptItem:
        with self.lock:
            if self.next < len(self.script):
                item, self.next = self.script[self.next], self.next + 1
                source = f"script item {self.next} of {len(self.script)}"
            else:
                item = reply(text(DEFAULT_REPLY))
                source = "script used up" if self.script else "no script"
        print(f"turn {request.index + 1} ({request.wire} {request.path}, model {request.model}): "
              f"{describe(item)} [{source}]", file=sys.stderr, flush=True)
        return item


def _wires(choice: str | None) -> list[Any] | None:
    if choice is None:
        return None  # the server's default: every wire it knows
    from .wires import DEFAULT_WIRES

    return [wire() for wire in DEFAULT_WIRES if wire.name == choice or wire.name.startswith(f"{choice}-")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agenter.testing",
        description="Run agenter's scripted model server in the foreground (Ctrl-C stops it).")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--wire", choices=["anthropic", "openai"], default=None,
                        help="serve only this API (default: all); openai is Responses and Chat Completions")
    parser.add_argument("--script", type=Path, default=None, metavar="FILE.json",
                        help="replies to play in order (format: docs/cli.md)")
    args = parser.parse_args(argv)

    script: list[ScriptItem] = []
    if args.script is not None:
        try:
            script = parse_script(json.loads(args.script.read_text()))
        except (OSError, ValueError) as exc:  # ScriptError and JSONDecodeError are ValueErrors
            print(f"python -m agenter.testing: {args.script}: {exc}", file=sys.stderr)
            return EXIT_USAGE

    server = ScriptedModelServer(handler=_Player(script), port=args.port, wires=_wires(args.wire))
    try:
        server.start()
    except OSError as exc:
        print(f"python -m agenter.testing: cannot listen on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()
    # SIGTERM stops it as cleanly as Ctrl-C does (scripts and test harnesses send it).
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        played = f"{len(script)} scripted replies, then" if script else "every turn gets"
        print(f"scripted model server on {server.base_url} ({played} a short text reply)")
        print("# export these in the shell that runs the agent:")
        if args.wire in (None, "anthropic"):
            print(f"export ANTHROPIC_BASE_URL={server.base_url}")
            print(f"export ANTHROPIC_API_KEY={DUMMY_KEY}")
        if args.wire in (None, "openai"):
            print(f"export OPENAI_BASE_URL={server.openai_base_url}")
            print(f"export OPENAI_API_KEY={DUMMY_KEY}")
        print("# serving until Ctrl-C; each model turn is logged on stderr", flush=True)
        while not stop.wait(0.5):  # a timed wait, so Ctrl-C is handled promptly
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print("scripted model server stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # Ctrl-C before serving started
        raise SystemExit(130) from None
