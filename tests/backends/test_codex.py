"""codex backend: the real Codex CLI (`codex app-server`, npm @openai/codex pinned in package.json)
against the scripted model server's OpenAI Responses wire. Files are checked on disk, requests as
the server saw them. Pure logic (config rendering, approval decisions, schemas) has unit tests."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, Budget, CodingEventType, CodingStatus
from agenter._errors import BackendError, ConfigurationError, RequirementError
from agenter.backends._programs.codex import direct_program, native_codex_binary
from agenter.backends._prompts import strict_schema
from agenter.backends.agents.codex import CodexBackend, CodexMCPServer, CodexOptions
from agenter.backends.agents.codex._events import changed_paths, messages, thread_total, turn_failure
from agenter.backends.agents.codex._permissions import Approvals
from agenter.backends.agents.codex._rpc import Notification
from agenter.backends.agents.codex._setup import (
    codex_config,
    config_overrides,
    merge_dotted,
    render_toml,
    seed_home,
    template_dir,
)
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.testing import conformance, hang, http_error, reply, text, thinking, tool_call
from agenter.tools import tool

API_KEY = "sk-test-SUPERSECRET-0123456789abcdef"
MODEL = "gpt-5.5"  # in Codex's model catalog: it offers apply_patch as a free-form tool
REPO_ROOT = Path(__file__).resolve().parents[2]
agent_test = pytest.mark.agent


def _codex_program() -> str | None:
    local = REPO_ROOT / "node_modules" / ".bin" / "codex"
    return str(local) if local.exists() else shutil.which("codex")


@pytest.fixture(scope="session")
def codex_path() -> str:
    found = _codex_program()
    if found is None:
        message = "the Codex CLI is not installed: run `npm install` in the repository (package.json pins it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


#: The HOME of the commands Codex runs: empty, so a login shell reads no start-up files (a slow
#: or locked ~/.bashrc on the test machine must not decide a test).
PRIVATE_HOME = tempfile.mkdtemp(prefix="agenter-codex-test-home-")


def options(server: Any, codex_path: str, **extra: Any) -> dict[str, Any]:
    """Backend options for a scripted run: no retries, so failures are quick and countable."""
    extra.setdefault("env", {"HOME": PRIVATE_HOME})
    return {"program_path": codex_path, "base_url": server.openai_base_url, "api_key": API_KEY,
            "max_retries": 0, **extra}


def make_backend(server: Any, codex_path: str, *, tools: list | None = None, sandbox: bool = True,
                 model: str | None = MODEL, **extra: Any) -> CodexBackend:
    opts = CodexOptions(**options(server, codex_path, **extra))
    return CodexBackend(BackendSettings(model=model, tools=tools or [], sandbox=sandbox, options=opts))


async def run_turn(backend: CodexBackend, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


def shell(command: str, **arguments: Any) -> Any:
    # exec_command returns early (no output, no exit code) when a command outlives its yield
    # window, which a loaded CI machine can stretch; wait for the command unless told otherwise.
    arguments.setdefault("yield_time_ms", 30_000)
    return tool_call("exec_command", {"cmd": command, **arguments})


def patch(body: str) -> Any:
    return tool_call("apply_patch", f"*** Begin Patch\n{body}*** End Patch\n")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ------------------------------------------------------------------------------------ real Codex
@agent_test
async def test_shell_write_and_apply_patch_are_reported(scripted_model_server, codex_path, repo):
    server = scripted_model_server([
        reply(shell("printf 'VALUE = 1\\n' > settings.py")),
        reply(patch("*** Update File: app.py\n@@\n-    return 'hello'\n+    return 'hello, world'\n"
                    "*** Add File: util.py\n+def double(x):\n+    return 2 * x\n")),
        reply(text("Done.")),
    ])
    backend = make_backend(server, codex_path)
    try:
        await backend.connect(SessionSpec(cwd=repo))
        messages = await run_turn(backend, "Add settings and utils")
    finally:
        await backend.disconnect()

    assert (repo / "settings.py").read_text() == "VALUE = 1\n"
    assert "hello, world" in (repo / "app.py").read_text()
    assert (repo / "util.py").read_text() == "def double(x):\n    return 2 * x\n"
    changed = backend.modified_files()
    assert changed.written == {"settings.py", "app.py", "util.py"} and not changed.deleted
    calls = [m.tool_name for m in messages if m.type is MessageType.TOOL_CALL]
    # The shell write is proven above by the file and the snapshot diff; its event may be
    # missing (Codex 0.169 sometimes sends no item for a command that exits at once).
    assert calls in (["shell", "apply_patch"], ["apply_patch"]), calls
    assert [m.content for m in messages if m.type is MessageType.TEXT] == ["Done."]
    results = [m for m in messages if m.type is MessageType.TOOL_RESULT]
    assert results and not any(m.is_error for m in results)
    # The shell command is a command (when Codex reported it), ending with its exit code.
    commands = [m for m in messages if m.type in (MessageType.COMMAND_START, MessageType.COMMAND_END)]
    assert [m.type for m in commands] in ([MessageType.COMMAND_START, MessageType.COMMAND_END], [])
    if commands:
        assert "VALUE = 1" in commands[0].details["command"] and commands[0].raw["type"] == "commandExecution"
        assert commands[1].details == {"exit_code": 0} and not commands[1].is_error
    # The patch's files, each with its lines added and removed (relative to the workspace).
    edits = [m.details for m in messages if m.type is MessageType.FILE_EDIT]
    assert edits == [{"path": "app.py", "lines_added": 1, "lines_removed": 1},
                     {"path": "util.py", "lines_added": 2, "lines_removed": 0}]

    first = server.model_requests[0]
    tools = {t.get("name"): t.get("type") for t in first.body["tools"]}
    assert tools["exec_command"] == "function" and tools["apply_patch"] == "custom"
    assert first.body["model"] == MODEL
    assert first.headers["authorization"] == f"Bearer {API_KEY}"
    developer = json.dumps(first.body["input"])
    assert "headless" in developer  # agenter's autonomous contract reached the model
    usage = backend.usage()
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.cost_usd > 0  # gpt-5.5 is priced
    assert backend.session_id


@agent_test
async def test_text_and_reasoning_stream_as_deltas_closed_by_the_whole_text(scripted_model_server, codex_path,
                                                                            repo):
    """Through the facade: Codex's agentMessage and reasoning deltas are text_delta and
    thinking_delta events that join to the final text (which is not sent again), and a key the
    model writes across two of Codex's deltas reaches the redaction whole."""
    answer = f"All done, the server wants Bearer {API_KEY} in its header and nothing else."
    server = scripted_model_server([reply(patch("*** Add File: notes.txt\n+noted\n")),
                                    reply(thinking("The note is written, now the answer."), text(answer))])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, validators=[], **options(server, codex_path))
    events = [e async for e in agent.stream_execute("Write a note", cwd=repo)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    messages = [e.data for e in events if e.type is CodingEventType.BACKEND_MESSAGE]
    kinds = [m["kind"] for m in messages]
    assert "text" not in kinds and "thinking" not in kinds
    deltas = [m["content"] for m in messages if m["kind"] == "text_delta"]
    assert len(deltas) > 1 and "".join(deltas) == result.summary == answer.replace(API_KEY, "[REDACTED]")
    assert "".join(m["content"] for m in messages if m["kind"] == "thinking_delta") == \
        "The note is written, now the answer."
    assert API_KEY[:20] not in json.dumps([e.data for e in events], default=str)


@agent_test
async def test_context_compaction_is_reported(scripted_model_server, codex_path, repo):
    """A small auto-compact limit makes Codex summarise the thread before the next model call: a
    compacted event with the context's size before it (Codex reports no size after it)."""
    server = scripted_model_server([
        reply(shell("true"), usage={"input_tokens": 5000, "output_tokens": 3000}),
        reply(text("SUMMARY of the work so far."), usage={"input_tokens": 100, "output_tokens": 10}),
        reply(text("Done."), usage={"input_tokens": 100, "output_tokens": 10}),
    ])
    backend = make_backend(server, codex_path, sandbox=False,
                           codex_config_overrides={"model_auto_compact_token_limit": 1000})
    try:
        await backend.connect(SessionSpec(cwd=repo))
        messages = await run_turn(backend, "Run true")
    finally:
        await backend.disconnect()
    compacted = [m for m in messages if m.type is MessageType.COMPACTED]
    assert [m.details for m in compacted] == [{"tokens_before": 8000, "tokens_after": None}]
    assert compacted[0].raw["type"] == "contextCompaction"
    assert [m.content for m in messages if m.type is MessageType.TEXT] == ["Done."]
    assert "SUMMARY of the work so far." in json.dumps(server.model_requests[-1].body["input"])


@agent_test
async def test_retry_after_syntax_error_continues_the_same_thread(scripted_model_server, codex_path, repo):
    server = scripted_model_server([
        reply(shell("printf 'def broken(:\\n    pass\\n' > mod.py")),
        reply(text("Wrote mod.py.")),
        reply(patch("*** Update File: mod.py\n@@\n-def broken(:\n+def broken():\n")),
        reply(text("Fixed the syntax error.")),
    ])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, validators=["syntax"],
                                  **options(server, codex_path))
    result = await agent.execute("Create mod.py", cwd=repo)

    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.iterations == 2
    assert (repo / "mod.py").read_text() == "def broken():\n    pass\n"
    assert set(result.files) >= {"mod.py"}
    requests = server.model_requests
    assert len(requests) == 4
    # The retry is a new turn on the same Codex thread: its request carries the first turn.
    retry_input = json.dumps(requests[2].body["input"])
    assert "Create mod.py" in retry_input and "Wrote mod.py." in retry_input
    assert requests[2].headers.get("session-id") == requests[0].headers.get("session-id")
    assert result.total_tokens > 0 and result.input_tokens > 0


@agent_test
async def test_untrusted_policy_is_answered_headless(scripted_model_server, codex_path, repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    server = scripted_model_server([
        reply(shell("echo hi > from_shell.txt")),                        # asks: declined
        reply(patch("*** Add File: from_patch.txt\n+patched\n")),       # inside cwd: approved
        reply(patch(f"*** Add File: {outside}/escape.txt\n+nope\n")),   # outside: declined
        reply(text("Finished.")),
    ])
    backend = make_backend(server, codex_path, codex_approval_policy="untrusted")
    started = time.monotonic()
    try:
        await backend.connect(SessionSpec(cwd=repo))
        messages = await asyncio.wait_for(run_turn(backend, "go"), 60)
    finally:
        await backend.disconnect()

    assert time.monotonic() - started < 60
    assert not (repo / "from_shell.txt").exists()
    assert (repo / "from_patch.txt").read_text() == "patched\n"
    assert not (outside / "escape.txt").exists()
    decisions = [m.content for m in messages if m.type is MessageType.STATUS and "agenter" in m.content]
    assert any("declined command" in d for d in decisions)
    assert any("approved file change" in d for d in decisions)
    assert any("declined file change" in d and "outside the workspace" in d for d in decisions)
    assert backend.modified_files().written == {"from_patch.txt"}
    assert {d.tool for d in backend.denials()} == {"shell", "apply_patch"}  # in the result too
    # The model was told about the declined command and could go on.
    assert "rejected" in json.dumps(server.model_requests[1].body["input"][-1])


@agent_test
async def test_on_request_runs_in_the_sandbox_and_declines_escalation(scripted_model_server, codex_path,
                                                                      repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    server = scripted_model_server([
        reply(shell("echo inside > inside.txt")),
        reply(shell(f"echo out > {outside}/escalated.txt", sandbox_permissions="require_escalated",
                    justification="write outside")),
        reply(text("ok")),
    ])
    backend = make_backend(server, codex_path, codex_approval_policy="on-request")
    try:
        await backend.connect(SessionSpec(cwd=repo))
        messages = await asyncio.wait_for(run_turn(backend, "go"), 60)
    finally:
        await backend.disconnect()
    assert (repo / "inside.txt").read_text() == "inside\n"
    assert not (outside / "escalated.txt").exists()
    assert any(m.type is MessageType.STATUS and "declined command" in m.content for m in messages)


@agent_test
async def test_workspace_write_sandbox_refuses_writes_outside_cwd(scripted_model_server, codex_path,
                                                                  repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    server = scripted_model_server([
        reply(shell(f"echo pwned > {outside}/shell.txt; echo pwned > /tmp/agenter-codex-escape.txt")),
        reply(patch(f"*** Add File: {outside}/patch.txt\n+pwned\n")),
        reply(shell("echo $TMPDIR > tmpdir.txt && echo scratch > $TMPDIR/scratch.txt && env > env.txt")),
        reply(text("tried")),
    ])
    backend = make_backend(server, codex_path)  # sandbox=True, approval policy never
    try:
        await backend.connect(SessionSpec(cwd=repo))
        await run_turn(backend, "escape")
    finally:
        await backend.disconnect()
    assert not (outside / "shell.txt").exists()
    assert not Path("/tmp/agenter-codex-escape.txt").exists()
    assert not (outside / "patch.txt").exists()
    # What the model was told about its first command (from the request log: Codex 0.169's
    # app-server sometimes sends no commandExecution item for a command that exits at once).
    fed_back = str([request.body.get("input") for request in server.model_requests])
    assert "Read-only file system" in fed_back
    # The private TMPDIR is writable (tools that need a temp dir still work), and it is cleaned up.
    private_tmp = Path((repo / "tmpdir.txt").read_text().strip())
    assert private_tmp.name == "tmp" and not private_tmp.exists()
    assert backend.modified_files().written == {"tmpdir.txt", "env.txt"}
    environment = (repo / "env.txt").read_text()  # commands never see the API key
    assert API_KEY not in environment and "AGENTER_CODEX_API_KEY" not in environment


@agent_test
async def test_sandbox_false_runs_unconfined(scripted_model_server, codex_path, repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    server = scripted_model_server([reply(shell(f"echo free > {outside}/free.txt")), reply(text("ok"))])
    backend = make_backend(server, codex_path, sandbox=False)
    try:
        await backend.connect(SessionSpec(cwd=repo))
        await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    assert (outside / "free.txt").read_text() == "free\n"
    assert '"danger-full-access"' in (json.dumps(server.model_requests[0].headers.get("x-codex-turn-metadata"))
                                      .replace('\\"', '"'))


@agent_test
async def test_writes_outside_allowed_write_paths_fail_the_run(scripted_model_server, codex_path, repo):
    server = scripted_model_server([
        reply(shell("mkdir -p src && echo ok > src/ok.py && echo no > README.md")),
        reply(text("done")),
    ])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, **options(server, codex_path))
    result = await agent.execute("Edit src only", cwd=repo, allowed_write_paths=["src/"])
    assert result.status is CodingStatus.FAILED  # the session's check, whatever the backend
    assert "README.md" in (result.error or "") and "src/ok.py" not in (result.error or "")
    assert "src/" in json.dumps(server.model_requests[0].body["input"])  # the model was told


@agent_test
async def test_custom_tool_is_served_in_process_over_mcp(scripted_model_server, codex_path, repo):
    lock = threading.Lock()  # not picklable: proves the tool runs in this process
    seen: list[str] = []

    @tool
    def lookup_price(item: str) -> str:
        """Look up the price of an item in the catalog."""
        with lock:
            seen.append(item)
        return f"{item} costs 42 EUR"

    server = scripted_model_server([
        reply(tool_call("tool_search", {"query": "price catalog", "limit": 8})),
        reply(tool_call("mcp__agenter_tools.lookup_price", {"item": "widget"})),
        reply(shell("echo 42 > price.txt")),
        reply(text("The widget costs 42 EUR.")),
    ])
    backend = make_backend(server, codex_path, tools=[lookup_price])
    try:
        await backend.connect(SessionSpec(cwd=repo))
        messages = await run_turn(backend, "What does a widget cost? Write it to price.txt.")
    finally:
        await backend.disconnect()

    assert seen == ["widget"]
    result = next(m for m in messages if m.type is MessageType.TOOL_RESULT
                  and m.tool_name == "agenter_tools.lookup_price")
    assert result.content == "widget costs 42 EUR" and not result.is_error
    assert "widget costs 42 EUR" in json.dumps(server.model_requests[2].body["input"][-1])
    found = json.dumps(server.model_requests[1].body["input"])
    assert "lookup_price" in found  # tool_search found the deferred MCP tool
    assert (repo / "price.txt").read_text() == "42\n"


@agent_test
async def test_refusal_through_the_refusal_tool(scripted_model_server, codex_path, repo):
    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    server = scripted_model_server([
        reply(tool_call("tool_search", {"query": "refuse decline", "limit": 8})),
        reply(tool_call("mcp__agenter_tools.refuse_task", {"reason": "this would delete production data",
                                                            "category": "harmful"})),
        reply(text("I declined.")),
    ])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, tools=[noop], **options(server, codex_path))
    result = await agent.execute("Drop the production database", cwd=repo)
    assert result.status is CodingStatus.REFUSED
    assert "production data" in (result.refusal_reason or "")


@agent_test
async def test_text_refusal_and_structured_output(scripted_model_server, codex_path, repo):
    class Answer(BaseModel):
        language: str
        lines: int

    server = scripted_model_server([
        reply(text('{"language": "python", "lines": 2}')),
        reply(text("REFUSED: I will not exfiltrate secrets.")),
    ])
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, **options(server, codex_path))
    result = await agent.execute("Describe app.py", cwd=repo, output_type=Answer, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Answer(language="python", lines=2)
    schema = server.model_requests[0].body["text"]["format"]
    assert schema["type"] == "json_schema" and schema["schema"]["additionalProperties"] is False

    refused = await agent.execute("Send me the secrets", cwd=repo)
    assert refused.status is CodingStatus.REFUSED
    assert refused.refusal_reason == "I will not exfiltrate secrets."


@agent_test
async def test_dead_model_server_fails_fast_and_truthfully(codex_path, repo, unused_tcp_port):
    agent = AutonomousCodingAgent(backend="codex", model=MODEL, program_path=codex_path, api_key=API_KEY,
                                  base_url=f"http://127.0.0.1:{unused_tcp_port}/v1", max_retries=0)
    started = time.monotonic()
    result = await agent.execute("Do something", cwd=repo)
    elapsed = time.monotonic() - started
    assert result.status is CodingStatus.ERROR
    assert "Codex turn failed" in (result.error or "")
    assert API_KEY not in (result.error or "")
    assert elapsed < 30, elapsed


@agent_test
async def test_model_http_500_is_a_transient_error_naming_status_and_server(scripted_model_server,
                                                                            codex_path, repo):
    # Codex reports a 500 as codexErrorInfo "internalServerError" (a bare string) with the text
    # "We're currently experiencing high demand": the status code must still reach the caller.
    server = scripted_model_server([], default=http_error(500))
    backend = make_backend(server, codex_path, sandbox=False)
    try:
        await backend.connect(SessionSpec(cwd=repo))
        with pytest.raises(BackendError) as caught:
            await asyncio.wait_for(run_turn(backend, "go"), 60)
    finally:
        await backend.disconnect()
    error = caught.value
    assert error.status_code == 500 and error.kind == "transient"
    assert "HTTP 500" in str(error) and server.openai_base_url in str(error)
    assert len(server.model_requests) == 1  # max_retries=0


def test_missing_api_key_is_a_configuration_error(monkeypatch, tmp_path):
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError) as caught:
        AutonomousCodingAgent(backend="codex", model=MODEL)
    assert "OPENAI_API_KEY" in str(caught.value) and "api_key=" in str(caught.value)
    assert "AGENTER_CODEX_API_KEY" not in str(caught.value)
    assert caught.value.parameter == "api_key"
    # A key from any of these sources is enough; your own Codex login needs none.
    AutonomousCodingAgent(backend="codex", model=MODEL, api_key=API_KEY)
    AutonomousCodingAgent(backend="codex", model=MODEL, env={"CODEX_API_KEY": API_KEY})
    AutonomousCodingAgent(backend="codex", model=MODEL, codex_home=tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    AutonomousCodingAgent(backend="codex", model=MODEL)


async def test_missing_api_key_at_connect_fails_before_codex_starts(monkeypatch, repo, tmp_path):
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    program = fake_codex(tmp_path, f"touch {tmp_path}/started\nsleep 30\n")
    backend = CodexBackend(BackendSettings(model=MODEL, tools=[], sandbox=False,
                                           options=CodexOptions(program_path=program)))
    with pytest.raises(BackendError) as caught:
        await backend.connect(SessionSpec(cwd=repo))
    assert caught.value.kind == "auth" and "OPENAI_API_KEY" in str(caught.value)
    assert not (tmp_path / "started").exists()


@agent_test
async def test_time_budget_kills_the_process_group(scripted_model_server, codex_path, repo):
    instances: list[RecordingCodex] = []

    class RecordingCodex(CodexBackend):
        def __init__(self, settings: BackendSettings):
            super().__init__(settings)
            instances.append(self)

        async def _connect(self, spec: SessionSpec) -> None:
            await super()._connect(spec)
            assert self.app_server_pid is not None
            self.pid: int = self.app_server_pid

    server = scripted_model_server([hang()])
    agent = AutonomousCodingAgent(backend=RecordingCodex, model=MODEL,
                                  budget=Budget(max_time_seconds=8), **options(server, codex_path))
    started = time.monotonic()
    result = await agent.execute("Think forever", cwd=repo)
    elapsed = time.monotonic() - started

    assert result.status is CodingStatus.BUDGET_EXCEEDED, (result.status, result.error)
    assert result.exceeded_limit == "time"
    assert elapsed < 25, elapsed
    (backend,) = instances
    assert not pid_alive(backend.pid)
    with pytest.raises(ProcessLookupError):
        os.killpg(backend.pid, 0)  # the whole group is gone, not just the leader


# ------------------------------------------------------------------ failures of the program itself
def fake_codex(tmp_path: Path, body: str) -> str:
    """A stand-in program for the failure paths the real binary cannot be made to show."""
    path = tmp_path / "fake-codex"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_missing_codex_says_how_to_install(tmp_path):
    # Probed when the agent is built, before anything runs.
    with pytest.raises(RequirementError) as caught:
        AutonomousCodingAgent(backend="codex", program_path=str(tmp_path / "no-such-codex"),
                              api_key=API_KEY, sandbox=False)
    assert "npm install -g @openai/codex" in str(caught.value)


async def test_missing_codex_at_connect_is_a_missing_program_error(repo, tmp_path):
    backend = CodexBackend(BackendSettings(model=None, tools=[], sandbox=False, options=CodexOptions(
        program_path=str(tmp_path / "no-such-codex"), api_key=API_KEY)))
    with pytest.raises(BackendError) as caught:
        await backend.connect(SessionSpec(cwd=repo))
    assert caught.value.kind == "missing_program"
    assert "npm install -g @openai/codex" in str(caught.value)


@agent_test
async def test_crashed_process_reports_exit_code_and_stderr(repo, tmp_path):
    program = fake_codex(tmp_path, f"echo 'fatal: model config broken {API_KEY}' >&2\nexit 3\n")
    backend = CodexBackend(BackendSettings(model=None, tools=[], sandbox=False, options=CodexOptions(
        program_path=program, api_key=API_KEY, base_url="http://127.0.0.1:9/v1")))
    with pytest.raises(BackendError) as caught:
        await backend.connect(SessionSpec(cwd=repo))
    message = str(caught.value)
    assert "exited with code 3" in message and "fatal: model config broken" in message
    assert API_KEY not in message
    assert backend.app_server_pid is None and not backend.connected  # disconnected on failure


@agent_test
async def test_malformed_line_is_a_clear_error(repo, tmp_path):
    program = fake_codex(tmp_path, "read line\necho 'this is not json'\nsleep 30\n")
    backend = CodexBackend(BackendSettings(model=None, tools=[], sandbox=False, options=CodexOptions(
        program_path=program, api_key=API_KEY)))
    started = time.monotonic()
    with pytest.raises(BackendError, match="malformed line"):
        await backend.connect(SessionSpec(cwd=repo))
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------------------------- unit tests
def test_options_are_validated_by_the_facade():
    with pytest.raises(ConfigurationError, match="codex_approval_policy"):
        AutonomousCodingAgent(backend="codex", codex_approval_policy="sometimes")
    with pytest.raises(ConfigurationError, match="unknown option"):
        AutonomousCodingAgent(backend="codex", codex_sandbox="yes")
    with pytest.raises(ConfigurationError, match="needs codex_home"):
        AutonomousCodingAgent(backend="codex", model_provider="openai")
    with pytest.raises(ConfigurationError, match="exactly one of"):
        AutonomousCodingAgent(backend="codex", codex_mcp_servers=[{"name": "x"}])
    with pytest.raises(ConfigurationError, match="reserved"):
        AutonomousCodingAgent(backend="codex", codex_mcp_servers=[{"name": "agenter_tools", "url": "http://h"}])
    agent = AutonomousCodingAgent(backend="codex", codex_reasoning_effort="high", api_key=API_KEY,
                                  codex_mcp_servers=[{"name": "docs", "command": "docs-mcp", "args": ["-q"]}])
    assert agent.capabilities.custom_tools and agent.capabilities.resume
    assert [server.name for server in agent.options.mcp_servers] == ["docs"]  # the old name still works
    with pytest.raises(ConfigurationError, match="old name"):
        AutonomousCodingAgent(backend="codex", api_key=API_KEY, codex_path="codex", program_path="codex")


def test_config_renders_to_toml_and_overrides():
    server = CodexMCPServer(name="docs", command="docs-mcp", args=["--x"], env={"A": "1"})
    config = {"model": "gpt-5.5", "features": {"plugins": False},
              "mcp_servers": {"docs": server.to_config()}, "model_providers": {"agenter": {"base_url": "http://h/v1"}}}
    merge_dotted(config, {"model_providers.agenter.stream_max_retries": 0, "features": {"apps": False}})
    rendered = render_toml(config)
    import tomllib

    assert tomllib.loads(rendered) == config
    args = config_overrides({"model": "m", "features": {"plugins": False}})
    assert args == ["-c", 'model="m"', "-c", "features.plugins=false"]


def test_strict_schema_closes_objects_and_makes_optionals_nullable():
    class Inner(BaseModel):
        value: int

    class Outer(BaseModel):
        name: str
        note: str = "x"
        inner: Inner

    schema = strict_schema(Outer.model_json_schema())
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"name", "note", "inner"}
    assert {"type": "null"} in schema["properties"]["note"]["anyOf"]
    assert schema["$defs"]["Inner"]["additionalProperties"] is False


def test_approval_decisions_by_policy(tmp_path):
    reports: list[tuple[bool, str]] = []

    def backend(policy: str, sandbox: bool) -> Approvals:
        return Approvals(policy=policy, sandbox=sandbox, cwd=tmp_path, writable_roots=[tmp_path],
                         report=lambda decision: reports.append((decision.approved, decision.text)))

    def patch_started(approvals: Approvals, item_id: str, paths: list[str]) -> None:
        approvals.observe(Notification("item/started", {"item": {
            "type": "fileChange", "id": item_id, "changes": [{"path": p} for p in paths]}}))

    command = {"command": "rm -rf build", "itemId": "c1"}
    assert backend("untrusted", True).answer(
        "item/commandExecution/requestApproval", command) == {"decision": "decline"}
    assert backend("on-request", True).answer(
        "item/commandExecution/requestApproval", command) == {"decision": "decline"}
    assert backend("on-request", False).answer(
        "item/commandExecution/requestApproval", command) == {"decision": "accept"}
    inside = backend("untrusted", True)
    patch_started(inside, "p1", [str(tmp_path / "a.py")])
    assert inside.answer("item/fileChange/requestApproval", {"itemId": "p1"}) == {
        "decision": "accept"}
    patch_started(inside, "p2", [str(tmp_path / "a.py"), "/etc/passwd"])
    assert inside.answer("item/fileChange/requestApproval", {"itemId": "p2"}) == {
        "decision": "decline"}
    assert inside.answer("item/tool/requestUserInput", {}) == {"answers": {}}
    elicitation = inside.answer("mcpServer/elicitation/request", {"serverName": "x"})
    assert isinstance(elicitation, dict) and elicitation["action"] == "decline"
    with pytest.raises(LookupError):
        inside.answer("account/chatgptAuthTokens/refresh", {})
    assert reports[0] == (False, "agenter declined command 'rm -rf build': approval policy 'untrusted': "
                                 "only commands Codex itself trusts run; nobody can vouch for this one "
                                 "in a headless run")
    assert any(accept is False and "/etc/passwd" in why for accept, why in reports)


def test_turn_failures_carry_status_and_kind():
    server = "the model server http://h/v1"
    named = turn_failure({"status": "failed", "error": {
        "message": "We\u2019re currently experiencing high demand", "codexErrorInfo": "internalServerError"}}, server)
    assert (named.status_code, named.kind) == (500, "transient")
    assert named.message.startswith("Codex turn failed: the model server http://h/v1 answered HTTP 500")
    http = turn_failure({"status": "failed", "error": {
        "message": "unexpected status 401 Unauthorized: bad key",
        "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 401}}}}, server)
    assert (http.status_code, http.kind) == (401, None) and "HTTP 401" in http.message
    other = turn_failure({"status": "failed", "error": {
        "message": "exceeded retry limit, last status: 429 Too Many Requests", "codexErrorInfo": "other"}}, server)
    assert other.status_code == 429
    context = turn_failure({"status": "failed", "error": {
        "message": "too long", "codexErrorInfo": "contextWindowExceeded"}}, server)
    assert (context.status_code, context.kind) == (None, "context_length")
    policy = turn_failure({"status": "failed", "error": {"message": "no", "codexErrorInfo": "cyberPolicy"}}, server)
    assert policy.refusal


def test_usage_and_file_changes_from_notifications():
    total = thread_total({"tokenUsage": {"total": {"inputTokens": 1000, "cachedInputTokens": 600,
                                                   "outputTokens": 50}}})
    assert total is not None
    assert (total.input_tokens, total.cache_read_tokens, total.output_tokens) == (400, 600, 50)
    assert thread_total({}) is None
    item = {"status": "completed", "changes": [
        {"path": "/r/a.py", "kind": {"type": "update"}},
        {"path": "/r/old.py", "kind": {"type": "update", "move_path": "/r/new.py"}},
        {"path": "/r/gone.py", "kind": {"type": "delete"}}]}
    assert changed_paths(item) == (["/r/a.py", "/r/new.py"], ["/r/old.py", "/r/gone.py"])
    assert changed_paths({**item, "status": "failed"}) == ([], [])


def test_commands_and_file_changes_speak_the_event_vocabulary():
    # The items as Codex 0.169's app-server sends them (trimmed).
    command = {"type": "commandExecution", "id": "call_1", "command": "/bin/bash -lc 'echo checked; exit 4'",
               "cwd": "/r", "status": "inProgress", "aggregatedOutput": None, "exitCode": None}
    (started,) = messages("item/started", {"item": command}, str)
    assert started.type is MessageType.COMMAND_START and started.tool_name == "shell"
    assert started.details == {"command": command["command"]} and started.raw is command
    done = {**command, "status": "failed", "aggregatedOutput": "checked\n", "exitCode": 4}
    (ended,) = messages("item/completed", {"item": done}, str)
    assert ended.type is MessageType.COMMAND_END and ended.tool_call_id == "call_1"
    assert ended.details == {"exit_code": 4} and ended.is_error and ended.content == "checked\n"
    patch = {"type": "fileChange", "id": "call_2", "status": "completed", "changes": [
        {"path": "/r/app.py", "kind": {"type": "update", "move_path": None},
         "diff": "@@ -1,2 +1,3 @@\n def greet():\n-    return 'hello'\n+    return 'hi'\n+# two\n"},
        {"path": "/r/util.py", "kind": {"type": "add"}, "diff": "def double(x):\n    return 2 * x\n"},
        {"path": "/r/gone.py", "kind": {"type": "delete"}, "diff": "X = 1\n"},
        {"path": "/r/old.py", "kind": {"type": "update", "move_path": "/r/new.py"}, "diff": ""}]}
    result, *edits = messages("item/completed", {"item": patch}, str)
    assert result.type is MessageType.TOOL_RESULT and result.raw is patch
    assert [(m.type, m.details) for m in edits] == [
        (MessageType.FILE_EDIT, {"path": "/r/app.py", "lines_added": 2, "lines_removed": 1}),
        (MessageType.FILE_EDIT, {"path": "/r/util.py", "lines_added": 2, "lines_removed": 0}),
        (MessageType.FILE_EDIT, {"path": "/r/gone.py", "lines_added": 0, "lines_removed": 1}),
        (MessageType.FILE_EDIT, {"path": "/r/new.py", "lines_added": 0, "lines_removed": 0})]
    assert messages("item/completed", {"item": {**patch, "status": "failed"}}, str)[1:] == []  # nothing edited


def test_cumulative_usage_is_settled_once_per_increase():
    backend = CodexBackend(BackendSettings(model=MODEL, tools=[], sandbox=False,
                                           options=CodexOptions(api_key=API_KEY)))

    def report(inputs: int, outputs: int) -> str | None:
        return backend._record_usage({"tokenUsage": {"total": {"inputTokens": inputs, "outputTokens": outputs}}})

    assert report(100, 10) == "model call: 100 input tokens (0 cached), 10 output tokens"
    first = backend.usage()
    assert report(100, 10) is None  # the same total again: nothing new
    assert backend.usage() == first
    report(250, 30)
    assert (backend.usage().input_tokens, backend.usage().output_tokens) == (250, 30)
    assert backend.usage().cost_usd > first.cost_usd > 0  # gpt-5.5 is priced, each increase once


def test_default_model_is_known_before_connect(tmp_path):
    def model(**options: Any) -> str | None:
        settings_model = options.pop("model", None)
        return CodexBackend(BackendSettings(model=settings_model, tools=[], sandbox=False,
                                            options=CodexOptions(api_key=API_KEY, **options))).default_model

    assert model(model=MODEL) == MODEL
    assert model(codex_config_overrides={"model": "gpt-5.4"}) == "gpt-5.4"
    (tmp_path / "config.toml").write_text('model = "gpt-5.3-codex"\n')
    assert model(codex_home=tmp_path) == "gpt-5.3-codex"
    assert model() is None  # Codex's own default: learnt at thread/start


def test_renamed_options_reach_codex_config():
    old_names: dict[str, Any] = {"network_access": True, "stream_idle_timeout_seconds": 2.5,
                                 "config_overrides": {"web_search": "live"}, "wire_api": "responses"}
    options = CodexOptions(api_key=API_KEY, base_url="http://h/v1", **old_names)
    assert options.codex_network_access and options.codex_stream_idle_timeout == 2.5
    config = codex_config(options, model=MODEL, sandbox=True, tools_url=None)
    assert config["sandbox_workspace_write"]["network_access"] is True
    provider = config["model_providers"]["agenter"]
    assert provider["stream_idle_timeout_ms"] == 2500 and provider["wire_api"] == "responses"
    assert provider["base_url"] == "http://h/v1" and config["web_search"] == "live"
    assert API_KEY not in render_toml(config)  # the key travels in the environment only


def test_native_binary_is_found_behind_the_npm_wrapper():
    program = _codex_program()
    if program is None:
        pytest.skip("Codex CLI not installed")
    native = native_codex_binary(program)
    assert native is not None and native.read_bytes()[:4] == b"\x7fELF"


def test_the_npm_wrapper_is_skipped_for_the_binary_it_starts(tmp_path):
    program = _codex_program()
    if program is None:
        pytest.skip("Codex CLI not installed")
    env = {"CODEX_MANAGED_BY_BUN": "1"}
    direct = direct_program(program, env)
    assert direct == str(native_codex_binary(program)) and Path(direct).read_bytes()[:4] == b"\x7fELF"
    # The variables the wrapper would have set for an npm install, and no others.
    root = Path(os.path.realpath(program)).parent.parent
    assert env == {"CODEX_MANAGED_PACKAGE_ROOT": str(root), "CODEX_MANAGED_BY_NPM": "1"}
    assert (root / "package.json").is_file()
    other = fake_codex(tmp_path, "exit 0\n")  # not the wrapper: started as it is
    assert direct_program(other, env) == other


@agent_test
async def test_codex_home_is_seeded_from_a_template_built_once(codex_path, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # the template goes to ~/.cache/agenter
    native = direct_program(codex_path, {})
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    env = {**os.environ, "HOME": PRIVATE_HOME}
    assert await seed_home(native, first, env)
    template = template_dir(native)
    assert template.parent == tmp_path / "user" / ".cache" / "agenter"
    assert stat.S_IMODE(template.parent.stat().st_mode) == 0o700
    made = template.stat().st_mtime_ns
    assert await seed_home(native, second, env)
    assert template.stat().st_mtime_ns == made  # built once, then only copied
    seeded = {p.name for p in first.iterdir()}
    assert any(name.startswith("state_") for name in seeded), seeded
    # No config (each session writes its own), no process leftovers, no marker of ours.
    assert not {"config.toml", "tmp", ".agenter-template", "sessions"} & seeded
    assert {p.name for p in second.iterdir()} == seeded


async def test_a_program_that_is_not_codex_gets_no_template(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    program = fake_codex(tmp_path, "read line\necho 'this is not json'\nsleep 30\n")
    home = tmp_path / "home"
    home.mkdir()
    started = time.monotonic()
    assert not await seed_home(program, home, dict(os.environ))
    assert time.monotonic() - started < 5
    assert not list(home.iterdir()) and not (tmp_path / "user" / ".cache").exists()


@agent_test
async def test_a_failed_sandbox_check_fails_connect_though_it_ran_beside_the_app_server(repo, tmp_path):
    # A stand-in Codex: its sandbox check fails; as app server it answers initialize and
    # thread/start. The check runs while the app server starts, and its verdict still decides.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex-linux-sandbox").symlink_to("/bin/true")
    program = fake_codex(tmp_path, (
        'if [ "$1" = sandbox ]; then echo "bwrap: setting up uid map: Permission denied" >&2; exit 1; fi\n'
        "read line\necho '{\"id\": 1, \"result\": {}}'\nread line\nread line\n"
        "echo '{\"id\": 2, \"result\": {\"thread\": {\"id\": \"t-1\"}}}'\nsleep 30\n"))
    backend = CodexBackend(BackendSettings(model=MODEL, tools=[], sandbox=True, options=CodexOptions(
        program_path=program, api_key=API_KEY, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})))
    with pytest.raises(BackendError) as caught:
        await backend.connect(SessionSpec(cwd=repo))
    assert caught.value.kind == "config"
    assert "sandbox" in str(caught.value) and "uid map: Permission denied" in str(caught.value)
    assert backend.app_server_pid is None and not backend.connected  # the app server was ended


# ---------------------------------------------------------------------------------- conformance
class CodexHarness:
    """Real Codex against the scripted model server, one server per backend."""

    capabilities = CodexBackend.capabilities

    def __init__(self, start_server: Any, codex_path: str):
        self._start_server = start_server
        self._codex_path = codex_path

    def supports(self, scenario: str) -> bool:
        return True

    def make(self, scenario: str, cwd: Path) -> CodexBackend:
        script: list[Any]
        default = None
        if scenario == "write":
            script = [reply(patch(f"*** Add File: {conformance.WRITE_PATH}\n"
                                  f"+{conformance.WRITE_CONTENT.rstrip()}\n")), reply(text("Written."))]
        elif scenario == "shell":
            script = [reply(shell(conformance.SHELL_COMMAND)), reply(text("Ran it."))]
        elif scenario == "hang":
            script = [hang()]
        elif scenario == "refuse":  # no custom tools here: the model states it in text
            script = [reply(text(f"REFUSED: {conformance.REFUSAL_REASON}"))]
        elif scenario == "output":
            script = [reply(text(json.dumps(conformance.OUTPUT_VALUE)))]
        elif scenario == "fail":
            script, default = [], http_error(500)
        elif scenario == "usage":
            script = [reply(shell("cat app.py || true")), reply(text("It greets."))]
        else:
            raise ValueError(scenario)
        server = self._start_server(script, default=default)
        return make_backend(server, self._codex_path)


@pytest.fixture
def harness(scripted_model_server, codex_path) -> CodexHarness:
    return CodexHarness(scripted_model_server, codex_path)


@agent_test
@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, harness, tmp_path):
    await check(harness, tmp_path)
