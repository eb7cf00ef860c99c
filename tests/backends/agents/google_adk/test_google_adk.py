"""google-adk backend: the real backend, the real Google ADK (LlmAgent + Runner) and the real
google-genai SDK, over real HTTP against the scripted model server's Gemini wire. Files are
checked on disk; requests as the server saw them. Nothing patches ADK or google-genai. The
conformance suite, the kit's permission proofs, resume, the error classes and the time budget
run from tests/backends/test_contract.py (this folder's cases.py); the pure translation rules
(_events, _permissions) have plain unit tests at the end."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter import CodingEventType as E
from agenter._errors import BackendError, ConfigurationError
from agenter.backends.agents.google_adk import GoogleADKBackend, GoogleADKOptions
from agenter.backends.agents.google_adk._events import TurnEvents, refused_beside, tool_answer
from agenter.backends.agents.google_adk._permissions import MCPToolName
from agenter.backends.agents.google_adk._permissions import tool_call as gate_call
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.testing import hang, http_error, refusal_reply, reply, text, tool_call
from agenter.tools import tool
from agenter.tools.spec import ToolSpec

API_KEY = "AIza-test-SUPERSECRET-0123456789abcdef"
agent_test = pytest.mark.agent


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ADK's session database goes to a cache folder of the test's own."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


def make_backend(server: Any, *, tools: list | None = None, sandbox: bool = True, permissions: Any = None,
                 on_permission: Any = None, model: str | None = None, **options: Any) -> GoogleADKBackend:
    from agenter.permissions import PermissionPolicy

    options.setdefault("max_retries", 0)
    opts = GoogleADKOptions(api_key=API_KEY, base_url=server.base_url, **options)
    policy = None if permissions is None else PermissionPolicy.coerce(permissions)
    settings = BackendSettings(model=model, tools=tools or [], sandbox=sandbox, options=opts, permissions=policy,
                               on_permission=on_permission, permission_timeout=60.0)
    GoogleADKBackend.check_settings(settings)
    return GoogleADKBackend(settings)


def make_agent(server: Any, **kwargs: Any) -> AutonomousCodingAgent:
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("max_retries", 0)
    return AutonomousCodingAgent(backend="google-adk", base_url=server.base_url, **kwargs)


async def run_turn(backend: GoogleADKBackend, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


async def one_turn(backend: GoogleADKBackend, cwd: Path, prompt: str = "go", **spec: Any) -> list:
    await backend.connect(SessionSpec(cwd=cwd, **spec))
    try:
        return await run_turn(backend, prompt)
    finally:
        await backend.disconnect()


def body(server: Any, index: int) -> dict[str, Any]:
    return server.model_requests[index].body


def responses_sent(server: Any, index: int) -> list[dict[str, Any]]:
    """The function responses of the last content of model request `index`."""
    parts = body(server, index)["contents"][-1]["parts"]
    return [p["functionResponse"] for p in parts if "functionResponse" in p]


def answer_of(response: dict[str, Any]) -> str:
    return json.dumps(response["response"])


def is_error(response: dict[str, Any]) -> bool:
    value = response["response"]
    return "error" in value or value.get("status") == "error"


def declared(server: Any, index: int = 0) -> dict[str, dict[str, Any]]:
    tools = body(server, index).get("tools") or [{}]
    return {d["name"]: d for t in tools for d in t.get("functionDeclarations", [])}


def of_type(messages: list, kind: MessageType) -> list:
    return [m for m in messages if m.type is kind]


# ---------------------------------------------------------------------------------------------
# Files really written, events, the request as the API gets it


@agent_test
async def test_writes_and_edits_files_with_adks_tools_and_reports_them(scripted_model_server, repo):
    server = scripted_model_server([
        reply(text("Adding a module."), tool_call("WriteFile", {"path": "pkg/util.py", "content": "X = 1\nY = 2\n"})),
        reply(tool_call("EditFile", {"path": "app.py", "old_string": "'hello'", "new_string": "'hi'"})),
        reply(tool_call("ReadFile", {"path": "app.py"}), tool_call("Execute", {"command": "ls pkg && exit 3"})),
        reply(text("All done.")),
    ])
    backend = make_backend(server)
    messages = await one_turn(backend, repo, "Change greet")
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert (repo / "pkg" / "util.py").read_text() == "X = 1\nY = 2\n"
    assert backend.last_turn().files.written == {"app.py", "pkg/util.py"}
    # Text streams as deltas first, then whole.
    assert messages[0].type is MessageType.TEXT_DELTA
    assert [m.content for m in of_type(messages, MessageType.TEXT)] == ["Adding a module.", "All done."]
    # Every call that ran is announced before its result; Execute as a command with its exit code.
    calls = [m.tool_call_id for m in of_type(messages, MessageType.TOOL_CALL)]
    results = [m.tool_call_id for m in of_type(messages, MessageType.TOOL_RESULT)]
    assert len(calls) == 3 and sorted(calls) == sorted(results)
    for call_id in calls:
        assert messages.index(next(m for m in messages if m.tool_call_id == call_id)) < messages.index(
            next(m for m in messages if m.type is MessageType.TOOL_RESULT and m.tool_call_id == call_id))
    start, = of_type(messages, MessageType.COMMAND_START)
    end, = of_type(messages, MessageType.COMMAND_END)
    assert start.details == {"command": "ls pkg && exit 3"} and start.tool_call_id == end.tool_call_id
    assert end.details == {"exit_code": 3} and end.is_error and "util.py" in end.content
    edits = [m.details for m in of_type(messages, MessageType.FILE_EDIT)]
    assert edits == [{"path": "pkg/util.py", "lines_added": 2, "lines_removed": 0},
                     {"path": "app.py", "lines_added": 1, "lines_removed": 1}]
    read = next(m for m in of_type(messages, MessageType.TOOL_RESULT) if m.tool_name == "ReadFile")
    assert "return 'hi'" in read.content
    # Usage: one settlement per model response, reported while the turn ran.
    assert len(of_type(messages, MessageType.USAGE)) == 4 and backend.usage().total_tokens > 0
    # The model read each result in the next request.
    assert "Wrote pkg/util.py" in answer_of(responses_sent(server, 1)[0])
    assert "exit code 3" in json.dumps(responses_sent(server, 3))


@agent_test
async def test_the_request_is_gemini_shaped_and_carries_agenters_instructions(scripted_model_server, repo):
    @tool(description="Look a word up.")
    def lookup(word: str) -> str:
        return f"{word}: a greeting"

    server = scripted_model_server([reply(text("Nothing to do."))])
    agent = make_agent(server, tools=[lookup])
    result = await agent.execute("Say hi", cwd=repo, require_changes=False,
                                 system_prompt="Prefer {braces} kept as written.")
    assert result.status is CodingStatus.COMPLETED, result.error
    request = server.model_requests[0]
    assert request.path.endswith("/models/gemini-2.5-pro:streamGenerateContent")
    system = json.dumps(request.body["systemInstruction"])
    assert "refuse_task" in system and "Work only inside the working directory" in system
    assert "Prefer {braces} kept as written." in system  # no ADK state templating of agenter's text
    assert set(declared(server)) == {"Execute", "ReadFile", "EditFile", "WriteFile", "lookup", "refuse_task"}
    assert request.headers["x-goog-api-key"] == "[redacted]"  # the key travels where the API wants it
    assert API_KEY not in json.dumps([r.body for r in server.requests])
    assert "google-adk/" in request.headers["x-goog-api-client"]


@agent_test
async def test_only_the_scripted_server_is_contacted(scripted_model_server, repo):
    """No telemetry, analytics or metadata-server probe: every connection the process opens while
    the backend connects, runs a turn and disconnects goes to the model server."""
    server = scripted_model_server([reply(tool_call("ReadFile", {"path": "app.py"})), reply(text("done"))])
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    seen: list[tuple[str, Any]] = []
    _AUDIT.append(seen)
    try:
        await one_turn(make_backend(server), repo)
    finally:
        _AUDIT.remove(seen)
    connects = [address for event, address in seen if event == "socket.connect"]
    assert connects and all(address[:2] == ("127.0.0.1", port) for address in connects if isinstance(address, tuple)), \
        connects
    assert not [address for event, address in seen if event == "socket.getaddrinfo"], seen


_AUDIT: list[list[tuple[str, Any]]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _AUDIT and event in ("socket.connect", "socket.getaddrinfo"):
        target = args[1] if event == "socket.connect" else args[:2]
        if event == "socket.connect" and getattr(args[0], "family", None) == socket.AF_UNIX:
            return
        for seen in _AUDIT:
            seen.append((event, target))


sys.addaudithook(_audit)


# ---------------------------------------------------------------------------------------------
# Tools: refused paths, custom tools, the refusal, a tool the agent lacks


@agent_test
async def test_refused_paths_and_failed_edits_are_errors_the_model_reads(scripted_model_server, repo):
    (repo / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    server = scripted_model_server([
        reply(tool_call("WriteFile", {"path": "../outside.txt", "content": "x"}, id="c_out"),
              tool_call("ReadFile", {"path": "missing.py"}, id="c_missing"),
              tool_call("EditFile", {"path": "app.py", "old_string": "nope", "new_string": "x"}, id="c_nope"),
              tool_call("EditFile", {"path": "blob.bin", "old_string": "binary", "new_string": "x"}, id="c_bin"),
              tool_call("ReadFile", {"path": ".git/config"}, id="c_git")),
        reply(text("ok")),
    ])
    messages = await one_turn(make_backend(server, adk_shell=False), repo)
    said = {r["id"]: r for r in responses_sent(server, 1)}
    assert all(is_error(r) for r in said.values()), said
    assert "outside the workspace" in answer_of(said["c_out"])
    assert "File not found: missing.py" in answer_of(said["c_missing"])
    assert "not found in file" in answer_of(said["c_nope"])
    assert "not UTF-8 text; nothing was changed" in answer_of(said["c_bin"])
    assert not (repo.parent / "outside.txt").exists() and (repo / "blob.bin").read_bytes().startswith(b"\xff")
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hello'\n"
    assert "Execute" not in declared(server)
    assert all(m.is_error for m in of_type(messages, MessageType.TOOL_RESULT))


@agent_test
async def test_custom_tools_run_with_their_spec_and_the_refusal_ends_the_turn(scripted_model_server, repo):
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
        reply(tool_call("lookup_price", {"item": "widget"}, id="c_price"), tool_call("broken", {"reason": "x"},
                                                                                    id="c_broken")),
        # ADK runs a response's calls side by side: the write beside the refusal is not run.
        reply(text("I won't."), tool_call("refuse_task", {"reason": "prices are secret", "category": "policy"}),
              tool_call("WriteFile", {"path": "x.py", "content": "x"}, id="c_write")),
        reply(text("never asked")),
    ])
    backend = make_backend(server, tools=[lookup_price, broken])
    messages = await one_turn(backend, repo)
    report = backend.last_turn()
    assert looked_up == ["widget"]
    said = {r["id"]: answer_of(r) for r in responses_sent(server, 1)}
    assert "widget: 42 EUR" in said["c_price"]
    assert "broken failed: RuntimeError: cannot: x" in said["c_broken"] and API_KEY not in said["c_broken"]
    assert len(server.model_requests) == 2  # the refusal ended ADK's run: no model call after it
    assert report.refusal is not None and report.refusal.reason == "prices are secret"
    assert report.refusal.category == "policy"
    assert not (repo / "x.py").exists()
    (beside,) = [m for m in of_type(messages, MessageType.TOOL_RESULT) if m.tool_call_id == "c_write"]
    assert beside.is_error and "refused in the same response" in beside.content
    assert {"lookup_price", "broken", "refuse_task"} <= set(declared(server))


def test_custom_tools_may_not_take_adks_tool_names():
    @tool(name="Execute")
    def mine(command: str) -> str:
        """Not the shell."""
        return command

    with pytest.raises(ConfigurationError, match="reserved"):
        AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, tools=[mine])


@agent_test
async def test_a_call_of_a_tool_the_agent_lacks_is_answered_and_the_run_goes_on(scripted_model_server, repo):
    server = scripted_model_server([reply(tool_call("Execute", {"command": "ls"}, id="c_ls")),
                                    reply(text("no shell, then"))])
    messages = await one_turn(make_backend(server, adk_shell=False), repo)
    (answer,) = responses_sent(server, 1)
    assert is_error(answer) and "no tool named 'Execute'" in answer_of(answer)
    (result,) = of_type(messages, MessageType.TOOL_RESULT)
    assert result.tool_call_id == "c_ls" and result.is_error
    assert of_type(messages, MessageType.TOOL_CALL) == []  # never ran, never announced
    assert of_type(messages, MessageType.TEXT)[-1].content == "no shell, then"


# ---------------------------------------------------------------------------------------------
# Structured output, modes, the facade


class Verdict(BaseModel):
    answer: int
    reasons: list[str]


@agent_test
async def test_structured_output_is_adks_output_schema_in_analysis_mode(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("ReadFile", {"path": "app.py"})),
        reply(tool_call("set_model_response", {"answer": 7, "reasons": ["it greets"]})),
        reply(text("never asked")),
    ])
    backend = make_backend(server)
    await one_turn(backend, repo, "Judge app.py", output_type=Verdict, mode="analysis")
    assert backend.last_turn().output == Verdict(answer=7, reasons=["it greets"])
    # Analysis mode: reading and commands, no file tool that writes.
    assert set(declared(server)) == {"ReadFile", "Execute", "refuse_task", "set_model_response"}
    schema = json.dumps(declared(server)["set_model_response"])
    assert '"answer"' in schema and '"reasons"' in schema
    assert "no tool that changes files" in json.dumps(body(server, 0)["systemInstruction"])
    assert len(server.model_requests) == 2


@agent_test
async def test_patch_mode_the_proposal_is_adks_output_and_agenter_applies_it(scripted_model_server, repo):
    proposal = {"summary": "greet says hi", "files": [
        {"path": "app.py", "operation": "modify", "new_path": None, "diff": None, "search_replace": None,
         "content": "def greet():\n    return 'hi'\n"}]}
    server = scripted_model_server([reply(tool_call("ReadFile", {"path": "app.py"})),
                                    reply(tool_call("set_model_response", proposal))])
    result = await make_agent(server, mode="patch").execute("Make greet say hi", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert set(declared(server)) == {"ReadFile", "Execute", "refuse_task", "set_model_response"}


@agent_test
async def test_the_facade_retries_with_the_validators_errors_in_the_same_adk_session(scripted_model_server, repo):
    server = scripted_model_server([
        reply(tool_call("WriteFile", {"path": "app.py", "content": "def greet(:\n"})),
        reply(text("done")),
        reply(tool_call("WriteFile", {"path": "app.py", "content": "def greet():\n    return 'hi'\n"})),
        reply(text("fixed")),
    ])
    result = await make_agent(server, validators=["syntax"]).execute("Do the task.", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.iterations == 2 and set(result.files) == {"app.py"}
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    # The retry prompt continues ADK's session: the first request's prompt is in its history.
    history = json.dumps(body(server, 2)["contents"])
    assert "Do the task." in history and "done" in history
    assert result.input_tokens > 0 and result.total_cost_usd > 0  # priced with Google's rates
    assert result.backend == "google-adk" and result.model == "gemini-2.5-pro" and result.session_id


@agent_test
async def test_a_response_the_provider_stopped_for_safety_is_a_refusal(scripted_model_server, repo):
    server = scripted_model_server([refusal_reply("I can't help with that.")])
    result = await make_agent(server).execute("bad request", cwd=repo)
    assert result.status is CodingStatus.REFUSED and "can't help" in (result.refusal_reason or "")


@agent_test
async def test_adks_limit_on_model_calls_ends_the_turn_with_a_status(scripted_model_server, repo):
    server = scripted_model_server(default=reply(tool_call("Execute", {"command": "true"})))
    messages = await one_turn(make_backend(server, adk_max_llm_calls=2), repo)
    statuses = [m.content for m in of_type(messages, MessageType.STATUS)]
    assert any("after 2 model calls (adk_max_llm_calls)" in s for s in statuses), statuses
    assert len(server.model_requests) == 2


# ---------------------------------------------------------------------------------------------
# Failures, budgets, cancellation


@agent_test
async def test_a_5xx_is_retried_by_google_genai_then_the_run_goes_on(scripted_model_server, repo):
    server = scripted_model_server([http_error(503, "overloaded"),
                                    reply(tool_call("WriteFile", {"path": "a.txt", "content": "a"})),
                                    reply(text("done"))])
    await one_turn(make_backend(server, max_retries=1), repo)
    assert (repo / "a.txt").read_text() == "a"
    assert [r.status for r in server.model_requests] == [503, 200, 200]


@agent_test
async def test_a_5xx_after_the_retries_is_a_transient_backend_error(scripted_model_server, repo):
    server = scripted_model_server(default=http_error(500, "the model is down"))
    with pytest.raises(BackendError) as caught:
        await one_turn(make_backend(server, max_retries=1), repo)
    error = caught.value
    assert error.kind == "transient" and error.status_code == 500 and error.backend == "google-adk"
    assert "HTTP 500" in str(error) and "the model is down" in str(error) and API_KEY not in str(error)
    assert len(server.model_requests) == 2  # the first try and max_retries=1


@agent_test
@pytest.mark.parametrize(("status", "error_type", "message", "kind"), [
    (401, None, "Request had invalid authentication credentials.", "auth"),
    (400, "INVALID_ARGUMENT", f"API key not valid. Please pass a valid API key. {API_KEY}", "auth"),
    (429, None, "Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests",
     "quota"),
    (400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed "
                              "(1048576).", "context_length"),
])
async def test_api_failures_have_their_kind_and_keep_no_key(scripted_model_server, repo, status, error_type,
                                                            message, kind):
    server = scripted_model_server(default=http_error(status, message, error_type=error_type))
    events = [e async for e in make_agent(server).stream_execute("go", cwd=repo)]
    result = events[-1].data["result"]
    assert result["status"] == "error" and result["error_kind"] == kind, result
    assert str(status) in result["error"]
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert API_KEY not in dumped and "SUPERSECRET" not in dumped
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


def _adk_tasks() -> list[str]:
    """asyncio tasks still running code of ADK, google-genai or this backend."""
    found = []
    for task in asyncio.all_tasks():
        if task is asyncio.current_task() or task.done():
            continue
        names = [frame.f_code.co_filename for frame in task.get_stack()] + [repr(task.get_coro())]
        if any(f"{os.sep}adk{os.sep}" in n or f"{os.sep}genai{os.sep}" in n or "google_adk" in n for n in names):
            found.append(repr(task))
    return found


@agent_test
@pytest.mark.parametrize("sandbox", [False, True], ids=["unsandboxed", "sandboxed"])
async def test_a_hung_command_and_a_hung_model_end_within_the_time_budget(scripted_model_server, repo, sandbox):
    marker = f"sleep {4100 + int(sandbox)}"
    server = scripted_model_server([
        reply(tool_call("Execute", {"command": "echo started"})),
        reply(tool_call("Execute", {"command": f"{marker} & {marker}"})),
    ], default=hang())
    # A session: the backend connects before the request, whose time budget is the turn's alone.
    async with make_agent(server, sandbox=sandbox).session(cwd=repo) as session:
        started = time.monotonic()
        events = [e async for e in session.stream_execute("Do the task.", budget=Budget(max_time_seconds=3),
                                                          require_changes=False)]
        elapsed = time.monotonic() - started
        result = events[-1].data["result"]
        assert result["status"] == "budget_exceeded" and result["exceeded_limit"] == "time", result
        assert elapsed < 3 + 2, elapsed
        # The command ADK's run was waiting for ended with the turn, and everything it started.
        assert _processes_running(marker) == []
        assert _adk_tasks() == []
        commands = [e.data["command"] for e in events if e.kind is E.COMMAND_STARTED]
        assert commands == ["echo started", f"{marker} & {marker}"]
        # The next request: the model never answers; the turn ends as promptly.
        started = time.monotonic()
        events = [e async for e in session.stream_execute("Go on.", budget=Budget(max_time_seconds=2),
                                                          require_changes=False)]
        assert events[-1].data["result"]["status"] == "budget_exceeded"
        assert time.monotonic() - started < 2 + 2
        assert _adk_tasks() == []


@agent_test
async def test_a_hung_model_on_the_first_request_ends_within_the_time_budget(scripted_model_server, repo):
    """The whole request: connecting (ADK imported, its first run prepared) and a model that
    never answers, within the budget and 2 s."""
    server = scripted_model_server([hang(after_events=1, reply=reply(text("slow " * 40)))])
    started = time.monotonic()
    result = await make_agent(server, budget=Budget(max_time_seconds=2)).execute("go", cwd=repo)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert time.monotonic() - started < 2 + 2
    assert _adk_tasks() == []


@agent_test
async def test_a_token_budget_stops_the_turn_between_responses(scripted_model_server, repo):
    usage = {"input_tokens": 40_000, "output_tokens": 100}
    server = scripted_model_server([reply(tool_call("Execute", {"command": "echo 1"}), usage=usage),
                                    reply(tool_call("Execute", {"command": "echo 2"}), usage=usage),
                                    reply(tool_call("Execute", {"command": "echo 3"}), usage=usage)],
                                   default=reply(text("done")))
    result = await make_agent(server, budget=Budget(max_tokens=50_000)).execute("go", cwd=repo,
                                                                                 require_changes=False)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "tokens"
    assert len(server.model_requests) <= 2


# ---------------------------------------------------------------------------------------------
# Sessions: ADK's session service, SQLite by default, resumed in another process


def history_texts(server: Any, index: int) -> list[str]:
    return [part["text"] for content in body(server, index)["contents"] for part in content["parts"]
            if "text" in part]


RESUME_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from agenter import AutonomousCodingAgent

    base_url, key, cwd, session_id = sys.argv[1:5]
    agent = AutonomousCodingAgent(backend="google-adk", base_url=base_url, api_key=key, max_retries=0)
    result = asyncio.run(agent.execute("third task", cwd=cwd, resume=session_id, require_changes=False))
    print(json.dumps({"status": result.status.value, "session_id": result.session_id, "summary": result.summary}))
""")


@agent_test
async def test_a_session_keeps_the_conversation_and_another_process_resumes_it(scripted_model_server, repo,
                                                                               private_cache):
    server = scripted_model_server([reply(text(f"first answer (the key was {API_KEY})")),
                                    reply(text("second answer")), reply(text("third answer"))])
    async with make_agent(server).session(cwd=repo) as session:
        first = await session.execute("first task", require_changes=False)
        second = await session.execute("second task", require_changes=False)
    assert first.session_id == second.session_id and first.session_id
    assert history_texts(server, 1) == ["first task", "first answer (the key was [REDACTED])", "second task"]
    # ADK's SQLite database, private to the user, without the key.
    database = private_cache / "agenter" / "google-adk" / "sessions.db"
    assert oct(database.stat().st_mode & 0o777) == "0o600"
    assert oct(database.parent.stat().st_mode & 0o777) == "0o700"
    assert API_KEY.encode() not in database.read_bytes()
    # Another process continues it by its id: the model sees the whole history.
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", RESUME_SCRIPT, server.base_url, API_KEY, str(repo), first.session_id],
        capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"status": "completed", "session_id": first.session_id, "summary": "third answer"}
    assert history_texts(server, 2) == ["first task", "first answer (the key was [REDACTED])", "second task",
                                        "second answer", "third task"]


@agent_test
async def test_resume_needs_a_stored_session(scripted_model_server, repo):
    server = scripted_model_server(default=reply(text("unused")))
    result = await make_agent(server).execute("x", cwd=repo, resume="no-such-session", require_changes=False)
    assert result.status is CodingStatus.ERROR and "no ADK session 'no-such-session' to resume" in result.error
    result = await make_agent(server, adk_session_db=":memory:").execute("x", cwd=repo, resume="abc",
                                                                         require_changes=False)
    assert result.status is CodingStatus.ERROR and "adk_session_db=':memory:'" in result.error
    assert server.model_requests == []


# ---------------------------------------------------------------------------------------------
# What is refused when the agent is built; what importing costs


def test_settings_the_backend_cannot_honour_fail_when_the_agent_is_built(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="no Gemini API key.*adk_vertex=True"):
        AutonomousCodingAgent(backend="google-adk")
    with pytest.raises(ConfigurationError, match="LiteLLM provider/model name"):
        AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, model="openai/gpt-4.1")
    with pytest.raises(ConfigurationError, match="network rules other than 'allow network' need sandbox=True"):
        AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, sandbox=False,
                              permissions={"mode": "bypass", "rules": ["allow network:github.com"]})
    with pytest.raises(ConfigurationError, match="exactly one of `command` or `url`"):
        AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, mcp_servers=[{"name": "x"}])
    # The shell off, a network rule needs no sandbox; Vertex AI needs no key here.
    AutonomousCodingAgent(backend="google-adk", api_key=API_KEY, sandbox=False, adk_shell=False,
                          permissions={"mode": "bypass", "rules": ["allow network:github.com"]})
    AutonomousCodingAgent(backend="google-adk", adk_vertex=True, model="projects/p/locations/l/models/m")
    assert "gemini-2.5-pro" in repr(AutonomousCodingAgent(backend="google-adk", api_key=API_KEY))


def test_the_shell_sandbox_requirement_names_this_backends_options():
    from agenter.sandbox.confine import ShellSandboxAvailable

    def needs(sandbox: bool, **options: Any) -> list[Any]:
        settings = BackendSettings(model=None, tools=[], sandbox=sandbox,
                                   options=GoogleADKOptions(api_key=API_KEY, **options))
        return [r for r in GoogleADKBackend.requirements(settings) if isinstance(r, ShellSandboxAvailable)]

    (forced,) = needs(True, adk_shell_sandbox="seatbelt")
    assert forced.prefer == "seatbelt" and forced.prefix == "adk"
    if sys.platform != "darwin":
        problem = forced.problem() or ""
        assert "adk_shell_sandbox='auto'" in problem and "adk_shell=False" in problem and "anthropic" not in problem
    assert needs(False) == [] and needs(True, adk_shell=False) == []


def test_choosing_the_backend_imports_no_adk():
    code = ("import sys, agenter; from agenter.backends import load_backend; "
            "load_backend('google-adk'); "
            "print([m for m in ('google.adk', 'google.genai', 'mcp') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# The translation rules, without ADK


def _turn_events() -> tuple[TurnEvents, list[Any], list[Any], list[str]]:
    settled: list[Any] = []
    running: list[Any] = []
    refused: list[str] = []
    events = TurnEvents(settle=settled.append, running=running.append, refused=refused.append)
    return events, settled, running, refused


def test_partial_text_streams_at_whitespace_and_the_whole_response_settles_usage():
    events, settled, running, _ = _turn_events()
    usage = {"prompt_token_count": 100, "cached_content_token_count": 40, "candidates_token_count": 7,
             "thoughts_token_count": 3}
    out = events.event({"author": "agenter", "partial": True, "content": {"parts": [
        {"text": "thinking it over", "thought": True}, {"text": "Hello wor"}]}, "usage_metadata": usage})
    assert [(m.type, m.content) for m in out] == [(MessageType.THINKING_DELTA, "thinking it "),
                                                  (MessageType.TEXT_DELTA, "Hello ")]
    assert running and running[0].input_tokens == 60 and running[0].output_tokens == 10
    assert events.event({"author": "agenter", "partial": True, "content": {"parts": [{"text": "ld"}]}}) == []
    out = events.event({"author": "agenter", "partial": False, "finish_reason": "STOP", "usage_metadata": usage,
                        "content": {"parts": [{"text": "thinking it over", "thought": True}, {"text": "Hello world"}]}})
    assert [(m.type, m.content) for m in out] == [
        (MessageType.THINKING_DELTA, "over"), (MessageType.TEXT_DELTA, "world"),
        (MessageType.THINKING, "thinking it over"), (MessageType.TEXT, "Hello world")]
    assert len(settled) == 1 and settled[0].cache_read_tokens == 40
    assert events.final_text == "Hello world"
    assert events.event({"author": "user", "content": {"parts": [{"text": "the prompt"}]}}) == []


def test_finish_reasons_a_refusal_a_cut_off_and_an_unreported_tool_result():
    events, _, _, refused = _turn_events()
    assert events.event({"author": "agenter", "error_code": "SAFETY", "content": {"parts": []}}) == []
    assert refused == ["The model declined the request (finish_reason=SAFETY)."]
    (cut,) = events.event({"author": "agenter", "error_code": "MAX_TOKENS", "content": {"parts": [{"text": ""}]}})
    assert cut.type is MessageType.STATUS and "max_tokens" in cut.content
    events.reported.add("seen")
    out = events.event({"author": "agenter", "content": {"parts": [
        {"function_response": {"id": "seen", "name": "ReadFile", "response": {"status": "ok"}}},
        {"function_response": {"id": "made-up", "name": "Nope", "response": {"error": "Tool 'Nope' not found."}}}]}})
    assert [(m.type, m.tool_call_id, m.is_error) for m in out] == [(MessageType.TOOL_RESULT, "made-up", True)]


def test_tool_answers_and_calls_beside_a_refusal():
    assert tool_answer({"status": "error", "stdout": "out", "exit_code": 2}) == ("out", True)
    assert tool_answer({"status": "ok", "content": "     1\tx"}) == ("     1\tx", False)
    assert tool_answer({"output": "fine"}) == ("fine", False)
    assert tool_answer({"rows": [1]}) == ('{"rows": [1]}', False)
    assert tool_answer(None) == ("", False)
    history = [{"content": {"parts": [{"function_call": {"id": "a", "name": "refuse_task"}},
                                      {"function_call": {"id": "b", "name": "WriteFile"}}]}},
               {"content": {"parts": [{"function_call": {"id": "c", "name": "WriteFile"}}]}}]
    assert refused_beside(history, "b", "refuse_task") and not refused_beside(history, "a", "refuse_task")
    assert not refused_beside(history, "c", "refuse_task") and not refused_beside(history, "zz", "refuse_task")


def test_the_gates_view_of_adks_calls():
    assert gate_call("Execute", {"command": "ls"}, {}).kind == "shell"
    read = gate_call("ReadFile", {"path": "a.py"}, {})
    assert read.kind == "read" and read.paths == ("a.py",) and read.read_only
    assert gate_call("EditFile", {"path": "a.py"}, {}).kind == "edit"
    assert gate_call("WriteFile", {"path": "b.py"}, {}).paths == ("b.py",)
    mcp = gate_call("files_echo", {"m": 1}, {}, MCPToolName("files", "echo", read_only=True))
    assert mcp.kind == "mcp" and mcp.mcp_server == "files" and mcp.read_only
    assert gate_call("refuse_task", {}, {}) is None and gate_call("set_model_response", {}, {}) is None
    unknown = gate_call("mystery", {}, {})
    assert unknown.kind == "custom" and not unknown.read_only
