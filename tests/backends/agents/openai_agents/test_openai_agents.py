"""openai-agents: the OpenAI Agents SDK's own agent loop (issue 26), proven with the real SDK and
the real openai client talking HTTP to the scripted model server, on both wires (Responses and
Chat Completions). Nothing of the SDK or its client is patched: what the model was told is read
from the requests the server received, what happened from the disk and the events. The backend
contract (the conformance suite, the permission proofs, resume by id, the error classes, a hung
model within the time budget) runs on both wires from tests/backends/test_contract.py (`cases.py`);
this file proves what is this backend's own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, Budget
from agenter import CodingEventType as E
from agenter._errors import BackendError, ConfigurationError
from agenter.backends.agents.openai_agents import OpenAIAgentsBackend, OpenAIAgentsOptions
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.permissions import PermissionPolicy
from agenter.testing import ScriptedModelServer, hang, http_error, reply, text, tool_call
from agenter.tools import tool
from agenter.tools.spec import ToolSpec

API_KEY = "sk-test-OPENAIAGENTS-0123456789abcdef"
#: The checkout, first on a child interpreter's path.
ROOT = Path(__file__).resolve().parents[4]
MODEL = "gpt-4.1"
WIRES = ["responses", "chat"]
agent_test = pytest.mark.agent


def make_backend(server: ScriptedModelServer, *, wire: str = "responses", tools: list | None = None,
                 sandbox: bool = False, permissions: Any = None, model: str | None = MODEL,
                 **options: Any) -> OpenAIAgentsBackend:
    options.setdefault("api_key", API_KEY)
    opts = OpenAIAgentsOptions(base_url=server.openai_base_url, openai_agents_wire=wire, **options)
    policy = None if permissions is None else PermissionPolicy.coerce(permissions)
    settings = BackendSettings(model=model, tools=tools or [], sandbox=sandbox, options=opts, permissions=policy)
    OpenAIAgentsBackend.check_settings(settings)
    return OpenAIAgentsBackend(settings)


def make_agent(server: ScriptedModelServer, wire: str = "responses", **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("model", MODEL)
    return AutonomousCodingAgent(backend="openai-agents", base_url=server.openai_base_url,
                                 openai_agents_wire=wire, **kwargs)


async def run_turn(backend: OpenAIAgentsBackend, prompt: str = "Do the task.") -> list[Any]:
    return [message async for message in backend.execute(prompt)]


async def run(agent: AutonomousCodingAgent, cwd: Path, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
    """The result (as SESSION_END carries it) and every event."""
    events = [event async for event in agent.stream_execute("Do the task.", cwd=cwd, **kwargs)]
    return events[-1].data["result"], events


def all_outputs(server: ScriptedModelServer, index: int) -> list[str]:
    """Every tool result in the history sent with model request `index`, on either wire."""
    body = server.model_requests[index].body
    if "input" in body:  # Responses
        return [item["output"] for item in body["input"] if item.get("type") == "function_call_output"]
    return [message["content"] for message in body["messages"] if message.get("role") == "tool"]


def tool_outputs(server: ScriptedModelServer, index: int) -> list[str]:
    """The tool results model request `index` brought (those of the previous response's calls)."""
    return all_outputs(server, index)[len(all_outputs(server, index - 1)) if index else 0:]


def offered_tools(server: ScriptedModelServer, index: int = 0) -> list[str]:
    return [tool.get("name") or tool["function"]["name"] for tool in server.model_requests[index].body["tools"]]


def of_type(messages: list[Any], kind: MessageType) -> list[Any]:
    return [m for m in messages if m.type is kind]


@pytest.fixture(scope="module", autouse=True)
def sdk_imported() -> None:
    """The SDK's first import takes seconds on a busy machine: done once, outside the time budgets."""
    import agents  # noqa: F401


# ---------------------------------------------------------------------------------------------
# Files, commands and events


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_files_are_written_and_every_step_is_an_event(scripted_model_server: Any, repo: Path,
                                                            wire: str) -> None:
    server = scripted_model_server([
        reply(text("I will add a module. "), tool_call("write_file", {"path": "pkg/util.py",
                                                                     "content": "A = 1\nB = 2\nC = 3\n"}),
              usage={"input_tokens": 900, "output_tokens": 30}),
        reply(tool_call("edit_file", {"path": "app.py", "old_string": "'hello'", "new_string": "'hello, world'"}),
              tool_call("read_file", {"path": "pkg/util.py", "start_line": 2})),
        reply(tool_call("shell", {"command": "python3 -c 'import pkg.util' && echo ok && exit 3"})),
        reply(tool_call("delete_file", {"path": "pkg/util.py"}), tool_call("write_file", {"path": "notes.md",
                                                                                          "content": "x\n"})),
        reply(text("All done."), usage={"input_tokens": 1500, "output_tokens": 12}),
    ])
    backend = make_backend(server, wire=wire)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend)
        report = backend.last_turn()
    finally:
        await backend.disconnect()
    # What the tools did is on disk, and in the turn's report.
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hello, world'\n"
    assert not (repo / "pkg" / "util.py").exists() and (repo / "notes.md").read_text() == "x\n"
    assert report.files.written == {"app.py", "notes.md"} and report.files.deleted == set()
    # The model read what the tools answered.
    assert tool_outputs(server, 2)[1] == "     2\tB = 2\n     3\tC = 3"
    assert tool_outputs(server, 3) == ["ok\n[exit code 3]"]
    # The stream: text deltas, tool calls and results, a command with its exit code, line counts.
    assert "".join(m.content for m in of_type(messages, MessageType.TEXT_DELTA)) == "I will add a module. All done."
    assert [m.tool_name for m in of_type(messages, MessageType.TOOL_CALL)] == [
        "write_file", "edit_file", "read_file", "delete_file", "write_file"]
    (start,) = of_type(messages, MessageType.COMMAND_START)
    (end,) = of_type(messages, MessageType.COMMAND_END)
    assert start.details == {"command": "python3 -c 'import pkg.util' && echo ok && exit 3"}
    assert end.details == {"exit_code": 3} and end.is_error and end.tool_call_id == start.tool_call_id
    edits = [(m.details["path"], m.details["lines_added"], m.details["lines_removed"])
             for m in of_type(messages, MessageType.FILE_EDIT)]
    assert edits == [("pkg/util.py", 3, 0), ("app.py", 1, 1), ("notes.md", 1, 0)]
    # A result follows its call; every call was decided by the gate.
    results = of_type(messages, MessageType.TOOL_RESULT)
    assert [r.tool_call_id for r in results] == [c.tool_call_id for c in of_type(messages, MessageType.TOOL_CALL)]
    assert len(of_type(messages, MessageType.PERMISSION)) == 6
    # Usage per response, settled as it came (five responses).
    usage = backend.usage()
    assert usage.total_tokens > 0 and len(of_type(messages, MessageType.USAGE)) == 5


@agent_test
async def test_a_refused_path_and_a_missing_file_are_errors_the_model_reads(scripted_model_server: Any,
                                                                           repo: Path) -> None:
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "../outside.txt", "content": "x"}),
              tool_call("read_file", {"path": "missing.py"}),
              tool_call("edit_file", {"path": "app.py", "old_string": "nope", "new_string": "x"}),
              tool_call("write_file", {"path": "app.py"})),
        reply(text("ok")),
    ])
    backend = make_backend(server, sandbox=True, openai_agents_shell=False)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        messages = await run_turn(backend)
    finally:
        await backend.disconnect()
    outside, missing, nope, no_content = tool_outputs(server, 1)
    assert outside.startswith("Permission denied") and "outside the workspace" in outside, outside
    assert missing == "No such file: 'missing.py'"
    assert "search text was not found" in nope or "not found" in nope, nope
    assert no_content == "'content' must be a string"
    assert not (repo.parent / "outside.txt").exists()
    assert [r.is_error for r in of_type(messages, MessageType.TOOL_RESULT)] == [True] * 4
    assert "shell" not in offered_tools(server)
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hello'\n"


@agent_test
async def test_a_call_of_a_tool_the_agent_lacks_ends_the_turn_with_a_backend_error(scripted_model_server: Any,
                                                                                   repo: Path) -> None:
    # The SDK ends its run when the model calls a tool it was not given (ModelBehaviorError).
    server = scripted_model_server([reply(tool_call("shell", {"command": "ls"})), reply(text("unused"))])
    backend = make_backend(server, openai_agents_shell=False)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError, match="Tool shell not found") as caught:
            await run_turn(backend)
    finally:
        await backend.disconnect()
    assert caught.value.kind == "unknown" and caught.value.backend == "openai-agents"


@agent_test
async def test_custom_tools_run_with_their_spec_and_the_refusal_tool_ends_the_turn(scripted_model_server: Any,
                                                                                  repo: Path) -> None:
    looked_up: list[str] = []

    @tool(spec=ToolSpec(kind="custom", read_only=True))
    def lookup_price(item: str) -> str:
        """Look up the price of an item."""
        looked_up.append(item)
        return f"{item}: 42 EUR"

    @tool
    async def broken(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(f"cannot: {reason} {API_KEY}")

    server = scripted_model_server([
        reply(tool_call("lookup_price", {"item": "widget"}), tool_call("broken", {"reason": "x"}),
              tool_call("lookup_price", {"wrong": 1})),
        reply(tool_call("refuse_task", {"reason": "prices are secret", "category": "policy"})),
        reply(text("never asked")),
    ])
    backend = make_backend(server, tools=[lookup_price, broken])
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend)
        report = backend.last_turn()
    finally:
        await backend.disconnect()
    assert looked_up == ["widget"]
    price, failed, invalid = tool_outputs(server, 1)
    assert price == "widget: 42 EUR"
    assert failed.startswith("broken failed: RuntimeError: cannot: x") and API_KEY not in failed
    assert invalid.startswith("Invalid arguments for lookup_price")
    # The refusal ended the turn: the third reply was never asked for.
    assert len(server.model_requests) == 2
    assert report.refusal is not None and report.refusal.reason == "prices are secret"
    assert report.refusal.category == "policy"
    assert {"lookup_price", "broken", "refuse_task", "shell", "read_file", "write_file"} <= set(offered_tools(server))


def test_custom_tools_may_not_take_the_builtin_names() -> None:
    @tool(name="shell")
    def mine(command: str) -> str:
        """Not the shell."""
        return command

    with pytest.raises(ConfigurationError, match="reserved"):
        AutonomousCodingAgent(backend="openai-agents", api_key=API_KEY, tools=[mine])


class Verdict(BaseModel):
    answer: int
    reasons: list[str]
    note: str | None = None


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_structured_output_is_the_sdks_output_type(scripted_model_server: Any, repo: Path,
                                                         wire: str) -> None:
    server = scripted_model_server([
        reply(tool_call("read_file", {"path": "app.py"})),
        reply(text(json.dumps({"answer": 7, "reasons": ["it greets"], "note": None}))),
    ])
    backend = make_backend(server, wire=wire)
    await backend.connect(SessionSpec(cwd=repo, output_type=Verdict, mode="analysis"))
    try:
        await run_turn(backend)
        output = backend.last_turn().output
    finally:
        await backend.disconnect()
    assert output == Verdict(answer=7, reasons=["it greets"])
    body = server.model_requests[0].body
    if wire == "responses":
        schema_format = body["text"]["format"]
        assert schema_format["type"] == "json_schema" and schema_format["strict"] is True
        assert set(schema_format["schema"]["properties"]) == {"answer", "reasons", "note"}
    else:
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["strict"] is True
    # Analysis mode: the agent may read and run commands, not write files.
    assert set(offered_tools(server)) == {"shell", "read_file", "refuse_task"}


@agent_test
async def test_the_facade_runs_a_request_to_completion_with_validation(scripted_model_server: Any,
                                                                       repo: Path) -> None:
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "app.py", "content": "def greet(:\n"})),
        reply(text("done")),
        # The retry prompt with the syntax error lands in the same conversation.
        reply(tool_call("write_file", {"path": "app.py", "content": "def greet():\n    return 'hi'\n"})),
        reply(text("fixed")),
    ])
    result, events = await run(make_agent(server), repo)
    assert result["status"] == "completed", result
    assert result["iterations"] == 2 and set(result["files"]) == {"app.py"}
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    retry_items = server.model_requests[2].body["input"]
    assert [item["content"] for item in retry_items if item.get("role") == "user"][0] == "Do the task."
    # Usage counted per response, priced with OpenAI's rates (gpt-4.1 has a price).
    assert result["input_tokens"] > 0 and result["total_cost_usd"] > 0
    assert result["backend"] == "openai-agents" and result["model"] == MODEL and result["session_id"]


# ---------------------------------------------------------------------------------------------
# Failures, budgets, cancellation


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_a_5xx_is_retried_by_the_client_then_a_transient_backend_error(scripted_model_server: Any,
                                                                             repo: Path, wire: str) -> None:
    server = scripted_model_server(default=http_error(503, "the model is down"))
    backend = make_backend(server, wire=wire, max_retries=2)
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as caught:
            await run_turn(backend)
    finally:
        await backend.disconnect()
    error = caught.value
    assert error.kind == "transient" and error.status_code == 503 and error.backend == "openai-agents"
    assert "HTTP 503" in str(error) and "the model is down" in str(error)
    assert len(server.model_requests) == 3  # the first try and max_retries=2


@agent_test
@pytest.mark.parametrize(("status", "body", "kind"), [
    (401, {"error": {"message": "Incorrect API key provided: sk-te...", "type": "invalid_request_error",
                     "code": "invalid_api_key"}}, "auth"),
    (429, {"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                     "type": "insufficient_quota", "code": "insufficient_quota"}}, "quota"),
    (400, {"error": {"message": "This model's maximum context length is 128000 tokens.", "type":
                     "invalid_request_error", "code": "context_length_exceeded"}}, "context_length"),
])
async def test_api_failures_have_their_kind_and_the_facade_reports_it(scripted_model_server: Any, repo: Path,
                                                                      status: int, body: Any, kind: str) -> None:
    server = scripted_model_server(default=http_error(status, body=body))
    result, _ = await run(make_agent(server, max_retries=0), repo)
    assert result["status"] == "error" and result["error_kind"] == kind, result
    assert API_KEY not in json.dumps(result)
    assert len(server.model_requests) == 1


def _processes_running(pattern: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue
            if pattern in cmdline and state not in ("Z", "X"):
                found.append(int(entry))
    return found


@agent_test
@pytest.mark.parametrize(("wire", "sandbox"), [("responses", False), ("chat", False), ("responses", True)])
async def test_a_hung_command_and_a_hung_model_end_within_the_time_budget(scripted_model_server: Any, repo: Path,
                                                                          wire: str, sandbox: bool) -> None:
    marker = f"sleep {4000 + int(sandbox) + 2 * (wire == 'chat')}"
    server = scripted_model_server([
        reply(tool_call("shell", {"command": "echo started"})),
        reply(tool_call("shell", {"command": f"{marker} & {marker}", "timeout": 600})),
    ], default=hang())
    # A session: the backend connects before the request, whose time budget is the turn's alone.
    async with make_agent(server, wire, sandbox=sandbox).session(cwd=repo) as session:
        started = time.monotonic()
        events = [e async for e in session.stream_execute("Do the task.", budget=Budget(max_time_seconds=3),
                                                          require_changes=False)]
        elapsed = time.monotonic() - started
        result = events[-1].data["result"]
        assert result["status"] == "budget_exceeded" and result["exceeded_limit"] == "time", result
        assert elapsed < 3 + 2, elapsed
        # The command the SDK's run was waiting for ended with the turn, and everything it started.
        assert _processes_running(marker) == []
        assert _sdk_tasks() == []  # the SDK's run loop and its tool tasks were cancelled and awaited
        commands = [e.data["command"] for e in events if e.kind is E.COMMAND_STARTED]
        assert commands == ["echo started", f"{marker} & {marker}"]
        # The next request: the model never answers; the turn ends as promptly.
        started = time.monotonic()
        events = [e async for e in session.stream_execute("Go on.", budget=Budget(max_time_seconds=2),
                                                          require_changes=False)]
        assert events[-1].data["result"]["status"] == "budget_exceeded"
        assert time.monotonic() - started < 2 + 2
        assert _sdk_tasks() == []


def _sdk_tasks() -> list[str]:
    """asyncio tasks still running code of the SDK or the openai client."""
    found = []
    for task in asyncio.all_tasks():
        if task is asyncio.current_task() or task.done():
            continue
        frames = task.get_stack()
        names = [frame.f_code.co_filename for frame in frames] + [repr(task.get_coro())]
        if any(f"{os.sep}agents{os.sep}" in name or f"{os.sep}openai{os.sep}" in name for name in names):
            found.append(repr(task))
    return found


@agent_test
async def test_a_token_budget_stops_the_turn_between_responses(scripted_model_server: Any, repo: Path) -> None:
    usage = {"input_tokens": 40_000, "output_tokens": 100}
    server = scripted_model_server([reply(tool_call("shell", {"command": "echo 1"}), usage=usage),
                                    reply(tool_call("shell", {"command": "echo 2"}), usage=usage),
                                    reply(tool_call("shell", {"command": "echo 3"}), usage=usage)],
                                   default=reply(text("done")))
    result, _ = await run(make_agent(server, budget=Budget(max_tokens=50_000)), repo, require_changes=False)
    assert result["status"] == "budget_exceeded" and result["exceeded_limit"] == "tokens", result
    assert len(server.model_requests) <= 2


# ---------------------------------------------------------------------------------------------
# Sessions: the SDK's conversation memory, kept in agenter's conversation store


def history_texts(server: ScriptedModelServer, index: int) -> list[str]:
    """The user and assistant texts in the history of model request `index` (Responses wire)."""
    texts = []
    for item in server.model_requests[index].body["input"]:
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part.get("text", "") for part in content if isinstance(part, dict)]
    return texts


RESUME_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from agenter import AutonomousCodingAgent

    base_url, key, store, cwd, session_id = sys.argv[1:6]
    agent = AutonomousCodingAgent(backend="openai-agents", base_url=base_url, api_key=key, model="gpt-4.1",
                                  openai_agents_store_dir=store)
    result = asyncio.run(agent.execute("third task", cwd=cwd, resume=session_id, require_changes=False))
    print(json.dumps({"status": result.status.value, "session_id": result.session_id, "summary": result.summary}))
""")


@agent_test
async def test_a_session_keeps_the_conversation_and_another_process_resumes_it(scripted_model_server: Any,
                                                                               repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "conversations"
    server = scripted_model_server([reply(text(f"first answer (the key was {API_KEY})")),
                                    reply(text("second answer")), reply(text("third answer"))])
    async with make_agent(server, openai_agents_store_dir=str(store)).session(cwd=repo) as session:
        first = await session.execute("first task", require_changes=False)
        second = await session.execute("second task", require_changes=False)
    assert first.session_id == second.session_id and first.session_id
    # The second request's history is the first one's, as the SDK reads it from the store each
    # turn (the key the model wrote scrubbed).
    assert history_texts(server, 1) == ["first task", "first answer (the key was [REDACTED])", "second task"]
    # The conversation is a file of agenter's store, without the key.
    (stored,) = store.glob("*.jsonl")
    assert stored.name == f"{first.session_id}.jsonl" and API_KEY not in stored.read_text()
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    # Another process continues it by its id: the model sees the whole history.
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", RESUME_SCRIPT, server.openai_base_url, API_KEY, str(store),
                         str(repo), first.session_id],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"status": "completed", "session_id": first.session_id, "summary": "third answer"}
    resumed = history_texts(server, 2)
    assert resumed[0] == "first task" and "second answer" in resumed and resumed[-1] == "third task"
    assert "first answer (the key was [REDACTED])" in resumed


@agent_test
async def test_resume_needs_a_stored_conversation_and_a_valid_id(scripted_model_server: Any, repo: Path,
                                                                 tmp_path: Path) -> None:
    server = scripted_model_server(default=reply(text("unused")))
    agent = make_agent(server, openai_agents_store_dir=str(tmp_path / "none"))
    result = await agent.execute("x", cwd=repo, resume="0123abcd", require_changes=False)
    assert result.status.value == "error" and "no conversation '0123abcd' to resume" in (result.error or "")
    assert result.error_kind == "config"
    result = await agent.execute("x", cwd=repo, resume="-rf x", require_changes=False)
    assert result.status.value == "error" and "invalid conversation session id" in (result.error or "")
    assert server.model_requests == []


@agent_test
async def test_an_sdk_session_object_of_the_users_keeps_the_conversation(scripted_model_server: Any,
                                                                         repo: Path) -> None:
    from agents import SQLiteSession

    sdk_session = SQLiteSession("my-conversation")
    await sdk_session.add_items([{"role": "user", "content": "an earlier question"},
                                 {"role": "assistant", "content": "an earlier answer"}])
    server = scripted_model_server([reply(text("noted"))])
    result = await make_agent(server, openai_agents_session=sdk_session).execute("now this", cwd=repo,
                                                                                 require_changes=False)
    assert result.status.value == "completed" and result.session_id == "my-conversation"
    assert history_texts(server, 0) == ["an earlier question", "an earlier answer", "now this"]
    assert len(await sdk_session.get_items()) == 4


SDK_SESSION_RESUME_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from agents import SQLiteSession
    from agenter import AutonomousCodingAgent

    base_url, key, db, cwd = sys.argv[1:5]
    agent = AutonomousCodingAgent(backend="openai-agents", base_url=base_url, api_key=key, model="gpt-4.1",
                                  openai_agents_session=SQLiteSession("ticket-42", db))
    result = asyncio.run(agent.execute("second task", cwd=cwd, resume="ticket-42", require_changes=False))
    print(json.dumps({"status": result.status.value, "session_id": result.session_id}))
""")


@agent_test
async def test_an_sdk_session_the_sdk_persists_is_resumed_by_another_process(scripted_model_server: Any,
                                                                            repo: Path, tmp_path: Path) -> None:
    from agents import SQLiteSession

    db = tmp_path / "conversations.db"
    server = scripted_model_server([reply(text("first answer")), reply(text("second answer"))])
    first = await make_agent(server, openai_agents_session=SQLiteSession("ticket-42", str(db))).execute(
        "first task", cwd=repo, require_changes=False)
    assert first.status.value == "completed" and first.session_id == "ticket-42"
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", SDK_SESSION_RESUME_SCRIPT, server.openai_base_url, API_KEY, str(db),
                         str(repo)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "completed", "session_id": "ticket-42"}
    assert history_texts(server, 1) == ["first task", "first answer", "second task"]


# ---------------------------------------------------------------------------------------------
# Tracing: the SDK's exporter would send every run to api.openai.com; agenter's runs send nothing


class RecordingProxy:
    """An HTTP proxy that records what it is asked to reach and refuses it (nothing leaves)."""

    def __init__(self) -> None:
        import socket
        import threading

        self.asked: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(4096).decode("latin-1")
                self.asked.append(data.split("\r\n", 1)[0])
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def stop(self) -> None:
        self.sock.close()


SDK_BARE_SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from openai import AsyncOpenAI
    from agents import Agent, OpenAIResponsesModel, Runner

    async def main():
        model = OpenAIResponsesModel("gpt-4.1", AsyncOpenAI(base_url=sys.argv[1], max_retries=0))
        result = Runner.run_streamed(Agent(name="bare", instructions="be brief", model=model), "hi")
        async for _ in result.stream_events():
            pass

    asyncio.run(main())
""")
AGENTER_SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from agenter import AutonomousCodingAgent

    agent = AutonomousCodingAgent(backend="openai-agents", base_url=sys.argv[1], model="gpt-4.1")
    result = asyncio.run(agent.execute("hi", cwd=sys.argv[2], require_changes=False))
    assert result.status.value == "completed", result
""")


@agent_test
async def test_no_request_leaves_for_api_openai_com(scripted_model_server: Any, repo: Path) -> None:
    server = scripted_model_server(default=reply(text("hello")))
    proxy = RecordingProxy()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-proj-test-0123456789abcdef",
           "HTTPS_PROXY": proxy.url, "HTTP_PROXY": proxy.url, "NO_PROXY": "127.0.0.1,localhost",
           "OPENAI_AGENTS_DISABLE_TRACING": "0"}
    env.pop("OPENAI_BASE_URL", None)
    try:
        # The control: the SDK run bare exports its trace to api.openai.com (through the proxy).
        bare = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", SDK_BARE_SCRIPT, server.openai_base_url],
                                       capture_output=True, text=True, timeout=120, env=env)
        assert bare.returncode == 0, bare.stderr[-2000:]
        assert any("api.openai.com" in line for line in proxy.asked), proxy.asked
        proxy.asked.clear()
        ours = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", AGENTER_SCRIPT, server.openai_base_url,
                                                        str(repo)], capture_output=True, text=True, timeout=120, env=env)
        assert ours.returncode == 0, ours.stderr[-2000:]
    finally:
        proxy.stop()
    assert proxy.asked == []
    assert len(server.model_requests) == 2  # both runs reached the scripted model


# ---------------------------------------------------------------------------------------------
# Modes and refusals


@agent_test
@pytest.mark.parametrize("wire", WIRES)
async def test_patch_mode_the_proposal_is_the_sdks_output_and_agenter_applies_it(scripted_model_server: Any,
                                                                                 repo: Path, wire: str) -> None:
    proposal = {"summary": "greet the world", "files": [
        {"path": "app.py", "operation": "modify", "new_path": None, "diff": None, "content": None,
         "search_replace": [{"search": "'hello'", "replace": "'hello, world'"}]}]}
    server = scripted_model_server([reply(tool_call("read_file", {"path": "app.py"})),
                                    reply(text(json.dumps(proposal)))])
    result, _ = await run(make_agent(server, wire, mode="patch"), repo)
    assert result["status"] == "completed", result
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hello, world'\n"
    # The agent could only read: agenter applied the proposal.
    assert set(offered_tools(server)) == {"shell", "read_file", "refuse_task"}


@agent_test
async def test_a_refusal_the_model_writes_is_a_refusal(scripted_model_server: Any, repo: Path) -> None:
    from agenter.testing import refusal_reply

    server = scripted_model_server([refusal_reply("I will not delete the production database.")])
    result, _ = await run(make_agent(server), repo)
    assert result["status"] == "refused", result
    assert result["refusal_reason"] == "I will not delete the production database."


@agent_test
async def test_a_final_answer_that_is_not_the_output_type_is_a_backend_error(scripted_model_server: Any,
                                                                            repo: Path) -> None:
    server = scripted_model_server([reply(text("no JSON here"))])
    backend = make_backend(server)
    await backend.connect(SessionSpec(cwd=repo, output_type=Verdict, mode="analysis"))
    try:
        with pytest.raises(BackendError, match="Invalid JSON|output") as caught:
            await run_turn(backend)
    finally:
        await backend.disconnect()
    assert caught.value.backend == "openai-agents"
