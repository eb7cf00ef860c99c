"""How often a real model's replies parse into a valid text tool call (the harness's text mode).

Given the base URL of an OpenAI-compatible server (e.g. llama.cpp's, from
`../shared/tools/local-llm.sh serve`), it sends agenter's built-in tool set described in the
system prompt (`describe_tools`) and a few steps of a small coding task ("fix calc.py": the first
request, after read_file's result, after edit_file's result), and counts the replies that
`parse_calls` (given the tools' definitions, so code blocks after a call are its text arguments)
reads as at least one valid call and no malformed one ("right": and in the declared
form, to a tool that step needs). Text-mode requests carry `STOP_SEQUENCES`. Variants:

  tags    the declared format: <tool_call>{"name", "arguments"}</tool_call>, results in <tool_response>
          (llama.cpp drops the two tags from Qwen2.5's reply: they are special tokens; the bare object stays)
  fence   the alternative: the same calls in a ```json fenced block (results still in <tool_response>)
  native  the tools as native tool definitions; counts native calls and text calls
          `looks_like_text_calls` detects (what automatic mode sees)

Not part of `make bench` (it needs a model server). Temperature 0, so `--repeat` only shows
whether the server is deterministic; the steps vary the input instead. Usage:

    python benchmarks/textcalls_probe.py --base-url http://127.0.0.1:8080 [--variants tags,fence]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from agenter.backends.model_api._harness.files import FILE_TOOL_DEFINITIONS
from agenter.backends.model_api._harness.textcalls import (
    STOP_SEQUENCES,
    describe_tools,
    looks_like_text_calls,
    parse_calls,
    to_text_messages,
)

#: The bash tool as the harness offers it (its description shortened: the sandbox lines vary).
BASH_TOOL = {
    "name": "bash",
    "description": "Run a shell command with bash in the working directory and return its output "
                   "(stdout and stderr together, then the exit code when it is not 0).",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
TOOLS = [*FILE_TOOL_DEFINITIONS, BASH_TOOL]
SYSTEM = ("You are a coding agent working in a Python repository. No human will answer: act with the tools, "
          "then stop with a one-line summary.")
TASK = "The test in test_calc.py fails. Fix the bug in calc.py and run the test with pytest."
CALC = "1\tdef add(a, b):\n2\t    return a - b\n"


def steps() -> list[tuple[str, list[dict[str, Any]], set[str]]]:
    """(name, conversation in the neutral block shape, the tools a good next call uses)."""
    read: dict[str, Any] = {"type": "tool_use", "id": "r1", "name": "read_file", "input": {"path": "calc.py"}}
    edit: dict[str, Any] = {"type": "tool_use", "id": "e1", "name": "edit_file",
            "input": {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}}
    first: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    after_read: list[dict[str, Any]] = [*first, {"role": "assistant", "content": [read]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "r1", "content": CALC}]}]
    after_edit: list[dict[str, Any]] = [*after_read, {"role": "assistant", "content": [edit]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "e1", "content": "Edited calc.py"}]}]
    return [("first", first, {"read_file", "list_directory", "glob", "grep", "bash"}),
            ("after read", after_read, {"edit_file", "write_file"}),
            ("after edit", after_edit, {"bash"})]


_TAGGED = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)
#: A call in a fenced block: a fence line, then a JSON object naming a tool.
_FENCED_CALL = re.compile(r'^ {0,3}```(?:json)?[ \t]*\n\s*\{\s*"name"', re.MULTILINE)


def as_fenced(text: str) -> str:
    return _TAGGED.sub(lambda m: f"```json\n{m.group(1)}\n```", text)


def openai_messages(variant: str, conversation: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    """The request's messages and tools for one variant."""
    if variant == "native":
        return [{"role": "system", "content": SYSTEM}, *_native(conversation)], [
            {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in TOOLS]
    system = f"{SYSTEM}\n\n{describe_tools(TOOLS)}"
    messages = [{"role": "system", "content": system}]
    for message in to_text_messages(conversation, TOOLS):
        text = "\n".join(b["text"] for b in message["content"] if b["type"] == "text")
        messages.append({"role": message["role"], "content": text})
    if variant == "fence":
        messages = [{**m, "content": as_fenced(m["content"])} for m in messages]
    return messages, None


def _native(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in conversation:
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
        elif message["role"] == "assistant":
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": b["id"], "type": "function",
                 "function": {"name": b["name"], "arguments": json.dumps(b["input"])}} for b in content]})
        else:
            out += [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]} for b in content]
    return out


def ask(base_url: str, messages: list[dict[str, Any]], tools: Any, max_tokens: int, timeout: float) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "local", "messages": messages, "temperature": 0, "max_tokens": max_tokens}
    if tools:
        body["tools"] = tools
    else:
        body["stop"] = list(STOP_SEQUENCES)
    request = urllib.request.Request(f"{base_url.rstrip('/')}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def judge(variant: str, reply: dict[str, Any], wanted: set[str]) -> tuple[bool, bool, str]:
    """(a valid call, in the declared form and to a tool the step needs, what was called)."""
    message = reply["choices"][0]["message"]
    text = message.get("content") or ""
    native = message.get("tool_calls") or []
    if variant == "native":
        names = [c["function"]["name"] for c in native]
        detected = not native and looks_like_text_calls(text, TOOLS)
        turn = parse_calls(text, TOOLS)
        names += [c["name"] for c in turn.calls] if detected else []
        return bool(names), bool(native) and names[0] in wanted, ",".join(names) + (" (text)" if detected else "")
    turn = parse_calls(text, TOOLS)
    valid = bool(turn.calls) and turn.error is None
    # llama.cpp drops <tool_call> (a special token of Qwen2.5) from the text: a call not in a
    # ```json block is the tagged form (code blocks after it are its text arguments).
    declared = bool(_FENCED_CALL.search(text)) == (variant == "fence")
    names = [c["name"] for c in turn.calls]
    return valid, valid and declared and names[0] in wanted, ",".join(names) or f"none ({turn.error or 'no call'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--variants", default="tags,fence")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--steps", default="first,after read,after edit", help="which steps to send")
    parser.add_argument("--show", action="store_true", help="print each reply")
    args = parser.parse_args()
    for variant in args.variants.split(","):
        valid = good = total = 0
        for name, conversation, wanted in steps():
            if name not in args.steps.split(","):
                continue
            messages, tools = openai_messages(variant, conversation)
            for _ in range(args.repeat):
                started = time.monotonic()
                try:
                    reply = ask(args.base_url, messages, tools, args.max_tokens, args.timeout)
                except OSError as exc:  # a busy shared server: count the request, say why
                    total += 1
                    print(f"{variant:6} {name:10} no reply: {exc}", flush=True)
                    continue
                ok, right, called = judge(variant, reply, wanted)
                usage = reply.get("usage", {})
                total, valid, good = total + 1, valid + ok, good + right
                print(f"{variant:6} {name:10} valid={ok!s:5} right={right!s:5} calls={called} "
                      f"prompt={usage.get('prompt_tokens')} gen={usage.get('completion_tokens')} "
                      f"{time.monotonic() - started:.0f}s", flush=True)
                if args.show:
                    print("   " + json.dumps(reply["choices"][0]["message"], ensure_ascii=False))
        print(f"{variant}: {valid}/{total} replies parse into a valid call, {good}/{total} in the declared "
              f"form to a tool the step needs", flush=True)


if __name__ == "__main__":
    main()
