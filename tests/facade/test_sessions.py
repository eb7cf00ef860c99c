"""Multi-request sessions (`agent.session(...)`) and resume (`CodingRequest(resume=...)`).

Session logic runs on FunctionBackend (pure logic, no agent program); the conversation kept
across requests, and the resume of a run killed mid-turn by a new process, are proven with the
real `claude` CLI (bundled with claude-agent-sdk) against the scripted model server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from agenter import (
    AutonomousCodingAgent,
    Budget,
    BudgetExceededError,
    CodingRequest,
    CodingStatus,
    ConfigurationError,
)
from agenter import (
    CodingEventType as E,
)
from agenter.backends import BackendCapabilities
from agenter.host import _pids
from agenter.session.transcript import read_transcript
from agenter.testing import FunctionBackend, TurnContext, hang, reply, text, tool_call


class Calls:
    """What the function backends of one agent saw."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.connects = 0
        self.disconnects = 0


def writer(calls: Calls, tokens: int = 100, cost: float = 0.01):
    def turn(ctx: TurnContext):
        calls.prompts.append(ctx.prompt)
        n = len(calls.prompts)
        message = ctx.write(f"f{n}.py", f"x = {n}\n")
        ctx.use(input_tokens=tokens, output_tokens=10, cost_usd=cost)
        return [message, f"wrote f{n}.py after {len(ctx.prompts)} prompt(s) in this conversation"]
    return turn


def make(calls: Calls, turn=None, **kwargs) -> AutonomousCodingAgent:
    def on_disconnect():
        calls.disconnects += 1
    return AutonomousCodingAgent(backend=FunctionBackend, turn=turn or writer(calls), on_disconnect=on_disconnect,
                                 **kwargs)


# ---------------------------------------------------------------------------------------------
# One connected backend, many requests


async def test_requests_share_one_connected_backend_with_per_request_results_and_running_totals(tmp_path):
    calls = Calls()
    agent = make(calls)
    async with agent.session(cwd=tmp_path) as session:
        assert session.is_open and session.keeps_conversation
        first = await session.execute("add f1")
        second = await session.execute(CodingRequest(prompt="add f2", cwd=tmp_path))
        assert calls.disconnects == 0  # still connected between requests
        assert session.usage.total_tokens == 220 and session.total_cost_usd == pytest.approx(0.02)
    assert calls.disconnects == 1 and not session.is_open

    # The second turn ran in the same conversation: the backend had seen both prompts.
    assert second.summary == "wrote f2.py after 2 prompt(s) in this conversation"
    # Per request: its own files, tokens and cost (the backend's figure is cumulative).
    assert first.files == {"f1.py": "x = 1\n"} and second.files == {"f2.py": "x = 2\n"}
    assert first.total_tokens == second.total_tokens == 110
    assert second.total_cost_usd == pytest.approx(0.01)
    assert session.files == {"f1.py": "x = 1\n", "f2.py": "x = 2\n"}
    assert [r.status for r in session.results] == [CodingStatus.COMPLETED] * 2
    assert first.session_id == second.session_id == session.session_id == "function-session"


async def test_stream_execute_gives_each_request_its_own_event_stream(tmp_path):
    calls = Calls()
    async with make(calls).session(cwd=tmp_path) as session:
        streams = []
        for prompt in ("one", "two"):
            streams.append([e async for e in session.stream_execute(prompt)])
    for index, events in enumerate(streams, start=1):
        assert events[0].type is E.SESSION_START and events[0].data["request"] == index
        assert events[-2].type is E.COMPLETED and events[-1].type is E.SESSION_END
        assert events[-1].result.files == {f"f{index}.py": f"x = {index}\n"}
        assert events[-1].data["tokens"] == 110


async def test_calls_are_serialized_in_call_order(tmp_path):
    active, most, order = 0, 0, []

    async def turn(ctx: TurnContext):
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.05)
        order.append(ctx.prompt)
        active -= 1
        ctx.write(f"{ctx.prompt}.py", "x = 1\n")
        return "ok"

    async with make(Calls(), turn=turn).session(cwd=tmp_path) as session:
        results = await asyncio.gather(*(session.execute(p) for p in ("a", "b", "c")))
    assert most == 1
    assert order == ["a", "b", "c"]
    assert [sorted(r.files) for r in results] == [["a.py"], ["b.py"], ["c.py"]]


async def test_a_request_budget_counts_from_its_own_start(tmp_path):
    calls = Calls()
    async with make(calls, budget=Budget(max_tokens=150)).session(cwd=tmp_path) as session:
        results = [await session.execute(f"r{i}") for i in range(3)]
    assert [r.status for r in results] == [CodingStatus.COMPLETED] * 3


async def test_the_session_budget_bounds_the_whole_session(tmp_path):
    calls = Calls()
    async with make(calls).session(cwd=tmp_path, budget=Budget(max_cost_usd=0.025)) as session:
        first, second = await session.execute("one"), await session.execute("two")
        third = await session.execute("three")  # crosses $0.025 while it runs
        fourth = await session.execute("four")  # refused before its turn
    assert first.ok and second.ok
    assert third.status is CodingStatus.BUDGET_EXCEEDED and third.exceeded_limit == "cost"
    assert third.error.startswith("session cost budget exceeded")
    assert fourth.status is CodingStatus.BUDGET_EXCEEDED and fourth.iterations == 0
    assert len(calls.prompts) == 3


async def test_session_iterations_count_only_when_given(tmp_path):
    calls = Calls()
    # A session budget without max_iterations does not cap the requests' turns in total.
    async with make(calls).session(cwd=tmp_path, budget=Budget(max_cost_usd=5.0)) as session:
        assert all([(await session.execute(f"r{i}")).ok for i in range(6)])
    async with make(Calls()).session(cwd=tmp_path, budget=Budget(max_iterations=2)) as session:
        results = [await session.execute(f"r{i}") for i in range(3)]
    assert [r.status for r in results] == [CodingStatus.COMPLETED, CodingStatus.COMPLETED,
                                           CodingStatus.BUDGET_EXCEEDED]
    assert "session iteration budget" in results[2].error


async def test_raise_on_budget_exceeded_holds_in_a_session(tmp_path):
    calls = Calls()
    agent = make(calls, budget=Budget(max_cost_usd=0.005), raise_on_budget_exceeded=True)
    async with agent.session(cwd=tmp_path) as session:
        with pytest.raises(BudgetExceededError):
            await session.execute("too dear")
        assert session.results[-1].status is CodingStatus.BUDGET_EXCEEDED


async def test_what_the_session_fixes_cannot_change_per_request(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    calls = Calls()
    agent = make(calls)
    session = agent.session(cwd=tmp_path, system_prompt="house rules")
    with pytest.raises(ConfigurationError, match="not open"):
        await session.execute("p")
    async with session:
        with pytest.raises(ConfigurationError, match="cwd is fixed"):
            await session.execute("p", cwd=other)
        with pytest.raises(ConfigurationError, match="cwd is fixed"):
            await session.execute(CodingRequest(prompt="p", cwd=other))
        with pytest.raises(ConfigurationError, match="system_prompt is fixed"):
            await session.execute("p", system_prompt="other rules")
        with pytest.raises(ConfigurationError, match="resume"):
            await session.execute("p", resume="abc")
        with pytest.raises(ConfigurationError, match="unknown"):
            await session.execute("p", verbosity=2)
        assert (await session.execute("p", cwd=str(tmp_path), system_prompt="house rules")).ok
    with pytest.raises(ConfigurationError, match="closed"):
        await session.execute("p")
    with pytest.raises(ConfigurationError, match="opened once"):
        await session.open()
    assert calls.prompts == ["p"]


async def test_a_backend_that_cannot_keep_a_conversation_says_so(tmp_path):
    class Forgetful(FunctionBackend):
        name: ClassVar[str] = "forgetful"
        capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
            text_completion=True, native_tool_loop=True, filesystem_read=True, filesystem_edit=True, shell=True)

    calls = Calls()
    agent = AutonomousCodingAgent(backend=Forgetful, turn=writer(calls))
    async with agent.session(cwd=tmp_path) as session:
        assert not session.keeps_conversation
        assert (await session.execute("one")).ok and (await session.execute("two")).ok
    with pytest.raises(ConfigurationError, match="cannot resume"):
        agent.session(cwd=tmp_path, resume="abc")


async def test_cancel_stops_the_running_request_and_closes(tmp_path):
    calls = Calls()
    started = asyncio.Event()
    stopped = asyncio.Event()

    async def slow(ctx: TurnContext):
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            stopped.set()
        return "never"

    session = make(calls, turn=slow).session(cwd=tmp_path)
    await session.open()
    running = asyncio.create_task(session.execute("take your time"))
    await asyncio.wait_for(started.wait(), 5)
    began = time.monotonic()
    await session.cancel()
    result = await asyncio.wait_for(running, 10)
    assert time.monotonic() - began < 5
    assert stopped.is_set() and calls.disconnects == 1
    assert result.status is CodingStatus.ERROR and "cancelled" in result.error
    assert not session.is_open


async def test_closing_in_the_middle_of_a_stream_ends_it_truthfully(tmp_path):
    async def slow(ctx: TurnContext):
        yield "working"
        await asyncio.sleep(30)

    calls = Calls()
    async with make(calls, turn=slow).session(cwd=tmp_path) as session:
        events = []
        async for event in session.stream_execute("p"):
            events.append(event)
            if event.type is E.BACKEND_MESSAGE:
                await session.close()
    assert events[-1].type is E.SESSION_END and events[-1].data["status"] == "error"
    assert calls.disconnects == 1


async def test_leaving_a_stream_early_frees_the_session_for_the_next_request(tmp_path):
    calls = Calls()
    turns = [lambda ctx: ["thinking..."], writer(calls)]
    async with make(calls, turn=turns).session(cwd=tmp_path) as session:
        async with contextlib.aclosing(session.stream_execute("first")) as stream:
            async for event in stream:
                if event.type is E.BACKEND_MESSAGE:
                    break
        assert session.results[-1].status is CodingStatus.ERROR  # the abandoned request
        assert (await asyncio.wait_for(session.execute("second"), 10)).ok


async def test_a_backend_that_cannot_start_fails_the_open(tmp_path):
    calls = Calls()
    agent = make(calls, connect_delay=30)
    session = agent.session(cwd=tmp_path, budget=Budget(max_time_seconds=0.3))
    began = time.monotonic()
    with pytest.raises(BudgetExceededError, match="did not start"):
        await session.open()
    assert time.monotonic() - began < 5
    assert calls.disconnects == 1 and not session.is_open


# ---------------------------------------------------------------------------------------------
# Resume (FunctionBackend: what reaches the backend; the transcript checks)


async def test_resume_by_session_id_and_by_transcript_reaches_the_backend(tmp_path):
    logs = tmp_path / "logs"
    repo = tmp_path / "repo"
    repo.mkdir()
    specs = []

    def turn(ctx: TurnContext):
        specs.append(ctx.spec.resume_session_id)
        ctx.write("a.py", "a = 1\n")
        return "ok"

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, log_dir=logs)
    first = await agent.execute("start", cwd=repo)
    (transcript,) = logs.glob("*.jsonl")
    await agent.execute("by id", cwd=repo, resume=first.session_id)
    await agent.execute("by transcript", cwd=repo, resume=transcript)
    await agent.execute("by transcript name", cwd=repo, resume=str(transcript))
    assert specs == [None, "function-session", "function-session", "function-session"]
    async with agent.session(cwd=repo, resume=transcript) as session:
        await session.execute("in a session")
    assert specs[-1] == "function-session"
    resumed = [read_transcript(p) for p in sorted(logs.glob("*.jsonl")) if p != transcript]
    origins = [t.header["resumed_from"] for t in resumed]
    assert {"session_id": "function-session"} in origins
    assert {"transcript": str(transcript), "session_id": "function-session"} in origins


async def test_a_transcript_that_cannot_be_resumed_fails_fast(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: "ok")
    with pytest.raises(ConfigurationError, match="no transcript"):
        await agent.execute("p", cwd=repo, resume=tmp_path / "missing.jsonl")
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(ConfigurationError, match="not an agenter transcript"):
        await agent.execute("p", cwd=repo, resume=str(tmp_path / "notes.jsonl"))
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"record": "header", "format": "agenter-transcript", "version": 1,
                                 "backend": "codex"}) + "\n")
    with pytest.raises(ConfigurationError, match="of a codex run"):
        await agent.execute("p", cwd=repo, resume=other)
    early = tmp_path / "early.jsonl"
    early.write_text(json.dumps({"record": "header", "format": "agenter-transcript", "version": 1,
                                 "backend": "function"}) + "\n")
    with pytest.raises(ConfigurationError, match="no agent session id"):
        await agent.execute("p", cwd=repo, resume=early)
    with pytest.raises(ConfigurationError, match="resume is empty"):
        await agent.execute("p", cwd=repo, resume=" ")


# ---------------------------------------------------------------------------------------------
# The real claude CLI: one conversation across requests; a killed run resumed by a new process

_sdk = importlib.util.find_spec("claude_agent_sdk")
CLI = Path(_sdk.origin).parent / "_bundled" / "claude" if _sdk and _sdk.origin else Path("/nonexistent")
API_KEY = "sk-test-SUPERSECRET-sessions-0123456789"
TEST_RUN_ENV = "AGENTER_TEST_RUN"
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="claude-agent-sdk has no bundled CLI here")


@pytest.fixture
def cli_env(tmp_path_factory: pytest.TempPathFactory):
    """The CLI's own HOME and TMPDIR, no retries, and this test's run token; what carries the token
    is ended when the test ends (and the test fails if anything was left)."""
    root = tmp_path_factory.mktemp("claude-cli")
    (root / "home").mkdir()
    (root / "tmp").mkdir()
    env = {"HOME": str(root / "home"), "TMPDIR": str(root / "tmp"), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_MAX_RETRIES": "0", TEST_RUN_ENV: uuid.uuid4().hex}
    yield env
    left = _pids.with_environment(TEST_RUN_ENV, env[TEST_RUN_ENV])
    _pids.kill(left)
    assert not left, f"processes left running: {left}"


def claude_agent(server, env, **kwargs) -> AutonomousCodingAgent:
    return AutonomousCodingAgent(backend="claude-code", base_url=server.base_url, api_key=API_KEY, env=env, **kwargs)


def request_text(server, index: int) -> str:
    return json.dumps(server.model_requests[index].body["messages"])


@pytest.mark.agent
@needs_cli
async def test_claude_code_keeps_one_conversation_across_requests(scripted_model_server, tmp_path, cli_env):
    repo = tmp_path / "repo"
    repo.mkdir()
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "first.txt", "content": "one\n"})), reply(text("Wrote first.txt.")),
        reply(tool_call("Write", {"file_path": "second.txt", "content": "two\n"})), reply(text("Wrote second.txt.")),
    ])
    async with claude_agent(server, cli_env).session(cwd=repo) as session:
        cli = session._backend.cli_pid
        first = await session.execute("Write first.txt")
        second = await session.execute("Now write second.txt")
        assert session._backend.cli_pid == cli  # one program served both requests
    assert not _pids.is_alive(cli)  # closing the session ended it
    assert first.ok and second.ok
    assert first.files == {"first.txt": "one\n"} and second.files == {"second.txt": "two\n"}
    # The second request's model call holds the first request's conversation.
    later = request_text(server, 2)
    assert "Write first.txt" in later and "Now write second.txt" in later and "Wrote first.txt." in later
    assert second.session_id == first.session_id
    assert second.total_tokens > 0 and session.usage.total_tokens >= first.total_tokens + second.total_tokens


RUN_ONE = """
import asyncio, json, sys
from agenter import AutonomousCodingAgent
base_url, env, repo, logs = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
agent = AutonomousCodingAgent(backend="claude-code", base_url=base_url, api_key=env.pop("KEY"), env=env,
                              log_dir=logs)
asyncio.run(agent.execute("Write first.txt, then wait for me", cwd=repo))
"""


@pytest.mark.agent
@needs_cli
async def test_a_run_killed_mid_turn_is_resumed_by_a_new_process(scripted_model_server, tmp_path, cli_env):
    repo, logs = tmp_path / "repo", tmp_path / "logs"
    repo.mkdir()
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": "first.txt", "content": "1\n"})),
        hang(60),  # run 1 is killed while its model call hangs
        reply(tool_call("Write", {"file_path": "second.txt", "content": "2\n"})),
        reply(text("Back again.")),
    ])
    run_one = subprocess.Popen(
        [sys.executable, "-c", RUN_ONE, server.base_url, json.dumps({**cli_env, "KEY": API_KEY}), str(repo), str(logs)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await asyncio.to_thread(server.wait_for_requests, 2, 60)
        (path,) = logs.glob("*.jsonl")
        recorded = read_transcript(path)
        assert recorded.session_id, "the transcript holds the agent's session id by the second model call"
        # Claude Code writes its conversation file a moment after it makes a request: a kill
        # before that leaves nothing to resume (measured: "No conversation found with session ID"
        # in about half the runs). The kill comes once run 1's Write is in the file.
        saved = Path(cli_env["HOME"], ".claude", "projects")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                "first.txt" in f.read_text(errors="replace") for f in saved.glob(f"*/{recorded.session_id}.jsonl")):
            await asyncio.sleep(0.05)
        os.killpg(run_one.pid, signal.SIGKILL)  # the run dies mid-turn, no cleanup of any kind
        run_one.wait(10)
    finally:
        if run_one.poll() is None:
            os.killpg(run_one.pid, signal.SIGKILL)
            run_one.wait(10)
    # The CLI has a session of its own: it goes when its stdin closes; end it if it does not.
    deadline = time.monotonic() + 10
    while _pids.with_environment(TEST_RUN_ENV, cli_env[TEST_RUN_ENV]) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    _pids.kill(_pids.with_environment(TEST_RUN_ENV, cli_env[TEST_RUN_ENV]))

    killed = read_transcript(path)  # readable after the crash, up to the last event
    assert killed.end is None and not killed.results
    assert [e.type for e in killed.events()][:2] == [E.SESSION_START, E.ITERATION_START]
    assert (repo / "first.txt").read_text() == "1\n"

    result = await claude_agent(server, cli_env, log_dir=logs).execute("Continue", cwd=repo, resume=path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "second.txt").read_text() == "2\n"
    assert result.session_id == killed.session_id
    # The new process's model call carries the earlier conversation (run 1's Write of first.txt).
    resumed = request_text(server, 2)
    assert "Write first.txt, then wait for me" in resumed and "first.txt" in resumed and "Continue" in resumed
    (second,) = [p for p in logs.glob("*.jsonl") if p != path]
    assert read_transcript(second).header["resumed_from"] == {"transcript": str(path),
                                                              "session_id": killed.session_id}
    assert API_KEY not in path.read_text() + second.read_text()
