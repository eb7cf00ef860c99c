"""Transcripts (log_dir): every event of a run appended to a JSONL file as it happens, flushed per
line, readable after a crash, redacted, with the request, the backend, versions and the result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from agenter import AutonomousCodingAgent, CodingRequest, ConfigurationError
from agenter import CodingEventType as E
from agenter._version import __version__
from agenter.backends import BackendMessage, MessageType
from agenter.session.transcript import read_transcript
from agenter.testing import FunctionBackend, ScriptedModelServer, TurnContext, reply, text, tool_call

KEY = "sk-test-TRANSCRIPT-0123456789abcdef"


def only_transcript(folder):
    (path,) = folder.glob("*.jsonl")
    return path


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_run_writes_its_request_events_result_and_versions(tmp_path):
    logs, repo = tmp_path / "logs", tmp_path / "repo"
    repo.mkdir()

    def turn(ctx: TurnContext):
        message = ctx.write("a.py", "a = 1\n")
        ctx.use(input_tokens=100, output_tokens=10, cost_usd=0.01)
        return [message, "wrote a.py"]

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, log_dir=logs)
    events = [e async for e in agent.stream_execute(
        CodingRequest(prompt=f"use the key {KEY} to write a.py", cwd=repo, system_prompt="be brief"))]
    path = only_transcript(logs)
    assert path.name.endswith(".jsonl") and "function" in path.name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # transcripts hold code and prompts
    records = lines(path)
    head = records[0]
    assert head["record"] == "header" and head["format"] == "agenter-transcript" and head["version"] == 1
    assert head["backend"] == "function" and head["mode"] == "autonomous" and head["cwd"] == str(repo.resolve())
    assert head["versions"]["agenter"] == __version__ and head["versions"]["python"]
    request = next(r for r in records if r["record"] == "request")
    assert request["prompt"] == "use the key [REDACTED] to write a.py" and request["system_prompt"] == "be brief"
    assert [r["session_id"] for r in records if r["record"] == "agent_session"] == ["function-session"]
    written = [r for r in records if r["record"] == "event"]
    assert [r["type"] for r in written] == [e.type.value for e in events]
    assert [r["data"] for r in written] == [e.data for e in events]
    assert written[-1]["data"]["result"]["files"] == {"a.py": "a = 1\n"}
    assert records[-1]["record"] == "end" and records[-1]["usage"]["input_tokens"] == 100
    assert KEY not in path.read_text()

    transcript = read_transcript(path)
    assert transcript.session_id == "function-session" and transcript.backend == "function"
    assert [e.type for e in transcript.events()] == [e.type for e in events]
    assert transcript.results[0]["status"] == "completed" and transcript.end is not None


async def test_each_event_is_on_disk_before_the_run_goes_on(tmp_path):
    logs = tmp_path / "logs"
    seen = {}

    async def turn(ctx: TurnContext):
        path = only_transcript(logs)
        seen["before"] = [r["type"] for r in lines(path) if r["record"] == "event"]
        yield "first words"
        await asyncio.sleep(0)
        seen["after"] = [r.get("data", {}).get("content") for r in lines(path)]

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, log_dir=logs)
    await agent.execute("p", cwd=tmp_path, require_changes=False)
    assert seen["before"][-2:] == ["session_start", "iteration_start"]
    assert seen["after"][-1] == "first words"  # written while the turn was still running


async def test_an_api_key_never_reaches_the_transcript(tmp_path):
    logs, repo = tmp_path / "logs", tmp_path / "repo"
    repo.mkdir()
    script = [reply(tool_call("write_file", {"path": "k.py", "content": f"KEY = '{KEY}'\n"})), reply(text("done"))]
    with ScriptedModelServer(script) as server:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=KEY, log_dir=logs)
        result = await agent.execute("write k.py", cwd=repo)
    assert result.ok and KEY in result.files["k.py"]  # the caller's result stays raw
    content = only_transcript(logs).read_text()
    assert KEY not in content and "[REDACTED]" in content
    assert lines(only_transcript(logs))[0]["versions"]["anthropic"]


async def test_a_session_transcript_holds_every_request(tmp_path):
    logs = tmp_path / "logs"
    agent = AutonomousCodingAgent(backend=FunctionBackend, log_dir=logs,
                                  turn=lambda ctx: [ctx.write(f"{len(ctx.prompts)}.py", "x = 1\n"), "ok"])
    async with agent.session(cwd=tmp_path) as session:
        await session.execute("one")
        await session.execute("two")
    assert session.transcript_path == only_transcript(logs)
    transcript = read_transcript(session.transcript_path)
    assert [r["prompt"] for r in transcript.requests] == ["one", "two"]
    assert [r["status"] for r in transcript.results] == ["completed", "completed"]
    assert [sorted(r["result"]["files"]) for r in transcript.results] == [["1.py"], ["2.py"]]
    assert {e.type for e in transcript.events(request=2)} >= {E.SESSION_START, E.SESSION_END}
    assert transcript.end["requests"] == 2


async def test_an_abandoned_run_still_says_how_it_ended(tmp_path):
    logs = tmp_path / "logs"

    async def slow(ctx: TurnContext):
        yield "working"
        await asyncio.sleep(30)

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=slow, log_dir=logs)
    async with contextlib.aclosing(agent.stream_execute("p", cwd=tmp_path)) as stream:
        async for event in stream:
            if event.type is E.BACKEND_MESSAGE:
                break
    transcript = read_transcript(only_transcript(logs))
    kinds = [e.type for e in transcript.events()]
    assert kinds[-2:] == [E.FAILED, E.SESSION_END]
    assert transcript.results[0]["status"] == "error" and transcript.end is not None


async def test_a_log_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="not a directory"):
        AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: "ok", log_dir=tmp_path / "file")


CRASHING_RUN = """
import asyncio, sys
from agenter import AutonomousCodingAgent

async def turn(ctx):
    yield "started the work"
    await asyncio.sleep(60)

from agenter.testing import FunctionBackend
agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, log_dir=sys.argv[1])
asyncio.run(agent.execute("a long task", cwd=sys.argv[2]))
"""


def test_a_killed_run_leaves_a_readable_transcript(tmp_path, capsys):
    logs = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_RUN, str(logs), str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            files = list(logs.glob("*.jsonl")) if logs.is_dir() else []
            if files and "started the work" in files[0].read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the transcript never showed the turn's first message")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    path = only_transcript(logs)
    with path.open("a") as handle:  # a line cut off mid-write
        handle.write('{"record": "event", "type": "backend_mess')
    transcript = read_transcript(path)
    events = list(transcript.events())
    assert [e.type for e in events] == [E.SESSION_START, E.ITERATION_START, E.BACKEND_MESSAGE]
    assert events[-1].data["content"] == "started the work"
    assert transcript.end is None and transcript.results == []
    from agenter.cli import main

    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "── request 1: a long task" in shown and "text: started the work" in shown
    assert "did not close" in shown


def test_reading_what_is_not_a_transcript_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigurationError, match="no transcript"):
        read_transcript(tmp_path / "none.jsonl")
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(ConfigurationError, match="not an agenter transcript"):
        read_transcript(tmp_path / "other.jsonl")


async def test_messages_with_raw_payloads_are_written(tmp_path):
    logs = tmp_path / "logs"
    agent = AutonomousCodingAgent(backend=FunctionBackend, log_dir=logs, turn=lambda ctx: [
        BackendMessage(MessageType.COMMAND_END, "ok", tool_name="Bash", details={"exit_code": 0},
                       raw={"type": "exec_command_end", "exit_code": 0, "auth": KEY})])
    await agent.execute("p", cwd=tmp_path, require_changes=False)
    (event,) = [e for e in read_transcript(only_transcript(logs)).events() if e.type is E.BACKEND_MESSAGE]
    assert event.kind is E.COMMAND_FINISHED and event.data["exit_code"] == 0
    assert event.data["raw"] == {"type": "exec_command_end", "exit_code": 0, "auth": "[REDACTED]"}
