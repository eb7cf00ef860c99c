"""anthropic-sdk backend: the real backend, the real anthropic SDK and real HTTP against the
scripted model server. Files are checked on disk; requests are checked as the server saw them.
Pure conversation/file-tool logic has plain unit tests at the end."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._errors import BackendError, ConfigurationError
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.model_api._harness.conversation import (
    append_user_content,
    close_open_tool_uses,
    invariant_violations,
    tool_result,
)
from agenter.backends.model_api._harness.files import FileToolbox, glob_to_regex
from agenter.backends.model_api.anthropic_sdk import AnthropicSDKBackend, AnthropicSDKOptions
from agenter.backends.model_api.anthropic_sdk._events import StreamAccumulator, with_cache_marks
from agenter.sandbox.paths import PathResolver
from agenter.testing import conformance, disconnect, hang, http_error, refusal_reply, reply, text, tool_call
from agenter.tools import tool

API_KEY = "sk-test-SUPERSECRET-0123456789abcdef"
agent_test = pytest.mark.agent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


def make_backend(server: Any, *, tools: list | None = None, sandbox: bool = True, permissions: Any = None,
                 on_permission: Any = None, permission_timeout: float | None = 60.0,
                 **options: Any) -> AnthropicSDKBackend:
    from agenter.permissions import PermissionPolicy

    opts = AnthropicSDKOptions(api_key=API_KEY, base_url=server.base_url, **options)
    policy = None if permissions is None else PermissionPolicy.coerce(permissions)
    settings = BackendSettings(model=None, tools=tools or [], sandbox=sandbox, options=opts, permissions=policy,
                               on_permission=on_permission, permission_timeout=permission_timeout)
    AnthropicSDKBackend.check_settings(settings)
    return AnthropicSDKBackend(settings)


def make_agent(server: Any, **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("api_key", API_KEY)
    return AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, **kwargs)


def said(messages: list) -> list:
    """The turn's messages without the usage updates the base adds after settled responses."""
    return [m for m in messages if m.type is not MessageType.USAGE]


async def run_turn(backend: AnthropicSDKBackend, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


def results_sent(server: Any, index: int) -> list[dict[str, Any]]:
    """tool_result blocks of the last user message of model request `index`."""
    body = server.model_requests[index].body
    content = body["messages"][-1]["content"]
    return [b for b in content if b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else json.dumps(content)


# ---------------------------------------------------------------------------------------------
# Files really written


@agent_test
async def test_writes_and_edits_files_on_disk(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text("Adding a module."), tool_call("write_file", {"path": "pkg/util.py", "content": "X = 1\n"})),
        reply(tool_call("edit_file", {"path": "app.py", "old_string": "'hello'", "new_string": "'hi'"}),
              tool_call("read_file", {"path": "app.py"})),
        reply(tool_call("delete_file", {"path": "pkg/util.py"}),
              tool_call("write_file", {"path": "notes.txt", "content": "done\n"})),
        reply(text("All done.")),
    ])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Change greet")
    finally:
        await backend.disconnect()
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert (repo / "notes.txt").read_text() == "done\n"
    assert not (repo / "pkg" / "util.py").exists()
    changed = backend.modified_files()
    assert changed.written == {"app.py", "notes.txt"}
    assert changed.deleted == set() or changed.deleted == {"pkg/util.py"}
    # The text streams as deltas first; the whole text follows them.
    kinds = [m.type for m in messages if m.type is not MessageType.TEXT_DELTA]
    assert messages[0].type is MessageType.TEXT_DELTA
    assert kinds[0] is MessageType.TEXT and MessageType.TOOL_CALL in kinds and MessageType.TOOL_RESULT in kinds
    # Every tool that ran was announced right before its result, in the order the model asked.
    calls = [m.tool_call_id for m in messages if m.type is MessageType.TOOL_CALL]
    results = [m.tool_call_id for m in messages if m.type is MessageType.TOOL_RESULT]
    assert len(calls) == 5 and calls == results
    pairs = [(m.type, m.tool_call_id) for m in messages if m.type in (MessageType.TOOL_CALL, MessageType.TOOL_RESULT)]
    assert pairs == [(kind, call) for call in calls for kind in (MessageType.TOOL_CALL, MessageType.TOOL_RESULT)]
    read_result = [m for m in messages if m.type is MessageType.TOOL_RESULT and m.tool_name == "read_file"][0]
    assert "return 'hi'" in read_result.content
    assert said(messages)[-1].content == "All done."
    assert invariant_violations(backend.messages) == []
    usage = backend.usage()
    assert usage.output_tokens > 0 and usage.cost_usd > 0
    assert backend.session_id and len(server.model_requests) == 4


@agent_test
async def test_facade_completes_with_real_files(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})),
        reply(text("Wrote calc.py")),
    ])
    agent = make_agent(server)
    result = await agent.execute("Write calc.py", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"calc.py": "def add(a, b):\n    return a + b\n"}
    assert (repo / "calc.py").exists()
    assert result.summary == "Wrote calc.py"
    assert result.output_tokens > 0 and result.total_cost_usd > 0
    # Default model and the autonomous contract in the system prompt.
    body = server.model_requests[0].body
    assert body["model"] == "claude-sonnet-5-5"
    assert "thinking" not in body and "temperature" not in body  # Claude 5 defaults
    assert "no human will answer" in json.dumps(body["system"])


@agent_test
async def test_facade_retry_resumes_the_same_conversation(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "bad.py", "content": "def broken(:\n"})),
        reply(text("done")),
        reply(tool_call("write_file", {"path": "bad.py", "content": "def fixed():\n    pass\n"})),
        reply(text("fixed")),
    ])
    result = await make_agent(server).execute("Write bad.py", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.iterations == 2
    retry_request = server.model_requests[2].body
    # The retry is a new user turn appended to the first conversation.
    first_prompt = retry_request["messages"][0]["content"][0]["text"]
    assert first_prompt == "Write bad.py"
    assert len(retry_request["messages"]) == 5
    assert invariant_violations(retry_request["messages"]) == []


# ---------------------------------------------------------------------------------------------
# Sandbox


@agent_test
@pytest.mark.parametrize("approve", [False, True], ids=["headless", "person-approves-everything"])
async def test_hostile_paths_are_refused_and_nothing_leaves_the_sandbox(scripted_model_server, tmp_path, repo,
                                                                         approve):
    """Headless, the permission gate denies them first; when a person approves every question,
    the path sandbox still refuses them (two layers). A NUL byte is invalid input either way."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    (repo / "link_out").symlink_to(outside, target_is_directory=True)
    (repo / "dangling").symlink_to(tmp_path / "nowhere" / "new.txt")
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n")
    hostile = [
        ("write_file", {"path": "../escape.txt", "content": "x"}),
        ("write_file", {"path": str(outside / "abs.txt"), "content": "x"}),
        ("write_file", {"path": "link_out/through_link.txt", "content": "x"}),
        ("write_file", {"path": "dangling", "content": "x"}),
        ("write_file", {"path": "nul\x00.txt", "content": "x"}),
        ("edit_file", {"path": ".git/config", "old_string": "[core]", "new_string": "[evil]"}),
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "rm -rf /"}),
        ("read_file", {"path": "link_out/secret.txt"}),
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("delete_file", {"path": "../outside/secret.txt"}),
        ("list_directory", {"path": ".."}),
        ("grep", {"pattern": "secret", "path": "link_out"}),
    ]
    server = scripted_model_server([reply(*[tool_call(n, a) for n, a in hostile]), reply(text("ok"))])
    backend = make_backend(server, on_permission=(lambda request: True) if approve else None)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Try to escape")
    finally:
        await backend.disconnect()
    sent = results_sent(server, 1)
    assert len(sent) == len(hostile)
    for block, (name, arguments) in zip(sent, hostile, strict=True):
        assert block.get("is_error") is True, (name, arguments, block)
        if "\x00" in arguments["path"]:
            assert "Invalid tool call" in result_text(block), block
        elif approve:
            assert "Refused" in result_text(block), (name, arguments, block)
        else:
            assert "Permission denied" in result_text(block), (name, arguments, block)
        assert "top secret" not in result_text(block)
    errors = [m for m in messages if m.type is MessageType.TOOL_RESULT]
    assert all(m.is_error for m in errors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "repo"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret"
    assert (repo / ".git" / "config").read_text() == "[core]\n"
    assert not (repo / ".git" / "hooks").exists()
    assert not (tmp_path / "nowhere").exists()
    assert backend.modified_files().written == set()


@agent_test
async def test_allowed_write_paths_limit_writes(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "src/ok.py", "content": "A = 1\n"}),
              tool_call("write_file", {"path": "docs/no.md", "content": "nope"}),
              tool_call("edit_file", {"path": "app.py", "old_string": "hello", "new_string": "bye"})),
        reply(text("done")),
    ])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo, allowed_write_paths=["src/**"]))
    try:
        await run_turn(backend, "write")
    finally:
        await backend.disconnect()
    ok, docs, edit = results_sent(server, 1)
    assert not ok.get("is_error")
    assert docs["is_error"] and "src/**" in result_text(docs)
    assert edit["is_error"] and "not allowed" in result_text(edit)
    assert (repo / "src" / "ok.py").exists() and not (repo / "docs").exists()
    assert "hello" in (repo / "app.py").read_text()
    assert "src/**" in json.dumps(server.model_requests[0].body["system"])


@agent_test
async def test_anthropic_text_editor_tool(scripted_model_server, repo, tmp_path):
    editor = "str_replace_based_edit_tool"
    server = scripted_model_server([
        reply(tool_call(editor, {"command": "create", "path": "mod.py", "file_text": "a = 1\nb = 2\n"}),
              tool_call(editor, {"command": "str_replace", "path": "mod.py", "old_str": "b = 2", "new_str": "b = 3"}),
              tool_call(editor, {"command": "insert", "path": "mod.py", "insert_line": 1, "insert_text": "c = 9"}),
              tool_call(editor, {"command": "view", "path": "mod.py", "view_range": [1, 2]}),
              tool_call(editor, {"command": "view", "path": "."}),
              tool_call(editor, {"command": "create", "path": "../evil.py", "file_text": "x"})),
        reply(text("done")),
    ])
    backend = make_backend(server, anthropic_text_editor=True)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "edit")
    finally:
        await backend.disconnect()
    tools = server.model_requests[0].body["tools"]
    assert {"type": "text_editor_20250728", "name": editor} == {k: tools[0][k] for k in ("type", "name")}
    assert "read_file" not in [t.get("name") for t in tools]
    assert (repo / "mod.py").read_text() == "a = 1\nc = 9\nb = 3\n"
    created, replaced, inserted, viewed, listed, evil = results_sent(server, 1)
    assert "a = 1" in result_text(viewed) and "b = 3" not in result_text(viewed)
    assert "mod.py" in result_text(listed)
    # The gate denies the write outside the workspace before the editor runs.
    assert evil["is_error"] and "Permission denied" in result_text(evil) and "outside the workspace" in result_text(evil)
    assert not (tmp_path / "evil.py").exists()
    assert backend.modified_files().written == {"mod.py"}


# ---------------------------------------------------------------------------------------------
# Refusal, structured output, custom tools


@agent_test
async def test_refusal_tool_ends_the_turn(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text("I won't."), tool_call("refuse_task", {"reason": "it deletes user data", "category": "harmful"}),
              tool_call("write_file", {"path": "x.py", "content": "x"})),
    ])
    result = await make_agent(server).execute("Delete everything", cwd=repo)
    assert result.status is CodingStatus.REFUSED
    assert result.refusal_reason == "it deletes user data"
    assert not (repo / "x.py").exists()
    assert len(server.model_requests) == 1


@agent_test
async def test_api_refusal_stop_reason(scripted_model_server, repo):
    server = scripted_model_server([refusal_reply("I can't help with that.")])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "bad request")
    finally:
        await backend.disconnect()
    assert backend.refusal() is not None
    assert "can't help" in backend.refusal().reason


class Summary(BaseModel):
    title: str
    files_changed: int


@agent_test
async def test_structured_output_invalid_then_fixed(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("final_result", {"title": "Fix", "files_changed": "many"})),
        reply(tool_call("final_result", {"title": "Fix", "files_changed": 2})),
    ])
    result = await make_agent(server).execute("Summarise", cwd=repo, output_type=Summary, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Summary(title="Fix", files_changed=2)
    first_tools = server.model_requests[0].body["tools"]
    final = [t for t in first_tools if t["name"] == "final_result"][0]
    assert final["input_schema"]["properties"]["files_changed"]["type"] == "integer"
    (invalid,) = results_sent(server, 1)
    assert invalid["is_error"] and "files_changed" in result_text(invalid)
    assert len(server.model_requests) == 2


@agent_test
async def test_structured_output_valid_first_time(scripted_model_server, repo):
    server = scripted_model_server([reply(tool_call("final_result", {"title": "Done", "files_changed": 0}))])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo, output_type=Summary))
    try:
        await run_turn(backend, "Summarise")
    finally:
        await backend.disconnect()
    assert backend.structured_output() == Summary(title="Done", files_changed=0)
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_missing_structured_output_is_nudged_once(scripted_model_server, repo):
    server = scripted_model_server([reply(text("done")),
                                    reply(tool_call("final_result", {"title": "T", "files_changed": 1}))])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo, output_type=Summary))
    try:
        await run_turn(backend, "Summarise")
    finally:
        await backend.disconnect()
    assert backend.structured_output() == Summary(title="T", files_changed=1)
    assert "final_result" in server.model_requests[1].body["messages"][-1]["content"][-1]["text"]


def lookup_version(package: str) -> str:
    """Version of a package."""
    return f"{package}==1.2.3"


@tool
async def count_words(sentence: str) -> int:
    """Count words."""
    await asyncio.sleep(0)
    return len(sentence.split())


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


@agent_test
async def test_custom_tools_sync_async_and_failing(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("lookup_version", {"package": "rich"}),
              tool_call("count_words", {"sentence": "one two three"}),
              tool_call("explode", {"reason": "testing"}),
              tool_call("count_words", {"wrong": 1})),
        reply(tool_call("write_file", {"path": "VERSION", "content": "rich==1.2.3\n"})),
        reply(text("done")),
    ])
    result = await make_agent(server, tools=[lookup_version, count_words, explode]).execute("Pin", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    names = [t["name"] for t in server.model_requests[0].body["tools"]]
    assert {"lookup_version", "count_words", "explode", "refuse_task"} <= set(names)
    version, words, failed, invalid = results_sent(server, 1)
    assert result_text(version) == "rich==1.2.3" and not version.get("is_error")
    assert result_text(words) == "3"
    assert failed["is_error"] and "boom: testing" in result_text(failed)
    assert invalid["is_error"]
    assert (repo / "VERSION").read_text() == "rich==1.2.3\n"


def test_reserved_or_invalid_tool_names_are_configuration_errors():
    def read_file(path: str) -> str:
        return path

    with pytest.raises(ConfigurationError, match="reserved"):
        AutonomousCodingAgent(backend="anthropic-sdk", tools=[read_file], api_key=API_KEY)
    with pytest.raises(ConfigurationError):
        AutonomousCodingAgent(backend="anthropic-sdk", api_key=API_KEY, thinking=2048, temperature=0.2)
    with pytest.raises(ConfigurationError, match="valid options"):
        AutonomousCodingAgent(backend="anthropic-sdk", api_key=API_KEY, max_tokenz=5)


# ---------------------------------------------------------------------------------------------
# Failures: retries, drops, hangs, auth, output limit


@agent_test
@pytest.mark.parametrize("status", [500, 529, 429])
async def test_transient_errors_are_retried_quickly(scripted_model_server, repo, status):
    server = scripted_model_server([
        http_error(status), http_error(status, headers={"retry-after": "0"}),
        reply(tool_call("write_file", {"path": "a.txt", "content": "a"})),
        reply(text("done")),
    ])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    started = time.monotonic()
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert time.monotonic() - started < 3.0  # retry-after 0 honoured: no exponential backoff
    statuses = [m.content for m in messages if m.type is MessageType.STATUS]
    assert len([s for s in statuses if s.startswith("retrying after")]) == 2
    assert str(status) in statuses[0]
    assert (repo / "a.txt").read_text() == "a"
    assert [r.status for r in server.model_requests] == [status, status, 200, 200]


@agent_test
async def test_retries_exhausted_is_a_backend_error(scripted_model_server, repo):
    server = scripted_model_server(default=http_error(529, "Overloaded"))
    backend = make_backend(server, max_retries=2)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert caught.value.status_code == 529 and caught.value.kind == "transient"
    assert "Overloaded" in str(caught.value) and "3 attempts" in str(caught.value)
    assert len(server.model_requests) == 3
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_bad_request_is_not_retried(scripted_model_server, repo):
    server = scripted_model_server([http_error(400, "prompt is too long")])
    result = await make_agent(server).execute("go", cwd=repo)
    assert result.status is CodingStatus.ERROR
    assert "400" in result.error and "prompt is too long" in result.error
    assert len(server.model_requests) == 1


@agent_test
async def test_prompt_too_long_is_a_context_length_error(scripted_model_server, repo):
    server = scripted_model_server([http_error(400, "prompt is too long: 210000 tokens > 200000 maximum")])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert caught.value.status_code == 400 and caught.value.kind == "context_length"


@agent_test
async def test_dropped_stream_is_retried(scripted_model_server, repo):
    server = scripted_model_server([
        disconnect(after_events=4, reply=reply(text("partial answer that gets cut"))),
        reply(tool_call("write_file", {"path": "b.txt", "content": "b"})),
        reply(text("done")),
    ])
    result = await make_agent(server, max_retry_wait=0.1).execute("go", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "b.txt").read_text() == "b"
    assert len(server.model_requests) == 3


@agent_test
async def test_dropped_stream_every_time_becomes_an_error(scripted_model_server, repo):
    server = scripted_model_server(default=disconnect(after_events=2))
    result = await make_agent(server, max_retries=1, max_retry_wait=0.05).execute("go", cwd=repo)
    assert result.status is CodingStatus.ERROR
    assert "2 attempts" in result.error
    assert len(server.model_requests) == 2


@agent_test
async def test_hung_server_stops_at_the_time_budget(scripted_model_server, repo):
    server = scripted_model_server([hang(60)])
    agent = make_agent(server, budget=Budget(max_time_seconds=1.5))
    started = time.monotonic()
    result = await agent.execute("go", cwd=repo)
    elapsed = time.monotonic() - started
    assert result.status is CodingStatus.BUDGET_EXCEEDED
    assert result.exceeded_limit == "time"
    assert elapsed < 1.5 + 2.0, elapsed
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftovers == []


@agent_test
async def test_cancellation_mid_tool_keeps_the_invariant(scripted_model_server, repo):
    started = asyncio.Event()

    @tool
    async def slow_tool() -> str:
        """Takes forever."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "c.txt", "content": "c"}), tool_call("slow_tool", {}),
              tool_call("list_directory", {})),
        reply(text("second iteration done")),
    ])
    backend = make_backend(server, tools=[slow_tool])
    await backend.connect(SessionSpec(cwd=repo))
    try:
        task = asyncio.create_task(run_turn(backend, "go"))
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert invariant_violations(backend.messages) == []
        last = backend.messages[-1]["content"]
        assert [b.get("is_error", False) for b in last] == [False, True, True]
        assert backend.modified_files().written == {"c.txt"}
        # The conversation is still usable: the next iteration sends a well-formed history.
        messages = await run_turn(backend, "continue")
        assert said(messages)[-1].content == "second iteration done"
        sent = server.model_requests[1].body["messages"]
        assert invariant_violations(sent) == []
        assert sent[-1]["content"][-1]["text"].startswith("continue")
    finally:
        await backend.disconnect()


@agent_test
async def test_auth_failure_never_shows_the_key(scripted_model_server, repo):
    server = scripted_model_server([http_error(401, f"invalid x-api-key {API_KEY}")])
    agent = make_agent(server)
    events = [event async for event in agent.stream_execute("go", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "error"
    assert "authentication failed" in result["error"] and "ANTHROPIC_API_KEY" in result["error"]
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert API_KEY not in dumped and "SUPERSECRET" not in dumped
    assert len(server.model_requests) == 1  # not retried
    sent_headers = server.model_requests[0].headers
    assert API_KEY in (sent_headers.get("x-api-key") or sent_headers.get("authorization") or "")

    backend = make_backend(scripted_model_server([http_error(403, "forbidden")]))
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert caught.value.status_code == 403 and API_KEY not in str(caught.value)
    assert caught.value.kind == "auth"


async def test_missing_api_key_is_a_clear_error(repo, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    backend = AnthropicSDKBackend(BackendSettings(model=None, tools=[], sandbox=True,
                                                  options=AnthropicSDKOptions()))
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        await backend.connect(SessionSpec(cwd=repo))
    await backend.disconnect()
    result = await AutonomousCodingAgent(backend="anthropic-sdk").execute("go", cwd=repo)
    assert result.status is CodingStatus.ERROR and "ANTHROPIC_API_KEY" in result.error


async def test_resume_of_an_earlier_session_is_a_clear_error(repo):
    result = await AutonomousCodingAgent(backend="anthropic-sdk", api_key=API_KEY).execute(
        "go", cwd=repo, resume="0123abcd")
    assert result.status is CodingStatus.ERROR and "cannot resume session '0123abcd'" in result.error


def test_bedrock_needs_boto3_and_defaults_to_the_bedrock_model():
    import importlib.util

    if importlib.util.find_spec("boto3") is None:
        with pytest.raises(ConfigurationError, match=r"agenter-sdk\[bedrock\]"):
            AutonomousCodingAgent(backend="anthropic-sdk", anthropic_bedrock=True, anthropic_aws_region="us-east-1")
        return
    options = AnthropicSDKOptions(anthropic_bedrock=True, anthropic_aws_region="us-east-1")
    backend = AnthropicSDKBackend(BackendSettings(model=None, tools=[], sandbox=True, options=options))
    assert backend.default_model == "us.anthropic.claude-sonnet-5-5" and backend.ledger.provider == "aws"


@agent_test
async def test_max_tokens_cutoff_is_recovered(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text("Here is the first half of a long"), stop_reason="max_tokens"),
        reply(tool_call("write_file", {"path": "long.txt", "content": "part 1\n"}), stop_reason="max_tokens"),
        reply(tool_call("edit_file", {"path": "long.txt", "old_string": "part 1\n", "new_string": "part 1\npart 2\n"})),
        reply(text("done")),
    ])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "write a long file")
    finally:
        await backend.disconnect()
    assert (repo / "long.txt").read_text() == "part 1\npart 2\n"
    bodies = [r.body for r in server.model_requests]
    assert "cut off at the output limit" in bodies[1]["messages"][-1]["content"][-1]["text"]
    # max_tokens escalated once (16384 -> 32768 for a 64k-output model), not twice.
    assert [b["max_tokens"] for b in bodies] == [16384, 32768, 32768, 32768]
    # The complete tool call of the cut-off response was still run and answered.
    second_nudge = bodies[2]["messages"][-1]["content"]
    assert second_nudge[0]["type"] == "tool_result" and second_nudge[-1]["type"] == "text"
    assert sum(1 for m in messages if m.type is MessageType.STATUS and "max_tokens" in m.content) == 2
    assert invariant_violations(backend.messages) == []


@agent_test
async def test_endless_cutoffs_stop_the_iteration(scripted_model_server, repo):
    server = scripted_model_server(default=reply(text("cut"), stop_reason="max_tokens"))
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    last = said(messages)[-1]
    assert last.type is MessageType.ERROR and "cut off" in last.content
    assert len(server.model_requests) == 4


@agent_test
async def test_tool_loop_cap(scripted_model_server, repo):
    server = scripted_model_server(default=reply(tool_call("list_directory", {})))
    backend = make_backend(server, anthropic_max_turns_per_iteration=3)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert "max_turns_per_iteration" in messages[-1].content
    assert len(server.model_requests) == 3
    assert invariant_violations(backend.messages) == []


# ---------------------------------------------------------------------------------------------
# Budgets and caching


@agent_test
async def test_token_budget_is_enforced_mid_iteration(scripted_model_server, repo):
    server = scripted_model_server(default=reply(tool_call("list_directory", {}),
                                                 usage={"input_tokens": 4000, "output_tokens": 500}))
    result = await make_agent(server, budget=Budget(max_tokens=12_000)).execute("go", cwd=repo)
    assert result.status is CodingStatus.BUDGET_EXCEEDED
    assert result.exceeded_limit == "tokens"
    assert len(server.model_requests) <= 4


@agent_test
async def test_prompt_caching_marks_prefix_and_rolling_breakpoint(scripted_model_server, repo):
    script = [reply(tool_call("write_file", {"path": f"f{i}.py", "content": f"V = {i}\n" * 20}))
              for i in range(9)]
    server = scripted_model_server([*script, reply(text("done"))])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "write ten files")
    finally:
        await backend.disconnect()
    bodies = [r.body for r in server.model_requests]
    assert len(bodies) == 10
    for body in bodies:
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        marks = json.dumps(body).count('"cache_control"')
        assert marks <= 4  # the API allows at most four breakpoints
    # History kept by the backend carries no marks (they are added per request).
    assert "cache_control" not in json.dumps(backend.messages)
    usage = backend.usage()
    cacheable = usage.cache_read_tokens + usage.cache_write_tokens
    total_input = usage.input_tokens + cacheable
    assert cacheable / total_input >= 0.8, usage
    assert usage.cache_read_tokens > usage.cache_write_tokens


def _finished(events: list) -> dict[str, Any]:
    """The result carried by SESSION_END (always the last event)."""
    return events[-1].data["result"]


@agent_test
async def test_token_budget_stop_reports_exactly_what_the_file_tool_wrote(scripted_model_server, tmp_path):
    """Issue 11 item 6: a budget that ends the turn while write_file runs. Whether the tool got
    to write or not, what is on disk is what result.files says, nothing changes after the result,
    and a tool that ran was reported as a tool_call event."""
    server = scripted_model_server(default=reply(
        tool_call("write_file", {"path": "out.txt", "content": "written\n"}),
        usage={"input_tokens": 5000, "output_tokens": 20}))
    agent = make_agent(server, budget=Budget(max_tokens=100))
    for run in range(15):
        cwd = tmp_path / f"run{run}"
        cwd.mkdir()
        events = [event async for event in agent.stream_execute("write out.txt", cwd=cwd)]
        result = _finished(events)
        assert result["status"] == "budget_exceeded" and result["exceeded_limit"] == "tokens", result
        on_disk = (cwd / "out.txt").exists()
        assert on_disk == ("out.txt" in result["files"]), (run, on_disk, result["files"])
        await asyncio.sleep(0.2)
        assert (cwd / "out.txt").exists() == on_disk, f"run {run}: the workspace changed after the result"
        calls = [e.data for e in events if e.data.get("message_type") == "tool_call"]
        if on_disk:
            assert [c["tool_name"] for c in calls] == ["write_file"], calls


@agent_test
@pytest.mark.parametrize("seconds", [1.0, 4.0])
async def test_time_budget_waits_for_a_sync_tool_or_names_it(scripted_model_server, tmp_path, seconds):
    """A sync custom tool still sleeping when the time budget ends the turn: its file is in
    result.files (it finished within the wait) or the error names it as still running (it
    outlived the wait: 4 s); it is never written unreported."""
    import threading

    started, done = threading.Event(), threading.Event()
    workspace = tmp_path / "repo"
    workspace.mkdir()

    def slow_write() -> str:
        """Takes a while, then writes slow.txt."""
        started.set()
        try:
            time.sleep(seconds)
            (workspace / "slow.txt").write_text("late\n")
        finally:
            done.set()
        return "written"

    server = scripted_model_server([reply(text("warm"))], default=reply(tool_call("slow_write", {})))
    agent = make_agent(server, tools=[slow_write])
    # A first run pays the process's one-time costs (imports, price table), so that the short
    # time budget below ends the turn while the tool sleeps, not while the client starts.
    await agent.execute("warm up", cwd=tmp_path, require_changes=False)
    events = [event async for event in agent.stream_execute(
        "write slowly", cwd=workspace, budget=Budget(max_time_seconds=0.6))]
    result = _finished(events)
    reported = "slow.txt" in result["files"]
    assert started.is_set() and result["status"] == "budget_exceeded" and result["exceeded_limit"] == "time"
    assert reported == (workspace / "slow.txt").exists()
    assert done.wait(seconds + 2)
    if not reported:
        assert "slow_write" in (result["error"] or "") and "still running" in result["error"], result["error"]
    if seconds > 2.5:  # longer than the backend waits (BaseBackend.settle_seconds)
        assert not reported and (workspace / "slow.txt").exists()
    else:
        assert reported


@agent_test
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK warns about the older model
async def test_each_response_is_priced_once(scripted_model_server, repo):
    from agenter._types import Usage
    from agenter.usage import estimate_cost

    first = Usage(input_tokens=3000, output_tokens=400, cache_read_tokens=1000)
    second = Usage(input_tokens=300_000, output_tokens=50)  # above the long-context tier
    server = scripted_model_server([
        reply(tool_call("list_directory", {}), usage={
            "input_tokens": 3000, "output_tokens": 400, "cache_read_input_tokens": 1000}),
        reply(text("done"), usage={"input_tokens": 300_000, "output_tokens": 50}),
    ])
    model = "claude-sonnet-4-5"  # its input price is higher above 200k tokens
    options = AnthropicSDKOptions(api_key=API_KEY, base_url=server.base_url, anthropic_prompt_caching=False)
    backend = AnthropicSDKBackend(BackendSettings(model=model, tools=[], sandbox=True, options=options))
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "look")
    finally:
        await backend.disconnect()
    usage = backend.usage()
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (303_000, 450, 1000)
    expected = estimate_cost(model, first, "anthropic") + estimate_cost(model, second, "anthropic")
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.cost_usd != pytest.approx(estimate_cost(model, first + second, "anthropic"))


@agent_test
async def test_old_option_names_still_work(scripted_model_server, repo):
    server = scripted_model_server([reply(text("done"))])
    agent = make_agent(server, prompt_caching=False, max_turns_per_iteration=2, use_anthropic_tools=True)
    await agent.execute("say done", cwd=repo, require_changes=False)
    body = server.model_requests[0].body
    assert "cache_control" not in json.dumps(body)
    assert body["tools"][0]["name"] == "str_replace_based_edit_tool"
    options = AnthropicSDKOptions(bedrock=True, aws_region="eu-west-1", aws_secret_key="s3cr3t-value")
    assert options.anthropic_bedrock and options.anthropic_aws_region == "eu-west-1"
    assert "s3cr3t-value" in options.secrets()
    with pytest.raises(ConfigurationError, match="anthropic_prompt_caching"):
        AnthropicSDKOptions(prompt_caching=False, anthropic_prompt_caching=True)


# ---------------------------------------------------------------------------------------------
# Unit tests: conversation rules


def _assistant(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "t", "input": {}} for i in ids]}


def test_close_open_tool_uses_answers_every_call_once():
    messages = [{"role": "user", "content": [{"type": "text", "text": "go"}]}, _assistant("a", "b", "c")]
    added = close_open_tool_uses(messages, [tool_result("a", "done")])
    assert added == 2
    assert invariant_violations(messages) == []
    assert [b["tool_use_id"] for b in messages[-1]["content"]] == ["a", "b", "c"]
    assert close_open_tool_uses(messages) == 0  # nothing open any more


def test_invariant_violations_detects_problems():
    assert invariant_violations([{"role": "user", "content": "x"}, _assistant("a")])
    missing = [{"role": "user", "content": "x"}, _assistant("a", "b"),
               {"role": "user", "content": [tool_result("a", "ok")]}]
    assert any("b has 0" in p for p in invariant_violations(missing))
    doubled = [{"role": "user", "content": "x"}, _assistant("a"),
               {"role": "user", "content": [tool_result("a", "ok"), tool_result("a", "ok")]}]
    assert invariant_violations(doubled)
    text_first = [{"role": "user", "content": "x"}, _assistant("a"),
                  {"role": "user", "content": [{"type": "text", "text": "hi"}, tool_result("a", "ok")]}]
    assert invariant_violations(text_first)


def test_append_user_content_merges_and_keeps_results_first():
    messages = [{"role": "user", "content": [{"type": "text", "text": "go"}]}, _assistant("a")]
    append_user_content(messages, [tool_result("a", "ok")])
    append_user_content(messages, [{"type": "text", "text": "retry prompt"}])
    assert len(messages) == 3
    assert [b["type"] for b in messages[-1]["content"]] == ["tool_result", "text"]
    assert invariant_violations(messages) == []


def test_cache_marks_are_on_copies_of_the_last_two_user_messages():
    messages = [{"role": "user", "content": [{"type": "text", "text": "go"}]}, _assistant("a"),
                {"role": "user", "content": [tool_result("a", "ok")]}, _assistant("b"),
                {"role": "user", "content": [tool_result("b", "ok")]}]
    marked = with_cache_marks(messages)
    assert "cache_control" in marked[-1]["content"][-1]
    assert "cache_control" in marked[2]["content"][-1]
    assert "cache_control" not in marked[0]["content"][-1]
    assert "cache_control" not in json.dumps(messages)


def _events_for(*blocks: tuple[str, dict[str, Any], list[dict[str, Any]], bool], stop: str) -> list[dict]:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": {
        "input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0}}}]
    for index, (kind, start, deltas, stopped) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": {"type": kind, **start}})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        if stopped:
            events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 99}})
    events.append({"type": "message_stop"})
    return events


def test_cut_off_tool_use_is_dropped_at_max_tokens():
    events = _events_for(
        ("text", {"text": ""}, [{"type": "text_delta", "text": "Writing"}], True),
        ("tool_use", {"id": "t1", "name": "write_file", "input": {}},
         [{"type": "input_json_delta", "partial_json": '{"path": "a.py"}'}], True),
        ("tool_use", {"id": "t2", "name": "write_file", "input": {}},
         [{"type": "input_json_delta", "partial_json": '{"path": "b.py", "content": "unfini'}], True),
        stop="max_tokens",
    )
    accumulator = StreamAccumulator()
    completed = [accumulator.feed(e) for e in events]
    assert [b.tool_id for b in completed if b is not None and b.type == "tool_use" and b.complete] == ["t1"]
    content = accumulator.content()
    assert [b["type"] for b in content] == ["text", "tool_use"]
    assert content[1]["input"] == {"path": "a.py"}
    assert accumulator.finished and accumulator.stop_reason == "max_tokens"
    assert accumulator.usage.output_tokens == 99 and accumulator.usage.cache_read_tokens == 5


def test_unterminated_tool_use_block_is_dropped():
    events = _events_for(
        ("tool_use", {"id": "t1", "name": "write_file", "input": {}},
         [{"type": "input_json_delta", "partial_json": '{"pa'}], False),
        stop="max_tokens",
    )
    accumulator = StreamAccumulator()
    for event in events:
        accumulator.feed(event)
    assert accumulator.content() == []


def test_malformed_tool_input_without_cutoff_is_reported():
    events = _events_for(
        ("tool_use", {"id": "t1", "name": "write_file", "input": {}},
         [{"type": "input_json_delta", "partial_json": '{"path": '}], True),
        stop="tool_use",
    )
    accumulator = StreamAccumulator()
    for event in events:
        accumulator.feed(event)
    assert accumulator.content()[0]["input"] == {}
    assert "not valid JSON" in accumulator.input_errors()["t1"]


def test_retry_delay_honours_the_server_within_the_cap():
    import email.utils

    from agenter.host.retry import retry_delay

    assert retry_delay(0, {"retry-after-ms": "250"}, 60) == 0.25
    assert retry_delay(0, {"retry-after": "3"}, 60) == 3.0
    assert retry_delay(0, {"retry-after": "0"}, 60) == 0.0
    assert retry_delay(0, {"retry-after": "120"}, 10) == 10
    in_five = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3.5 <= retry_delay(0, {"retry-after": in_five}, 60) <= 5
    assert 0.375 <= retry_delay(0, {"retry-after": "soon"}, 60) <= 0.5  # unreadable: backoff
    assert [retry_delay(n, None, 60) <= 8 for n in range(12)] == [True] * 12
    assert 3 <= retry_delay(3, None, 60) <= 4
    assert retry_delay(5, None, 1.5) == 1.5


# ---------------------------------------------------------------------------------------------
# Unit tests: file tools


@pytest.fixture
def toolbox(repo: Path) -> FileToolbox:
    (repo / "src").mkdir()
    (repo / "src" / "a.py").write_text("x = 1\nx = 1\ny = 2\n")
    (repo / "src" / "b.txt").write_text("hello world\n")
    (repo / ".venv").mkdir()
    (repo / ".venv" / "hidden.py").write_text("x = 1\n")
    return FileToolbox(PathResolver(repo))


def test_edit_file_errors_are_clear(toolbox, repo):
    none = toolbox.run("edit_file", {"path": "src/a.py", "old_string": "z = 3", "new_string": "z = 4"})
    assert none.is_error and "not found" in none.content
    many = toolbox.run("edit_file", {"path": "src/a.py", "old_string": "x = 1", "new_string": "x = 5"})
    assert many.is_error and "occurs 2 times" in many.content
    indent = toolbox.run("edit_file", {"path": "src/a.py", "old_string": "  y = 2", "new_string": "y = 3"})
    assert indent.is_error and "whitespace" in indent.content
    every = toolbox.run("edit_file", {"path": "src/a.py", "old_string": "x = 1", "new_string": "x = 5",
                                      "replace_all": True})
    assert not every.is_error and every.written == {"src/a.py"}
    assert (repo / "src" / "a.py").read_text() == "x = 5\nx = 5\ny = 2\n"
    missing = toolbox.run("edit_file", {"path": "nope.py", "old_string": "a", "new_string": "b"})
    assert missing.is_error and "No such file" in missing.content
    bad_args = toolbox.run("write_file", {"path": "x.py"})
    assert bad_args.is_error and "Bad arguments" in bad_args.content


def test_read_file_line_ranges(toolbox, repo):
    (repo / "many.txt").write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    part = toolbox.run("read_file", {"path": "many.txt", "start_line": 10, "end_line": 12})
    assert part.content.splitlines() == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    whole = toolbox.run("read_file", {"path": "many.txt"})
    assert "read on with start_line=2001" in whole.content
    past = toolbox.run("read_file", {"path": "many.txt", "start_line": 5000})
    assert past.is_error
    (repo / "bin.dat").write_bytes(b"\x00\x01\x02")
    assert toolbox.run("read_file", {"path": "bin.dat"}).is_error


def test_glob_grep_and_list(toolbox):
    assert toolbox.run("glob", {"pattern": "**/*.py"}).content.splitlines() == ["app.py", "src/a.py"]
    assert toolbox.run("glob", {"pattern": "*.txt", "path": "src"}).content == "src/b.txt"
    grep = toolbox.run("grep", {"pattern": r"x = \d", "glob": "**/*.py"})
    assert grep.content.splitlines() == ["src/a.py:1: x = 1", "src/a.py:2: x = 1"]
    insensitive = toolbox.run("grep", {"pattern": "HELLO WORLD", "case_insensitive": True})
    assert insensitive.content == "src/b.txt:1: hello world"
    assert toolbox.run("grep", {"pattern": "("}).is_error
    listing = toolbox.run("list_directory", {}).content.splitlines()
    assert listing == ["app.py", "src/"]


def test_glob_to_regex():
    assert glob_to_regex("**/*.py").match("a/b/c.py") and glob_to_regex("**/*.py").match("c.py")
    assert not glob_to_regex("*.py").match("a/c.py")
    assert glob_to_regex("src/[ab].txt").match("src/a.txt")


def test_unsandboxed_backend_can_write_outside(tmp_path):
    outside = tmp_path / "elsewhere.txt"
    box = FileToolbox(PathResolver(tmp_path / "repo_missing_ok", sandbox=False))
    outcome = box.run("write_file", {"path": str(outside), "content": "ok"})
    assert not outcome.is_error and outside.read_text() == "ok"


def test_module_import_is_light():
    import subprocess
    import sys

    code = ("import sys, agenter.backends.model_api.anthropic_sdk; "
            "print('anthropic' in sys.modules, 'genai_prices' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.stdout.split() == ["False", "False"], out.stderr


@agent_test
async def test_thinking_blocks_are_reported_and_sent_back(scripted_model_server, repo):
    from agenter.testing import thinking

    server = scripted_model_server([
        reply(thinking("I should create the file first."), tool_call("write_file", {"path": "t.txt", "content": "t"})),
        reply(text("done")),
    ])
    backend = make_backend(server, thinking="adaptive", effort="low")
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert messages[0].type is MessageType.THINKING and "create the file" in messages[0].content
    first, second = (r.body for r in server.model_requests)
    assert first["thinking"] == {"type": "adaptive"} and first["output_config"] == {"effort": "low"}
    echoed = second["messages"][1]["content"][0]
    assert echoed["type"] == "thinking" and echoed["signature"] and "create the file" in echoed["thinking"]


# ---------------------------------------------------------------------------------------------
# The backend contract (agenter.testing.conformance), real HTTP against the scripted server


class AnthropicSDKHarness:
    """Plays the conformance scenarios through the scripted server's Anthropic wire, every one of
    them: "shell" runs the command with the bash tool, under bubblewrap (sandbox=True)."""

    capabilities = AnthropicSDKBackend.capabilities

    def __init__(self, start_server: Any):
        self.start_server = start_server

    def supports(self, scenario: str) -> bool:
        return scenario in ("write", "shell", "refuse", "output", "fail", "usage", "hang")

    def make(self, scenario: str, cwd: Path) -> AnthropicSDKBackend:
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


@pytest.fixture
def harness(scripted_model_server: Any) -> AnthropicSDKHarness:
    return AnthropicSDKHarness(scripted_model_server)


@agent_test
@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, harness, tmp_path):
    await check(harness, tmp_path)
