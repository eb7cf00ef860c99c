"""The litellm backend running agenter's own agent (the harness): the real backend, the real
LiteLLM library and real HTTP against the scripted model server, reached with an `openai/` model
and `api_base` (the server's Chat Completions wire), and with an `anthropic/` Claude model (its
Anthropic Messages wire: prompt caching and signed thinking as LiteLLM passes them on). Files are
checked on disk; what the model was sent is read from the requests the server received.

The context path of analysis and patch mode (litellm_context="prompt") is proven in
test_litellm.py and tests/session/test_patch_mode.py. Importing LiteLLM takes tens of
seconds on a busy machine: it is imported once, by a fixture, before the timed tests.
"""

from __future__ import annotations

import asyncio
import importlib.util
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
from agenter._types import Usage
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.model_api._harness.conversation import invariant_violations
from agenter.backends.model_api._harness.wire import WireRequest
from agenter.testing import (
    ScriptedModelServer,
    conformance,
    disconnect,
    hang,
    http_error,
    refusal_reply,
    reply,
    text,
    thinking,
    tool_call,
)
from agenter.testing._scene import HOOK, diverged_repo, harness_hostile_calls, private_home, remote_head

API_KEY = "sk-test-LITELLM-SECRET-0123456789abcdef"
MODEL = "openai/scripted-model"
CLAUDE = "anthropic/claude-sonnet-4-5"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed"),
    # LiteLLM reads pydantic fields the deprecated way on every streamed chunk, and declares
    # TypedDicts pydantic warns about.
    pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
    # The first test also waits for LiteLLM's import and first calls (the module's fixture).
    pytest.mark.timeout(300),
]
agent_test = pytest.mark.agent


@pytest.fixture(scope="module", autouse=True)
def litellm_imported() -> Any:
    """LiteLLM imported once (as the backend does: its price map kept offline), the price tables
    loaded, and one streamed call with a tool made per provider (LiteLLM imports its provider
    modules on the first call: seconds on a busy machine), so that the timed tests time the
    run, not the first imports."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from agenter.backends.model_api.litellm._wire import model_facts
    from agenter.usage import is_known_model

    async def first_calls(server: ScriptedModelServer) -> None:
        tool = {"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object"}}}
        for model, base in ((MODEL, server.openai_base_url), (CLAUDE, server.base_url)):
            stream = await litellm.acompletion(model=model, api_base=base, api_key="k", max_tokens=16, tools=[tool],
                                               messages=[{"role": "user", "content": "hi"}], stream=True)
            async for _ in stream:
                pass

    for model in (MODEL, CLAUDE):
        model_facts(litellm, model)
        is_known_model(model)
    with ScriptedModelServer(default=reply(text("ok"))) as server:
        asyncio.run(first_calls(server))
    return litellm


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


def make_agent(server: Any, model: str = MODEL, **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("max_retry_wait", 0.0)
    base = server.base_url if model.startswith("anthropic/") else server.openai_base_url
    return AutonomousCodingAgent(backend="litellm", model=model, base_url=base, **kwargs)


def make_backend(server: Any, *, model: str = MODEL, tools: list | None = None, mode: str = "autonomous",
                 **options: Any) -> Any:
    from agenter.backends.model_api.litellm import LiteLLMBackend, LiteLLMOptions

    options.setdefault("max_retry_wait", 0.0)
    base = server.base_url if model.startswith("anthropic/") else server.openai_base_url
    opts = LiteLLMOptions(api_key=API_KEY, base_url=base, **options)
    settings = BackendSettings(model=model, tools=tools or [], sandbox=True, options=opts, mode=mode)
    LiteLLMBackend.check_settings(settings)
    return LiteLLMBackend(settings)


async def run_turn(backend: Any, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


def tool_results(request: Any) -> list[tuple[str, str]]:
    """(call id, content) of the tool results at the end of a Chat Completions request."""
    trailing = []
    for message in reversed(request.body["messages"]):
        if message["role"] != "tool":
            if trailing or message["role"] == "assistant":
                break
            continue
        trailing.append((message["tool_call_id"], message["content"]))
    return trailing[::-1]


def tool_names(request: Any) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools") or []]


# ---------------------------------------------------------------------------------------------
# Files really written by the model's tool calls


@agent_test
async def test_tool_calls_write_edit_and_run_bash_on_disk(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text("Adding a module."), tool_call("write_file", {"path": "pkg/util.py", "content": "X = 1\n"}),
              tool_call("edit_file", {"path": "app.py", "old_string": "'hello'", "new_string": "'hi'"})),
        reply(tool_call("bash", {"command": "printf 'ok\\n' > made.txt && cat app.py"}),
              tool_call("read_file", {"path": "pkg/util.py"})),
        reply(text("All done.")),
    ])
    backend = make_backend(server)
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
    assert {r.wire for r in server.model_requests} == {"openai-chat"}
    # Every call was answered under its own id, in order; the bash output went back.
    (_, bash_out), (_, read_out) = tool_results(third)
    assert "return 'hi'" in bash_out and "X = 1" in read_out
    asked = [c["id"] for c in second.body["messages"][2]["tool_calls"]]
    assert len(asked) == 2 and [call_id for call_id, _ in tool_results(second)] == asked
    # LiteLLM sent the tools as function tools, streamed, usage asked for; the system prompt
    # names no absolute path; no limit and no temperature (the server's defaults).
    assert {"read_file", "write_file", "edit_file", "bash", "refuse_task"} <= set(tool_names(first))
    body = first.body
    assert body["messages"][0]["role"] == "system" and "no human will answer" in body["messages"][0]["content"]
    assert str(repo) not in json.dumps(body)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert not {"max_tokens", "max_completion_tokens", "temperature"} & set(body)
    assert first.headers.get("authorization") == f"Bearer {API_KEY}"
    usage = backend.usage()
    assert usage.input_tokens > 0 and usage.output_tokens > 0


@agent_test
async def test_facade_autonomous_run_completes_with_real_files(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})),
        reply(text("Wrote calc.py")),
    ])
    agent = make_agent(server, max_tokens=900, temperature=0.0, effort="low",
                       litellm_extra={"extra_headers": {"x-agenter-test": "yes"}})
    assert agent.mode == "autonomous" and agent.capabilities.native_tool_loop
    result = await agent.execute("Write calc.py", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"calc.py": "def add(a, b):\n    return a + b\n"}
    assert result.summary == "Wrote calc.py"
    assert result.input_tokens > 0 and result.output_tokens > 0
    request = server.model_requests[0]
    assert request.body["temperature"] == 0.0 and request.body["max_tokens"] == 900
    assert request.body["reasoning_effort"] == "low"
    assert request.headers["x-agenter-test"] == "yes"


@agent_test
async def test_unstreamed_requests_run_the_same_loop(scripted_model_server, repo):
    server = scripted_model_server([reply(thinking("Plan."), text("Writing."),
                                          tool_call("write_file", {"path": "n.txt", "content": "n\n"})),
                                    reply(text("done"))])
    backend = make_backend(server, stream=False)
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
async def test_custom_tools_and_structured_output(scripted_model_server, repo):
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
    result = await make_agent(server, tools=[lookup_version]).execute(
        "Pin rich", cwd=repo, output_type=Summary, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Summary(title="Pin", files_changed=0)
    (_, version), (_, invalid) = tool_results(server.model_requests[1])
    assert version == "rich==1.2.3" and "files_changed" in invalid


@agent_test
async def test_refusal_and_reasoning(scripted_model_server, repo):
    # Claude's refusal (LiteLLM: finish_reason content_filter, the text as content), and an OpenAI
    # refusal unstreamed (LiteLLM keeps it in provider_specific_fields; streamed, it drops it).
    server = scripted_model_server([refusal_reply("I can't help with that.")])
    result = await make_agent(server, model=CLAUDE).execute("Do harm", cwd=repo)
    assert result.status is CodingStatus.REFUSED and "can't help" in (result.refusal_reason or "")
    server = scripted_model_server([refusal_reply("I won't do that.")])
    result = await make_agent(server, stream=False).execute("Do harm", cwd=repo)
    assert result.status is CodingStatus.REFUSED and "won't do that" in (result.refusal_reason or "")

    server = scripted_model_server([reply(thinking("First the file."), tool_call("list_directory", {})),
                                    reply(text("done"))])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Look")
    finally:
        await backend.disconnect()
    assert [m.content for m in messages if m.type is MessageType.THINKING] == ["First the file."]
    # Unsigned reasoning (an OpenAI-compatible server's reasoning_content) is never sent back.
    assert "First the file." not in json.dumps(server.model_requests[1].body)


@agent_test
async def test_patch_and_analysis_mode_with_the_tools_and_on_the_context_path(scripted_model_server, repo):
    """litellm_context="tools": the harness runs read-only and the proposal is its final_result;
    the default context path still answers patch mode with one proposal."""
    proposal = {"summary": "Say hi.", "files": [{"path": "app.py", "operation": "modify", "new_path": None,
                                                  "diff": None, "search_replace": None,
                                                  "content": "def greet():\n    return 'hi'\n"}]}
    server = scripted_model_server([reply(tool_call("read_file", {"path": "app.py"})),
                                    reply(tool_call("final_result", proposal))])
    result = await make_agent(server, mode="patch", litellm_context="tools").execute("Make greet say hi", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    names = tool_names(server.model_requests[0])
    assert "read_file" in names and "final_result" in names
    assert not {"write_file", "edit_file", "delete_file"} & set(names)

    server = scripted_model_server([reply(text("greet returns hi."))])
    result = await make_agent(server, mode="analysis", litellm_context="tools").execute("What?", cwd=repo)
    assert result.status is CodingStatus.COMPLETED and result.summary == "greet returns hi."
    assert "tools" in server.model_requests[0].body

    proposal["files"][0]["content"] = "def greet():\n    return 'hey'\n"  # type: ignore[index]
    server = scripted_model_server([reply(text(json.dumps(proposal)))])
    result = await make_agent(server, mode="patch").execute("Make greet say hey", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hey'\n"
    body = server.model_requests[0].body
    assert "tools" not in body and body["response_format"]["type"] == "json_schema"


def test_the_path_follows_the_mode_and_litellm_context():
    from agenter.backends.model_api.litellm import LiteLLMBackend

    options = {"base_url": "http://127.0.0.1:9/v1", "api_key": "k", "model": MODEL}
    auto = AutonomousCodingAgent(backend="litellm", **options)
    assert auto.mode == "autonomous" and auto.capabilities.native_tool_loop
    patch = LiteLLMBackend(AutonomousCodingAgent(backend="litellm", mode="patch", **options)._settings)
    tools = LiteLLMBackend(AutonomousCodingAgent(backend="litellm", mode="patch", litellm_context="tools",
                                                 **options)._settings)
    assert patch.context_path and not patch.capabilities.resume and not patch.capabilities.filesystem_read
    assert not tools.context_path and tools.capabilities.filesystem_read

    def lookup(name: str) -> str:
        """Look something up."""
        return name

    with pytest.raises(ConfigurationError, match="litellm_context='tools'"):
        AutonomousCodingAgent(backend="litellm", mode="patch", tools=[lookup], **options)
    AutonomousCodingAgent(backend="litellm", mode="patch", litellm_context="tools", tools=[lookup], **options)
    AutonomousCodingAgent(backend="litellm", tools=[lookup], **options)
    with pytest.raises(ConfigurationError, match="need sandbox=True"):
        AutonomousCodingAgent(backend="litellm", sandbox=False, permissions=["deny network"], **options)
    with pytest.raises(ConfigurationError, match="litellm_extra may not set reasoning_effort, tools"):
        AutonomousCodingAgent(backend="litellm", litellm_extra={"tools": [], "reasoning_effort": "high"}, **options)
    with pytest.raises(ConfigurationError, match="thinking budget"):
        AutonomousCodingAgent(backend="litellm", thinking=0, **options)


# ---------------------------------------------------------------------------------------------
# Tool calls written in the reply (the harness's text tool-call mode)


def text_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@agent_test
async def test_text_tool_calls_read_edit_run_the_test_and_finish(scripted_model_server, repo):
    """litellm_tool_calls="text": read a file, edit it, run the test with bash, finish, every
    call written in the reply; LiteLLM passes the stop sequence on."""
    (repo / "test_app.py").write_text("from app import greet\n\ndef test_greet():\n    assert greet() == 'hi'\n")
    server = scripted_model_server([
        reply(text("I will read it first.\n" + text_call("read_file", {"path": "app.py"}))),
        reply(text(text_call("edit_file", {"path": "app.py", "old_string": "'hello'", "new_string": "'hi'"}))),
        reply(text(json.dumps({"name": "bash", "arguments": {"command": "python -m pytest -q test_app.py"}}))),
        reply(text("The test passes.")),
    ])
    result = await make_agent(server, litellm_tool_calls="text", temperature=0.0).execute(
        "Make greet() return 'hi' and run the test", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert result.summary == "The test passes."
    first, _, third, fourth = (r.body for r in server.model_requests)
    assert "tools" not in first  # described in the system prompt instead
    system = first["messages"][0]["content"]
    assert "# Tools" in system and "<tool_call>" in system and "edit_file(" in system
    assert first["stop"] == ["<tool_response>"]
    sent = json.dumps(fourth)
    assert "<tool_response>" in sent and "1 passed" in sent
    assert "<tool_call>" in json.dumps(third)


@agent_test
async def test_automatic_mode_switches_to_text_calls(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text('Let me write it.\n```json\n{"name": "write_file", "arguments": {"path": "n.txt", '
                   '"content": "n\\n"}}\n```')),
        reply(text("Done.")),
    ])
    backend = make_backend(server)  # litellm_tool_calls="auto", the default
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Write n.txt")
    finally:
        await backend.disconnect()
    assert (repo / "n.txt").read_text() == "n\n"
    notes = [m.content for m in messages if m.type is MessageType.STATUS]
    assert any("wrote its tool calls in its reply" in n and "litellm_tool_calls='text'" in n for n in notes)
    first, second = (r.body for r in server.model_requests)
    assert "tools" in first and "tools" not in second and "# Tools" in second["messages"][0]["content"]
    assert invariant_violations(backend.messages) == []


# ---------------------------------------------------------------------------------------------
# The permission gate: the hostile attempts (agenter.testing._scene)


@pytest.fixture
def hostile_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    home = private_home(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    return diverged_repo(tmp_path), home


@agent_test
async def test_hostile_attempts_are_denied_and_the_run_goes_on(scripted_model_server, hostile_setup):
    repo, home = hostile_setup
    head = remote_head(repo)
    server = scripted_model_server()
    hostile = harness_hostile_calls(home, f"{server.base_url}/install.sh")
    server.add(reply(*[tool_call(name, arguments) for name, arguments, _ in hostile]),
               reply(tool_call("read_file", {"path": "app.py"})),
               reply(text("I could not do the risky parts.")))
    events = [e async for e in make_agent(server).stream_execute("Do the task.", cwd=repo, require_changes=False)]
    result = events[-1].data["result"]
    assert result["status"] == "completed", result
    sent = tool_results(server.model_requests[1])
    assert len(sent) == len(hostile)
    for (_, content), (name, _, why) in zip(sent, hostile, strict=True):
        assert content.startswith("Permission denied") and why in content, (name, content)
    # The run went on: the next call ran and its result went back.
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
# Faults: 5xx, dropped streams, a hung model, auth, cut-off responses


@agent_test
async def test_a_5xx_is_retried_then_a_transient_backend_error(scripted_model_server, repo):
    server = scripted_model_server([http_error(503), reply(tool_call("write_file", {"path": "a.txt", "content": "a"})),
                                    reply(text("done"))])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert [m.content for m in messages if m.type is MessageType.STATUS][0].startswith("retrying after 503")
    assert (repo / "a.txt").read_text() == "a"

    server = scripted_model_server(default=http_error(500, "model crashed"))
    backend = make_backend(server, max_retries=2)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert caught.value.status_code == 500 and caught.value.kind == "transient"
    assert "LiteLLM error 500" in str(caught.value) and "3 attempts" in str(caught.value)
    assert "model crashed" in str(caught.value) and len(server.model_requests) == 3
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_a_dropped_stream_is_retried_and_its_tokens_counted(scripted_model_server, repo):
    server = scripted_model_server([
        disconnect(after_events=4, reply=reply(text("a partial answer that gets cut off " * 30))),
        reply(tool_call("write_file", {"path": "b.txt", "content": "b"})),
        reply(text("done")),
    ])
    events = [e async for e in make_agent(server).stream_execute("go", cwd=repo)]
    result = events[-1]._result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "b.txt").read_text() == "b" and len(server.model_requests) == 3
    assert any(e.data.get("content", "").startswith("retrying after") for e in events)

    server = scripted_model_server(default=disconnect(after_events=2))
    result = await make_agent(server, max_retries=1).execute("go", cwd=repo)
    assert result.status is CodingStatus.ERROR and "LiteLLM unreachable after 2 attempts" in (result.error or "")
    assert len(server.model_requests) == 2
    # The dropped attempts' prompts were spent: estimated and counted.
    assert result.input_tokens > 0


@agent_test
async def test_a_hung_model_stops_at_the_time_budget(scripted_model_server, repo):
    server = scripted_model_server([hang(60)])
    started = time.monotonic()
    result = await make_agent(server, budget=Budget(max_time_seconds=1.5)).execute("go", cwd=repo)
    elapsed = time.monotonic() - started
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert elapsed < 1.5 + 2.0, elapsed
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftovers == []

    # Hung mid-stream: the tokens of the cancelled response are counted (estimated).
    stall = reply(text("this response goes silent after a while " * 40))
    server = scripted_model_server([hang(60, after_events=40, reply=stall)])
    started = time.monotonic()
    result = await make_agent(server, budget=Budget(max_time_seconds=1.5)).execute("go", cwd=repo)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and time.monotonic() - started < 1.5 + 2.0
    assert result.input_tokens > 0 and result.output_tokens > 0


@agent_test
async def test_auth_failure_is_not_retried_and_never_shows_the_key(scripted_model_server, repo):
    server = scripted_model_server([http_error(401, f"Incorrect API key provided: {API_KEY}")])
    events = [e async for e in make_agent(server).stream_execute("go", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "error" and "authentication failed (401)" in result["error"]
    assert API_KEY not in json.dumps([e.model_dump(mode="json") for e in events])
    assert len(server.model_requests) == 1


@agent_test
async def test_a_cut_off_response_is_continued(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text("The first half of a long"), stop_reason="max_tokens"),
        reply(text("done")),
    ])
    backend = make_backend(server, max_tokens=64)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert any(m.type is MessageType.STATUS and "cut off" in m.content for m in messages)
    assert "cut off at the output limit" in json.dumps(server.model_requests[1].body)


# ---------------------------------------------------------------------------------------------
# A Claude model through LiteLLM's Anthropic provider: caching, thinking, LiteLLM's price


@agent_test
async def test_claude_through_litellm_caches_thinks_and_is_priced_by_litellm(scripted_model_server, repo,
                                                                             litellm_imported):
    server = scripted_model_server([
        reply(thinking("Write it, then check."), text("Writing."),
              tool_call("write_file", {"path": "c.py", "content": "C = 3\n"})),
        reply(tool_call("read_file", {"path": "c.py"})),
        reply(text("Done.")),
    ])
    backend = make_backend(server, model=CLAUDE, max_tokens=4096, thinking=2048)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "Write c.py")
    finally:
        await backend.disconnect()
    assert (repo / "c.py").read_text() == "C = 3\n"
    first, second, third = server.model_requests
    assert first.wire == "anthropic"
    assert first.body["thinking"] == {"type": "enabled", "budget_tokens": 2048} and first.body["max_tokens"] == 4096
    # LiteLLM marked the system prompt and the newest message cacheable, as asked.
    assert all("cache_control" in b for b in first.body["system"])
    assert "cache_control" in json.dumps(first.body["messages"][-1])
    # The signed thinking went back before the tool call (Anthropic refuses a tool-use turn without it).
    assistant = second.body["messages"][1]["content"]
    assert assistant[0]["type"] == "thinking" and assistant[0]["thinking"] == "Write it, then check."
    assert assistant[0]["signature"] and [b["type"] for b in assistant[1:]] == ["text", "tool_use"]
    # The cached prefix was read back, counted apart, and priced by LiteLLM's model map (its
    # rates are per token, so the sum of the responses' prices is the price of the sum).
    usage = backend.usage()
    assert usage.cache_read_tokens > 0 and usage.cache_write_tokens > 0
    prompt, completion = litellm_imported.cost_per_token(
        model=CLAUDE, prompt_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
        completion_tokens=usage.output_tokens, cache_read_input_tokens=usage.cache_read_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens)
    assert usage.cost_usd == pytest.approx(prompt + completion, rel=1e-6) and usage.cost_usd > 0
    assert third.body["messages"][-1]["role"] == "user"


# ---------------------------------------------------------------------------------------------
# The backend contract (agenter.testing.conformance) in autonomous mode


class LiteLLMHarness:
    """Plays the conformance scenarios through LiteLLM and the scripted server's Chat Completions
    wire with the tool loop: "shell" runs the command with the bash tool, confined (sandbox=True)."""

    def __init__(self, start_server: Any):
        from agenter.backends.model_api.litellm import LiteLLMBackend

        self.capabilities = LiteLLMBackend.capabilities
        self.start_server = start_server

    def supports(self, scenario: str) -> bool:
        return scenario in ("write", "shell", "refuse", "output", "fail", "usage", "hang")

    def make(self, scenario: str, cwd: Path) -> Any:
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
            return make_backend(self.start_server(default=http_error(500, "scripted failure")), max_retries=0)
        return make_backend(self.start_server(scripts[scenario]))


@agent_test
@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, scripted_model_server, tmp_path):
    await check(LiteLLMHarness(scripted_model_server), tmp_path)


# ---------------------------------------------------------------------------------------------
# Unit tests: the call LiteLLM is given


def _wire(caching: bool = True, **call: Any) -> Any:
    from agenter.backends.model_api.litellm._wire import LiteLLMWire

    return LiteLLMWire(None, model="anthropic/claude-sonnet-4-5", call=call, prompt_caching=caching)


def test_the_call_litellm_is_given():
    tools = [{"name": "t", "description": "d", "input_schema": {"type": "object"}}]
    conversation = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "SIG"},
                                          {"type": "thinking", "thinking": "unsigned", "signature": ""},
                                          {"type": "tool_use", "id": "c1", "name": "t", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "A"}]},
    ]
    request = WireRequest(system="S", messages=conversation, max_tokens=100, tools=tools, tool_choice="any",
                          temperature=0.2, effort="high", thinking=2048, timeout=30.0)
    params = _wire(api_base="http://x", drop_params=True).params(request)
    assert params["model"] == "anthropic/claude-sonnet-4-5" and params["api_base"] == "http://x"
    assert (params["num_retries"], params["max_retries"], params["drop_params"]) == (0, 0, True)
    assert params["max_tokens"] == 100 and params["temperature"] == 0.2 and params["timeout"] == 30.0
    assert params["tool_choice"] == "required" and params["reasoning_effort"] == "high"
    assert params["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert params["cache_control_injection_points"] == [{"location": "message", "role": "system"},
                                                        {"location": "message", "index": -1}]
    assistant = params["messages"][2]
    assert assistant["thinking_blocks"] == [{"type": "thinking", "thinking": "hm", "signature": "SIG"}]
    assert assistant["tool_calls"][0]["id"] == "c1" and params["messages"][3]["role"] == "tool"
    # A one-off request (a summary) is not marked; a model without caching never is.
    assert "cache_control_injection_points" not in _wire().params(
        WireRequest(system="S", messages=[], max_tokens=10, cache=False))
    plain = _wire(caching=False).params(WireRequest(system="", messages=[], max_tokens=0, thinking="disabled"))
    assert plain["thinking"] == {"type": "disabled"}
    assert not {"max_tokens", "temperature", "tools", "reasoning_effort", "cache_control_injection_points",
                "timeout"} & set(plain)


def test_signed_thinking_is_kept_and_a_stream_ended_early_is_seen():
    from agenter.backends.model_api._chat import ChatReader
    from agenter.backends.model_api.litellm._wire import _ended_early

    def chunk(**delta: Any) -> Any:
        fields = {"content": None, "tool_calls": None, "refusal": None, "reasoning_content": None, **delta}
        return SimpleNamespace(usage=None, choices=[SimpleNamespace(delta=SimpleNamespace(**fields),
                                                                    finish_reason=None)])

    reader = ChatReader(0, keep_thinking=True)
    for piece in [chunk(reasoning_content="a", thinking_blocks=[{"type": "thinking", "thinking": "a"}]),
                  chunk(reasoning_content="b", thinking_blocks=[{"type": "thinking", "thinking": "b"}]),
                  chunk(thinking_blocks=[{"type": "thinking", "thinking": "", "signature": "S1"}]),
                  chunk(thinking_blocks=[{"type": "redacted_thinking", "data": "R"}]),
                  chunk(content="Hi")]:
        reader.feed(piece)
    reader.finish = "stop"
    response = reader.finished()[-1]
    assert response.content == [{"type": "thinking", "thinking": "ab", "signature": "S1"},
                                {"type": "redacted_thinking", "data": "R"}, {"type": "text", "text": "Hi"}]
    # LiteLLM closes every stream with a finish_reason; its wrapper records whether the provider sent one.
    assert _ended_early(SimpleNamespace(received_finish_reason=None, intermittent_finish_reason=None))
    assert not _ended_early(SimpleNamespace(received_finish_reason="stop", intermittent_finish_reason=None))
    assert not _ended_early(SimpleNamespace())


def test_litellms_price_covers_cache_reads_and_writes(litellm_imported):
    wire = _wire()
    wire._litellm = litellm_imported
    usage = Usage(input_tokens=100, output_tokens=10, cache_read_tokens=1000, cache_write_tokens=463)
    prompt, completion = litellm_imported.cost_per_token(
        model=CLAUDE, prompt_tokens=1563, completion_tokens=10, cache_read_input_tokens=1000,
        cache_creation_input_tokens=463)
    assert wire.cost(usage) == pytest.approx(prompt + completion) and wire.cost(usage) > 0
    assert wire.cost(Usage(input_tokens=1)) != wire.cost(Usage(cache_read_tokens=1))
    unknown = _wire()
    unknown._litellm, unknown.model = litellm_imported, "openai/scripted-model"
    assert unknown.cost(usage) is None  # the ledger prices it (genai-prices) or notes none is known


def test_module_import_is_light():
    code = ("import sys, agenter, agenter.backends.model_api.litellm; "
            "print('litellm' in sys.modules, 'openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.stdout.split() == ["False", "False"], out.stderr
