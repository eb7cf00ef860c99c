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
  keeps them: `{"name", "description", "input_schema"}`): the rules of the format (with the rule
  on code blocks below when a tool has a parameter that may be one, naming the long-text ones
  offered: write_file's content, edit_file's old_string and new_string), one compact signature
  per tool (`read_file(path: string, start_line?: integer)`, a parameter description given once
  per name and wording) and one worked example (`Example`; by default read_file, its result, then
  write_file with the new text in a ```python block after the call, or edit_file with two blocks
  when write_file is not offered; else the first tool and a final answer); the harness's own
  tools (`brief`) get only their description's first sentence, as a small model reads every
  word of the section on every request and learns the rest from the tools' errors. Append it to the
  system prompt, send no native tool definitions, and send `STOP_SEQUENCES` as the request's stop
  sequences (a model that writes `<tool_response>` is making a result up).
- `parse_calls(reply_text, tools)` reads one assistant reply; `tools` are the offered tools'
  definitions (or only their names: then no code block is an argument). `TextTurn.blocks` is the
  assistant message to store (text and `tool_use` blocks in the order written, ids generated);
  `TextTurn.calls` are the `tool_use` blocks to run, in the order written. Three forms are calls:
  1. tagged, as above, anywhere outside a fenced code block or an inline code span; a missing
     `</tool_call>` is accepted only at the very end of the reply; "arguments" may be left out
     (`{}`), other keys are ignored;
  2. fenced: a code block (language `json` or none) whose content is one or more call objects
     (a JSON object whose keys are exactly "name" and "arguments"), e.g. ```json {...} ```; the
     form this model writes when offered native tools; a block of another language only when its
     content is call objects and nothing else (the model wrote ```python around its calls);
  3. bare: a call object starting a line, outside code. It is what the tagged form becomes on
     llama.cpp's server, which drops `<tool_call>`/`</tool_call>` from the reply text (they are
     control tokens of Qwen2.5, rendered only when the request carries native tools).
  Nothing else is a call: prose that describes a call, a tagged call inside a code block (an
  example), an object with other keys, an object in the middle of a line. Arguments are not
  checked against the schema here; the tool does that as usual.
- Text arguments as code blocks (a small model cannot JSON-escape a whole file: measured, Qwen2.5-
  Coder-1.5B ended its reply right after `"content": "`, every time; asked for the content as a
  block after the call, it wrote the file at once, as Aider asks small models for whole files).
  A call's block parameters are the parameters its schema requires whose type is "string", in
  the schema's property order (`block_parameters`). When the call's arguments leave some out,
  the fenced code blocks right after the call give them, in that order: only whitespace before
  and between the blocks, each opening a line, any info string, backtick or tilde fences, closed
  by a line of the same character at least as long as the opening (CommonMark), so text holding
  ``` goes in a ```` fence. A tagged call's blocks may come before `</tool_call>`, after it, or
  both. Blocks beyond the missing parameters, and a block that holds a call object (a fenced
  call), are not arguments; a parameter given in the JSON takes no block. Fewer blocks than
  missing parameters: the call is made as it is, and the tool reports the missing argument,
  except a call that gives none of the long texts its tool requires (write_file with a path
  only): that is a malformed attempt, whose feedback shows the call with its code blocks. A
  block's text is taken exactly as written between the fence lines, with one exception for the
  line break that ends its last line: kept for a whole file's text (`WHOLE_TEXT_PARAMETERS`:
  `content`, `file_text`; the file ends with a line break, as written), dropped for every other
  parameter (so edit_file's old_string, a whole line in the block, also matches a fragment of a
  line or a file's last line without a line break, and a path or a command has no stray line
  break). A block that is not closed (the reply ended inside it: the model stopped or hit its
  output limit) makes the call a malformed attempt, never a truncated file.
- A `<tool_response>` the model writes itself (outside code) ends the reply: it and all after it
  is dropped, calls after it are not run (its results are invented; the stop sequence normally
  prevents it).
- A malformed call attempt ends the parse: a `<tool_call>` not followed by a JSON object and
  `</tool_call>`; something that can only be a call (`{"name": ...` starting a line, or the
  objects after a first call in a code block) that is not valid JSON or not a call object; no
  "name"; a name no offered tool has; arguments not an object; a code block argument not closed.
  The calls before it are returned and should run; the rest of the reply (from the attempt on)
  stays text as written; and `TextTurn.error` says what was wrong. Send `TextTurn.feedback` as a
  text block of the next user message, after the tool_result blocks of the calls that ran, so the
  model can correct itself. Order rule: calls run in the order written, and none runs after one
  that could not be read (a later call may depend on it).
- `looks_like_text_calls(text, tools)` is the automatic-mode test: True when a reply holds a
  recognised call attempt naming one of `tools`. Use it on a reply to a request that offered
  native tools and got no native call; then switch to text mode and run that same reply through
  `parse_calls` (no second request needed).
- `to_text_messages(messages, tools)` turns a conversation in the neutral shape into one a wire
  without native tools can carry: assistant `tool_use` blocks become call text in the form the
  tools section asks for (always the tagged form, also for calls written fenced or bare, so the
  history shows one format; given the tools' definitions, a block parameter's value follows the
  call as a code block when it is long text (a name in the tools section's rule) or spans lines,
  when a block can say it exactly (not a whole file's text without a final line break) and the
  call gives every block parameter; the fence is longer than any run of backticks in the text,
  its info string the language of the call's "path"; `parse_calls` reads it back as the same
  call), user `tool_result` blocks become `<tool_response>` text (`render_results`; "Error: "
  before a failed tool's output), text is kept; thinking blocks are dropped; other blocks
  (images) are kept in place. Each message's content comes back as a list of blocks with
  adjacent text merged into one text block joined by newlines (a `cache_control` mark on a
  merged block is kept on the merged one). A message left empty is dropped. The input is not
  changed.

Limits: calls carry no ids in the text, so results pair with calls by order only; a fenced or bare
object of structured output whose only keys are "name" and "arguments" would read as a call; a
file whose content holds `<tool_response>` cannot be written through a call while the stop
sequence is on (the model stops there); a schema's `$ref` parts show as `any` in the signature;
a file without a final line break cannot be written through a code block (its content must be
in the JSON); an indented fence's content keeps its indentation (not removed as CommonMark does);
which parameters hold a whole file is known by name only (`WHOLE_TEXT_PARAMETERS`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, TypeAlias

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "RESULT_CLOSE",
    "RESULT_OPEN",
    "STOP_SEQUENCES",
    "Example",
    "WHOLE_TEXT_PARAMETERS",
    "TextTurn",
    "Tools",
    "block_parameters",
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
#: Parameters that hold a whole file's text: a code block for one keeps the line break that ends
#: its last line (the file ends with one, as written); a block for any other parameter is taken
#: without it (an edit's old text then also matches a fragment of a line or a last line without one).
WHOLE_TEXT_PARAMETERS = frozenset({"content", "file_text"})
#: Parameters the tools section asks to be written as code blocks: a file's text, an edit's texts.
_LONG_TEXT_PARAMETERS = WHOLE_TEXT_PARAMETERS | {"old_string", "new_string", "old_str", "new_str"}
#: A code block's info string by the file's extension, where the language's name differs from it.
_LANGUAGES = {"py": "python", "js": "javascript", "ts": "typescript", "sh": "bash", "md": "markdown",
              "rs": "rust", "rb": "ruby", "yml": "yaml"}

#: The tools a call may name: their names, or their definitions (`{"name", "input_schema", ...}`;
#: only a definition's schema lets a call's text arguments be given as code blocks).
Tools: TypeAlias = Iterable[str | Mapping[str, Any]]

_DECODER = json.JSONDecoder()


# ---------------------------------------------------------------- rendering

def render_call(name: str, arguments: Mapping[str, Any], tool: Mapping[str, Any] | None = None) -> str:
    """One call in the declared format, as Qwen2.5's template writes it. With the tool's
    definition, its long text arguments (a file's text, an edit's texts, any text that spans
    lines) follow the call as code blocks, the form the tools section asks for (the module's
    contract, `to_text_messages`, says which exactly)."""
    inline, blocks = _split_arguments(arguments, _schema(tool) if tool is not None else {})
    payload = json.dumps({"name": name, "arguments": inline}, ensure_ascii=False)
    return "\n".join([f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}", *blocks])


def block_parameters(schema: Mapping[str, Any]) -> list[str]:
    """The parameters a call may give as code blocks after it: those the schema requires whose
    type is "string", in the schema's property order."""
    listed = schema.get("required")
    required = set(listed) if isinstance(listed, list | tuple) else set()
    return [name for name, prop in _properties(schema).items()
            if name in required and isinstance(prop, Mapping) and prop.get("type") == "string"]


def _split_arguments(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The arguments left in the JSON and the code blocks after it. A block is used for a
    block parameter that holds long text (a file's text, an edit's texts) or whose value spans
    lines, and only when the call gives every block parameter (a parameter left out would take
    the first block when the text is read again)."""
    inline = dict(arguments)
    params = block_parameters(schema)
    if any(name not in arguments for name in params):
        return inline, []
    info = _language(arguments.get("path"))
    blocks = []
    for name in params:
        body = _block_body(name, arguments[name])
        if body is not None:
            del inline[name]
            blocks.append(_fence(body, info))
    return inline, blocks


def _block_body(name: str, value: Any) -> str | None:
    """The text between the fence lines that reads back as `value`, or None when `value` stays
    in the JSON: a short text on one line, a whole file without a final line break (a block
    cannot say so), a text that would read as a call."""
    if not isinstance(value, str) or (name not in _LONG_TEXT_PARAMETERS and "\n" not in value):
        return None
    if name in WHOLE_TEXT_PARAMETERS:
        body = value if value.endswith("\n") else None
    else:
        body = value + "\n"
    return None if body is None or _holds_call(body) else body


def _fence(body: str, info: str) -> str:
    """`body` (ending with a line break) in a backtick fence longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    marker = "`" * max(3, longest + 1)
    return f"{marker}{info}\n{body}{marker}"


def fenced(body: str, path: str) -> str:
    """A file's text (ending with a line break, or empty) as a fenced block, its language from
    the path."""
    return _fence(body, _language(path))


def _language(path: Any) -> str:
    """A code block's info string for a file, from its extension ("" when it has none)."""
    suffix = PurePosixPath(path).suffix[1:].lower() if isinstance(path, str) else ""
    return _LANGUAGES.get(suffix, suffix) if suffix.isalnum() else ""


def _block_value(name: str, body: str) -> str:
    """A parameter's value from its block's text (see WHOLE_TEXT_PARAMETERS)."""
    if name in WHOLE_TEXT_PARAMETERS or not body.endswith("\n"):
        return body
    return body[:-1]


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


def _text_pieces(blocks: Sequence[Mapping[str, Any]],
                 definitions: Mapping[str, Mapping[str, Any]] | None = None) -> Iterator[str]:
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            yield render_result(block)
        elif kind == "text" and block.get("text"):
            yield str(block["text"])
        elif kind == "tool_use":
            name = str(block.get("name", ""))
            yield render_call(name, block.get("input") or {}, (definitions or {}).get(name))


def to_text_messages(messages: Sequence[Mapping[str, Any]], tools: Tools = ()) -> list[dict[str, Any]]:
    """The conversation with calls and results written as text (see the module's contract).
    With the tools' definitions, calls are written as the tools section asks: long text
    arguments as code blocks after the call."""
    definitions = {str(tool["name"]): tool for tool in tools if isinstance(tool, Mapping)}
    converted = []
    for message in messages:
        content = message.get("content")
        blocks: Sequence[Mapping[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or [])
        merged = _merge_text(blocks, definitions)
        if merged:
            converted.append({**message, "content": merged})
    return converted


def _merge_text(blocks: Sequence[Mapping[str, Any]],
                definitions: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Blocks with calls, results and text rendered, adjacent text joined by newlines."""
    out: list[dict[str, Any]] = []
    run: list[Mapping[str, Any]] = []

    def flush() -> None:
        text = "\n".join(_text_pieces(run, definitions))
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


_SENTENCE_END = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+(?=\S)")


def first_sentence(text: str) -> str:
    """The first sentence of a description (all of it when it has one)."""
    text = " ".join(text.split())
    return _SENTENCE_END.split(text, 1)[0]


def _tool_text(tool: Mapping[str, Any], described: set[tuple[str, str]], *, brief: bool = False) -> str:
    """One tool: its signature, its description, then its parameters' descriptions (one given
    in an earlier tool in the same words is not repeated). Brief: the description's first
    sentence and no parameter descriptions."""
    schema = _schema(tool)
    props = _properties(schema)
    params = ", ".join(_param_text(n, p, schema) for n, p in props.items())
    lines = [f"- {tool['name']}({params})"]
    if tool.get("description"):
        description = str(tool["description"])
        lines.append(f"  {first_sentence(description) if brief else ' '.join(description.split())}")
    if brief:
        return "\n".join(lines)
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
    """read_file, then a sentence on what is wrong and the fix written with a code block:
    write_file with the file's new text in a ```python block (what Qwen2.5-Coder-1.5B copied
    best), or, without write_file, edit_file with the old and the new text in two blocks. (The
    sentence, as Aider's prompt asks for an explanation before the change: with it the model
    solved 5 of 9 benchmark tasks instead of 4, the fifth on its retry.) Otherwise the first
    tool, with its required arguments filled by type, and a final answer."""
    by_name = {str(tool.get("name")): tool for tool in tools}
    if "read_file" in by_name and {"write_file", "edit_file"} & set(by_name):
        if "write_file" in by_name:
            then = render_call("write_file", {"path": "greet.py", "content": 'print("hello")\n'},
                               by_name["write_file"])
        else:
            then = render_call("edit_file", {"path": "greet.py", "old_string": 'print("helo")',
                                             "new_string": 'print("hello")'}, by_name["edit_file"])
        return Example("read_file", {"path": "greet.py"}, '1\tprint("helo")',
                       'The greeting is misspelled: "helo" must be "hello".\n' + then,
                       note="greet.py is not part of your task")
    tool = tools[0]
    schema = _schema(tool)
    props = _properties(schema)
    arguments = {name: _placeholder(props.get(name)) for name in schema.get("required") or ()}
    return Example(str(tool["name"]), arguments, "(what the tool returned)",
                   "(once the task is done: a short answer in plain text, without a call)")


def _blocks_rule(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tools section's sentences on code blocks as arguments: none when no tool has a
    parameter that may be one."""
    params = [(str(tool["name"]), block_parameters(_schema(tool))) for tool in tools]
    if not any(names for _, names in params):
        return []
    rule = ("A string argument the tool requires may instead be left out of the JSON and written as a fenced "
            "code block right after the call (several blocks: in the order of the parameters).")
    long = [f"{tool}'s {' and '.join(n for n in names if n in _LONG_TEXT_PARAMETERS)}"
            for tool, names in params if any(n in _LONG_TEXT_PARAMETERS for n in names)]
    if long:
        rule += f" Write these as code blocks, not in the JSON: {'; '.join(long)}."
    return [rule]


def describe_tools(tools: Sequence[Mapping[str, Any]], *, example: Example | None = None,
                   brief: Collection[str] = ()) -> str:
    """The system-prompt section that offers `tools` in text mode (see the module's contract).
    The tools named in `brief` get one line of description (its first sentence) and no parameter
    descriptions. Empty when there are no tools."""
    if not tools:
        return ""
    shown = example or default_example(tools)
    first = next((tool for tool in tools if tool.get("name") == shown.name), None)
    described: set[tuple[str, str]] = set()
    return "\n".join([
        "# Tools",
        "To use a tool, write the call on its own lines in exactly this form, the arguments a JSON object:",
        f'{CALL_OPEN}\n{{"name": "TOOL_NAME", "arguments": {{...}}}}\n{CALL_CLOSE}',
        *_blocks_rule(tools),
        "Several calls in one reply run in the order written. End your reply after your calls: the results "
        f"come in the next message, each in {RESULT_OPEN}{RESULT_CLOSE}, in the order of the calls. Only calls "
        "in this form run: describing a call in words does nothing. When the task is done, reply without a call.",
        "",
        *(_tool_text(tool, described, brief=tool.get("name") in brief) for tool in tools),
        "",
        f"Example ({shown.note}). You reply:" if shown.note else "Example. You reply:",
        render_call(shown.name, shown.arguments, first),
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
        told = f"Your tool call could not be used: {self.error}. {ran} after it ran. "
        blocks = _BLOCK_FORMS.get(self.named or "")
        if blocks is not None:  # a file's text inside the JSON: the usual way to break a call
            lead = "Write" if self.error.startswith(_NO_TEXT) else "Leave the text out of the JSON: write"
            return (told + f"{lead} the call with its path only, then the text "
                    "as a fenced code block right after it" + (" (the old text, then the new)" if len(blocks) > 1
                                                              else "") + ":\n"
                    f'{CALL_OPEN}\n{{"name": "{self.named}", "arguments": {{"path": "FILE"}}}}\n{CALL_CLOSE}\n'
                    + "\n".join(f"```python\n{block}\n```" for block in blocks))
        return (told + "Write each call again in this form:\n"
                f'{CALL_OPEN}\n{{"name": "TOOL_NAME", "arguments": {{...}}}}\n{CALL_CLOSE}')


#: How the error of a call that gives none of its long texts begins (_text_missing).
_NO_TEXT = "the call gives no "
#: What the code blocks hold after a call of a tool whose text goes in code blocks: repeated to
#: the model when its call of that tool was malformed.
_BLOCK_FORMS: dict[str, tuple[str, ...]] = {
    "write_file": ("...the whole file...",),
    "edit_file": ("...the text as it is now...", "...the new text..."),
}


@dataclass(frozen=True)
class _Attempt:
    """What the scanner found: a call attempt (its span, the decoded object or why there is
    none), or `cut`: a result the model wrote itself, where the reply is cut off."""

    start: int
    end: int
    payload: dict[str, Any] | None = None
    problem: str | None = None
    cut: bool = False
    #: The texts of the code blocks that follow the call, for its missing block parameters.
    blocks: tuple[str, ...] = ()


def new_call_id() -> str:
    return f"call_{secrets.token_hex(8)}"


def parse_calls(text: str, tools: Tools, *, new_id: Callable[[], str] = new_call_id) -> TextTurn:
    """Read one assistant reply for calls to `tools` (their names or definitions; see the
    module's contract). `new_id` makes each tool_use id."""
    schemas = _tool_schemas(tools)
    wanted = _wanted_blocks(schemas)
    turn = TextTurn()
    taken = 0  # text before this index is in turn.blocks
    for attempt in _attempts(text, wanted):
        _add_text(turn, text[taken:attempt.start])
        if attempt.cut:
            return turn
        problem = attempt.problem or _check(attempt.payload, schemas) or _text_missing(attempt, wanted, schemas)
        if problem is not None:
            turn.error = problem
            name = (attempt.payload or {}).get("name") if attempt.payload is not None else _name_in(
                text[attempt.start:attempt.end])
            turn.named = name if isinstance(name, str) and name in schemas else None
            _add_text(turn, text[attempt.start:])
            return turn
        assert attempt.payload is not None
        arguments = dict(attempt.payload.get("arguments", {}))
        for param, body in zip(wanted(attempt.payload), attempt.blocks, strict=False):
            arguments[param] = _block_value(param, body)
        block = {"type": "tool_use", "id": new_id(), "name": attempt.payload["name"], "input": arguments}
        turn.blocks.append(block)
        turn.calls.append(block)
        taken = attempt.end
    _add_text(turn, text[taken:])
    return turn


def _name_in(attempt: str) -> str | None:
    """The tool an attempt that is not valid JSON names, read from its `"name": "..."` (for the
    feedback's form and detection; the call itself is never guessed)."""
    found = _NAME_FIELD.search(attempt)
    return found.group(1) if found else None


_NAME_FIELD = re.compile(r'"name"\s*:\s*"([A-Za-z0-9_.\-]{1,64})"')


def looks_like_text_calls(text: str, tools: Tools) -> bool:
    """Whether a reply holds a recognised call attempt naming one of `tools` (the test of
    automatic mode, for a reply that made no native call)."""
    turn = parse_calls(text, tools, new_id=lambda: "")
    return bool(turn.calls) or turn.named is not None


def _tool_schemas(tools: Tools) -> dict[str, Mapping[str, Any]]:
    """Each tool's input schema by name; {} for a tool given by name only."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        if isinstance(tool, str):
            schemas[tool] = {}
        else:
            schemas[str(tool.get("name"))] = _schema(tool)
    return schemas


def _wanted_blocks(schemas: Mapping[str, Mapping[str, Any]]) -> Callable[[Any], list[str]]:
    """For a decoded call: the block parameters its arguments leave out, in order (none for a
    call that cannot run)."""
    def wanted(payload: Any) -> list[str]:
        if _check(payload, schemas) is not None:
            return []
        arguments = payload.get("arguments", {})
        return [name for name in block_parameters(schemas[payload["name"]]) if name not in arguments]
    return wanted


def _text_missing(attempt: _Attempt, wanted: Callable[[Any], list[str]],
                  schemas: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why a call cannot run that gives none of the long texts its tool requires (write_file
    with a path only, no code block after it): the model meant to give them and has to be shown
    how; the tool's own "missing argument" error did not teach it (measured, Qwen2.5-Coder-1.5B)."""
    payload = attempt.payload or {}
    long = [name for name in block_parameters(schemas.get(str(payload.get("name")), {}))
            if name in _LONG_TEXT_PARAMETERS]
    missing = wanted(payload)[len(attempt.blocks):]
    if not long or any(name not in missing for name in long):
        return None
    what = "it as a code block" if len(long) == 1 else "them as code blocks"
    return f"{_NO_TEXT}{' and no '.join(long)}: {payload['name']} takes {what} right after the call"


def _add_text(turn: TextTurn, text: str) -> None:
    if text.strip():
        turn.blocks.append({"type": "text", "text": text.strip()})


def _check(payload: dict[str, Any] | None, tool_names: Mapping[str, Any]) -> str | None:
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


def _attempts(text: str, wanted: Callable[[Any], list[str]]) -> Iterator[_Attempt]:
    """What `text` holds, in order: call attempts (tagged, fenced, bare; each with the code
    blocks after it that `wanted` says it takes) and a self-written result. Each is consumed
    whole, so a tag, fence or object inside another (in a JSON string, in an example, in a code
    block that is an argument) is never read on its own. Stops after a malformed attempt or a cut."""
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
            attempts = [_tagged_call(text, at, wanted)]
        elif kind == "fence":
            pos, attempts = _fenced_calls(text, match)
            if attempts:  # only the block's last call can have code blocks after it
                attempts[-1] = _with_blocks(text, attempts[-1], wanted)
        else:
            attempts = [_with_blocks(text, attempt, wanted) for attempt in _bare_call(text, match)]
            pos = match.end()
        for attempt in attempts:
            yield attempt
            if attempt.problem is not None:
                return
            pos = max(pos, attempt.end)


def _tagged_call(text: str, start: int, wanted: Callable[[Any], list[str]]) -> _Attempt:
    """The tagged call opening at `start`: `<tool_call>`, one JSON object, the code blocks it
    takes (before or after `</tool_call>`, or both), `</tool_call>` (which may be missing only at
    the end of the text)."""
    at = _skip_space(text, start + len(CALL_OPEN))
    if at == len(text):
        return _Attempt(start, at, problem=f"nothing follows {CALL_OPEN}")
    try:
        payload, after = _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as exc:
        return _Attempt(start, len(text), problem=_json_problem(text, at, exc))
    if not isinstance(payload, dict):
        return _Attempt(start, after, problem=f"the call must be a JSON object, not {_json_kind(payload)}")
    params = wanted(payload)
    blocks, after, problem = _read_blocks(text, after, params)
    if problem is not None:
        return _Attempt(start, after, payload, problem=problem)
    end = _skip_space(text, after)
    if text.startswith(CALL_CLOSE, end):
        more, end, problem = _read_blocks(text, end + len(CALL_CLOSE), params[len(blocks):])
        return _Attempt(start, end, payload, problem=problem, blocks=(*blocks, *more))
    if end == len(text):
        return _Attempt(start, end, payload, blocks=tuple(blocks))
    return _Attempt(start, end, payload, problem=f"{CALL_CLOSE} must follow the JSON object"
                    + (" and its code blocks" if blocks else ""))


def _with_blocks(text: str, attempt: _Attempt, wanted: Callable[[Any], list[str]]) -> _Attempt:
    """A fenced or bare call with the code blocks after it that it takes."""
    if attempt.problem is not None:
        return attempt
    blocks, end, problem = _read_blocks(text, attempt.end, wanted(attempt.payload))
    if not blocks and problem is None:
        return attempt
    return _Attempt(attempt.start, end, attempt.payload, problem=problem, blocks=tuple(blocks))


def _read_blocks(text: str, pos: int, params: Sequence[str]) -> tuple[list[str], int, str | None]:
    """The code blocks right after `pos` (only whitespace before and between them, each opening
    a line), one per parameter of `params` at most: their texts, where the last ends, and why
    they cannot be used (a block not closed: the reply ended inside it)."""
    blocks: list[str] = []
    for param in params:
        opening = _block_opening(text, pos)
        if opening is None:
            break
        end, body_start, body_end, closed = _fence_extent(text, opening)
        body = text[body_start:body_end]
        if _may_hold_calls(opening, body) and _holds_call(body):
            break  # a fenced call, not an argument
        if not closed:
            marker = opening.group(1)
            return blocks, len(text), (f"the code block for {param} is not closed (the reply ended inside it; a "
                                       f"line of {marker} ends it), so the call did not run: write the call and "
                                       "its code blocks again")
        blocks.append(text[body_start:body_end])
        pos = end
    return blocks, pos, None


def _block_opening(text: str, pos: int) -> re.Match[str] | None:
    """A fence that opens the next line with text after `pos` when only whitespace comes before it."""
    at = _skip_space(text, pos)
    line = text.rfind("\n", pos, at) + 1
    if at == len(text) or line == 0:
        return None
    return _FENCE_OPEN.match(text, line)


def _holds_call(body: str) -> bool:
    """Whether a code block's text starts with a call object (then it is a fenced call)."""
    try:
        value, _ = _DECODER.raw_decode(body, _skip_space(body, 0))
    except json.JSONDecodeError:
        return False
    return _is_call_object(value)


def _may_hold_calls(opening: re.Match[str], body: str) -> bool:
    """Whether a fenced block with this opening and text is read for calls: a block of language
    json or none, or of any other language when its text is only call objects (measured,
    Qwen2.5-Coder-1.5B wrote its calls in ```python blocks)."""
    info = opening.group(2).split()
    return (info[0].lower() if info else "") in _FENCE_LANGUAGES or _only_calls(body)


def _only_calls(body: str) -> bool:
    """Whether a code block's text is one or more call objects and nothing else."""
    at, found = _skip_space(body, 0), False
    while at < len(body):
        try:
            value, at = _DECODER.raw_decode(body, at)
        except json.JSONDecodeError:
            return False
        if not _is_call_object(value):
            return False
        found, at = True, _skip_space(body, at)
    return found


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
    end, body_start, body_end, _ = _fence_extent(text, opening)
    if not _may_hold_calls(opening, text[body_start:body_end]):
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


def _fence_extent(text: str, opening: re.Match[str]) -> tuple[int, int, int, bool]:
    """Where a fenced block ends (after its closing line; the end of the text when unclosed),
    where its body starts and ends, and whether it was closed (CommonMark: by a line of the same
    character, at least as many, up to 3 spaces before)."""
    marker = opening.group(1)
    body_start = min(opening.end() + 1, len(text))
    closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$", re.MULTILINE)
    found = closing.search(text, body_start)
    if found is None:
        return len(text), body_start, len(text), False
    return found.end(), body_start, found.start(), True


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
