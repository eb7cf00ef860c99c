"""claude-code backend: the REAL `claude` CLI (bundled with claude-agent-sdk) against the
scripted model server. Files are checked on disk; requests are checked as the server saw them;
processes are checked by pid. Pure helpers have plain unit tests at the end."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._errors import BackendError, ConfigurationError, RequirementError
from agenter._types import Usage
from agenter.backends._programs.claude import exit_code, line_changes, result_text, usage_from
from agenter.backends.agents.claude_code import ClaudeCodeBackend, ClaudeCodeOptions
from agenter.backends.agents.claude_code._events import TurnTranslator
from agenter.backends.agents.claude_code._options import DEFAULT_ALLOWED_TOOLS
from agenter.backends.agents.claude_code._permissions import Permissions
from agenter.backends.agents.claude_code._setup import mcp_tool_name
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.host import MARK_ENV, Program, PythonPackage, _pids
from agenter.sandbox.paths import PathResolver
from agenter.testing import (
    conformance,
    hang,
    http_error,
    refusal_reply,
    reply,
    text,
    thinking,
    tool_call,
)
from agenter.tools import tool

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

API_KEY = "sk-test-SUPERSECRET-claude-0123456789"
CLI = str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")
HAVE_SANDBOX_PROGRAMS = bool(shutil.which("bwrap") and shutil.which("socat"))

agent_test = pytest.mark.agent
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="claude-agent-sdk has no bundled CLI here")
needs_sandbox = pytest.mark.skipif(not HAVE_SANDBOX_PROGRAMS,
                                   reason="bubblewrap and socat are not installed (scripts/install-system-deps.sh)")


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


#: Set in every CLI environment of one test, so the leftover check sees only this test's processes
#: (other test runs on the machine carry process marks of their own).
TEST_RUN_ENV = "AGENTER_TEST_RUN"


@pytest.fixture
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The CLI's own HOME and TMPDIR (outside the workspace), no retries of 5xx, no deferred tool
    loading, and this test's run token."""
    root = tmp_path_factory.mktemp("claude-cli")
    home, tmp = root / "home", root / "tmp"
    home.mkdir()
    tmp.mkdir()
    return {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "false",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        TEST_RUN_ENV: uuid.uuid4().hex,
    }


@pytest.fixture
def no_leftover_cli(cli_env: dict[str, str]):
    """Fails the test if a `claude` child of this process, or anything a CLI of this test started
    (it carries agenter's process mark, MARK_ENV, and this test's run token), outlives it; kills
    what it finds."""
    token = f"{TEST_RUN_ENV}={cli_env[TEST_RUN_ENV]}".encode()
    mark = f"{MARK_ENV}=".encode()

    def started_by_a_cli() -> set[int]:
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    variables = (entry / "environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if token in variables and any(v.startswith(mark) for v in variables):
                    found.add(int(entry.name))
        return {pid for pid in found if _pids.is_alive(pid)}

    def describe(pid: int) -> str:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[:2]
        except OSError:
            return "(gone)"
        return f"{command} (state {state[0]}, parent {state[1]})"

    before = _pids.children_running(CLI) | started_by_a_cli()
    yield
    leftovers = (_pids.children_running(CLI) | started_by_a_cli()) - before
    alive = {pid for pid in leftovers if _pids.is_alive(pid)}
    described = {pid: describe(pid) for pid in alive}
    _pids.kill(alive)
    assert not alive, f"processes left running: {described}"


def make_backend(server: Any, cli_env: dict[str, str], *, tools: list | None = None, sandbox: bool = True,
                 model: str | None = None, **options: Any) -> ClaudeCodeBackend:
    opts = ClaudeCodeOptions(api_key=API_KEY, base_url=server.base_url, env=cli_env, **options)
    return ClaudeCodeBackend(BackendSettings(model=model, tools=tools or [], sandbox=sandbox, options=opts))


def make_agent(server: Any, cli_env: dict[str, str], **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("api_key", API_KEY)
    return AutonomousCodingAgent(backend="claude-code", base_url=server.base_url, env=cli_env, **kwargs)


async def run_turn(backend: ClaudeCodeBackend, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


def last_tool_results(server: Any, index: int) -> list[dict[str, Any]]:
    """tool_result blocks in the last user message of model request `index`."""
    messages = server.model_requests[index].body["messages"]
    user = [m for m in messages if m["role"] == "user"][-1]
    content = user["content"] if isinstance(user["content"], list) else []
    return [b for b in content if b.get("type") == "tool_result"]


def block_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def request_text(server: Any, index: int) -> str:
    return json.dumps(server.model_requests[index].body["messages"])


def claude_children() -> set[int]:
    return {pid for pid in _pids.children_running(CLI) if _pids.is_alive(pid)}


# ---------------------------------------------------------------------------------------------
# Files really written by the CLI


@agent_test
@needs_cli
async def test_write_edit_and_bash_changes_are_all_reported(scripted_model_server, repo, cli_env, no_leftover_cli):
    (repo / "gone.txt").write_text("delete me\n")
    server = scripted_model_server([
        reply(thinking("Add a module, then fix greet."), text("Adding a module."),
              tool_call("Write", {"file_path": "pkg/util.py", "content": "X = 1\n"}),
              tool_call("Read", {"file_path": str(repo / "app.py")})),
        reply(tool_call("Edit", {"file_path": str(repo / "app.py"), "old_string": "'hello'", "new_string": "'hi'"}),
              tool_call("Bash", {"command": "echo made > by_bash.txt && rm gone.txt",
                                 "description": "Create one file, delete another"})),
        reply(text("All done.")),
    ])
    backend = make_backend(server, cli_env, model="claude-sonnet-4-5", claude_max_thinking_tokens=2048)
    await backend.connect(SessionSpec(cwd=repo, system_prompt="House rule: keep functions short."))
    try:
        pid = backend.cli_pid
        assert pid and _pids.is_alive(pid)
        assert pid in _pids.with_environment(TEST_RUN_ENV, cli_env[TEST_RUN_ENV])
        assert any(v.startswith(f"{MARK_ENV}=".encode())  # the mark reap() finds leftovers by
                   for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        messages = await run_turn(backend, "Change greet")
    finally:
        await backend.disconnect()
    assert not _pids.is_alive(pid)

    assert (repo / "pkg" / "util.py").read_text() == "X = 1\n"
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert (repo / "by_bash.txt").read_text() == "made\n"
    assert not (repo / "gone.txt").exists()
    changed = backend.modified_files()
    assert changed.written == {"pkg/util.py", "app.py", "by_bash.txt"}
    assert changed.deleted == {"gone.txt"}

    # Streamed as they arrived: status, thought and text (in deltas, then whole), tool calls with
    # inputs, tool results.
    whole = [m for m in messages if m.type not in (MessageType.TEXT_DELTA, MessageType.THINKING_DELTA,
                                                   MessageType.USAGE)]
    kinds = [m.type for m in whole]
    assert kinds[0] is MessageType.STATUS and "session" in whole[0].content
    assert kinds[1:3] == [MessageType.THINKING, MessageType.TEXT]
    assert whole[1].content == "Add a module, then fix greet."
    assert "".join(m.content for m in messages if m.type is MessageType.TEXT_DELTA) == "Adding a module.All done."
    calls = [m for m in messages if m.type is MessageType.TOOL_CALL]
    assert [c.tool_name for c in calls] == ["Write", "Read", "Edit"]  # Bash is a command (below)
    assert calls[0].tool_input == {"file_path": "pkg/util.py", "content": "X = 1\n"}
    assert calls[0].raw.id == calls[0].tool_call_id  # the SDK's block, kept
    results = [m for m in messages if m.type is MessageType.TOOL_RESULT]
    assert [r.tool_name for r in results] == ["Write", "Read", "Edit"]
    assert not any(r.is_error for r in results)
    # Bash: a command with its exit code; Write and Edit: the files edited, with their line counts.
    (started,) = [m for m in messages if m.type is MessageType.COMMAND_START]
    (ended,) = [m for m in messages if m.type is MessageType.COMMAND_END]
    assert started.tool_name == "Bash" and started.details == {"command": "echo made > by_bash.txt && rm gone.txt"}
    assert ended.tool_call_id == started.tool_call_id and ended.details == {"exit_code": 0} and not ended.is_error
    assert messages.index(started) < messages.index(ended)
    edits = [m.details for m in messages if m.type is MessageType.FILE_EDIT]
    assert edits == [{"path": "pkg/util.py", "lines_added": 1, "lines_removed": 0},
                     {"path": "app.py", "lines_added": 1, "lines_removed": 1}]
    assert "return 'hello'" in results[1].content  # Read's result, streamed back
    assert whole[-1].type is MessageType.TEXT and whole[-1].content == "All done."

    # The CLI's real wire: streaming Messages API, the tools we allowed plus our MCP tools.
    first = server.model_requests[0]
    turn = first.model_request
    assert first.path == "/v1/messages" and turn.stream
    assert set(DEFAULT_ALLOWED_TOOLS) <= set(turn.tool_names)
    assert mcp_tool_name("refuse_task") in turn.tool_names
    assert "Agent" not in turn.tool_names and "WebFetch" not in turn.tool_names
    write_schema = next(t for t in turn.tools if t["name"] == "Write")["input_schema"]
    assert set(write_schema["required"]) == {"file_path", "content"}
    assert first.headers["x-api-key"] == API_KEY
    assert turn.model == "claude-sonnet-4-5"
    assert turn.body["thinking"]["type"] == "enabled" and turn.body["thinking"]["budget_tokens"] == 2048
    system = json.dumps(turn.system)
    assert "House rule: keep functions short." in system and "refuse_task" in system  # appended to the preset
    assert "Claude Code" in system
    assert not (repo / ".claude").exists()  # the CLI's own scratch folder is cleaned up
    assert backend.session_id and first.headers["x-claude-code-session-id"] == backend.session_id

    usage = backend.usage()
    assert usage.output_tokens > 0 and usage.total_tokens > 0
    assert usage.cost_usd > 0


@agent_test
@needs_cli
async def test_retry_after_syntax_error_continues_the_same_session(scripted_model_server, repo, cli_env,
                                                                    no_leftover_cli):
    cli_pids: list[set[int]] = []

    def note_pids(request):  # runs in the server thread for each model turn
        cli_pids.append(claude_children())

    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "calc.py", "content": "def add(a, b)\n    return a + b\n"})),
        reply(text("Wrote calc.py.")),
        reply(tool_call("Edit", {"file_path": "calc.py", "old_string": "def add(a, b)\n",
                                 "new_string": "def add(a, b):\n"})),
        reply(text("Fixed the syntax error.")),
    ], handler=note_pids)
    agent = make_agent(server, cli_env, validators=["syntax"], max_iterations=3)
    result = await agent.execute("Write calc.py with add(a, b)", cwd=repo)

    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.iterations == 2
    assert result.files["calc.py"] == "def add(a, b):\n    return a + b\n"
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    # The retry prompt carried the validation error into the SAME conversation: the third model
    # request still holds the first iteration's Write call, and the same session id header.
    retry_request = request_text(server, 2)
    assert "did not pass validation" in retry_request and "calc.py" in retry_request
    assert "def add(a, b)\\n    return a + b" in retry_request  # iteration 1's tool input
    session_ids = {r.headers["x-claude-code-session-id"] for r in server.model_requests}
    assert len(session_ids) == 1
    # One CLI process served both iterations.
    assert len(cli_pids) == 4 and all(p == cli_pids[0] and len(p) == 1 for p in cli_pids)
    assert result.total_tokens > 0 and result.total_cost_usd > 0


@agent_test
@needs_cli
async def test_write_outside_allowed_paths_is_denied_and_the_model_sees_why(scripted_model_server, repo, tmp_path,
                                                                             cli_env, no_leftover_cli):
    outside = tmp_path / "outside.txt"
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "docs/notes.md", "content": "not allowed\n"}),
              tool_call("Write", {"file_path": str(outside), "content": "escaped\n"}),
              tool_call("Write", {"file_path": "src/ok.py", "content": "OK = True\n"})),
        reply(text("Some writes were refused.")),
    ])
    backend = make_backend(server, cli_env)
    await backend.connect(SessionSpec(cwd=repo, allowed_write_paths=["src/**"]))
    try:
        messages = await run_turn(backend, "Write three files")
    finally:
        await backend.disconnect()

    assert not (repo / "docs" / "notes.md").exists()
    assert not outside.exists()
    assert (repo / "src" / "ok.py").read_text() == "OK = True\n"
    assert backend.modified_files().written == {"src/ok.py"}
    denied = [m for m in messages if m.type is MessageType.TOOL_RESULT and m.is_error]
    assert len(denied) == 2
    # What the model got back in its next request:
    results = last_tool_results(server, 1)
    errors = [block_text(b) for b in results if b.get("is_error")]
    assert len(errors) == 2
    assert any("docs/notes.md" in e and "allowed" in e.lower() for e in errors)
    assert any("outside" in e.lower() for e in errors)
    assert not any("hook error" in e for e in errors)  # a plain refusal, not a "broken hook"
    # The model was told the rule up front: the appended system prompt names the patterns.
    system = json.dumps(server.model_requests[0].model_request.system)
    assert "gitignore-style patterns" in system and "src/**" in system


@agent_test
@needs_cli
async def test_allowed_write_paths_hold_without_sandbox_too(scripted_model_server, repo, cli_env, no_leftover_cli):
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "docs/notes.md", "content": "not allowed\n"}),
              tool_call("Write", {"file_path": "src/ok.py", "content": "OK = True\n"})),
        reply(text("One write was refused.")),
    ])
    backend = make_backend(server, {**cli_env, "IS_SANDBOX": "1"}, sandbox=False)
    await backend.connect(SessionSpec(cwd=repo, allowed_write_paths=["src/**"]))
    try:
        await run_turn(backend, "Write two files")
    finally:
        await backend.disconnect()
    assert not (repo / "docs" / "notes.md").exists()
    assert (repo / "src" / "ok.py").exists()
    errors = [block_text(b) for b in last_tool_results(server, 1) if b.get("is_error")]
    assert len(errors) == 1 and "docs/notes.md" in errors[0]


@agent_test
@needs_cli
async def test_refusal_tool_gives_refused(scripted_model_server, repo, cli_env, no_leftover_cli):
    server = scripted_model_server([
        reply(tool_call(mcp_tool_name("refuse_task"), {"reason": "This would delete production data.",
                                                       "category": "harmful"})),
        reply(text("I declined the task.")),
    ])
    agent = make_agent(server, cli_env)
    result = await agent.execute("Drop every table in production", cwd=repo)
    assert result.status is CodingStatus.REFUSED
    assert result.refusal_reason == "This would delete production data."
    assert result.files == {}


@agent_test
@needs_cli
async def test_api_refusal_stop_reason_gives_refused(scripted_model_server, repo, cli_env, no_leftover_cli):
    # Claude Code continues once after an API refusal; a second one ends the turn.
    server = scripted_model_server([refusal_reply("I can't help with that."),
                                    refusal_reply("I still can't help with that request.")])
    backend = make_backend(server, cli_env)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Something harmful")
    finally:
        await backend.disconnect()
    refusal = backend.refusal()
    assert refusal is not None and "still can't help" in refusal.reason
    assert any(m.type is MessageType.STATUS and "refusal" in m.content for m in messages)


class Summary(BaseModel):
    files_changed: int
    headline: str


@agent_test
@needs_cli
async def test_structured_output_through_claude_codes_json_schema(scripted_model_server, repo, cli_env,
                                                                   no_leftover_cli):
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "CHANGELOG.md", "content": "- greet\n"})),
        reply(tool_call("StructuredOutput", {"files_changed": 1, "headline": "Added a changelog"})),
        reply(text("Done.")),
    ])
    agent = make_agent(server, cli_env)
    result = await agent.execute("Add a changelog and summarise", cwd=repo, output_type=Summary)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Summary(files_changed=1, headline="Added a changelog")
    structured_tool = next(t for t in server.model_requests[0].model_request.tools if t["name"] == "StructuredOutput")
    assert set(structured_tool["input_schema"]["properties"]) == {"files_changed", "headline"}


@agent_test
@needs_cli
async def test_missing_structured_output_is_retried_not_an_error(scripted_model_server, repo, cli_env,
                                                                  no_leftover_cli):
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "CHANGELOG.md", "content": "- greet\n"})),
    ], default=reply(text("I forgot the summary.")))
    agent = make_agent(server, cli_env, max_iterations=2)
    result = await agent.execute("Add a changelog and summarise", cwd=repo, output_type=Summary)
    assert result.status is CodingStatus.FAILED
    assert result.iterations == 2
    assert any("structured output" in e.lower() for e in result.validation_errors)
    assert (repo / "CHANGELOG.md").exists()


@agent_test
@needs_cli
async def test_custom_tool_is_called_in_process(scripted_model_server, repo, cli_env, no_leftover_cli):
    calls: list[str] = []

    @tool
    def ticket_title(ticket: str) -> str:
        """Title of a ticket in the tracker."""
        calls.append(ticket)
        return f"{ticket}: Make greet friendlier"

    server = scripted_model_server([
        reply(tool_call(mcp_tool_name("ticket_title"), {"ticket": "ENG-7"})),
        reply(tool_call("Edit", {"file_path": "app.py", "old_string": "'hello'", "new_string": "'hello, friend'"})),
        reply(text("Done.")),
    ])
    agent = make_agent(server, cli_env, tools=[ticket_title])
    result = await agent.execute("Do ENG-7", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert calls == ["ENG-7"]
    ticket_tool = next(t for t in server.model_requests[0].model_request.tools if t["name"] == mcp_tool_name("ticket_title"))
    assert ticket_tool["description"] == "Title of a ticket in the tracker."
    assert ticket_tool["input_schema"]["required"] == ["ticket"]
    assert any("ENG-7: Make greet friendlier" in block_text(b) for b in last_tool_results(server, 1))
    assert "hello, friend" in (result.files["app.py"] or "")


# ---------------------------------------------------------------------------------------------
# Failures are failures


@agent_test
@needs_cli
async def test_http_500_from_the_model_is_an_error(scripted_model_server, repo, cli_env, no_leftover_cli):
    server = scripted_model_server([http_error(500, "internal failure in the model")])
    backend = make_backend(server, cli_env)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend, "Change greet")
    finally:
        await backend.disconnect()
    assert caught.value.status_code == 500
    assert "500" in str(caught.value) and API_KEY not in str(caught.value)
    assert len(server.model_requests) == 1  # CLAUDE_CODE_MAX_RETRIES=0: no retry storm

    server.add(http_error(500, "still failing"))
    agent = make_agent(server, cli_env)
    result = await agent.execute("Change greet", cwd=repo)
    assert result.status is CodingStatus.ERROR
    assert "500" in (result.error or "") and API_KEY not in (result.error or "")


@agent_test
@needs_cli
async def test_time_budget_stops_a_slow_model_and_leaves_no_process(scripted_model_server, repo, cli_env,
                                                                     no_leftover_cli):
    seen: list[set[int]] = []

    def note_pids(request):
        seen.append(claude_children())

    server = scripted_model_server([hang(60)], handler=note_pids)
    agent = make_agent(server, cli_env, budget=Budget(max_time_seconds=8))
    started = time.monotonic()
    result = await agent.execute("Change greet", cwd=repo)
    elapsed = time.monotonic() - started

    assert result.status is CodingStatus.BUDGET_EXCEEDED
    assert result.exceeded_limit == "time"
    assert elapsed < 20
    assert seen and len(seen[0]) == 1
    (pid,) = seen[0]
    assert not _pids.is_alive(pid), "the claude process outlived the time budget"


@agent_test
@needs_cli
async def test_token_budget_is_enforced_while_messages_stream(scripted_model_server, repo, cli_env,
                                                              no_leftover_cli):
    big = {"input_tokens": 40_000, "output_tokens": 100}
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "a.txt", "content": "a\n"}), usage=big),
        reply(tool_call("Write", {"file_path": "b.txt", "content": "b\n"}), usage=big),
        reply(tool_call("Write", {"file_path": "c.txt", "content": "c\n"}), usage=big),
        reply(text("Done."), usage=big),
    ])
    agent = make_agent(server, cli_env, budget=Budget(max_tokens=60_000))
    result = await agent.execute("Write files", cwd=repo)
    assert result.status is CodingStatus.BUDGET_EXCEEDED
    assert result.exceeded_limit == "tokens"
    assert len(server.model_requests) < 4  # stopped mid-turn, not after the whole turn
    assert result.total_tokens >= 60_000


@agent_test
@needs_cli
async def test_cancelled_turn_kills_the_cli_and_the_next_turn_resumes(scripted_model_server, repo, cli_env,
                                                                       no_leftover_cli):
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "first.txt", "content": "1\n"})),
        hang(60),
        reply(text("Back again.")),
    ])
    backend = make_backend(server, cli_env)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        first_pid = backend.cli_pid
        assert first_pid is not None

        async def consume() -> None:
            async for _ in backend.execute("Write first.txt"):
                pass

        task = asyncio.create_task(consume())
        await asyncio.to_thread(server.wait_for_requests, 2, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not _pids.is_alive(first_pid)
        assert backend.cli_pid is None
        assert backend.modified_files().written == {"first.txt"}
        session = backend.session_id

        messages = await run_turn(backend, "Continue")  # a new CLI resumes the session
        assert backend.cli_pid and backend.cli_pid != first_pid
    finally:
        await backend.disconnect()
    assert [m for m in messages if m.type is not MessageType.USAGE][-1].content == "Back again."
    assert backend.session_id == session
    assert "first.txt" in request_text(server, 2)  # the resumed conversation has the old turn


@agent_test
@needs_cli
async def test_cli_dying_mid_turn_is_an_error_not_a_success(scripted_model_server, repo, cli_env,
                                                            no_leftover_cli):
    server = scripted_model_server([hang(60)])
    backend = make_backend(server, cli_env)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        pid = backend.cli_pid
        assert pid is not None

        async def kill_when_asked() -> None:
            await asyncio.to_thread(server.wait_for_requests, 1, 30)
            os.kill(pid, 9)

        killer = asyncio.create_task(kill_when_asked())
        with pytest.raises(BackendError) as caught:
            await asyncio.wait_for(run_turn(backend, "Change greet"), 30)
        await killer
    finally:
        await backend.disconnect()
    assert "killed by signal 9" in str(caught.value)
    assert not _pids.is_alive(pid)


@agent_test
@needs_cli
async def test_missing_cli_is_a_backend_error(repo, cli_env):
    opts = ClaudeCodeOptions(api_key=API_KEY, env=cli_env, program_path=str(repo / "no-such-claude"))
    backend = ClaudeCodeBackend(BackendSettings(model=None, tools=[], sandbox=False, options=opts))
    with pytest.raises(BackendError, match="not found") as caught:
        await backend.connect(SessionSpec(cwd=repo))
    await backend.disconnect()
    assert caught.value.kind == "missing_program"
    # Through the facade the same setting fails at construction, naming the option's fix.
    with pytest.raises(RequirementError, match="program_path"):
        AutonomousCodingAgent(backend="claude-code", sandbox=False, cli_path=str(repo / "no-such-claude"))


# ---------------------------------------------------------------------------------------------
# Sandbox


@agent_test
@needs_cli
@needs_sandbox
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap sandbox is Linux-only")
async def test_sandboxed_bash_can_write_only_inside_cwd(scripted_model_server, repo, tmp_path, cli_env,
                                                         no_leftover_cli):
    outside = tmp_path / "escape.txt"
    server = scripted_model_server([
        reply(tool_call("Bash", {"command": f"echo in > inside.txt; echo out > {outside}; echo exit=$?"})),
        reply(text("Tried both.")),
    ])
    backend = make_backend(server, cli_env, sandbox=True)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Write two files")
    finally:
        await backend.disconnect()
    assert (repo / "inside.txt").read_text() == "in\n"
    assert not outside.exists()
    bash_result = next(m for m in messages if m.type is MessageType.COMMAND_END)  # Bash results are command ends
    assert "Read-only file system" in bash_result.content or "ermission denied" in bash_result.content
    assert backend.modified_files().written == {"inside.txt"}


@agent_test
@needs_cli
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap sandbox is Linux-only")
async def test_sandbox_without_bubblewrap_and_socat_fails_clearly(scripted_model_server, repo, tmp_path, cli_env):
    """Found when the agent is built (RequirementError), before any CLI or model call runs."""
    # A PATH holding everything from the usual bin folders except bwrap and socat.
    bare = tmp_path / "bin-without-sandbox"
    bare.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name not in ("bwrap", "socat") and not (bare / name).exists():
                (bare / name).symlink_to(os.path.join(folder, name))
    server = scripted_model_server([reply(text("never reached"))])
    with pytest.raises(RequirementError) as caught:
        make_agent(server, {**cli_env, "PATH": str(bare)})
    error = str(caught.value)
    assert "bubblewrap" in error and "socat" in error and "sandbox=False" in error
    assert [m.split(":")[0] for m in caught.value.missing] == ["the program 'bwrap' on PATH",
                                                                 "the program 'socat' on PATH"]
    assert server.model_requests == []  # nothing ran unsandboxed
    make_agent(server, {**cli_env, "PATH": str(bare)}, sandbox=False)  # without the sandbox: fine


@agent_test
@needs_cli
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap sandbox is Linux-only")
async def test_the_clis_own_sandbox_check_is_reported_too(scripted_model_server, repo, tmp_path, cli_env,
                                                           no_leftover_cli):
    """Our pre-check aside, a sandbox the CLI itself cannot start is an error, never a silent fallback.

    The backend is built directly, so the facade's requirement check (bwrap, socat) never runs."""
    bare = tmp_path / "bin2"
    bare.mkdir()
    for name in ("bash", "sh", "env", "cat", "ls", "rg", "git"):
        found = shutil.which(name)
        if found:
            (bare / name).symlink_to(found)
    server = scripted_model_server([reply(tool_call("Bash", {"command": "echo hi > x.txt"})), reply(text("ok"))])
    backend = make_backend(server, {**cli_env, "PATH": str(bare)}, sandbox=True)
    with pytest.raises(BackendError) as caught:
        await backend.connect(SessionSpec(cwd=repo))
        try:
            await run_turn(backend, "go")
        finally:
            await backend.disconnect()
    await backend.disconnect()
    assert "sandbox" in str(caught.value).lower() and "bubblewrap" in str(caught.value)
    assert not (repo / "x.txt").exists()


@agent_test
@needs_cli
@pytest.mark.parametrize("is_sandbox", ["1", None], ids=["bypass", "root-fallback"])
async def test_sandbox_off_is_unrestricted(scripted_model_server, repo, tmp_path, cli_env, no_leftover_cli,
                                           is_sandbox):
    outside = tmp_path / "outside.txt"
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": str(outside), "content": "allowed without sandbox\n"}),
              tool_call("Bash", {"command": f"echo bash >> {outside}"})),
        reply(text("Done.")),
    ])
    env = dict(cli_env)
    if is_sandbox:
        env["IS_SANDBOX"] = is_sandbox
    backend = make_backend(server, env, sandbox=False)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend, "Write outside")
    finally:
        await backend.disconnect()
    assert outside.read_text() == "allowed without sandbox\nbash\n"
    expected_mode = "bypassPermissions" if is_sandbox or os.geteuid() != 0 else "acceptEdits"
    assert expected_mode in messages[0].content
    assert backend.modified_files().written == set()  # outside cwd: not a repository change


# ---------------------------------------------------------------------------------------------
# The contract, checked by agenter's conformance suite against the real CLI


class ClaudeCodeHarness:
    """Scripts the model for each conformance scenario; Claude Code plays them all. sandbox=False
    (with IS_SANDBOX=1, so the CLI bypasses permission prompts also as root): the suite checks the
    contract, the sandbox has tests of its own above."""

    capabilities = ClaudeCodeBackend.capabilities

    def __init__(self, start_server: Any, env: dict[str, str]):
        self._start_server = start_server
        self._env = {**env, "IS_SANDBOX": "1"}

    def supports(self, scenario: str) -> bool:
        return scenario in ("write", "shell", "hang", "refuse", "output", "fail", "usage")

    def make(self, scenario: str, cwd: Path) -> ClaudeCodeBackend:
        usage = {"input_tokens": 1200, "output_tokens": 40}
        scripts: dict[str, list[Any]] = {
            "write": [reply(tool_call("Write", {"file_path": conformance.WRITE_PATH,
                                                "content": conformance.WRITE_CONTENT})), reply(text("Done."))],
            "shell": [reply(tool_call("Bash", {"command": conformance.SHELL_COMMAND, "description": "Run it"})),
                      reply(text("Done."))],
            "hang": [hang(60)],
            "refuse": [reply(tool_call(mcp_tool_name("refuse_task"), {"reason": conformance.REFUSAL_REASON})),
                       reply(text("Declined."))],
            "output": [reply(tool_call("StructuredOutput", conformance.OUTPUT_VALUE)), reply(text("Done."))],
            "fail": [],
            "usage": [reply(tool_call("Glob", {"pattern": "*"}), usage=usage), reply(text("Done."), usage=usage)],
        }
        default = http_error(500, "conformance failure") if scenario == "fail" else None
        server = self._start_server(scripts[scenario], default=default)
        options = ClaudeCodeOptions(api_key=API_KEY, base_url=server.base_url, env=self._env)
        return ClaudeCodeBackend(BackendSettings(model=None, tools=[], sandbox=False, options=options))


@pytest.fixture
def harness(scripted_model_server, cli_env) -> ClaudeCodeHarness:
    return ClaudeCodeHarness(scripted_model_server, cli_env)


@agent_test
@needs_cli
@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, harness, tmp_path, no_leftover_cli):
    await check(harness, tmp_path)


# ---------------------------------------------------------------------------------------------
# Pure logic


def test_options_defaults_and_validation():
    opts = ClaudeCodeOptions()
    assert opts.claude_allowed_tools == ["Read", "Edit", "Write", "Bash", "Glob", "Grep"]
    assert opts.claude_setting_sources == []
    with pytest.raises(ValidationError):
        ClaudeCodeOptions(unknown=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ClaudeCodeOptions(claude_setting_sources=["everything"])


def test_old_option_names_keep_working():
    old = ClaudeCodeOptions(allowed_tools=["Read"], setting_sources=["project"], max_turns=3,  # type: ignore[call-arg]
                            cli_path="/x/claude")
    assert (old.claude_allowed_tools, old.claude_setting_sources, old.claude_max_turns, old.program_path) == (
        ["Read"], ["project"], 3, "/x/claude")
    with pytest.raises(ConfigurationError, match="program_path"):
        ClaudeCodeOptions(cli_path="/a", program_path="/b")  # type: ignore[call-arg]


def test_unknown_option_through_the_facade_is_a_configuration_error():
    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="claude-code", max_thinking=5)
    assert "claude_max_thinking_tokens" in str(caught.value)


def test_reserved_and_duplicate_tool_names_are_rejected():
    @tool(name="refuse_task")
    def fake(reason: str) -> str:
        return reason

    with pytest.raises(ConfigurationError):
        AutonomousCodingAgent(backend="claude-code", tools=[fake])


def test_requirements_follow_the_settings():
    def needs(sandbox: bool, **options: Any) -> list[Any]:
        settings = BackendSettings(model=None, tools=[], sandbox=sandbox, options=ClaudeCodeOptions(**options))
        return list(ClaudeCodeBackend.requirements(settings))

    first, *rest = needs(True, env={"PATH": "/opt/bin"})
    assert isinstance(first, PythonPackage) and first.module == "claude_agent_sdk"
    assert "agenter-sdk[claude-code]" in first.install
    if sys.platform.startswith("linux"):
        assert [(r.name, r.env_path) for r in rest] == [("bwrap", "/opt/bin"), ("socat", "/opt/bin")]
        assert all(isinstance(r, Program) and "sandbox=False" in r.install for r in rest)
    assert needs(False) == [first]
    (_, cli) = needs(False, program_path="/opt/claude")
    assert isinstance(cli, Program) and cli.path == "/opt/claude"


def test_importing_the_backend_does_not_import_the_sdk():
    import subprocess

    code = ("import sys, agenter.backends.agents.claude_code; "
            "print('claude_agent_sdk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


_LOOP_DURING_CONNECT = """
import asyncio, sys, time
from agenter._errors import BackendError
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.backends.agents.claude_code import ClaudeCodeBackend, ClaudeCodeOptions

async def main():
    gaps = []
    async def beat():
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
    beating = asyncio.create_task(beat())
    await asyncio.sleep(0.05)
    options = ClaudeCodeOptions(program_path=sys.argv[2], api_key="sk-test-0123456789")
    backend = ClaudeCodeBackend(BackendSettings(model=None, tools=[], sandbox=False, options=options))
    started = time.perf_counter()
    try:
        await backend.connect(SessionSpec(cwd=sys.argv[1]))
    except BackendError as exc:
        assert exc.kind == "missing_program", exc
    finally:
        await backend.disconnect()
    took = time.perf_counter() - started
    beating.cancel()
    print("claude_agent_sdk" in sys.modules, took, max(gaps))

asyncio.run(main())
"""


def test_the_sdks_first_import_does_not_stall_the_event_loop(tmp_path):
    """A fresh process: connect imports claude_agent_sdk (seconds on a busy machine) in a thread, so
    a task on the same loop keeps ticking (the CLI here does not exist, so nothing else runs)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _LOOP_DURING_CONNECT, str(tmp_path), str(tmp_path / "no-claude")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    imported, took, longest_gap = out.stdout.split()
    assert imported == "True"
    # Blocked, the loop would miss a beat for the whole import (most of `took`).
    assert float(longest_gap) < float(took) / 3, out.stdout


def test_usage_helpers():
    raw = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
           "cache_creation_input_tokens": 7, "service_tier": "standard"}
    assert usage_from(raw) == Usage(input_tokens=10, output_tokens=5, cache_read_tokens=100, cache_write_tokens=7)
    assert usage_from(None) == Usage()
    assert Usage(input_tokens=10, output_tokens=1).maximum(Usage(input_tokens=10, output_tokens=9)) == Usage(
        input_tokens=10, output_tokens=9)
    assert result_text([{"type": "text", "text": "a"}, {"type": "image"}]) == "a\n[image]"


def test_translator_tracks_writes_usage_and_refusals():
    from claude_agent_sdk import (
        AssistantMessage,
        SystemMessage,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        UserMessage,
    )

    events = TurnTranslator(lambda s: s.replace(API_KEY, "[REDACTED]"))
    calls = AssistantMessage(
        content=[TextBlock(f"key {API_KEY}"), ToolUseBlock("t1", "Write", {"file_path": "kept.py", "content": "x"}),
                 ToolUseBlock("t2", "Edit", {"file_path": "/etc/denied"})],
        model="claude-sonnet-4-5", message_id="m1", usage={"input_tokens": 10, "output_tokens": 1})
    out = events.translate(calls)
    assert [m.type for m in out] == [MessageType.TEXT, MessageType.TOOL_CALL, MessageType.TOOL_CALL]
    assert API_KEY not in out[0].content
    # A streamed copy of the same API message repeats its usage: counted once, largest figures.
    events.translate(AssistantMessage(content=[], model="claude-sonnet-4-5", message_id="m1",
                                      usage={"input_tokens": 10, "output_tokens": 7}))
    assert events.usage() == Usage(input_tokens=10, output_tokens=7)
    results = events.translate(UserMessage(content=[ToolResultBlock("t1", "ok"),
                                                    ToolResultBlock("t2", "denied", is_error=True)]))
    assert [(m.tool_name, m.is_error) for m in results if m.type is MessageType.TOOL_RESULT] == [
        ("Write", False), ("Edit", True)]
    # The successful write is also a file edit (no patch from this CLI message: counted from the input).
    assert [m.details for m in results if m.type is MessageType.FILE_EDIT] == [
        {"path": "kept.py", "lines_added": 1, "lines_removed": 0}]
    assert events.take_written() == ["kept.py"] and events.take_written() == []  # failed writes are not
    assert events.model == "claude-sonnet-4-5"
    events.translate(SystemMessage("model_refusal", {"api_refusal_category": "cyber"}))
    assert events.api_refusal == (f"key {API_KEY}", "cyber")  # the backend redacts when it records it


def test_bash_exit_codes_and_edit_line_counts_from_claude_codes_results():
    assert exit_code("done", False, {"stdout": "done", "interrupted": False}) == 0
    assert exit_code("", False, {"stdout": "", "interrupted": True}) is None
    assert exit_code("Exit code 4\nchecked", True, "Error: Exit code 4\nchecked") == 4
    assert exit_code("Error: Exit code 127\nbash: nope: command not found", True, None) == 127
    assert exit_code("Permission to use Bash has been denied.", True, None) is None
    patch = {"structuredPatch": [{"lines": [" one", "-two", "+2", "+2b", " three"]},
                                 {"lines": ["-x", "-y", " z"]}]}
    assert line_changes("Edit", {}, patch) == (2, 3)
    assert line_changes("Write", {"content": "a\nb\n"}, {"type": "create", "structuredPatch": []}) == (2, 0)
    assert line_changes("Edit", {"old_string": "a\nb", "new_string": "c"}, None) == (1, 2)
    assert line_changes("MultiEdit", {"edits": [{"old_string": "a", "new_string": "b\nc"},
                                                {"old_string": "d", "new_string": ""}]}, None) == (2, 2)


async def test_permissions_confine_file_tools_and_answer_prompts(tmp_path):
    from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

    gate = Permissions(resolver=PathResolver(tmp_path, ["src/**"]), mode="default", sandbox=True,
                       allowed=["Read", "Write", mcp_tool_name("refuse_task")])
    assert gate.write_denial("Write", {"file_path": "src/a.py"}) is None
    assert "docs/b.md" in (gate.write_denial("Write", {"file_path": "docs/b.md"}) or "")
    assert gate.write_denial("Bash", {"command": "rm -rf /"}) is None  # the OS sandbox's job
    hook = await gate.pre_tool_use({"tool_name": "Edit", "tool_input": {"file_path": "/etc/x"}}, None, None)
    assert hook["hookSpecificOutput"]["permissionDecision"] == "ask"  # the prompt is then denied below
    assert isinstance(await gate.can_use_tool("Edit", {"file_path": "/etc/x"}, None), PermissionResultDeny)
    assert isinstance(await gate.can_use_tool("WebFetch", {}, None), PermissionResultDeny)
    assert isinstance(await gate.can_use_tool("Read", {}, None), PermissionResultAllow)
    open_gate = Permissions(resolver=None, mode="bypassPermissions", sandbox=False, allowed=[])
    assert open_gate.hooks() is None
    assert isinstance(await open_gate.can_use_tool("WebFetch", {}, None), PermissionResultAllow)


def test_the_clis_bookkeeping_is_never_a_change():
    assert ClaudeCodeBackend.internal_paths == (".claude/.cc-writes/",)
    assert ClaudeCodeBackend.price_provider == "anthropic"


def test_descendants_finds_grandchildren():
    import subprocess

    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while not _pids.descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        kids = _pids.descendants(proc.pid)
        assert kids and all(_pids.is_alive(k) for k in kids)
    finally:
        _pids.kill(_pids.descendants(proc.pid) | {proc.pid})
        proc.wait()
    assert not _pids.is_alive(proc.pid)
