"""The `agenter` command: NDJSON events, exit codes, the live display, clear usage errors."""

from __future__ import annotations

import json
import subprocess
import sys

from agenter.testing import ScriptedModelServer, reply, text, tool_call

AGENTER = [sys.executable, "-m", "agenter.cli"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENTER, *args], capture_output=True, text=True, timeout=timeout)


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


def test_usage_errors_exit_2(tmp_path):
    proc = run_cli("run", "x", "--cwd", str(tmp_path), "--backend", "nope")
    assert proc.returncode == 2 and "valid values for backend" in proc.stderr
    proc = run_cli("run", "x", "--cwd", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "cwd" in proc.stderr
    proc = run_cli("run", "x", "--cwd", str(tmp_path), "--option", "no_such_option=1")
    assert proc.returncode == 2 and "no_such_option" in proc.stderr


def test_backends_lists_names():
    proc = run_cli("backends")
    assert proc.returncode == 0 and "anthropic-sdk" in proc.stdout.split()
