"""AgentProcess: the whole process group ends, also members that outlive their leader."""

from __future__ import annotations

import os
import sys
import time

from agenter.host import AgentProcess, redact

# The leader exits on SIGTERM; its child ignores SIGTERM and must still be killed.
SCRIPT = r"""
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


async def test_terminate_kills_group_members_that_ignore_sigterm(tmp_path):
    process = await AgentProcess.start([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=dict(os.environ),
                                       stdin_pipe=False)
    child_pid = int((await process.process.stdout.readline()).decode())
    try:
        await process.terminate(grace=2)
        deadline = time.monotonic() + 5
        while alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(process.pid)
        assert not alive(child_pid)
    finally:
        for pid in (child_pid, process.pid):
            if alive(pid):
                os.kill(pid, 9)


def test_redact_env_values_and_key_shapes(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok_abcdefgh12345")
    text = redact("token tok_abcdefgh12345, key sk-ant-api03-XYZxyz1234567890, Authorization: Bearer abcdefgh1234")
    assert "tok_abcdefgh12345" not in text and "sk-ant-api03" not in text and "abcdefgh1234" not in text


async def test_a_grandchild_that_calls_setsid_does_not_outlive_the_command(tmp_path):
    """Issue 11 item 15: a validator command's grandchild in a session of its own is still ended."""
    from agenter.host import _pids
    from agenter.host.process import run_process

    script = ("import subprocess, sys; "
              "p = subprocess.Popen(['setsid', 'sleep', '300'], stdout=subprocess.DEVNULL, "
              "stderr=subprocess.DEVNULL, start_new_session=True); print(p.pid)")
    outcome = await run_process([sys.executable, "-c", script], cwd=tmp_path, timeout=30)
    pid = int(outcome.stdout.strip().splitlines()[-1])
    try:
        assert outcome.returncode == 0
        assert not _pids.is_alive(pid), "the setsid grandchild outlived run_process"
    finally:
        _pids.kill({pid})
