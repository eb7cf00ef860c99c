"""Tool calls written in the reply's text, for models that make none on the wire (the harness's
text tool-call mode). Pure functions over the harness's neutral, Anthropic-shaped blocks; no I/O,
no third-party imports.

Why: many local models (measured: Qwen2.5-Coder-1.5B-Instruct on llama.cpp's server) answer a
tool turn by writing the call in their text. In text mode the wire sends no tool definitions;
the tools are described in the system prompt instead, each reply is parsed for calls, and the
conversation is sent as plain text.

The declared format is Qwen2.5's own (its chat template renders native calls and results this
way, so Qwen-family models are trained on it; Hermes-style models use the same tags):

    <tool_call>
    {"name": "read_file", "arguments": {"path": "calc.py"}}
    </tool_call>

and each result comes back in the next user message as

    <tool_response>
    ...the tool's output...
    </tool_response>

Contract for the harness:

- `describe_tools(tools)` is the system-prompt section for the tools (definitions as the harness
  keeps them: `{"name", "description", "input_schema"}`): the rules of the format, one compact
  signature per tool (`read_file(path: string, start_line?: integer)`, a parameter description
  given once per name and wording) and one worked example (`Example`; by default read_file, its
  result, then edit_file, when both are offered; else the first tool and a final answer). Append
  it to the system prompt, send no native tool definitions, and send `STOP_SEQUENCES` as the
  request's stop sequences (a model that writes `<tool_response>` is making a result up).
- `parse_calls(reply_text, tool_names)` reads one assistant reply. `TextTurn.blocks` is the
  assistant message to store (text and `tool_use` blocks in the order written, ids generated);
  `TextTurn.calls` are the `tool_use` blocks to run, in the order written. Three forms are calls:
  1. tagged, as above, anywhere outside a fenced code block or an inline code span; a missing
     `</tool_call>` is accepted only at the very end of the reply; "arguments" may be left out
     (`{}`), other keys are ignored;
  2. fenced: a code block (language `json` or none) whose content is one or more call objects
     (a JSON object whose keys are exactly "name" and "arguments"), e.g. ```json {...} ```; the
     form this model writes when offered native tools;
  3. bare: a call object starting a line, outside code. It is what the tagged form becomes on
     llama.cpp's server, which drops `<tool_call>`/`</tool_call>` from the reply text (they are
     control tokens of Qwen2.5, rendered only when the request carries native tools).
  Nothing else is a call: prose that describes a call, a tagged call inside a code block (an
  example), an object with other keys, an object in the middle of a line. Arguments are not
  checked against the schema here; the tool does that as usual.
- A `<tool_response>` the model writes itself (outside code) ends the reply: it and all after it
  is dropped, calls after it are not run (its results are invented; the stop sequence normally
  prevents it).
- A malformed call attempt ends the parse: a `<tool_call>` not followed by a JSON object and
  `</tool_call>`; something that can only be a call (`{"name": ...` starting a line, or the
  objects after a first call in a code block) that is not valid JSON or not a call object; no
  "name"; a name no offered tool has; arguments not an object. The calls before it are returned
  and should run; the rest of the reply (from the attempt on) stays text as written; and
  `TextTurn.error` says what was wrong. Send `TextTurn.feedback` as a text block of the next user
  message, after the tool_result blocks of the calls that ran, so the model can correct itself.
  Order rule: calls run in the order written, and none runs after one that could not be read (a
  later call may depend on it).
- `looks_like_text_calls(text, tool_names)` is the automatic-mode test: True when a reply holds a
  recognised call attempt naming one of `tool_names`. Use it on a reply to a request that offered
  native tools and got no native call; then switch to text mode and run that same reply through
  `parse_calls` (no second request needed).
- `to_text_messages(messages)` turns a conversation in the neutral shape into one a wire without
  native tools can carry: assistant `tool_use` blocks become call text (always the tagged form,
  also for calls written fenced or bare, so the history shows one format), user `tool_result`
  blocks become `<tool_response>` text (`render_results`; "Error: " before a failed tool's
  output), text is kept; thinking blocks are dropped; other blocks (images) are kept in place.
  Each message's content comes back as a list of blocks with adjacent text merged into one text
  block joined by newlines (a `cache_control` mark on a merged block is kept on the merged one).
  A message left empty is dropped. The input is not changed.

Limits: calls carry no ids in the text, so results pair with calls by order only; a fenced or bare
object of structured output whose only keys are "name" and "arguments" would read as a call; a
file whose content holds `<tool_response>` cannot be written through a call while the stop
sequence is on (the model stops there); a schema's `$ref` parts show as `any` in the signature.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "RESULT_CLOSE",
    "RESULT_OPEN",
    "STOP_SEQUENCES",
    "Example",
    "TextTurn",
    "default_example",
    "describe_tools",
    "looks_like_text_calls",
    "parse_calls",
    "render_call",
    "render_result",
    "render_results",
    "to_text_messages",
]

#: The tags of Qwen2.5's chat template around one call and around one result.
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
RESULT_OPEN = "<tool_response>"
RESULT_CLOSE = "</tool_response>"
#: Stop sequences for a text-mode request: a model that writes a result itself is making it up.
STOP_SEQUENCES = (RESULT_OPEN,)
#: Put before the content of a result the tool marked as an error.
ERROR_PREFIX = "Error: "
#: Languages a fenced call may declare.
_FENCE_LANGUAGES = frozenset({"", "json"})
#: The keys of a call object (a fenced or bare call), exactly.
_CALL_KEYS = frozenset({"name", "arguments"})
#: A fenced code block's opening line (CommonMark: up to 3 spaces, ``` or ~~~, an info string).
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`\n]*$)|~{3,})[ \t]*([^\n]*?)[ \t]*$", re.MULTILINE)
#: Characters of the reply quoted around a JSON syntax error.
_EXCERPT = 40
#: Blocks a text-only wire cannot carry; dropped from the conversation.
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})

_DECODER = json.JSONDecoder()


# ---------------------------------------------------------------- rendering

def render_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call in the declared format, as Qwen2.5's template writes it."""
    payload = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}"


def _content_text(content: Any) -> str:
    """A tool_result's content (a string or a list of blocks) as text; images become a marker."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, Mapping):
            parts.append(f"[{block.get('type', 'block')} not shown]")
    return "\n".join(parts)


def render_result(block: Mapping[str, Any]) -> str:
    """One tool_result block as the model sees it."""
    text = _content_text(block.get("content", ""))
    if block.get("is_error"):
        text = ERROR_PREFIX + text
    return f"{RESULT_OPEN}\n{text}\n{RESULT_CLOSE}"


def render_results(blocks: Sequence[Mapping[str, Any]]) -> str:
    """A user message's blocks as the text the model reads next: each tool_result as a
    `<tool_response>` in the order given (the order of the calls), text blocks as they are.
    Other blocks (images) are left out: keep them beside this text (`to_text_messages` does)."""
    return "\n".join(_text_pieces(blocks))


def _text_pieces(blocks: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            yield render_result(block)
        elif kind == "text" and block.get("text"):
            yield str(block["text"])
        elif kind == "tool_use":
            yield render_call(str(block.get("name", "")), block.get("input") or {})


def to_text_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with calls and results written as text (see the module's contract)."""
    converted = []
    for message in messages:
        content = message.get("content")
        blocks: Sequence[Mapping[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or [])
        merged = _merge_text(blocks)
        if merged:
            converted.append({**message, "content": merged})
    return converted


def _merge_text(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Blocks with calls, results and text rendered, adjacent text joined by newlines."""
    out: list[dict[str, Any]] = []
    run: list[Mapping[str, Any]] = []

    def flush() -> None:
        text = "\n".join(_text_pieces(run))
        if text:
            block: dict[str, Any] = {"type": "text", "text": text}
            marks = [b["cache_control"] for b in run if b.get("cache_control")]
            if marks:
                block["cache_control"] = marks[-1]
            out.append(block)
        run.clear()

    for block in blocks:
        kind = block.get("type")
        if kind in _DROPPED_BLOCKS:
            continue
        if kind in ("text", "tool_use", "tool_result"):
            run.append(block)
        else:
            flush()
            out.append(dict(block))
    flush()
    return out


# ---------------------------------------------------------------- describing the tools

@dataclass(frozen=True)
class Example:
    """The worked example in the tools section: a call, its result, then the model's next reply
    (`then`: another call made with `render_call`, or a final answer in plain text)."""

    name: str
    arguments: Mapping[str, Any]
    result: str
    then: str
    #: Said in brackets after "Example", e.g. that its file is not part of the task.
    note: str = ""


def _type_text(schema: Any) -> str:
    """A JSON schema as a short type: string, integer[], "a" | "b", {key: type, key?: type}."""
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_type_text(s) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        item = _type_text(schema.get("items"))
        return f"({item})[]" if " " in item else f"{item}[]"
    if kind == "object" or "properties" in schema:
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            return "object"
        return "{" + ", ".join(_param_text(n, p, schema) for n, p in props.items()) + "}"
    return str(kind) if kind else "any"


def _param_text(name: str, prop: Any, parent: Mapping[str, Any]) -> str:
    optional = "" if name in (parent.get("required") or ()) else "?"
    default = ""
    if isinstance(prop, Mapping) and "default" in prop:
        default = " = " + json.dumps(prop["default"], ensure_ascii=False)
    return f"{name}{optional}: {_type_text(prop)}{default}"


def _schema(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = tool.get("input_schema")
    return schema if isinstance(schema, Mapping) else {}


def _properties(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    props = schema.get("properties")
    return props if isinstance(props, Mapping) else {}


def _tool_text(tool: Mapping[str, Any], described: set[tuple[str, str]]) -> str:
    """One tool: its signature, its description, then its parameters' descriptions (one given
    in an earlier tool in the same words is not repeated)."""
    schema = _schema(tool)
    props = _properties(schema)
    params = ", ".join(_param_text(n, p, schema) for n, p in props.items())
    lines = [f"- {tool['name']}({params})"]
    if tool.get("description"):
        lines.append(f"  {' '.join(str(tool['description']).split())}")
    for name, prop in props.items():
        text = prop.get("description") if isinstance(prop, Mapping) else None
        if text and (name, text) not in described:
            described.add((name, text))
            lines.append(f"  {name}: {' '.join(str(text).split())}")
    return "\n".join(lines)


def _placeholder(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(schema, Mapping) and schema.get("enum"):
        return schema["enum"][0]
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(str(kind), "...")


def default_example(tools: Sequence[Mapping[str, Any]]) -> Example:
    """read_file then edit_file when both are offered (the step a coding task needs most);
    otherwise the first tool, with its required arguments filled by type, and a final answer."""
    names = {tool.get("name") for tool in tools}
    if {"read_file", "edit_file"} <= names:
        return Example(
            "read_file", {"path": "greet.py"}, '1\tprint("helo")',
            render_call("edit_file", {"path": "greet.py", "old_string": 'print("helo")',
                                      "new_string": 'print("hello")'}),
            note="greet.py is not part of your task")
    tool = tools[0]
    schema = _schema(tool)
    props = _properties(schema)
    arguments = {name: _placeholder(props.get(name)) for name in schema.get("required") or ()}
    return Example(str(tool["name"]), arguments, "(what the tool returned)",
                   "(once the task is done: a short answer in plain text, without a call)")


def describe_tools(tools: Sequence[Mapping[str, Any]], *, example: Example | None = None) -> str:
    """The system-prompt section that offers `tools` in text mode (see the module's contract).
    Empty when there are no tools."""
    if not tools:
        return ""
    shown = example or default_example(tools)
    described: set[tuple[str, str]] = set()
    return "\n".join([
        "# Tools",
        "To use a tool, write the call on its own lines in exactly this form, the arguments a JSON object:",
        f'{CALL_OPEN}\n{{"name": "TOOL_NAME", "arguments": {{...}}}}\n{CALL_CLOSE}',
        "Several calls in one reply run in the order written. End your reply after your calls: the results "
        f"come in the next message, each in {RESULT_OPEN}{RESULT_CLOSE}, in the order of the calls. Only calls "
        "in this form run: describing a call in words does nothing. When the task is done, reply without a call.",
        "",
        *(_tool_text(tool, described) for tool in tools),
        "",
        f"Example ({shown.note}). You reply:" if shown.note else "Example. You reply:",
        render_call(shown.name, shown.arguments),
        "The next message brings the result:",
        f"{RESULT_OPEN}\n{shown.result}\n{RESULT_CLOSE}",
        "You reply:",
        shown.then,
    ])


# ---------------------------------------------------------------- parsing

@dataclass
class TextTurn:
    """One assistant reply read for calls (see the module's contract).

    blocks: the assistant message's content: text and tool_use blocks in the order written.
    calls: the tool_use blocks of `blocks`, to run in this order.
    error: why a call attempt could not be used (parsing stopped there), or None.
    named: the offered tool that the malformed attempt named, when it named one (for detection).
    """

    blocks: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    named: str | None = None

    @property
    def text(self) -> str:
        """The reply's text outside the calls (a malformed attempt and what follows included)."""
        return "\n".join(b["text"] for b in self.blocks if b["type"] == "text")

    @property
    def feedback(self) -> str | None:
        """What to tell the model about the malformed call, as a user text block; None if none."""
        if self.error is None:
            return None
        ran = "The calls before it ran; nothing" if self.calls else "Nothing"
        return (f"Your tool call could not be used: {self.error}. {ran} after it ran. "
                f"Write each call again in this form:\n"
                f'{CALL_OPEN}\n{{"name": "TOOL_NAME", "arguments": {{...}}}}\n{CALL_CLOSE}')


@dataclass(frozen=True)
class _Attempt:
    """What the scanner found: a call attempt (its span, the decoded object or why there is
    none), or `cut`: a result the model wrote itself, where the reply is cut off."""

    start: int
    end: int
    payload: dict[str, Any] | None = None
    problem: str | None = None
    cut: bool = False


def _new_id() -> str:
    return f"call_{secrets.token_hex(8)}"


def parse_calls(text: str, tool_names: Collection[str], *,
                new_id: Callable[[], str] = _new_id) -> TextTurn:
    """Read one assistant reply for calls to the tools named `tool_names` (see the module's
    contract). `new_id` makes each tool_use id."""
    turn = TextTurn()
    taken = 0  # text before this index is in turn.blocks
    for attempt in _attempts(text):
        _add_text(turn, text[taken:attempt.start])
        if attempt.cut:
            return turn
        problem = attempt.problem or _check(attempt.payload, tool_names)
        if problem is not None:
            turn.error = problem
            name = (attempt.payload or {}).get("name")
            turn.named = name if isinstance(name, str) and name in tool_names else None
            _add_text(turn, text[attempt.start:])
            return turn
        assert attempt.payload is not None
        block = {"type": "tool_use", "id": new_id(), "name": attempt.payload["name"],
                 "input": attempt.payload.get("arguments", {})}
        turn.blocks.append(block)
        turn.calls.append(block)
        taken = attempt.end
    _add_text(turn, text[taken:])
    return turn


def looks_like_text_calls(text: str, tool_names: Collection[str]) -> bool:
    """Whether a reply holds a recognised call attempt naming one of `tool_names` (the test of
    automatic mode, for a reply that made no native call)."""
    turn = parse_calls(text, tool_names, new_id=lambda: "")
    return bool(turn.calls) or turn.named is not None


def _add_text(turn: TextTurn, text: str) -> None:
    if text.strip():
        turn.blocks.append({"type": "text", "text": text.strip()})


def _check(payload: dict[str, Any] | None, tool_names: Collection[str]) -> str | None:
    """Why a decoded call cannot run, or None."""
    if payload is None:
        return "the call is not a JSON object"
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return 'the call has no "name" string'
    if name not in tool_names:
        known = ", ".join(sorted(tool_names)) or "none"
        return f"there is no tool named {json.dumps(name, ensure_ascii=False)} (the tools: {known})"
    arguments = payload.get("arguments", {})
    if not isinstance(arguments, dict):
        return f'"arguments" must be a JSON object, not {_json_kind(arguments)}'
    return None


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else "a string"


def _is_call_object(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == _CALL_KEYS


class _Finder:
    """The next match of each marker at or after a position, searched again only once passed
    (so a long reply is scanned about once per marker)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: dict[str, tuple[int, re.Match[str] | None]] = {}

    def next(self, kind: str, pattern: re.Pattern[str], pos: int) -> tuple[int, re.Match[str] | None]:
        at, match = self.found.get(kind, (-1, None))
        if at < pos and at != len(self.text) + 1:
            match = pattern.search(self.text, pos)
            while match is not None and kind in _CODE_SPAN_SENSITIVE and _in_code_span(self.text, match.start()):
                match = pattern.search(self.text, match.end())
            at = match.start() if match else len(self.text) + 1
            self.found[kind] = (at, match)
        return at, match


def _in_code_span(text: str, at: int) -> bool:
    return at > 0 and text[at - 1] == "`"


def _attempts(text: str) -> Iterator[_Attempt]:
    """What `text` holds, in order: call attempts (tagged, fenced, bare) and a self-written
    result. Each is consumed whole, so a tag, fence or object inside another (in a JSON string,
    in an example) is never read on its own. Stops after a malformed attempt or a cut."""
    finder = _Finder(text)
    pos = 0
    while True:
        found = sorted((finder.next(kind, pattern, pos) + (kind,) for kind, pattern in _MARKERS.items()),
                       key=lambda item: item[0])
        at, match, kind = found[0]
        if match is None:
            return
        if kind == "result":
            yield _Attempt(at, len(text), cut=True)
            return
        if kind == "tag":
            attempts = [_tagged_call(text, at)]
        elif kind == "fence":
            pos, attempts = _fenced_calls(text, match)
        else:
            attempts = _bare_call(text, match)
            pos = match.end()
        for attempt in attempts:
            yield attempt
            if attempt.problem is not None:
                return
            pos = max(pos, attempt.end)


def _tagged_call(text: str, start: int) -> _Attempt:
    """The tagged call opening at `start`: `<tool_call>`, one JSON object, `</tool_call>` (which
    may be missing only at the end of the text)."""
    at = _skip_space(text, start + len(CALL_OPEN))
    if at == len(text):
        return _Attempt(start, at, problem=f"nothing follows {CALL_OPEN}")
    try:
        payload, after = _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as exc:
        return _Attempt(start, len(text), problem=_json_problem(text, at, exc))
    if not isinstance(payload, dict):
        return _Attempt(start, after, problem=f"the call must be a JSON object, not {_json_kind(payload)}")
    end = _skip_space(text, after)
    if text.startswith(CALL_CLOSE, end):
        return _Attempt(start, end + len(CALL_CLOSE), payload)
    if end == len(text):
        return _Attempt(start, end, payload)
    return _Attempt(start, end, payload, problem=f"{CALL_CLOSE} must follow the JSON object")


def _bare_call(text: str, match: re.Match[str]) -> list[_Attempt]:
    """A call object starting a line (the tagged form after a server dropped the tags); another
    object there is text."""
    start = match.start(1)
    try:
        payload, after = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        return [_Attempt(start, len(text), problem=_json_problem(text, start, exc))]
    return [_Attempt(start, after, payload)] if _is_call_object(payload) else []


def _fenced_calls(text: str, opening: re.Match[str]) -> tuple[int, list[_Attempt]]:
    """The calls a fenced block holds (it is text unless its first object is a call object) and
    where the block ends. After a first call, anything but another call object is an error."""
    end, body_start, body_end = _fence_extent(text, opening)
    info = opening.group(2).split()
    if (info[0].lower() if info else "") not in _FENCE_LANGUAGES:
        return end, []
    attempts: list[_Attempt] = []
    body = text[:body_end]  # objects may not run past the closing fence
    at = _skip_space(text, body_start, body_end)
    while at < body_end:
        start = opening.start() if not attempts else at
        try:
            payload, after = _DECODER.raw_decode(body, at)
        except json.JSONDecodeError as exc:
            if attempts or _CALL_START.match(text, at):
                attempts.append(_Attempt(start, end, problem=_json_problem(text, at, exc)))
            return end, attempts
        if not _is_call_object(payload):
            if attempts:
                attempts.append(_Attempt(start, end, problem=(
                    'a code block that holds a call may hold only calls, each a JSON object with "name" and '
                    '"arguments"')))
            return end, attempts
        attempts.append(_Attempt(start, after, payload))
        at = _skip_space(text, after, body_end)
    if attempts:
        attempts[-1] = _Attempt(attempts[-1].start, end, attempts[-1].payload)
    return end, attempts


def _fence_extent(text: str, opening: re.Match[str]) -> tuple[int, int, int]:
    """Where a fenced block ends (after its closing line; the end of the text when unclosed)
    and where its body starts and ends."""
    marker = opening.group(1)
    body_start = min(opening.end() + 1, len(text))
    closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$", re.MULTILINE)
    found = closing.search(text, body_start)
    if found is None:
        return len(text), body_start, len(text)
    return found.end(), body_start, found.start()


def _json_problem(text: str, start: int, exc: json.JSONDecodeError) -> str:
    near = json.dumps(text[max(start, exc.pos - _EXCERPT // 2):exc.pos + _EXCERPT // 2], ensure_ascii=False)
    return f"the call is not valid JSON ({exc.msg}, near {near})"


def _skip_space(text: str, pos: int, stop: int | None = None) -> int:
    stop = len(text) if stop is None else stop
    while pos < stop and text[pos].isspace():
        pos += 1
    return pos


#: The start of what can only be a call object: `{` and "name" or "arguments" as the first key.
_CALL_START = re.compile(r'\{\s*"(?:name|arguments)"\s*:')
#: A line that may start a bare call object.
_BARE_START = re.compile(r'^[ \t]*(' + _CALL_START.pattern + ")", re.MULTILINE)
#: What the scanner looks for, by kind.
_MARKERS: dict[str, re.Pattern[str]] = {
    "fence": _FENCE_OPEN,
    "tag": re.compile(re.escape(CALL_OPEN)),
    "bare": _BARE_START,
    "result": re.compile(re.escape(RESULT_OPEN)),
}
#: Markers that are only an example when written in an inline code span (a backtick before).
_CODE_SPAN_SENSITIVE = frozenset({"tag", "result"})
