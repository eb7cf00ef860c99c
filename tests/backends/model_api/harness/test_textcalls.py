"""Text tool calls (the harness's text mode): the tools section, strict parsing of calls from a
reply, and the conversation written as text. Pure functions, so plain inputs; the real-model
check is benchmarks/textcalls_probe.py."""

from __future__ import annotations

import itertools
import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from agenter.backends.model_api._harness.textcalls import (
    CALL_OPEN,
    STOP_SEQUENCES,
    Example,
    block_parameters,
    describe_tools,
    looks_like_text_calls,
    parse_calls,
    render_call,
    render_result,
    render_results,
    to_text_messages,
)

TOOLS = [
    {"name": "read_file", "description": "Read a text file.",
     "input_schema": {"type": "object", "properties": {
         "path": {"type": "string", "description": "Path relative to the working directory."},
         "start_line": {"type": "integer", "minimum": 1}}, "required": ["path"]}},
    {"name": "edit_file", "description": "Replace text in a file.",
     "input_schema": {"type": "object", "properties": {
         "path": {"type": "string", "description": "Path relative to the working directory."},
         "old_string": {"type": "string"}, "new_string": {"type": "string"},
         "replace_all": {"type": "boolean", "default": False}},
         "required": ["path", "old_string", "new_string"]}},
    {"name": "bash", "description": "Run a shell command.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
]
NAMES = [t["name"] for t in TOOLS]
#: What Qwen2.5-Coder-1.5B-Instruct (llama.cpp, temperature 0) answered when offered these tools
#: natively with "The test in test_calc.py fails. Read calc.py and fix the bug.": no native call.
MEASURED_NATIVE_REPLY = '```json\n{\n  "name": "read_file",\n  "arguments": {\n    "path": "test_calc.py"\n  }\n}\n```'


def ids():
    counter = itertools.count(1)
    return lambda: f"id{next(counter)}"


def call(name, arguments, id_="id1"):
    return {"type": "tool_use", "id": id_, "name": name, "input": arguments}


def parse(text, names=NAMES):
    return parse_calls(text, names, new_id=ids())


# ---------------------------------------------------------------- the declared format

def test_a_tagged_call_with_text_around_it():
    reply = f"Let me look at it.\n{render_call('read_file', {'path': 'calc.py'})}\n"
    turn = parse(reply)
    assert turn.calls == [call("read_file", {"path": "calc.py"})]
    assert turn.blocks == [{"type": "text", "text": "Let me look at it."}, turn.calls[0]]
    assert turn.error is None and turn.feedback is None
    assert turn.text == "Let me look at it."


def test_the_format_is_the_one_qwen_templates_write():
    assert render_call("bash", {"command": "ls"}) == '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


def test_the_stop_sequence_is_the_result_tag():
    assert STOP_SEQUENCES == ("<tool_response>",)


def test_a_call_on_one_line_and_inline_after_prose_is_read():
    turn = parse('Reading. <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call> Done?')
    assert [c["input"] for c in turn.calls] == [{"command": "ls"}]
    assert turn.text == "Reading.\nDone?"


def test_several_calls_run_in_the_order_written_with_their_text_between():
    reply = (f"First:\n{render_call('read_file', {'path': 'a.py'})}\nthen\n"
             f"{render_call('bash', {'command': 'pytest -q'})}{render_call('read_file', {'path': 'b.py'})}")
    turn = parse(reply)
    assert [(c["name"], c["input"], c["id"]) for c in turn.calls] == [
        ("read_file", {"path": "a.py"}, "id1"), ("bash", {"command": "pytest -q"}, "id2"),
        ("read_file", {"path": "b.py"}, "id3")]
    assert [b["type"] for b in turn.blocks] == ["text", "tool_use", "text", "tool_use", "tool_use"]


def test_ids_are_generated_unique_by_default():
    turn = parse_calls(render_call("bash", {"command": "a"}) * 3, NAMES)
    assert len({c["id"] for c in turn.calls}) == 3
    assert all(c["id"].startswith("call_") for c in turn.calls)


def test_missing_arguments_are_an_empty_object():
    assert parse('<tool_call>\n{"name": "bash"}\n</tool_call>').calls == [call("bash", {})]


def test_a_missing_closing_tag_is_accepted_only_at_the_end_of_the_reply():
    assert parse('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n').calls == [
        call("bash", {"command": "ls"})]
    turn = parse('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\nand then more')
    assert turn.calls == [] and "</tool_call> must follow the JSON object" in turn.error


def test_braces_tags_and_fences_inside_json_strings_are_data():
    content = 'def f():\n    return {"a": [1, {"b": "}"}]}\n# </tool_call> <tool_call> ``` \\" end'
    reply = render_call("edit_file", {"path": "x.py", "old_string": "{", "new_string": content})
    reply += "\n" + render_call("bash", {"command": "echo '}}'"})
    turn = parse(reply)
    assert [c["input"] for c in turn.calls] == [
        {"path": "x.py", "old_string": "{", "new_string": content}, {"command": "echo '}}'"}]
    assert turn.error is None


def test_unicode_round_trips_escaped_or_not():
    arguments = {"path": "données/日本.py", "new_string": "naïve ✓ 🚀", "old_string": "\u0000\t\n"}
    assert parse(render_call("edit_file", arguments)).calls == [call("edit_file", arguments)]
    escaped = CALL_OPEN + json.dumps({"name": "edit_file", "arguments": arguments}) + "</tool_call>"
    assert parse(escaped).calls == [call("edit_file", arguments)]


def test_huge_arguments_parse_in_linear_time():
    content = ("x = {'a': '}'}\n" * 70_000)  # ~1 MB
    reply = "Writing.\n" + render_call("edit_file", {"path": "big.py", "old_string": "", "new_string": content})
    started = time.perf_counter()
    turn = parse(reply)
    assert turn.calls[0]["input"]["new_string"] == content
    assert time.perf_counter() - started < 1.0
    tools = [{"name": "write_file", "input_schema": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}]
    reply = "Writing.\n" + render_call("write_file", {"path": "big.py", "content": content}, tools[0])
    assert "```python\nx = {" in reply
    started = time.perf_counter()
    turn = parse_calls(reply, tools)
    assert turn.calls[0]["input"]["content"] == content
    assert time.perf_counter() - started < 1.0


# ---------------------------------------------------------------- strictness

def test_prose_about_a_call_is_not_a_call():
    for reply in ["I will now call read_file on x.py.",
                  'I would run read_file with {"path": "x.py"}.',
                  'Then: {"name": "read_file", "arguments": {"path": "x.py"}}',  # not at a line's start
                  '{"name": "read_file", "path": "x.py"}',  # not a call object
                  '{"arguments": {"path": "x.py"}}',
                  "Use the <tool_call tag to call tools.",
                  "The closing tag is </tool_call>.",
                  ""]:
        turn = parse(reply)
        assert turn.calls == [] and turn.error is None, reply
        assert not looks_like_text_calls(reply, NAMES)


def test_a_tagged_call_in_a_code_block_or_code_span_is_an_example_not_a_call():
    example = render_call("bash", {"command": "rm -rf build"})
    for reply in [f"Calls look like this:\n```\n{example}\n```\nThat is all.",
                  f"For example:\n~~~xml\n{example}\n~~~",
                  f"  ```text\n{example}\n  ```",
                  f"Unclosed example:\n```\n{example}",
                  "Write `<tool_call>` then the JSON."]:
        turn = parse(reply)
        assert turn.calls == [] and turn.error is None, reply
        assert turn.text == reply.strip()


def test_a_call_after_an_example_block_still_runs():
    example = render_call("bash", {"command": "rm -rf build"})
    turn = parse(f"Not this:\n```\n{example}\n```\nbut this:\n{render_call('bash', {'command': 'ls'})}")
    assert [c["input"] for c in turn.calls] == [{"command": "ls"}]


def test_partial_or_malformed_tags_end_the_parse_with_an_error_for_the_model():
    cases = {
        "<tool_call>": "nothing follows <tool_call>",
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"': "not valid JSON",
        "<tool_call>\nread_file calc.py\n</tool_call>": "not valid JSON",
        "<tool_call>\n[1, 2]\n</tool_call>": "must be a JSON object, not an array",
        '<tool_call>\n{"arguments": {}}\n</tool_call>': 'no "name" string',
        '<tool_call>\n{"name": "bash", "arguments": "ls"}\n</tool_call>': '"arguments" must be a JSON object, not a string',
        '<tool_call>\n{"name": "bash", "arguments": ["ls"]}\n</tool_call>': "not an array",
        '<tool_call>\n{"name": "bash", "arguments": {}} extra\n</tool_call>': "</tool_call> must follow",
    }
    for reply, expected in cases.items():
        turn = parse("Trying.\n" + reply)
        assert turn.calls == [], reply
        assert expected in turn.error, (reply, turn.error)
        assert turn.text == "Trying.\n" + reply.strip()  # the attempt stays in the message as written
        assert turn.feedback.startswith(f"Your tool call could not be used: {turn.error}. Nothing after it ran.")
        assert CALL_OPEN in turn.feedback


def test_a_json_error_quotes_the_text_near_it():
    turn = parse('<tool_call>\n{"name": "bash", "arguments": {"command": "ls" "-l"}}\n</tool_call>')
    assert "Expecting ',' delimiter" in turn.error and '"ls\\" \\"-l' in turn.error


def test_an_unknown_tool_is_an_error_naming_the_tools():
    turn = parse(render_call("delete_everything", {}))
    assert turn.error == 'there is no tool named "delete_everything" (the tools: bash, edit_file, read_file)'
    assert not looks_like_text_calls(render_call("delete_everything", {}), NAMES)


def test_parsing_stops_at_the_first_bad_call_and_keeps_the_calls_before_it():
    reply = (render_call("read_file", {"path": "a.py"}) + "\n" + render_call("nope", {}) + "\n"
             + render_call("bash", {"command": "rm -rf /"}))
    turn = parse(reply)
    assert turn.calls == [call("read_file", {"path": "a.py"})]
    assert "nope" in turn.error and "rm -rf" in turn.text  # the later call is text, not run
    assert "The calls before it ran; nothing after it ran." in turn.feedback


# ---------------------------------------------------------------- fenced JSON calls

def test_a_fenced_object_with_exactly_name_and_arguments_is_a_call():
    turn = parse(MEASURED_NATIVE_REPLY)
    assert turn.calls == [call("read_file", {"path": "test_calc.py"})] and turn.error is None
    assert parse("Now:\n```\n" + json.dumps({"name": "bash", "arguments": {"command": "ls"}}) + "\n```").calls == [
        call("bash", {"command": "ls"})]


def test_other_fenced_json_is_text():
    for body, language in [(json.dumps({"name": "bash", "arguments": {}, "id": 1}), "json"),
                           (json.dumps({"name": "bash"}), "json"),
                           (json.dumps([{"name": "bash", "arguments": {}}]), "json"),
                           (json.dumps({"name": "bash", "arguments": {}}) + "\nprint(1)", "python"),
                           ('{"x": {"name": "bash", "arguments": {', "json")]:
        reply = f"```{language}\n{body}\n```"
        turn = parse(reply)
        assert turn.calls == [] and turn.error is None, reply


def test_a_fenced_call_to_an_unknown_tool_or_with_bad_arguments_is_an_error():
    assert "no tool named" in parse('```json\n{"name": "rm", "arguments": {}}\n```').error
    assert "not a string" in parse('```json\n{"name": "bash", "arguments": "ls"}\n```').error


def test_fenced_and_tagged_calls_mix_in_order():
    reply = (render_call("read_file", {"path": "a.py"}) + '\n```json\n{"name": "bash", "arguments": {"command": "x"}}\n```\n'
             + render_call("read_file", {"path": "b.py"}))
    assert [c["input"] for c in parse(reply).calls] == [{"path": "a.py"}, {"command": "x"}, {"path": "b.py"}]


def test_a_fenced_block_may_hold_several_call_objects_and_only_those():
    reply = ('```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n'
             '{"name": "bash", "arguments": {"command": "x"}}\n```\nDone.')
    turn = parse(reply)
    assert [c["input"] for c in turn.calls] == [{"path": "a.py"}, {"command": "x"}]
    assert turn.blocks[-1] == {"type": "text", "text": "Done."}
    # What the model wrote (measured): a plan of calls, the last to a tool that does not exist.
    turn = parse('```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n{"name": "run_tests", "arguments": {}}\n```')
    assert [c["name"] for c in turn.calls] == ["read_file"] and "no tool named" in turn.error
    assert turn.text == '{"name": "run_tests", "arguments": {}}\n```'
    turn = parse('```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\nthen run it\n```')
    assert len(turn.calls) == 1 and "not valid JSON" in turn.error
    turn = parse('```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n[1]\n```')
    assert len(turn.calls) == 1 and "may hold only calls" in turn.error
    assert "not valid JSON" in parse('```json\n{"name": "read_file", "arguments": {"path": \n```').error


# ---------------------------------------------------------------- bare call objects (tags dropped by the server)

#: What Qwen2.5-Coder-1.5B-Instruct (llama.cpp, no tools on the request, this module's tools
#: section) answered: llama.cpp drops <tool_call> and </tool_call> (special tokens of the model),
#: and the model went on to write a result itself.
MEASURED_TEXT_REPLY = ('{"name": "read_file", "arguments": {"path": "test_calc.py"}}\n<tool_response>\n'
                       '1\timport pytest\n2\tfrom calc import add\n</tool_response>\n<tool_response>\n1 pytest.main()\n</tool_response>')


def test_a_call_object_starting_a_line_is_a_call_and_a_self_written_result_cuts_the_reply():
    turn = parse(MEASURED_TEXT_REPLY)
    assert turn.calls == [call("read_file", {"path": "test_calc.py"})] and turn.error is None
    assert turn.blocks == turn.calls  # the made-up results are dropped
    assert looks_like_text_calls(MEASURED_TEXT_REPLY, NAMES)


def test_bare_call_objects_pretty_printed_indented_or_several():
    reply = ('I will read it.\n  {\n    "name": "read_file",\n    "arguments": {"path": "a.py"}\n  }\n'
             '{"arguments": {"command": "ls"}, "name": "bash"} and more text\n')
    turn = parse(reply)
    assert [c["input"] for c in turn.calls] == [{"path": "a.py"}, {"command": "ls"}]
    assert turn.text == "I will read it.\nand more text"


def test_a_broken_object_that_can_only_be_a_call_is_an_error():
    turn = parse('Reading.\n{"name": "read_file", "arguments": {"path": "a.py"}\n')
    assert turn.calls == [] and "not valid JSON" in turn.error and turn.text.startswith("Reading.\n{")
    assert parse('{"name": "nope", "arguments": {}}').error.startswith("there is no tool named")


def test_a_result_in_code_is_text_and_nothing_after_a_self_written_result_runs():
    reply = "Results look like `<tool_response>` or\n```\n<tool_response>\nx\n</tool_response>\n```\n"
    assert parse(reply).text == reply.strip()
    turn = parse(f"<tool_response>\nmade up\n</tool_response>\n{render_call('bash', {'command': 'rm -rf /'})}")
    assert turn.blocks == [] and turn.calls == []


# ---------------------------------------------------------------- detection (automatic mode)

def test_detection_needs_a_recognised_call_naming_an_offered_tool():
    assert looks_like_text_calls(MEASURED_NATIVE_REPLY, NAMES)
    assert looks_like_text_calls(render_call("bash", {"command": "ls"}), NAMES)
    assert not looks_like_text_calls(MEASURED_NATIVE_REPLY, ["bash"])  # read_file was not offered
    # A malformed attempt that names an offered tool counts: the model is using the format.
    assert looks_like_text_calls('<tool_call>\n{"name": "bash", "arguments": "ls"}\n</tool_call>', NAMES)
    assert not looks_like_text_calls("<tool_call>\nnot json\n</tool_call>", NAMES)
    assert not looks_like_text_calls("Done: the bug was in add().", NAMES)


# ---------------------------------------------------------------- results and the conversation as text

def test_results_render_in_order_with_errors_marked_and_text_after():
    blocks = [{"type": "tool_result", "tool_use_id": "a", "content": "one"},
              {"type": "tool_result", "tool_use_id": "b", "content": "File not found", "is_error": True},
              {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "text", "text": "x"},
                                                                      {"type": "image", "source": {}}]},
              {"type": "text", "text": "Your tool call could not be used: ..."}]
    assert render_results(blocks) == (
        "<tool_response>\none\n</tool_response>\n<tool_response>\nError: File not found\n</tool_response>\n"
        "<tool_response>\nx\n[image not shown]\n</tool_response>\nYour tool call could not be used: ...")
    assert render_result({"type": "tool_result", "tool_use_id": "a", "content": ""}) == "<tool_response>\n\n</tool_response>"


def test_a_conversation_becomes_text_only_and_the_input_is_untouched():
    turn = parse("Reading.\n" + render_call("read_file", {"path": "a.py"}))
    messages = [
        {"role": "user", "content": "Fix a.py"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, *turn.blocks]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": turn.calls[0]["id"], "content": "1\tx = 1",
                                      "cache_control": {"type": "ephemeral"}},
                                     {"type": "image", "source": {"type": "base64", "data": "AA"}},
                                     {"type": "text", "text": "Also this."}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
        {"role": "assistant", "content": "Done."},
    ]
    before = json.dumps(messages)
    assert to_text_messages(messages) == [
        {"role": "user", "content": [{"type": "text", "text": "Fix a.py"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading.\n" + render_call("read_file", {"path": "a.py"})}]},
        {"role": "user", "content": [
            {"type": "text", "text": "<tool_response>\n1\tx = 1\n</tool_response>", "cache_control": {"type": "ephemeral"}},
            {"type": "image", "source": {"type": "base64", "data": "AA"}},
            {"type": "text", "text": "Also this."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]
    assert json.dumps(messages) == before


def test_a_fenced_call_goes_back_in_the_declared_form():
    turn = parse(MEASURED_NATIVE_REPLY)
    text = to_text_messages([{"role": "assistant", "content": turn.blocks}])[0]["content"][0]["text"]
    assert text == render_call("read_file", {"path": "test_calc.py"})


def test_a_malformed_call_and_its_feedback_go_back_as_written():
    turn = parse(f"{render_call('read_file', {'path': 'a.py'})}\n<tool_call>\n{{bad\n</tool_call>")
    user = [{"type": "tool_result", "tool_use_id": turn.calls[0]["id"], "content": "1\tx"},
            {"type": "text", "text": turn.feedback}]
    assistant_text, user_text = (m["content"][0]["text"] for m in to_text_messages(
        [{"role": "assistant", "content": turn.blocks}, {"role": "user", "content": user}]))
    assert assistant_text.endswith("<tool_call>\n{bad\n</tool_call>")
    assert user_text.startswith("<tool_response>\n1\tx\n</tool_response>\nYour tool call could not be used")


# ---------------------------------------------------------------- the tools section

def test_the_tools_section_has_every_tool_compactly_and_one_worked_example():
    section = describe_tools(TOOLS)
    assert "- read_file(path: string, start_line?: integer)" in section
    assert "- edit_file(path: string, old_string: string, new_string: string, replace_all?: boolean = false)" in section
    assert "- bash(command: string)" in section
    assert section.count("path: Path relative to the working directory.") == 1  # not repeated per tool
    assert section.count("Example") == 1 and section.count("<tool_response>\n") == 1
    assert "End your reply after your calls" in section
    example = section[section.index("Example"):]
    before, after = example.split("</tool_response>")
    calls = parse(before).calls + parse(after).calls  # valid calls to offered tools
    assert [c["name"] for c in calls] == ["read_file", "edit_file"]
    assert len(section) < 1600


def test_the_example_follows_the_tools_offered():
    tools = [{"name": "search", "description": "Search the web.",
              "input_schema": {"type": "object", "properties": {
                  "query": {"type": "string"}, "mode": {"enum": ["fast", "deep"]},
                  "tags": {"type": "array", "items": {"type": "string"}},
                  "limit": {"type": "integer"}, "filter": {"type": "object", "properties": {"site": {"type": "string"}}},
                  "any": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                  "required": ["query", "mode"]}},
             {"name": "ping", "description": "", "input_schema": {"type": "object"}},
             {"name": "text_editor"}]
    section = describe_tools(tools)
    assert ('- search(query: string, mode: "fast" | "deep", tags?: string[], limit?: integer, '
            'filter?: {site?: string}, any?: string | null)') in section
    assert "- ping()\n- text_editor()" in section
    assert parse(section[section.index("Example"):], ["search"]).calls[0]["input"] == {"query": "...", "mode": "fast"}
    custom = describe_tools(tools, example=Example("ping", {}, "pong", "It answers.", note="an illustration"))
    assert "Example (an illustration). You reply:\n<tool_call>\n" in custom and custom.endswith("It answers.")
    assert describe_tools([]) == ""


# ---------------------------------------------------------------- properties

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json_values = st.recursive(_json_scalars, lambda inner: st.lists(inner, max_size=4)
                            | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)
_arguments = st.dictionaries(st.text(), _json_values, max_size=5)
#: Prose without the characters that start a tag, a fence or a JSON object.
_prose = st.text(st.characters(blacklist_characters="<`~{", blacklist_categories=["Cs"]), max_size=40)


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(NAMES), arguments=_arguments)
def test_parse_of_a_rendered_call_is_the_call(name, arguments):
    assert parse(render_call(name, arguments)).calls == [call(name, arguments)]


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(NAMES), arguments=_arguments, indent=st.sampled_from([None, 2]),
       form=st.sampled_from(["bare", "fenced", "fenced json"]))
def test_the_fenced_and_bare_forms_of_a_call_are_the_call(name, arguments, indent, form):
    obj = json.dumps({"name": name, "arguments": arguments}, indent=indent)
    reply = {"bare": f"Next:\n{obj}\n", "fenced": f"```\n{obj}\n```", "fenced json": f"```json\n{obj}\n```"}[form]
    assert parse(reply).calls == [call(name, arguments)]


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(NAMES), _arguments), min_size=1, max_size=4),
       prose=st.lists(_prose, min_size=5, max_size=5))
def test_calls_between_prose_come_back_in_order_through_the_text_conversation(calls, prose):
    reply = prose[0] + "".join(f"\n{render_call(n, a)}\n{p}" for (n, a), p in zip(calls, prose[1:], strict=False))
    turn = parse(reply)
    assert [(c["name"], c["input"]) for c in turn.calls] == calls and turn.error is None
    text = to_text_messages([{"role": "assistant", "content": turn.blocks}])[0]["content"][0]["text"]
    assert [(c["name"], c["input"]) for c in parse(text).calls] == calls


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list('<>/tool_call{}[]":, \n`~json\\ab')), max_size=80) | st.text(max_size=80))
def test_any_text_parses_without_raising_and_the_blocks_hold_the_calls(text):
    turn = parse(text)
    assert [b for b in turn.blocks if b["type"] == "tool_use"] == turn.calls
    assert turn.error is None or (turn.feedback or "").startswith("Your tool call could not be used")
    assert all(isinstance(c["input"], dict) and c["name"] in NAMES for c in turn.calls)


# ---------------------------------------------------------------- text arguments as code blocks

WRITE_FILE = {"name": "write_file", "description": "Create or replace a file.",
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                               "required": ["path", "content"]}}
DEFS = [*TOOLS, WRITE_FILE]
BY_NAME = {t["name"]: t for t in DEFS}
#: What Qwen2.5-Coder-1.5B-Instruct (llama.cpp, temperature 0, tags dropped by the server) wrote
#: when the system prompt asked for a file's content as a code block after the call.
MEASURED_BLOCK_REPLY = ('{"name": "write_file", "arguments": {"path": "word_count.py"}}\n```python\nimport sys\n\n\n'
                        'def count_words(text):\n    return len(text.split())\n\n\nif __name__ == "__main__":\n'
                        '    print(count_words(sys.stdin.read()))\n```')


def parse_defs(text):
    return parse_calls(text, DEFS, new_id=ids())


def test_block_parameters_are_the_required_strings_in_property_order():
    assert block_parameters(BY_NAME["edit_file"]["input_schema"]) == ["path", "old_string", "new_string"]
    assert block_parameters(BY_NAME["read_file"]["input_schema"]) == ["path"]
    assert block_parameters({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
                             "required": ["n"]}) == []
    assert block_parameters({}) == []


def test_a_file_written_as_a_block_after_the_call_is_the_exact_text():
    turn = parse_defs(MEASURED_BLOCK_REPLY)
    content = MEASURED_BLOCK_REPLY.split("```python\n")[1][:-3]
    assert content.endswith("read()))\n")  # a file keeps the line break that ends its last line
    assert turn.calls == [call("write_file", {"path": "word_count.py", "content": content})]
    assert turn.error is None and turn.blocks == turn.calls
    assert looks_like_text_calls(MEASURED_BLOCK_REPLY, DEFS)


def test_edit_strings_in_two_blocks_lose_their_last_line_break():
    reply = ('Fixing it.\n<tool_call>\n{"name": "edit_file", "arguments": {"path": "greet.py"}}\n</tool_call>\n'
             '```python\nprint("helo")\n```\n\n```python\nprint("hello")\n```\nDone.')
    turn = parse_defs(reply)
    assert turn.calls == [call("edit_file", {"path": "greet.py", "old_string": 'print("helo")',
                                             "new_string": 'print("hello")'})]
    assert turn.text == "Fixing it.\nDone."
    # Several lines keep their inner line breaks; an empty block is an empty string.
    turn = parse_defs('{"name": "edit_file", "arguments": {"path": "a.py"}}\n~~~\n  a\n  b\n\n~~~\n```\n```')
    assert turn.calls[0]["input"] == {"path": "a.py", "old_string": "  a\n  b\n", "new_string": ""}


def test_blocks_fill_the_missing_parameters_in_order_and_json_arguments_take_none():
    # old_string given in the JSON: the one block is new_string.
    turn = parse_defs('{"name": "edit_file", "arguments": {"path": "a.py", "old_string": "x"}}\n```\ny\n```')
    assert turn.calls[0]["input"] == {"path": "a.py", "old_string": "x", "new_string": "y"}
    # Every argument in the JSON: a block after the call is text (an illustration).
    reply = render_call("write_file", {"path": "a.py", "content": "x = 1\n"}) + "\n```python\nx = 2\n```"
    turn = parse_defs(reply)
    assert turn.calls[0]["input"] == {"path": "a.py", "content": "x = 1\n"}
    assert turn.text == "```python\nx = 2\n```"
    # No argument in the JSON: path, old_string, new_string from three blocks.
    turn = parse_defs('{"name": "edit_file", "arguments": {}}\n```\na.py\n```\n```\nx\n```\n```\ny\n```\n```\nz\n```')
    assert turn.calls[0]["input"] == {"path": "a.py", "old_string": "x", "new_string": "y"}
    assert turn.text == "```\nz\n```"  # beyond the missing parameters


def test_fewer_blocks_than_missing_parameters_make_the_call_as_it_is():
    turn = parse_defs('{"name": "edit_file", "arguments": {"path": "a.py"}}\n```\nx\n```\nthen the new text')
    assert turn.calls[0]["input"] == {"path": "a.py", "old_string": "x"} and turn.error is None


def test_a_call_that_gives_none_of_its_long_texts_is_shown_the_blocks():
    """write_file with a path only and no block after it (measured: Qwen2.5-Coder-1.5B, three
    times in a row): not made, the feedback shows the call with its code block."""
    turn = parse_defs("Writing it.\n" + render_call("write_file", {"path": "a.py"}))
    assert turn.calls == [] and turn.error == (
        "the call gives no content: write_file takes it as a code block right after the call")
    assert turn.named == "write_file" and turn.text.startswith("Writing it.\n<tool_call>")
    feedback = turn.feedback
    assert feedback is not None and "Leave the text out" not in feedback
    assert feedback.endswith('{"name": "write_file", "arguments": {"path": "FILE"}}\n</tool_call>\n'
                             "```python\n...the whole file...\n```")
    assert parse_defs(render_call("edit_file", {"path": "a.py"})).error == (
        "the call gives no old_string and no new_string: edit_file takes them as code blocks right after the call")
    # The calls before it run; one long text of two in the JSON is made as it is.
    turn = parse_defs(render_call("read_file", {"path": "a.py"}) + "\n" + render_call("write_file", {"path": "a.py"}))
    assert [c["name"] for c in turn.calls] == ["read_file"] and turn.error is not None
    assert parse_defs(render_call("edit_file", {"path": "a.py", "new_string": "x"})).error is None


def test_a_block_of_another_language_holding_only_calls_is_a_fenced_call():
    """Measured: Qwen2.5-Coder-1.5B wrote its calls in ```python blocks; such a block that holds
    call objects and nothing else is a call. Anything more in it keeps it code."""
    turn = parse_defs('```python\n{"name": "read_file", "arguments": {"path": "config.py"}}\n```')
    assert turn.calls == [call("read_file", {"path": "config.py"})] and turn.error is None
    turn = parse_defs('```python\n{"name": "write_file", "arguments": {"path": "a.py"}}\n```\n```python\nx = 1\n```')
    assert turn.calls == [call("write_file", {"path": "a.py", "content": "x = 1\n"})]
    for code in ['```python\nd = {"name": "read_file", "arguments": {}}\n```',
                 '```python\n{"name": "read_file", "arguments": {}}\nprint(d)\n```',
                 '```python\n{"name": "read_file", "arguments": {}, "x": 1}\n```']:
        turn = parse_defs(code)
        assert turn.calls == [] and turn.error is None and turn.text == code, code
    # A python block after a call that holds only a call is that call, not the first one's text.
    turn = parse_defs(render_call("write_file", {"path": "a.py"}) + '\n```python\n'
                      '{"name": "read_file", "arguments": {"path": "a.py"}}\n```')
    assert turn.error is not None and turn.calls == []


def test_blocks_must_follow_the_call_directly_each_opening_a_line():
    edit = '{"name": "edit_file", "arguments": {"path": "a.py", "old_string": "o"}}'
    for reply in [edit + '\nLike this:\n```\nx\n```', edit + ' ```\nx\n```',
                  edit + '\n    ```\nx\n    ```']:  # indented code
        turn = parse_defs(reply)
        assert turn.calls == [call("edit_file", {"path": "a.py", "old_string": "o"})] and turn.error is None, reply


def test_a_tagged_calls_blocks_may_be_inside_the_tags_after_them_or_both():
    inside = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py"}}\n```py\nx = 1\n```\n</tool_call>'
    assert parse_defs(inside).calls[0]["input"] == {"path": "a.py", "content": "x = 1\n"}
    assert parse_defs(inside[:-len("</tool_call>")]).calls[0]["input"]["content"] == "x = 1\n"  # end of reply
    both = ('<tool_call>\n{"name": "edit_file", "arguments": {"path": "a.py"}}\n```\nx\n```\n</tool_call>\n'
            '```\ny\n```')
    assert parse_defs(both).calls[0]["input"] == {"path": "a.py", "old_string": "x", "new_string": "y"}
    extra = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py"}}\n```\nx\n```\n```\ny\n```\n</tool_call>'
    assert "</tool_call> must follow the JSON object and its code blocks" in parse_defs(extra).error


def test_a_block_holding_backticks_uses_a_longer_fence():
    content = 'Use it like this:\n```python\nprint("hi")\n```\n'
    reply = '{"name": "write_file", "arguments": {"path": "README.md"}}\n````markdown\n' + content + "````"
    assert parse_defs(reply).calls[0]["input"]["content"] == content
    # A shorter or different fence line inside does not close it; a longer one does.
    reply = '{"name": "write_file", "arguments": {"path": "a.md"}}\n````\n```\n~~~~\n`````\nafter'
    turn = parse_defs(reply)
    assert turn.calls[0]["input"]["content"] == "```\n~~~~\n" and turn.text == "after"


def test_calls_tags_and_results_inside_a_block_are_the_files_text():
    content = (f"{render_call('bash', {'command': 'rm -rf /'})}\n<tool_response>\nx\n</tool_response>\n"
               '{"name": "bash", "arguments": {"command": "ls"}}\n')
    reply = '{"name": "write_file", "arguments": {"path": "notes.txt"}}\n```\n' + content + "```\n"
    turn = parse_defs(reply)
    assert turn.calls == [call("write_file", {"path": "notes.txt", "content": content})] and turn.error is None


def test_a_fenced_call_after_a_call_is_a_call_not_its_argument():
    reply = ('```json\n{"name": "edit_file", "arguments": {"path": "a.py", "old_string": "o"}}\n```\n'
             '```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```')
    assert [(c["name"], c["input"]) for c in parse_defs(reply).calls] == [
        ("edit_file", {"path": "a.py", "old_string": "o"}), ("read_file", {"path": "a.py"})]
    # JSON that is not a call is text like any other, e.g. a package.json.
    package = '{"name": "app", "version": "1.0.0"}\n'
    reply = '```json\n{"name": "write_file", "arguments": {"path": "package.json"}}\n```\n```json\n' + package + "```"
    assert parse_defs(reply).calls[0]["input"] == {"path": "package.json", "content": package}


def test_a_block_not_closed_is_an_error_and_nothing_is_written():
    reply = (render_call("read_file", {"path": "a.py"}) + "\n"
             + '{"name": "write_file", "arguments": {"path": "big.py"}}\n```python\ndef f():\n    return 1\n')
    turn = parse_defs(reply)
    assert turn.calls == [call("read_file", {"path": "a.py"})]  # the call before it runs
    assert turn.error == ("the code block for content is not closed (the reply ended inside it; a line of ``` ends "
                          "it), so the call did not run: write the call and its code blocks again")
    assert turn.feedback.startswith("Your tool call could not be used: the code block for content is not closed")
    assert turn.text.startswith('{"name": "write_file"') and turn.text.endswith("return 1")
    assert turn.named == "write_file" and looks_like_text_calls(reply, DEFS)
    assert "not closed" in parse_defs('{"name": "write_file", "arguments": {"path": "a"}}\n```').error
    # The second of two blocks not closed: the call does not run either.
    turn = parse_defs('{"name": "edit_file", "arguments": {"path": "a.py"}}\n```\nx\n```\n```\ny')
    assert turn.calls == [] and "code block for new_string is not closed" in turn.error


def test_names_only_take_no_blocks():
    turn = parse(MEASURED_BLOCK_REPLY, NAMES + ["write_file"])
    assert turn.calls == [call("write_file", {"path": "word_count.py"})]
    assert turn.text.startswith("```python\nimport sys")


def test_the_history_writes_long_text_as_blocks_after_the_call():
    content = 'x = 1\n```\ninner ````` fence\n'
    blocks = [{"type": "text", "text": "Writing."}, call("write_file", {"path": "src/app.py", "content": content}),
              call("edit_file", {"path": "a.js", "old_string": "a", "new_string": "b\nc"}, "id2"),
              call("write_file", {"path": "b", "content": "no final line break"}, "id3"),
              call("edit_file", {"path": "c.py", "new_string": "x"}, "id4"),  # old_string missing: all JSON
              call("bash", {"command": "ls"}, "id5")]
    text = to_text_messages([{"role": "assistant", "content": blocks}], DEFS)[0]["content"][0]["text"]
    assert text == "\n".join([
        "Writing.",
        render_call("write_file", {"path": "src/app.py"}), "``````python\n" + content + "``````",
        render_call("edit_file", {"path": "a.js"}), "```javascript\na\n```", "```javascript\nb\nc\n```",
        render_call("write_file", {"path": "b", "content": "no final line break"}),
        render_call("edit_file", {"path": "c.py", "new_string": "x"}),
        render_call("bash", {"command": "ls"}),
    ])
    assert parse_defs(text).calls == [b for b in blocks if b["type"] == "tool_use"]
    # Without the definitions every argument stays in the JSON, as before.
    assert to_text_messages([{"role": "assistant", "content": blocks[1:2]}])[0]["content"][0]["text"] == render_call(
        "write_file", {"path": "src/app.py", "content": content})


def test_the_default_example_writes_the_fix_as_a_block_and_parses():
    section = describe_tools(DEFS)
    assert ("A string argument the tool requires may instead be left out of the JSON and written as a fenced code "
            "block right after the call (several blocks: in the order of the parameters). Write these as code "
            "blocks, not in the JSON: edit_file's old_string and new_string; write_file's content.") in section
    then = section[section.rindex("You reply:\n") + len("You reply:\n"):]
    # A sentence on what is wrong before the call (the example's reply; the model copies it).
    assert then == ('The greeting is misspelled: "helo" must be "hello".\n'
                    '<tool_call>\n{"name": "write_file", "arguments": {"path": "greet.py"}}\n</tool_call>\n'
                    '```python\nprint("hello")\n```')
    assert parse_defs(then).calls == [call("write_file", {"path": "greet.py", "content": 'print("hello")\n'})]
    # Without write_file: edit_file with the old and the new text in two blocks.
    then = describe_tools(TOOLS).rsplit("You reply:\n", 1)[1]
    assert then.endswith('</tool_call>\n```python\nprint("helo")\n```\n```python\nprint("hello")\n```')
    assert parse_calls(then, TOOLS).calls[0]["input"] == {"path": "greet.py", "old_string": 'print("helo")',
                                                          "new_string": 'print("hello")'}
    # No tool with a required string: no rule.
    assert "code block" not in describe_tools([{"name": "ping", "input_schema": {"type": "object"}}])


_texts = st.text(st.sampled_from(list("ab `~\n{}\"<>/")), max_size=30) | st.text(max_size=30)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["write_file", "edit_file", "bash"]), texts=st.lists(_texts, min_size=3, max_size=3),
       path=st.sampled_from(["a.py", "b.md", "c", "d.json"]), after=_prose)
def test_a_call_rendered_with_blocks_reads_back_as_the_call(name, texts, path, after):
    arguments = {"write_file": {"path": path, "content": texts[0]},
                 "edit_file": {"path": path, "old_string": texts[1], "new_string": texts[2]},
                 "bash": {"command": texts[0]}}[name]
    text = render_call(name, arguments, BY_NAME[name]) + "\n" + after
    turn = parse_defs(text)
    assert turn.calls == [call(name, arguments)] and turn.error is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(['{"name": "edit_file", "arguments": {"path": "a"}}', '<tool_call>', '</tool_call>',
                                 '{"name": "write_file", "arguments": {}}', "```", "````", "~~~", "```json", "\n",
                                 " ", "x", '{"name": "bash", "arguments": {}}', "<tool_response>"]), max_size=25))
def test_any_text_with_calls_and_fences_parses_without_raising(pieces):
    turn = parse_defs("".join(pieces))
    assert [b for b in turn.blocks if b["type"] == "tool_use"] == turn.calls
    assert all(isinstance(c["input"], dict) and c["name"] in BY_NAME for c in turn.calls)
    assert turn.error is None or turn.feedback.startswith("Your tool call could not be used")


#: What Qwen2.5-Coder-1.5B answered on the caesar-cipher task of the real-model benchmark, eight
#: times in a row: the file's text inside the JSON, its docstrings' quotes not escaped.
BROKEN_WRITE = ('```json\n{\n    "name": "write_file",\n    "arguments": {\n        "path": "cipher.py",\n'
                '        "content": "def shift(text: str, key: int) -> str:\\n    """Each letter."""\\n    return text"\n'
                '    }\n}\n```')


def test_a_file_s_text_that_breaks_the_json_is_answered_with_the_code_block_form():
    """The repair message for a malformed write_file or edit_file call shows that call's form
    with the text as code blocks (the model had repeated the same broken JSON against the generic
    form); the tool is read from the attempt's "name", and nothing is guessed or run."""
    turn = parse(BROKEN_WRITE, ["write_file", "read_file"])
    assert turn.calls == [] and turn.named == "write_file" and turn.error.startswith("the call is not valid JSON")
    assert turn.feedback.endswith(
        'Leave the text out of the JSON: write the call with its path only, then the text as a fenced code block '
        'right after it:\n<tool_call>\n{"name": "write_file", "arguments": {"path": "FILE"}}\n</tool_call>\n'
        "```python\n...the whole file...\n```")
    edit = parse(BROKEN_WRITE.replace("write_file", "edit_file"), NAMES)
    assert edit.named == "edit_file" and "(the old text, then the new)" in edit.feedback
    assert edit.feedback.count("```python") == 2
    # Another tool, or one not offered: the generic form.
    other = parse(BROKEN_WRITE.replace("write_file", "bash"), NAMES)
    assert other.named == "bash" and '{"name": "TOOL_NAME", "arguments": {...}}' in other.feedback
    assert parse(BROKEN_WRITE, ["read_file"]).named is None


def test_brief_tools_get_their_first_sentence_and_no_parameter_descriptions():
    """The harness's own tools are described in one sentence each (a small model reads the section
    on every request); a user's tool keeps all its words."""
    tools = [{"name": "edit_file", "description": "Replace a piece of text. old_string must occur once, e.g. 'x'.",
              "input_schema": {"type": "object", "required": ["path"],
                               "properties": {"path": {"type": "string", "description": "Relative path."}}}},
             {"name": "lookup", "description": "Look a word up, e.g. 'cat'. Answers its meaning.",
              "input_schema": {"type": "object",
                               "properties": {"word": {"type": "string", "description": "The word."}}}}]
    section = describe_tools(tools, brief={"edit_file"})
    assert "- edit_file(path: string)\n  Replace a piece of text.\n- lookup(" in section
    assert "Relative path." not in section and "old_string must" not in section
    assert "  Look a word up, e.g. 'cat'. Answers its meaning.\n  word: The word." in section
    assert describe_tools(tools, brief={"lookup"}).count("  Look a word up, e.g. 'cat'.\n") == 1
