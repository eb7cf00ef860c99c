"""The openai backend running agenter's own agent (the harness) on both OpenAI wires: the real
backend, the real `openai` client and real HTTP against the scripted model server (Chat
Completions and the Responses API). Files are checked on disk; what the model was sent is read
from the requests the server received. Pure request/stream conversions have unit tests at the end.

The context path of analysis and patch mode (openai_context="prompt") is proven in
tests/backends/model_api/openai_compat/test_openai_compat.py and tests/session/test_patch_mode.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._errors import BackendError, ConfigurationError
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.model_api._chat import ChatReader, chat_messages
from agenter.backends.model_api._harness.conversation import invariant_violations
from agenter.backends.model_api._harness.wire import WireRequest
from agenter.backends.model_api.openai_compat import OpenAICompatBackend, OpenAIOptions
from agenter.backends.model_api.openai_compat._wire import ChatWire, ResponsesWire, responses_input
from agenter.testing import conformance, disconnect, hang, http_error, refusal_reply, reply, text, thinking, tool_call
from agenter.testing._scene import HOOK, diverged_repo, harness_hostile_calls, private_home, remote_head
from agenter.validators import CommandValidator

API_KEY = "sk-test-OPENAI-SECRET-0123456789abcdef"
WIRES = ["chat", "responses"]
agent_test = pytest.mark.agent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


def make_agent(server: Any, wire: str, **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("max_retry_wait", 0.0)
    return AutonomousCodingAgent(backend="openai", model="scripted-model", base_url=server.openai_base_url,
                                 openai_wire=wire, **kwargs)


def make_backend(server: Any, wire: str, *, tools: list | None = None, mode: str = "autonomous",
                 **options: Any) -> OpenAICompatBackend:
    options.setdefault("max_retry_wait", 0.0)
    opts = OpenAIOptions(api_key=API_KEY, base_url=server.openai_base_url, openai_wire=wire, **options)
    settings = BackendSettings(model="scripted-model", tools=tools or [], sandbox=True, options=opts, mode=mode)
    OpenAICompatBackend.check_settings(settings)
    return OpenAICompatBackend(settings)


async def run_turn(backend: OpenAICompatBackend, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


def tool_results(request: Any) -> list[tuple[str, str]]:
    """(call id, content) of the tool results at the end of a request, on either wire."""
    body = request.body
    if request.wire == "openai-chat":
        trailing = []
        for message in reversed(body["messages"]):
            if message["role"] != "tool":
                if trailing or message["role"] == "assistant":
                    break
                continue
            trailing.append((message["tool_call_id"], message["content"]))
        return trailing[::-1]
    items = body["input"]
    last_call = max(i for i, item in enumerate(items) if item.get("type") == "function_call")
    return [(item["call_id"], item["output"]) for item in items[last_call:] if item.get("type") == "function_call_output"]


def tool_names(request: Any) -> list[str]:
    tools = request.body.get("tools") or []
    return [t["function"]["name"] if "function" in t else t["name"] for t in tools]


# ---------------------------------------------------------------------------------------------
# Files really written by the model's tool calls


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_tool_calls_write_edit_and_run_bash_on_disk(scripted_model_server, repo, wire):
    server = scripted_model_server([
        reply(text("Adding a module."), tool_call("write_file", {"path": "pkg/util.py", "content": "X = 1\n"}),
              tool_call("edit_file", {"path": "app.py", "old_string": "'hello'", "new_string": "'hi'"})),
        reply(tool_call("bash", {"command": "printf 'ok\\n' > made.txt && cat app.py"}),
              tool_call("read_file", {"path": "pkg/util.py"})),
        reply(text("All done.")),
    ])
    backend = make_backend(server, wire)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Change greet")
    finally:
        await backend.disconnect()
    assert not backend.context_path and backend.capabilities.native_tool_loop
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert (repo / "pkg" / "util.py").read_text() == "X = 1\n"
    assert (repo / "made.txt").read_text() == "ok\n"
    assert backend.modified_files().written == {"app.py", "pkg/util.py", "made.txt"}
    assert [m.content for m in messages if m.type is MessageType.TEXT] == ["Adding a module.", "All done."]
    assert any(m.type is MessageType.TEXT_DELTA for m in messages)
    assert invariant_violations(backend.messages) == []
    first, second, third = server.model_requests
    assert {r.wire for r in server.model_requests} == {f"openai-{wire}"}
    # Every call was answered under its own id, in order; the bash output went back.
    (bash_id, bash_out), (_, read_out) = tool_results(third)
    assert "return 'hi'" in bash_out and "X = 1" in read_out
    answered = [call_id for call_id, _ in tool_results(second)]
    if wire == "chat":
        asked = [c["id"] for c in second.body["messages"][2]["tool_calls"]]
    else:
        asked = [i["call_id"] for i in second.body["input"] if i.get("type") == "function_call"]
    assert len(asked) == 2 and answered == asked
    # The tools are function tools; the system prompt names no absolute path.
    names = tool_names(first)
    assert {"read_file", "write_file", "edit_file", "bash", "refuse_task"} <= set(names)
    body = first.body
    system = body["messages"][0]["content"] if wire == "chat" else body["instructions"]
    assert "no human will answer" in system and str(repo) not in json.dumps(body)
    if wire == "chat":
        assert body["messages"][0]["role"] == "system"
        assistant = second.body["messages"][2]
        assert assistant["role"] == "assistant" and assistant["content"] == "Adding a module."
        assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["write_file", "edit_file"]
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert first.body["tools"][0]["type"] == "function" and "parameters" in first.body["tools"][0]["function"]
    else:
        kinds = [item.get("type", item.get("role")) for item in second.body["input"]]
        assert kinds == ["user", "assistant", "function_call", "function_call", "function_call_output",
                         "function_call_output"]
        assert all(t["strict"] is False for t in body["tools"])
        assert "store" not in body  # only sent to the OpenAI API itself
    # max_tokens=None: no limit sent (the server's default), no temperature either.
    assert not {"max_tokens", "max_completion_tokens", "max_output_tokens", "temperature"} & set(body)
    usage = backend.usage()
    assert usage.input_tokens > 0 and usage.output_tokens > 0


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_facade_autonomous_run_completes_with_real_files(scripted_model_server, repo, wire):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})),
        reply(text("Wrote calc.py")),
    ])
    agent = make_agent(server, wire, max_tokens=900, temperature=0.0, effort="low",
                       openai_extra_body={"top_k": 20})
    result = await agent.execute("Write calc.py", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"calc.py": "def add(a, b):\n    return a + b\n"}
    assert result.summary == "Wrote calc.py"
    assert result.input_tokens > 0 and result.output_tokens > 0
    body = server.model_requests[0].body
    assert body["temperature"] == 0.0 and body["top_k"] == 20
    if wire == "chat":
        assert body["max_tokens"] == 900 and body["reasoning_effort"] == "low"
    else:
        assert body["max_output_tokens"] == 900 and body["reasoning"] == {"effort": "low"}


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_unstreamed_requests_run_the_same_loop(scripted_model_server, repo, wire):
    server = scripted_model_server([reply(thinking("Plan."), text("Writing."),
                                          tool_call("write_file", {"path": "n.txt", "content": "n\n"})),
                                    reply(text("done"))])
    backend = make_backend(server, wire, stream=False)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert (repo / "n.txt").read_text() == "n\n"
    assert [m.type for m in messages if m.type in (MessageType.THINKING, MessageType.TEXT)][:2] == [
        MessageType.THINKING, MessageType.TEXT]
    assert all(r.body.get("stream") in (None, False) for r in server.model_requests)
    assert backend.usage().output_tokens > 0


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_custom_tools_and_structured_output(scripted_model_server, repo, wire):
    class Summary(BaseModel):
        title: str
        files_changed: int

    def lookup_version(package: str) -> str:
        """Version of a package."""
        return f"{package}==1.2.3"

    server = scripted_model_server([
        reply(tool_call("lookup_version", {"package": "rich"}),
              tool_call("final_result", {"title": "Pin", "files_changed": "many"})),
        reply(tool_call("final_result", {"title": "Pin", "files_changed": 0})),
    ])
    agent = make_agent(server, wire, tools=[lookup_version])
    result = await agent.execute("Pin rich", cwd=repo, output_type=Summary, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Summary(title="Pin", files_changed=0)
    (_, version), (_, invalid) = tool_results(server.model_requests[1])
    assert version == "rich==1.2.3" and "files_changed" in invalid


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_refusal_and_reasoning(scripted_model_server, repo, wire):
    server = scripted_model_server([refusal_reply("I can't help with that.")])
    result = await make_agent(server, wire).execute("Do harm", cwd=repo)
    assert result.status is CodingStatus.REFUSED and "can't help" in (result.refusal_reason or "")

    server = scripted_model_server([reply(thinking("First the file."), tool_call("list_directory", {})),
                                    reply(text("done"))])
    backend = make_backend(server, wire)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Look")
    finally:
        await backend.disconnect()
    assert [m.content for m in messages if m.type is MessageType.THINKING] == ["First the file."]
    assert "First the file." not in json.dumps(server.model_requests[1].body)  # never sent back


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_patch_and_analysis_mode_with_the_tools(scripted_model_server, repo, wire):
    """openai_context="tools": the harness runs read-only and the proposal is its final_result;
    agenter applies it."""
    proposal = {"summary": "Say hi.", "files": [{"path": "app.py", "operation": "modify", "new_path": None,
                                                  "diff": None, "search_replace": None,
                                                  "content": "def greet():\n    return 'hi'\n"}]}
    server = scripted_model_server([reply(tool_call("read_file", {"path": "app.py"})),
                                    reply(tool_call("final_result", proposal))])
    agent = make_agent(server, wire, mode="patch", openai_context="tools")
    result = await agent.execute("Make greet say hi", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    names = tool_names(server.model_requests[0])
    assert "read_file" in names and "final_result" in names
    assert not {"write_file", "edit_file", "delete_file"} & set(names)

    server = scripted_model_server([reply(text("greet returns hello."))])
    result = await make_agent(server, wire, mode="analysis", openai_context="tools").execute("What?", cwd=repo)
    assert result.status is CodingStatus.COMPLETED and result.summary == "greet returns hello."
    assert "tools" in server.model_requests[0].body


def test_the_path_follows_the_mode_and_openai_context():
    options = {"base_url": "http://127.0.0.1:9/v1", "api_key": "k", "model": "m"}
    auto = AutonomousCodingAgent(backend="openai", **options)
    assert auto.mode == "autonomous" and auto.capabilities.native_tool_loop
    patch = OpenAICompatBackend(AutonomousCodingAgent(backend="openai", mode="patch", **options)._settings)
    tools = OpenAICompatBackend(AutonomousCodingAgent(backend="openai", mode="patch", openai_context="tools",
                                                      **options)._settings)
    # The session reads the running backend's capabilities: the context path remembers no
    # conversation and reads no file itself, so patch mode repeats the task and shows the files.
    assert patch.context_path and not patch.capabilities.resume and not patch.capabilities.filesystem_read
    assert not tools.context_path and tools.capabilities.resume and tools.capabilities.filesystem_read
    assert OpenAICompatBackend.capabilities.resume  # the class keeps what the tool loop can do

    def lookup(name: str) -> str:
        """Look something up."""
        return name

    with pytest.raises(ConfigurationError, match="openai_context='tools'"):
        AutonomousCodingAgent(backend="openai", mode="patch", tools=[lookup], **options)
    AutonomousCodingAgent(backend="openai", mode="patch", openai_context="tools", tools=[lookup], **options)
    AutonomousCodingAgent(backend="openai", tools=[lookup], **options)
    with pytest.raises(ConfigurationError, match="need sandbox=True"):
        AutonomousCodingAgent(backend="openai", sandbox=False, permissions=["deny network"], **options)


# ---------------------------------------------------------------------------------------------
# Tool calls written in the reply (the harness's text tool-call mode, textcalls.py)


def text_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_text_tool_calls_read_edit_run_the_test_and_finish(scripted_model_server, repo, wire):
    """openai_tool_calls="text": the multi-step task a small local model is given (read a file,
    edit it, run the test with bash, finish), every call written in the reply."""
    (repo / "test_app.py").write_text("from app import greet\n\ndef test_greet():\n    assert greet() == 'hi'\n")
    server = scripted_model_server([
        reply(text("I will read it first.\n" + text_call("read_file", {"path": "app.py"}))),
        reply(text(text_call("edit_file", {"path": "app.py", "old_string": "'hello'", "new_string": "'hi'"}))),
        # A bare object starting a line (what llama.cpp leaves of the tags) is a call too.
        reply(text(json.dumps({"name": "bash", "arguments": {"command": "python -m pytest -q test_app.py"}}))),
        reply(text("The test passes.")),
    ])
    result = await make_agent(server, wire, openai_tool_calls="text", temperature=0.0).execute(
        "Make greet() return 'hi' and run the test", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert result.summary == "The test passes."
    first, _, third, fourth = (r.body for r in server.model_requests)
    assert "tools" not in first  # described in the system prompt instead
    system = first["messages"][0]["content"] if wire == "chat" else first["instructions"]
    assert "# Tools" in system and "<tool_call>" in system and "edit_file(" in system
    # Declining is for harmful or impossible tasks only: a small model called refuse_task with
    # the failing tests as its reason.
    assert "or failing tests, is not a reason to decline" in system
    # refuse_task's first sentence only: the instructions above say when to decline.
    assert "- refuse_task(reason: string, category?: string)\n  Decline the task instead of doing it, with the " \
        "reason.\n" in system and "never because it is hard" not in system
    # agenter's own tools get one sentence each: the model reads the section on every request.
    assert "- read_file(path: string, start_line?: integer, end_line?: integer)\n  Read a text file.\n" in system
    assert "Path relative to the working directory." not in system and len(system) < 3700
    if wire == "chat":
        assert first["stop"] == ["<tool_response>"]
    else:
        assert "stop" not in first  # the Responses API takes no stop sequences
    sent = json.dumps(fourth)
    assert "<tool_response>" in sent and "1 passed" in sent
    assert "<tool_call>" in json.dumps(third)  # earlier calls go back in the tagged form


@agent_test
async def test_automatic_mode_switches_to_text_calls(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text('Let me write it.\n```json\n{"name": "write_file", "arguments": {"path": "n.txt", '
                   '"content": "n\\n"}}\n```')),
        reply(text("Done.")),
    ])
    backend = make_backend(server, "chat")  # openai_tool_calls="auto", the default
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Write n.txt")
    finally:
        await backend.disconnect()
    assert (repo / "n.txt").read_text() == "n\n"
    notes = [m.content for m in messages if m.type is MessageType.STATUS]
    assert any("wrote its tool calls in its reply" in n and "openai_tool_calls='text'" in n for n in notes)
    first, second = (r.body for r in server.model_requests)
    assert "tools" in first and "tools" not in second and "# Tools" in second["messages"][0]["content"]
    assert invariant_violations(backend.messages) == []

    # "native" never reads calls from the text: the reply is the model's answer.
    server = scripted_model_server([reply(text(text_call("write_file", {"path": "m.txt", "content": "m"})))])
    backend = make_backend(server, "chat", openai_tool_calls="native")
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "Write m.txt")
    finally:
        await backend.disconnect()
    assert not (repo / "m.txt").exists() and len(server.model_requests) == 1


@agent_test
async def test_a_text_call_that_cannot_be_read_goes_back_with_the_error(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text('<tool_call>\n{"name": "write_file", "arguments": {"path": "x.txt", "content": }\n</tool_call>')),
        reply(text(text_call("write_flie", {"path": "x.txt", "content": "x"}))),
        reply(text(text_call("write_file", {"path": "x.txt", "content": "x"}))),
        reply(text("Done.")),
    ])
    result = await make_agent(server, "chat", openai_tool_calls="text").execute("Write x.txt", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "x.txt").read_text() == "x"
    second, third = (json.dumps(r.body) for r in server.model_requests[1:3])
    assert "Your tool call could not be used" in second and "not valid JSON" in second
    assert "Your tool call could not be used" in third and "write_flie" in third


@agent_test
async def test_text_tool_calls_give_a_files_text_and_an_edits_texts_as_code_blocks(scripted_model_server, repo):
    """openai_tool_calls="text" on Chat Completions: long text goes as code blocks after the call
    (a small model cannot JSON-escape a whole file), in the replies and in the history sent back."""
    module = 'import sys\n\n\ndef count_words(text):\n    return len(text.split())\n'
    server = scripted_model_server([
        # What Qwen2.5-Coder-1.5B wrote (llama.cpp drops the tags): the call, then the file in a block.
        reply(text('{"name": "write_file", "arguments": {"path": "word_count.py"}}\n```python\n' + module + "```")),
        # edit_file's old and new text in two blocks, one inside the tags and one after them.
        reply(text('<tool_call>\n{"name": "edit_file", "arguments": {"path": "app.py"}}\n```python\n'
                   "    return 'hello'\n```\n</tool_call>\n```python\n    return 'hi'\n```")),
        # The reply ended inside the block (the output limit): nothing is written, the model is told.
        reply(text('{"name": "write_file", "arguments": {"path": "cut.py"}}\n```python\ndef f():\n'),
              stop_reason="max_tokens"),
        # No block at all: the call is not made, and the model is shown the form with the block.
        reply(text('{"name": "write_file", "arguments": {"path": "cut.py"}}')),
        reply(text("Done.")),
    ])
    result = await make_agent(server, "chat", openai_tool_calls="text").execute(
        "Write word_count.py and make greet() return 'hi'", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "word_count.py").read_text() == module
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert not (repo / "cut.py").exists()
    first = server.model_requests[0].body
    assert ("Write these as code blocks, not in the JSON: write_file's content; edit_file's old_string and "
            "new_string.") in first["messages"][0]["content"]
    second, _, fourth, fifth = (json.dumps(r.body) for r in server.model_requests[1:])
    # The history shows the call in the form the model is asked for: the file's text in a block.
    assert json.dumps('{"path": "word_count.py"}}\n</tool_call>\n```python\nimport sys\n')[1:-1] in second
    assert "Your tool call could not be used: the code block for content is not closed" in fourth
    assert "cut off at the output limit" in fourth
    assert "could not be used: the call gives no content: write_file takes it as a code block" in fifth
    assert json.dumps('"arguments": {"path": "FILE"}}\n</tool_call>\n```python\n...the whole file...\n```')[1:-1] in fifth


async def test_a_code_block_without_a_call_is_answered_with_how_to_write_it_once_a_turn(scripted_model_server, repo):
    """Text mode with code edits off: a reply with the new code in a block and no call (what
    Qwen2.5-Coder-1.5B gave, twice) does not end a turn that changed nothing: the model is told
    how to write it, once. After a file changed, a block in the final answer ends the turn."""
    module = "def f():\n    return 1\n"
    server = scripted_model_server([
        reply(text("```python\n" + module + "```")),
        reply(text('{"name": "write_file", "arguments": {"path": "f.py"}}\n```python\n' + module + "```")),
        reply(text("Done: f.py now reads\n```python\n" + module + "```")),
    ])
    result = await make_agent(server, "chat", openai_tool_calls="text", text_code_edits=False).execute(
        "Write f.py", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "f.py").read_text() == module
    assert len(server.model_requests) == 3
    second = json.dumps(server.model_requests[1].body)
    assert "Your reply has a code block but no tool call, so no file has changed" in second
    third = json.dumps(server.model_requests[2].body)
    assert third.count("Your reply has a code block but no tool call") == 1


LEAP = ("DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]\n\n\ndef is_leap_year(year):\n    return year % 4 == 0\n"
        "\n\ndef days_in_year(year):\n    return 366 if is_leap_year(year) else 365\n\n\n"
        "def days_in_month(year, month):\n    return 29 if month == 2 and is_leap_year(year) else DAYS[month - 1]\n")
FIXED = "def is_leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n"


async def fix_leap_year(agent: AutonomousCodingAgent, repo: Path) -> tuple[list[Any], dict[str, Any]]:
    """The leap-year task run to COMPLETED with is_leap_year fixed and the rest of the file kept:
    its events and its result."""
    events = [e async for e in agent.stream_execute(
        "Fix `is_leap_year` in `calendar_utils.py`: 1900 is not a leap year.", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", (result["error"], [str(e.data)[:300] for e in events])
    assert (repo / "calendar_utils.py").read_text() == LEAP.replace(
        "def is_leap_year(year):\n    return year % 4 == 0\n", FIXED)
    return events, result


@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_the_task_s_files_go_with_it_and_a_code_block_of_their_functions_is_the_edit(
        scripted_model_server, repo, wire):
    """What Qwen2.5-Coder-1.5B did on the leap-year task of the real-model benchmark, four
    replies in a row: the fixed function alone in a block, no call. In text mode the file the
    task names goes with it, and the block is read as a write_file call: the function is
    replaced, the rest of the file stays, the events and the history show a write_file call."""
    (repo / "calendar_utils.py").write_text(LEAP)
    server = scripted_model_server([
        reply(text("```python\n" + FIXED + "```")),
        # An explanation that quotes the fixed function as the file now has it: text, no nudge.
        reply(text("I fixed it:\n```python\n" + FIXED + "```")),
    ])
    # text_edits_end_turn=False: the model hears the write's result (by default the turn ends
    # at the edit: the next test).
    agent = make_agent(server, wire, openai_tool_calls="text", text_edits_end_turn=False)
    events, result = await fix_leap_year(agent, repo)
    assert list(result["files"]) == ["calendar_utils.py"]
    first = json.dumps(server.model_requests[0].body)
    assert "The files named above, as they are now (each path, then its text):\\n\\ncalendar_utils.py\\n```python\\nDAYS" \
        in first
    # The message's last words say how to answer: an explanation, then the file in a block.
    assert first.index("Explain what to change, then give the changed file") > first.index("def days_in_month")
    assert [e.data["tool_name"] for e in events if e.data.get("message_type") == "tool_call"] == ["write_file"]
    assert any("the reply's code block replaces is_leap_year in calendar_utils.py" in str(e.data) for e in events)
    second = json.dumps(server.model_requests[1].body)
    assert '{\\"name\\": \\"write_file\\", \\"arguments\\": {\\"path\\": \\"calendar_utils.py\\"}}' in second
    assert len(server.model_requests) == 2


@pytest.mark.parametrize("wire", WIRES)
async def test_a_reply_of_code_block_edits_ends_the_turn_and_the_validators_judge_it(
        scripted_model_server, repo, wire):
    """By default (text_edits_end_turn) a reply that is only code blocks, all written as edits,
    ends the turn, as an edit-format tool's reply does: one request, not a second one only for
    the model to say it is done. The validators judge it; their findings come back next."""
    (repo / "calendar_utils.py").write_text(LEAP)
    wrong = FIXED.replace(" or year % 400 == 0", "")
    server = scripted_model_server([reply(text("```python\n" + wrong + "```")),
                                    reply(text("```python\n" + FIXED + "```"))])
    check = CommandValidator([sys.executable, "-c", "import calendar_utils as c; assert c.is_leap_year(2000), '2000'"])
    agent = make_agent(server, wire, openai_tool_calls="text", validators=[check])
    events, result = await fix_leap_year(agent, repo)
    assert result["iterations"] == 2 and len(server.model_requests) == 2  # one request per attempt
    assert any("the turn ends there (text_edits_end_turn)" in str(e.data.get("content")) for e in events)
    retry = json.dumps(server.model_requests[1].body)
    assert "AssertionError: 2000" in retry


async def test_the_same_broken_call_again_ends_the_turn_and_the_retry_starts_afresh(scripted_model_server, repo):
    """What Qwen2.5-Coder-1.5B did on the caesar task of the real-model benchmark: a write_file
    call with the file in its JSON, docstring quotes unescaped, and after the repair message the
    same reply word for word, eight times, until the time budget ran out. The second identical
    reply ends the turn; the validators' findings start the retry, where the model writes it."""
    (repo / "calendar_utils.py").write_text(LEAP)
    broken = ('<tool_call>\n{"name": "write_file", "arguments": {"path": "calendar_utils.py", "content": '
              '"def is_leap_year(year):\\n    """Whether."""\\n    return True"}}\n</tool_call>')
    fixed = LEAP.replace("def is_leap_year(year):\n    return year % 4 == 0\n", FIXED)
    server = scripted_model_server([
        reply(text(broken)), reply(text(broken)),
        reply(text('<tool_call>\n{"name": "write_file", "arguments": {"path": "calendar_utils.py"}}\n</tool_call>\n'
                   "```python\n" + fixed + "```\n")), reply(text("Done.")),
    ])
    check = CommandValidator([sys.executable, "-c", "import calendar_utils as c; assert not c.is_leap_year(1900)"])
    agent = make_agent(server, "chat", openai_tool_calls="text", validators=[check])
    events = [e async for e in agent.stream_execute("Fix `is_leap_year` in `calendar_utils.py`.", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", result["error"]
    assert (repo / "calendar_utils.py").read_text() == fixed
    assert len(server.model_requests) == 4 and result["iterations"] == 2  # not a third broken request
    assert any("the same tool call that could not be read again" in str(e.data.get("content")) for e in events)
    second, third = (json.dumps(r.body) for r in server.model_requests[1:3])
    assert "Leave the text out of the JSON" in second
    assert "Leave the text out of the JSON" in third and "AssertionError" in third


async def test_code_blocks_as_edits_pass_the_sandbox_and_unplaced_blocks_are_explained(scripted_model_server, repo):
    """A labelled block outside allowed_write_paths is refused like any write (named in the
    result); a block of functions no file has is explained to the model once, then a labelled
    block writes the new file; a final answer that shows the file as it is changes nothing."""
    module = "def count(text):\n    return len(text.split())\n"
    server = scripted_model_server([
        reply(text("app.py\n```python\ndef greet():\n    return 'hi'\n```")),
        reply(text("```python\n" + module + "```")),
        reply(text("Here it is.\n\nsrc/word_count.py\n```python\n" + module + "```")),
        reply(text("Done. src/word_count.py:\n```python\n" + module + "```")),
    ])
    agent = make_agent(server, "chat", openai_tool_calls="text")
    result = await agent.execute("Write src/word_count.py with count(text).", cwd=repo, allowed_write_paths=["src/"])
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hello'\n"
    assert (repo / "src" / "word_count.py").read_text() == module
    assert len(server.model_requests) == 3  # the written block ended the turn (text_edits_end_turn)
    second, third = (json.dumps(r.body) for r in server.model_requests[1:3])
    assert "writes are limited to: src/" in second
    assert ("Some code blocks of your reply were not written to a file: the block that defines count was not "
            "written: no file the task names or you have read defines any of them. Put the file's path on the line before "
            "the block.") in third
    assert any(r["rule"] == "allowed_write_paths" for r in result.permission_denials)


# ---------------------------------------------------------------------------------------------
# The permission gate: the four hostile attempts, on both wires


@pytest.fixture
def hostile_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A repository a force push would rewrite, and HOME with a fake private key (agenter.testing._scene)."""
    home = private_home(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    return diverged_repo(tmp_path), home


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_hostile_attempts_are_denied_and_nothing_happens(scripted_model_server, hostile_setup, wire):
    repo, home = hostile_setup
    head = remote_head(repo)
    server = scripted_model_server()
    hostile = harness_hostile_calls(home, f"{server.base_url}/install.sh")
    server.add(reply(*[tool_call(name, arguments) for name, arguments, _ in hostile]),
               reply(tool_call("read_file", {"path": "app.py"})),
               reply(text("I could not do the risky parts.")))
    events = [e async for e in make_agent(server, wire).stream_execute("Do the task.", cwd=repo,
                                                                         require_changes=False)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", (result["error"], [str(e.data)[:300] for e in events])
    sent = tool_results(server.model_requests[1])
    assert len(sent) == len(hostile)
    for (_, content), (name, _, why) in zip(sent, hostile, strict=True):
        assert content.startswith("Permission denied") and why in content, (name, content)
    assert "return 'hello'" in tool_results(server.model_requests[2])[0][1]
    assert len(result["permission_denials"]) == len(hostile)
    ran = [e.data["tool_name"] for e in events if e.data.get("message_type") == "tool_call"]
    assert ran == ["read_file"]
    assert not (repo / HOOK).exists()
    assert remote_head(repo) == head
    assert all(r.path != "/install.sh" for r in server.requests)
    assert "FAKE-KEY-MATERIAL" not in json.dumps([r.body for r in server.model_requests])
    assert result["files"] == {}


# ---------------------------------------------------------------------------------------------
# Faults: 5xx, dropped streams, a hung model, auth


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_5xx_is_retried_then_a_transient_backend_error(scripted_model_server, repo, wire):
    server = scripted_model_server([http_error(503), reply(tool_call("write_file", {"path": "a.txt", "content": "a"})),
                                    reply(text("done"))])
    backend = make_backend(server, wire)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert [m.content for m in messages if m.type is MessageType.STATUS][0].startswith("retrying after 503")
    assert (repo / "a.txt").read_text() == "a"

    server = scripted_model_server(default=http_error(500, "model crashed"))
    backend = make_backend(server, wire, max_retries=2)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert caught.value.status_code == 500 and caught.value.kind == "transient"
    assert "OpenAI-compatible API error 500" in str(caught.value) and "3 attempts" in str(caught.value)
    assert "model crashed" in str(caught.value) and len(server.model_requests) == 3
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_llama_cpp_context_size_error_is_context_length(scripted_model_server, repo):
    body = {"error": {"code": 400, "message": "request (5000 tokens) exceeds the available context size (4096 tokens)",
                      "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}
    server = scripted_model_server([http_error(400, body=body)])
    backend = make_backend(server, "chat")
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "go")  # only the task: nothing to compact
    finally:
        await backend.disconnect()
    assert caught.value.kind == "context_length" and caught.value.status_code == 400
    assert len(server.model_requests) == 1


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_dropped_stream_is_retried_and_its_tokens_counted(scripted_model_server, repo, wire):
    server = scripted_model_server([
        disconnect(after_events=4, reply=reply(text("a partial answer that gets cut off " * 30))),
        reply(tool_call("write_file", {"path": "b.txt", "content": "b"})),
        reply(text("done")),
    ])
    result = await make_agent(server, wire).execute("go", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "b.txt").read_text() == "b" and len(server.model_requests) == 3

    server = scripted_model_server(default=disconnect(after_events=2))
    result = await make_agent(server, wire, max_retries=1).execute("go", cwd=repo)
    assert result.status is CodingStatus.ERROR and "unreachable after 2 attempts" in (result.error or "")
    # The dropped attempts' prompts were spent: estimated and counted.
    assert result.input_tokens > 0


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_hung_model_stops_at_the_time_budget(scripted_model_server, repo, wire):
    server = scripted_model_server([hang(60)])
    started = time.monotonic()
    result = await make_agent(server, wire, budget=Budget(max_time_seconds=1.5)).execute("go", cwd=repo)
    elapsed = time.monotonic() - started
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert elapsed < 1.5 + 2.0, elapsed
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftovers == []

    # Hung mid-stream: the tokens of the cancelled response are counted (estimated).
    stall = reply(text("this response goes silent after a while " * 40))
    server = scripted_model_server([hang(60, after_events=40, reply=stall)])
    started = time.monotonic()
    result = await make_agent(server, wire, budget=Budget(max_time_seconds=1.5)).execute("go", cwd=repo)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and time.monotonic() - started < 3.5
    assert result.input_tokens > 0 and result.output_tokens > 0


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_request_cancelled_while_the_model_works_counts_its_prompt_as_an_estimate(scripted_model_server,
                                                                                         repo, wire):
    """Through execute(): a paid API bills the prompt of a request it received, so the time
    budget cancelling a request the model never answers (not even a response header) still
    counts its prompt, marked as agenter's estimate; an HTTP error answer counts nothing. The
    budget is set past this machine's time to a request (a run measures it, once the imports are
    done), so the request is sent before the budget ends."""
    arrived: list[float] = []

    def note(request: Any) -> None:
        arrived.append(time.monotonic())
        return None  # the script answers

    warm = scripted_model_server([reply(text("ok")), reply(text("ok"))], handler=note)
    await make_agent(warm, wire).execute("Say ok.", cwd=repo, require_changes=False)  # the imports, once
    began = time.monotonic()
    first = await make_agent(warm, wire).execute("Say ok.", cwd=repo, require_changes=False)
    assert first.ok and first.estimated_tokens == 0, first  # the scripted server reports usage
    budget = max(2.0, 3 * (arrived[1] - began))
    server = scripted_model_server(default=hang())
    result = await make_agent(server, wire, budget=Budget(max_time_seconds=budget)).execute("Read app.py.", cwd=repo)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time", result
    (sent,) = server.model_requests
    body_tokens = len(sent.raw_body) / 4  # the wire's own estimate: its prompt before the wire's framing
    assert 0.6 * body_tokens < result.input_tokens <= body_tokens, (result, body_tokens)
    assert result.output_tokens == 0 and result.estimated_input_tokens == result.input_tokens
    assert result.estimated_tokens == result.total_tokens

    server = scripted_model_server(default=http_error(500, "model crashed"))
    failed = await make_agent(server, wire, max_retries=1).execute("Read app.py.", cwd=repo)
    assert failed.status is CodingStatus.ERROR and len(server.model_requests) == 2, failed
    assert failed.total_tokens == 0, failed  # two error answers: nothing billed


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_auth_failure_is_not_retried_and_never_shows_the_key(scripted_model_server, repo, wire):
    server = scripted_model_server([http_error(401, f"Incorrect API key provided: {API_KEY}")])
    events = [e async for e in make_agent(server, wire).stream_execute("go", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "error" and "authentication failed (401)" in result["error"]
    assert API_KEY not in json.dumps([e.model_dump(mode="json") for e in events])
    assert len(server.model_requests) == 1
    assert server.model_requests[0].headers.get("authorization") == f"Bearer {API_KEY}"


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_cut_off_response_is_continued(scripted_model_server, repo, wire):
    server = scripted_model_server([
        reply(text("The first half of a long"), stop_reason="max_tokens"),
        reply(text("done")),
    ])
    backend = make_backend(server, wire, max_tokens=64)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert any(m.type is MessageType.STATUS and "cut off" in m.content for m in messages)
    assert "cut off at the output limit" in json.dumps(server.model_requests[1].body)


@agent_test
async def test_a_response_cut_off_while_repeating_itself_is_left_out_not_continued(scripted_model_server, repo):
    """Measured on min stack: the model wrote the class's methods over and over until max_tokens
    cut it; asked to continue, it went on repeating until the time budget ran out. Now the
    repetition is left out of the conversation (one round kept), the model is told, and it is
    not asked to continue; a second such response ends the turn."""
    loop = "".join(f"{n}. Added a check that the code has no spaces.\n" for n in range(1, 40)) + "40. Added a ch"
    block = "app.py\n```python\ndef greet():\n    return 'hi'\n```"
    server = scripted_model_server([reply(text("Here is the plan:\n" + loop), stop_reason="max_tokens"),
                                    reply(text(block))])
    events = [e async for e in make_agent(server, "chat", openai_tool_calls="text", max_tokens=64).stream_execute(
        "Make greet() in app.py return 'hi'", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", result["error"]
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    second = json.dumps(server.model_requests[1].body)
    assert "Your last response kept repeating the same lines, so it was cut off" in second
    assert "cut off at the output limit. Continue" not in second
    assert "1. Added a check" in second and "4. Added a check" not in second  # one round kept
    assert server.model_requests[1].body["max_tokens"] == 64  # not raised, as for a long answer
    assert any("while repeating the same lines" in str(e.data.get("content")) for e in events)
    # Repeating again after being told: the turn ends (no third request), the run fails truthfully.
    server = scripted_model_server([reply(text(loop), stop_reason="max_tokens")] * 3)
    result = await make_agent(server, "chat", openai_tool_calls="text", budget=Budget(max_iterations=1)).execute(
        "Make greet() in app.py return 'hi'", cwd=repo)
    assert result.status is CodingStatus.FAILED and len(server.model_requests) == 2



@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_response_that_repeats_itself_is_stopped_while_it_streams(scripted_model_server, repo, wire):
    """The same loop without an output limit near: agenter stops the stream once it repeats
    (RepetitionWatch) instead of letting the model run to the limit, then goes on as at a cut."""
    methods = "    def pop(self):\n        return self.stack.pop()\n\n    def peek(self):\n        return self.stack[-1]\n\n"
    block = "app.py\n```python\ndef greet():\n    return 'hi'\n```"
    server = scripted_model_server([reply(text("```python\nclass MinStack:\n" + methods * 300 + "```")),
                                    reply(text(block))])
    events = [e async for e in make_agent(server, wire, openai_tool_calls="text").stream_execute(
        "Make greet() in app.py return 'hi'", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", result["error"]
    assert any("response stopped by agenter while repeating the same lines" in str(e.data.get("content"))
               for e in events)
    second = json.dumps(server.model_requests[1].body)
    assert "Your last response kept repeating the same lines" in second
    assert second.count("def peek(self)") <= 2  # what streamed before the stop, one round of it kept


# ---------------------------------------------------------------------------------------------
# The backend contract (agenter.testing.conformance) in autonomous mode, on both wires


class OpenAIHarness:
    """Plays the conformance scenarios through the scripted server's OpenAI wires with the tool
    loop: "shell" runs the command with the bash tool, confined (sandbox=True)."""

    capabilities = OpenAICompatBackend.capabilities

    def __init__(self, start_server: Any, wire: str):
        self.start_server = start_server
        self.wire = wire

    def supports(self, scenario: str) -> bool:
        return scenario in ("write", "shell", "refuse", "output", "fail", "usage", "hang")

    def make(self, scenario: str, cwd: Path) -> OpenAICompatBackend:
        usage = {"input_tokens": 1200, "output_tokens": 40}
        scripts: dict[str, Any] = {
            "write": [reply(tool_call("write_file", {"path": conformance.WRITE_PATH,
                                                     "content": conformance.WRITE_CONTENT})), reply(text("done"))],
            "shell": [reply(tool_call("bash", {"command": conformance.SHELL_COMMAND})), reply(text("done"))],
            "refuse": [reply(tool_call("refuse_task", {"reason": conformance.REFUSAL_REASON}))],
            "output": [reply(tool_call("final_result", conformance.OUTPUT_VALUE))],
            "usage": [reply(tool_call("list_directory", {}), usage=usage), reply(text("done"), usage=usage)],
            "hang": [hang()],
        }
        if scenario == "fail":
            return make_backend(self.start_server(default=http_error(500, "scripted failure")), self.wire,
                                max_retries=0)
        return make_backend(self.start_server(scripts[scenario]), self.wire)


@agent_test
@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, wire, scripted_model_server, tmp_path):
    await check(OpenAIHarness(scripted_model_server, wire), tmp_path)


# ---------------------------------------------------------------------------------------------
# Unit tests: requests and streams


def _conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                                          {"type": "text", "text": "Reading."},
                                          {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "A", "is_error": True},
                                     {"type": "text", "text": "continue"}]},
        {"role": "user", "content": "a summary as a string"},
    ]


def test_conversation_as_chat_messages_and_responses_items():
    assert chat_messages("SYS", _conversation()) == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "user", "content": "continue"},
        {"role": "user", "content": "a summary as a string"},
    ]
    assert responses_input(_conversation()) == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Reading."},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path": "a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "A"},
        {"role": "user", "content": "continue"},
        {"role": "user", "content": "a summary as a string"},
    ]


def test_request_parameters_on_each_wire():
    tools = [{"name": "t", "description": "d", "input_schema": {"type": "object"}}]
    request = WireRequest(system="S", messages=[{"role": "user", "content": "q"}], max_tokens=100, tools=tools,
                          tool_choice="any", temperature=0.2, effort="high",
                          output_schema={"title": "My Out", "type": "object"})
    official = ChatWire(None, model="gpt-5", official=True).params(request)
    assert official["max_completion_tokens"] == 100 and "max_tokens" not in official
    assert official["tool_choice"] == "required" and official["reasoning_effort"] == "high"
    assert official["response_format"]["json_schema"]["name"] == "My_Out"
    assert official["tools"] == [{"type": "function", "function": {"name": "t", "description": "d",
                                                                  "parameters": {"type": "object"}}}]
    local = ChatWire(None, model="q", official=False).params(request)
    assert local["max_tokens"] == 100 and "max_completion_tokens" not in local
    responses = ResponsesWire(None, model="gpt-5", official=True).params(request)
    assert responses["store"] is False and responses["max_output_tokens"] == 100
    assert responses["instructions"] == "S" and responses["reasoning"] == {"effort": "high"}
    assert responses["tools"] == [{"type": "function", "name": "t", "description": "d",
                                   "parameters": {"type": "object"}, "strict": False}]
    assert responses["text"]["format"]["type"] == "json_schema"
    unlimited = ChatWire(None, model="q", official=False).params(WireRequest(system="", messages=[], max_tokens=0))
    assert not {"max_tokens", "temperature", "tools", "response_format", "reasoning_effort"} & set(unlimited)
    with pytest.raises(ValueError, match="provider-defined"):
        ChatWire(None, model="q", official=False).params(
            WireRequest(system="", messages=[], max_tokens=1, tools=[{"type": "text_editor_20250728", "name": "e"}]))


def _chunk(content: str | None = None, calls: list | None = None, finish: str | None = None) -> Any:
    delta = SimpleNamespace(content=content, tool_calls=calls, refusal=None, reasoning_content=None)
    return SimpleNamespace(usage=None, choices=[SimpleNamespace(delta=delta, finish_reason=finish)])


def _call(index: int, arguments: str, id: str | None = None, name: str | None = None) -> Any:
    return SimpleNamespace(index=index, id=id, function=SimpleNamespace(name=name, arguments=arguments))


def test_chat_stream_accumulates_tool_calls_and_drops_a_cut_off_one():
    reader = ChatReader(0)
    for chunk in [_chunk("Writing"), _chunk(calls=[_call(0, "", "c1", "write_file")]),
                  _chunk(calls=[_call(0, '{"path": ')]), _chunk(calls=[_call(0, '"a.py"}')]),
                  _chunk(calls=[_call(1, '{"path": "b.py", "content": "unfini', "c2", "write_file")]),
                  _chunk(finish="length")]:
        reader.feed(chunk)
    response = reader.finished()[-1]
    assert response.stop == "max_tokens" and response.stop_detail == "length"
    assert [b["type"] for b in response.content] == ["text", "tool_use"]
    assert response.content[1] == {"type": "tool_use", "id": "c1", "name": "write_file", "input": {"path": "a.py"}}

    reader = ChatReader(0)
    for chunk in [_chunk(calls=[_call(0, '{"path": ', "c1", "read_file")]), _chunk(finish="stop")]:
        reader.feed(chunk)
    response = reader.finished()[-1]
    # A complete call whose arguments are not JSON is kept and named; "stop" with calls is tool_use.
    assert response.stop == "tool_use" and response.content[0]["input"] == {}
    assert "not valid JSON" in response.input_errors["c1"]

    # A server that numbers no call: a piece with an id starts one, a piece without continues it;
    # a call without an id gets one.
    reader = ChatReader(0)
    for chunk in [_chunk(calls=[_call(None, '{"path":', "c1", "read_file")]), _chunk(calls=[_call(None, ' "a"}')]),
                  _chunk(calls=[_call(None, "{}", None, "list_directory")]), _chunk(finish="tool_calls")]:
        reader.feed(chunk)
    first, second = reader.finished()[-1].content
    assert first == {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a"}}
    assert second["name"] == "list_directory" and second["id"].startswith("call_")


def test_module_import_is_light():
    code = ("import sys, agenter.backends.model_api.openai_compat; "
            "print('openai' in sys.modules, 'genai_prices' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[4])})
    assert out.stdout.split() == ["False", "False"], out.stderr


async def test_a_reply_that_quotes_a_file_as_it_is_is_an_answer_not_a_missed_edit(scripted_model_server, repo):
    """Measured on the retry of the leap-year task: the model explained, quoting the function as
    the file has it. That block is a quote: nothing is written and the model is not told its
    block names no file (which made it answer with nothing)."""
    server = scripted_model_server([reply(text("greet() already reads:\n```python\ndef greet():\n"
                                               "    return 'hello'\n```"))])
    result = await make_agent(server, "chat", openai_tool_calls="text").execute(
        "Does greet() in app.py return 'hello'?", cwd=repo, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert len(server.model_requests) == 1 and (repo / "app.py").read_text() == "def greet():\n    return 'hello'\n"


GREET_HI = "def greet():\n    return 'hi'\n"


async def answered_once(scripted_model_server: Any, repo: Path, first: str, then: str) -> tuple[Any, list[Any]]:
    """Text mode, "make greet() return 'hi'": the model's `first` reply is answered (a second
    request), `then` writes app.py, and the run completes. The server and the run's events."""
    server = scripted_model_server([reply(text(first)), reply(text(then))])
    events = [e async for e in make_agent(server, "chat", openai_tool_calls="text").stream_execute(
        "Make greet() in app.py return 'hi'", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", result["error"]
    assert (repo / "app.py").read_text() == GREET_HI
    assert len(server.model_requests) == 2
    return server, events


async def test_an_empty_reply_before_any_change_is_answered_once_with_what_to_write(scripted_model_server, repo):
    """Measured on three of nine benchmark tasks: the model began its reply with `<tool_response>`,
    which the stop sequence cut to nothing, and the turn ended having changed nothing. In text
    mode an empty reply in a turn that has changed no file is answered, once, with what to write."""
    server, events = await answered_once(scripted_model_server, repo, "", "```python\n" + GREET_HI + "```")
    assert "Your reply was empty. Write the change now: the file's path on a line of its own, then its new text " \
        "in a ``` code block. If the task is done, say so instead." in json.dumps(server.model_requests[1].body)
    assert any("the model's reply was empty" in str(e.data.get("content")) for e in events)
    # Twice empty: told once, then the turn ends (the run fails, saying the agent changed no file).
    server = scripted_model_server([reply(text(""))] * 2)
    result = await make_agent(server, "chat", openai_tool_calls="text", budget=Budget(max_iterations=1)).execute(
        "Make greet() in app.py return 'hi'", cwd=repo)
    assert result.status is CodingStatus.FAILED and len(server.model_requests) == 2


@agent_test
async def test_a_reply_that_stops_at_the_code_it_announces_is_answered_once(scripted_model_server, repo):
    """Measured on three benchmark retries: "Here's the updated `median` function:", then
    `<tool_response>`, cut there by the stop sequence; the attempt ended with nothing written. In
    text mode such a reply (no call, no block, a colon last) in a turn that changed no file is
    answered once with what to write. A reply that ends otherwise ends the turn as before."""
    server, events = await answered_once(scripted_model_server, repo,
                                         "greet returns the wrong word. Here's the updated function:",
                                         "app.py\n```python\n" + GREET_HI + "```")
    assert "Your reply stops before the code it announces, so no file has changed." in json.dumps(
        server.model_requests[1].body)
    assert any("announcing code that never came" in str(e.data.get("content")) for e in events)
    server = scripted_model_server([reply(text("The code is right as it is."))])
    result = await make_agent(server, "chat", openai_tool_calls="text", budget=Budget(max_iterations=1)).execute(
        "Make greet() in app.py return 'hi'", cwd=repo)
    assert result.status is CodingStatus.FAILED and len(server.model_requests) == 1


@agent_test
async def test_a_model_that_never_calls_a_tool_is_told_apart_with_the_mode_to_try(scripted_model_server, repo):
    """A run whose model made no tool call names the cause and what to try: the text tool-call
    option (native mode), or patch mode (text mode, where the model ignored the format)."""
    prose = "You should change greet to return 'hi'. Then it works."
    server = scripted_model_server([reply(text(prose))] * 2)
    result = await make_agent(server, "chat", openai_tool_calls="native", budget=Budget(max_iterations=1)).execute(
        "Make greet() return 'hi'", cwd=repo)
    assert result.status is CodingStatus.FAILED
    assert "the model made no tool call; a model that writes its tool calls in its reply needs " \
           "openai_tool_calls='text'" in result.error and "mode='patch'" in result.error, result.error
    result = await make_agent(server, "chat", openai_tool_calls="text", budget=Budget(max_iterations=1)).execute(
        "Make greet() return 'hi'", cwd=repo)
    assert "the model wrote no call in the form the system prompt describes; mode='patch'" in result.error, \
        result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hello'\n"


@agent_test
async def test_calls_in_python_blocks_run_and_a_write_without_its_text_is_shown_the_form(scripted_model_server, repo):
    """The two-file-config run of the real-model benchmark (Qwen2.5-Coder-1.5B): the model wrote
    each call in a ```python block, and write_file with a path only, three times. The read runs;
    the bare write is answered with the form that carries the file, and the next reply writes it."""
    read = '```python\n{"name": "read_file", "arguments": {"path": "app.py"}}\n```'
    bare = '```python\n{"name": "write_file", "arguments": {"path": "app.py"}}\n```'
    server = scripted_model_server([
        reply(text(read)), reply(text(bare)),
        reply(text(bare + "\n```python\ndef greet():\n    return 'hi'\n```")), reply(text("Done."))])
    result = await make_agent(server, "chat", openai_tool_calls="text", text_edits_end_turn=False).execute(
        "Make greet() in app.py return 'hi'", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    second, third = (r.body["messages"][-1]["content"] for r in server.model_requests[1:3])
    assert second.startswith("<tool_response>\n     1\tdef greet():")  # the read ran
    assert "the call gives no content" in third and "...the whole file..." in third
    assert "does not say which file it is" not in json.dumps([r.body for r in server.model_requests])


async def test_with_native_calls_the_attached_files_carry_no_code_block_answer(scripted_model_server, repo):
    """attach_named_files with native tool calls: the files go with the task, but the words on
    answering with a code block are text mode's (there a block is an edit; here it is not)."""
    (repo / "calendar_utils.py").write_text(LEAP)
    server = scripted_model_server([reply(text("Nothing to change."))])
    agent = make_agent(server, "chat", attach_named_files=True)
    [e async for e in agent.stream_execute("Fix `is_leap_year` in `calendar_utils.py`.", cwd=repo)]
    first = json.dumps(server.model_requests[0].body)
    assert "calendar_utils.py\\n```python\\nDAYS" in first and "Explain what to change" not in first
