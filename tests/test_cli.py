"""The `agenter` command: NDJSON events, exit codes, the live display, clear usage errors,
Ctrl-C, and `python -m agenter.testing` (the scripted model server for trying it by hand)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from agenter.testing import ScriptedModelServer, http_error, reply, text, tool_call

AGENTER = [sys.executable, "-m", "agenter"]
SERVER = [sys.executable, "-m", "agenter.testing"]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without model credentials or endpoints, so no test can reach a real API."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(extra)
    return env


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENTER, *args], capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env())


def stop_process(proc: subprocess.Popen) -> None:
    """End a process this test started (by its pid) if it is still running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def test_json_events_and_exit_code_zero_on_completed(tmp_path):
    script = [reply(tool_call("write_file", {"path": "hello.py", "content": "print('hi')\n"})),
              reply(text("Wrote hello.py"))]
    with ScriptedModelServer(script) as server:
        proc = run_cli("run", "Write hello.py", "--cwd", str(tmp_path), "--json",
                       "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test-cli-123456")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["type"] == "session_start" and events[-1]["type"] == "session_end"
    assert events[-1]["data"]["status"] == "completed"
    assert (tmp_path / "hello.py").read_text() == "print('hi')\n"
    assert "sk-test-cli-123456" not in proc.stdout + proc.stderr


def test_exit_code_nonzero_when_not_completed(tmp_path):
    with ScriptedModelServer([reply(text("I changed nothing."))] * 2) as server:
        proc = run_cli("run", "Do something", "--cwd", str(tmp_path), "--max-iterations", "2",
                       "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test")
    assert proc.returncode == 1
    assert "FAILED" in proc.stderr  # the live display reports on stderr
    # nothing changed, so the syntax validator had nothing to check: not a green tick
    assert "✓" not in proc.stderr and "syntax skipped" in proc.stderr


def test_usage_errors_exit_2(tmp_path):
    proc = run_cli("run", "x", "--cwd", str(tmp_path), "--backend", "nope")
    assert proc.returncode == 2 and "valid values for backend" in proc.stderr
    proc = run_cli("run", "x", "--cwd", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "cwd" in proc.stderr
    proc = run_cli("run", "x", "--cwd", str(tmp_path), "--option", "no_such_option=1")
    assert proc.returncode == 2 and "no_such_option" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--option", "foo"], "--option needs KEY=VALUE, got 'foo'"),
    (["--option", "=1"], "--option needs KEY=VALUE, got '=1'"),
    (["--max-cost", "-1"], "--max-cost must be > 0"),
    (["--max-cost", "0"], "--max-cost must be > 0"),
    (["--max-cost", "nan"], "--max-cost must be > 0"),
    (["--max-tokens", "0"], "--max-tokens must be >= 1"),
    (["--max-time", "-5"], "--max-time must be > 0"),
    (["--max-iterations", "0"], "--max-iterations must be >= 1"),
])
def test_bad_flags_exit_2_naming_the_flag(tmp_path, args, message):
    with ScriptedModelServer([]) as server:  # a run that wrongly starts would reach only this
        proc = run_cli("run", "x", "--cwd", str(tmp_path), *args,
                       env=clean_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="sk-test"))
        assert server.model_requests == []
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"agenter: {message}\n"


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_an_empty_prompt_is_refused(tmp_path, prompt):
    with ScriptedModelServer([reply(text("ok"))]) as server:
        proc = run_cli("run", prompt, "--cwd", str(tmp_path),
                       env=clean_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="sk-test"))
        assert server.model_requests == []
    assert proc.returncode == 2
    assert proc.stderr == "agenter: the prompt is empty\n"


def test_no_pydantic_internals_in_messages():
    """Whatever pydantic text reaches the CLI becomes one line that names the flag, no link."""
    from pydantic import BaseModel, Field, ValidationError

    from agenter import ConfigurationError
    from agenter.cli import _describe_error

    class Limits(BaseModel):  # field names as in Budget and CodingRequest
        max_cost_usd: float = Field(gt=0)
        prompt: str = Field(min_length=1)

    with pytest.raises(ValidationError) as raw:
        Limits(max_cost_usd=-1, prompt="")
    assert _describe_error(raw.value) == (
        "--max-cost: input should be greater than 0; the prompt: string should have at least 1 character")
    wrapped = ConfigurationError(f"invalid request: {raw.value}")
    wrapped.__cause__ = raw.value
    assert _describe_error(wrapped).startswith("invalid request: --max-cost: input should")
    plain = ConfigurationError("first line\nsecond line\n  For further information visit https://errors.pydantic.dev/2/v")
    assert _describe_error(plain) == "first line; second line"


def test_version():
    from agenter import __version__

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"agenter {__version__}"


def test_backends_lists_names():
    proc = run_cli("backends")
    assert proc.returncode == 0 and "anthropic-sdk" in proc.stdout.split()


# ------------------------------------------------------------------------------ live display


def live_display():
    from rich.console import Console

    from agenter.cli import _LiveDisplay

    out = io.StringIO()
    return _LiveDisplay(Console(file=out, width=200, color_system=None)), out


def event(kind: str, **data):
    from agenter import CodingEvent

    return CodingEvent(type=kind, data=data)


@pytest.mark.parametrize(("final", "heading"), [
    (event("completed", status="completed", files=["a.py"]), "COMPLETED"),
    (event("completed", status="completed_with_limit_exceeded", files=[]), "COMPLETED WITH LIMIT EXCEEDED"),
    (event("failed", status="failed", error="validation did not pass", files=[]), "FAILED"),
    (event("failed", status="error", error="no Anthropic API key", files=[]), "ERROR"),
    (event("failed", status="budget_exceeded", error="token budget", files=[]), "BUDGET EXCEEDED"),
    (event("refused", reason="no", files=[]), "REFUSED"),
])
def test_live_display_heads_the_real_status(final, heading):
    display, out = live_display()
    display.show(final)
    display.close()
    first = out.getvalue().splitlines()[0]
    assert first.split("  ")[0] == heading, first


def test_live_display_marks_skipped_validators_and_unknown_model():
    display, out = live_display()
    display.show(event("session_start", backend="codex", model=None, cwd="/repo"))
    display.show(event("validation_result", validator="syntax", passed=True, skipped=True, errors=[], blocking=True))
    display.show(event("validation_result", validator="security", passed=True, skipped=False, errors=[],
                       blocking=True))
    display.close()
    lines = out.getvalue().splitlines()
    assert "model: agent default" in lines[0] and "None" not in lines[0]
    assert lines[1].strip() == "– syntax skipped" and lines[2].strip() == "✓ security"


def test_error_run_is_headed_error_not_failed(tmp_path):
    with ScriptedModelServer([http_error(400, "bad request from the script")]) as server:
        proc = run_cli("run", "Do something", "--cwd", str(tmp_path),
                       "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test")
    assert proc.returncode == 1
    assert re.search(r"^ERROR\b", proc.stderr, re.MULTILINE), proc.stderr
    assert "FAILED" not in proc.stderr


# ------------------------------------------------------------------------------ Ctrl-C


def test_sigint_exits_130_with_a_final_session_end(tmp_path):
    with ScriptedModelServer([reply(text("too late"), delay=60)]) as server:
        proc = subprocess.Popen(
            [*AGENTER, "run", "Write hello.py", "--cwd", str(tmp_path), "--json",
             "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if json.loads(line)["type"] == "iteration_start":
                    break
            server.wait_for_requests(1, timeout=30)  # the turn is in flight
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            # read through the same buffered reader as above (communicate() would skip what
            # it already buffered); the process ends, so stdout reaches EOF
            rest = proc.stdout.read()
            proc.wait(timeout=30)
            took = time.monotonic() - started
            stderr = proc.stderr.read() if proc.stderr else ""
        finally:
            stop_process(proc)
    assert proc.returncode == 130, stderr
    assert took < 10
    events = [json.loads(line) for line in [*lines, *rest.splitlines()]]
    assert [e["type"] for e in events[-2:]] == ["failed", "session_end"]
    end = events[-1]["data"]
    assert end["status"] == "error" and end["error"] == "interrupted by the user"
    assert end["iterations"] == 1
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.strip().splitlines()[-1] == "agenter: interrupted"
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)


def test_a_closed_pipe_stops_the_run_quietly(tmp_path):
    """`agenter run --json ... | head -1`: no traceback when the reader goes away."""
    with ScriptedModelServer([reply(text("nothing changed"))] * 5) as server:
        proc = subprocess.Popen(
            [*AGENTER, "run", "Do something", "--cwd", str(tmp_path), "--json",
             "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert json.loads(proc.stdout.readline())["type"] == "session_start"
            proc.stdout.close()
            proc.wait(timeout=60)
            stderr = proc.stderr.read()
        finally:
            stop_process(proc)
    assert proc.returncode == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


# ------------------------------------------------------------------------------ python -m agenter.testing


def start_server(*args: str) -> tuple[subprocess.Popen, str, str]:
    """Start `python -m agenter.testing`; its URL and what it printed before serving."""
    proc = subprocess.Popen([*SERVER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env())
    assert proc.stdout is not None
    header = []
    for line in proc.stdout:
        header.append(line)
        if line.startswith("# serving"):
            break
    match = re.search(r"(http://127\.0\.0\.1:\d+)", header[0] if header else "")
    if match is None:
        stop_process(proc)
        raise AssertionError(f"no URL in {header!r}: {proc.stderr.read() if proc.stderr else ''}")
    return proc, match.group(1), "".join(header)


def interrupt(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=15)[1]


def test_scripted_server_command_answers_and_stops_on_ctrl_c():
    import anthropic

    proc, url, header = start_server()
    try:
        client = anthropic.Anthropic(base_url=url, api_key="sk-dummy", max_retries=0)
        message = client.messages.create(model="claude-sonnet-5-5", max_tokens=100,
                                         messages=[{"role": "user", "content": "hello"}])
        assert message.content[0].type == "text" and message.content[0].text
        stderr = interrupt(proc)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, stderr
    assert f"export ANTHROPIC_BASE_URL={url}" in header
    assert f"export OPENAI_BASE_URL={url}/v1" in header
    assert "export ANTHROPIC_API_KEY=" in header
    assert "Traceback" not in stderr


def test_scripted_server_command_plays_a_script_file_for_the_cli(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"reply": [{"tool_call": "write_file", "input": {"path": "hello.py", "content": "print('hi')\n"}}]},
        "Wrote hello.py",
    ]))
    repo = tmp_path / "repo"
    repo.mkdir()
    proc, url, header = start_server("--wire", "anthropic", "--script", str(script))
    try:
        cli = run_cli("run", "Write hello.py", "--cwd", str(repo),
                      env=clean_env(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-dummy"))
        stderr = interrupt(proc)
    finally:
        stop_process(proc)
    assert cli.returncode == 0, cli.stderr
    assert (repo / "hello.py").read_text() == "print('hi')\n"
    assert proc.returncode == 0 and "OPENAI_BASE_URL" not in header
    assert "turn 1" in stderr and "turn 2" in stderr  # each answered turn is logged


def test_script_file_format_errors_are_clear(tmp_path):
    from agenter.testing import Hang, HttpError, Reply, TextPart, ThinkingPart, ToolCallPart
    from agenter.testing.__main__ import ScriptError, parse_script

    items = parse_script([
        "hi",
        {"reply": [{"thinking": "hmm"}, {"text": "a"}, {"tool_call": "run", "input": {"cmd": "ls"}}],
         "delay": 0.5, "usage": {"input_tokens": 10}},
        {"reply": "just text", "stop_reason": "max_tokens"},
        {"http_error": 529, "message": "overloaded"},
        {"hang": None},
        {"http_error": 400, "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "x"}}},
    ])
    assert isinstance(items[0], Reply) and items[0].parts == (TextPart("hi"),)
    assert items[1].parts[0] == ThinkingPart("hmm") and isinstance(items[1].parts[2], ToolCallPart)
    assert items[1].delay == 0.5 and items[1].usage.input_tokens == 10
    assert items[2].stop_reason == "max_tokens"
    assert isinstance(items[3], HttpError) and items[3].status == 529
    assert isinstance(items[4], Hang) and items[4].seconds is None
    assert isinstance(items[5], HttpError) and items[5].body["error"]["type"] == "invalid_request_error"
    for bad, problem in [({"reply": []}, "a JSON list"), ([{"reply": []}], "item 1"), ([{"tool_cal": "x"}], "item 1"),
                         ([{"reply": "x", "dely": 1}], "dely"), ([3], "item 1")]:
        with pytest.raises(ScriptError, match=problem):
            parse_script(bad)

    script = tmp_path / "bad.json"
    script.write_text("[not json")
    proc = subprocess.run([*SERVER, "--script", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and str(script) in proc.stderr


# ---------------------------------------------------------------------------------------------
# Transcripts: run --log-dir, show, runs, --resume


def test_log_dir_then_show_and_runs(tmp_path):
    logs, repo = tmp_path / "logs", tmp_path / "repo"
    repo.mkdir()
    script = [reply(tool_call("write_file", {"path": "hello.py", "content": "print('hi')\n"})),
              reply(text("Wrote hello.py"))]
    with ScriptedModelServer(script) as server:
        proc = run_cli("run", "Write hello.py", "--cwd", str(repo), "--json", "--log-dir", str(logs),
                       "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test-cli-123456")
    assert proc.returncode == 0, proc.stderr
    (transcript,) = logs.glob("*.jsonl")
    shown = run_cli("show", str(transcript))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "backend anthropic-sdk" in out and "── request 1: Write hello.py" in out
    assert 'tool write_file {"path": "hello.py"' in out and "✓ syntax" in out and "COMPLETED" in out
    assert "did not close" not in out
    listed = run_cli("runs", str(logs))
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:5] == ["started", "backend", "model", "requests", "status"]
    assert "anthropic-sdk" in row and " completed " in row and transcript.name in row
    assert "sk-test-cli-123456" not in transcript.read_text() + out + listed.stdout


def test_show_runs_and_resume_say_what_is_wrong(tmp_path):
    missing = run_cli("show", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "no transcript" in missing.stderr
    assert run_cli("runs", str(tmp_path / "nope")).returncode == 2
    empty = run_cli("runs", str(tmp_path))
    assert empty.returncode == 0 and "no transcripts" in empty.stdout
    other = tmp_path / "codex-run.jsonl"
    other.write_text(json.dumps({"record": "header", "format": "agenter-transcript", "version": 1,
                                 "backend": "codex"}) + "\n")
    proc = run_cli("run", "continue", "--cwd", str(tmp_path), "--resume", str(other),
                   "--option", "api_key=sk-test-cli-123456")
    assert proc.returncode == 2 and "of a codex run" in proc.stderr
