"""Child processes, started and ended one way.

Every program agenter starts (an agent, a validator's command) runs in a session of its own and
carries a fresh mark in its environment. Ending it is one policy: SIGTERM its group, give it
`grace` seconds, then one /proc scan, off the event loop, finds whatever is left (the group, the
session, descendants, and anything carrying the mark even after a setsid() or a reparenting) and
SIGKILLs it. Agents that other libraries spawn (claude-agent-sdk starts `claude`) get the mark
through their environment and are ended with `reap`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agenter.host import _pids
from agenter.host.redact import Redactor, strip_ansi

__all__ = ["MARK_ENV", "AgentProcess", "ProcessOutcome", "leftovers", "marked_env", "reap", "run_process"]

#: Environment variable carrying the mark of the run that started a process.
MARK_ENV = "AGENTER_PROCESS_MARK"


def marked_env(env: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """A copy of `env` (default: ours) with a fresh process mark, and the mark."""
    mark = uuid.uuid4().hex
    result = dict(os.environ if env is None else env)
    result[MARK_ENV] = mark
    return result, mark


def leftovers(mark: str | None, *, pid: int | None = None, pgid: int | None = None,
              session: int | None = None) -> set[int]:
    """Live processes of a run: carrying `mark`, below `pid`, or in the group or session (one scan)."""
    table = _pids.scan((MARK_ENV, mark) if mark else None)
    return _pids.family(table, roots=[pid] if pid else [], groups=[pgid] if pgid else [],
                        sessions=[session] if session else [])


async def reap(mark: str | None, *, pid: int | None = None, pgid: int | None = None,
               session: int | None = None) -> set[int]:
    """SIGKILL whatever is left of a run; the scan runs in a thread. Returns the pids killed."""
    if pgid:
        _pids.kill_group(pgid)
    found = await asyncio.to_thread(_kill_and_wait, mark, pid, pgid, session)
    return found


def _kill_and_wait(mark: str | None, pid: int | None, pgid: int | None, session: int | None,
                   wait: float = 1.0) -> set[int]:
    """One scan, SIGKILL, then a short wait until they are gone (a disconnect that returns
    while a killed process is still exiting would not be truthful)."""
    found = leftovers(mark, pid=pid, pgid=pgid, session=session)
    _pids.kill(found)
    deadline = time.monotonic() + wait
    alive = set(found)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if _pids.is_alive(p)}
        if alive:
            time.sleep(0.01)
    return found


async def _wait_exit(process: asyncio.subprocess.Process, timeout: float) -> bool:
    """Wait until the process itself has exited; True if it did within timeout.

    Process.wait() also waits for the pipes to close, which a grandchild that inherited them
    can postpone forever, so poll returncode (set as soon as the child is reaped).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    waiter = asyncio.ensure_future(process.wait())
    try:
        while process.returncode is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait({waiter}, timeout=min(0.05, remaining))
        return True
    finally:
        if not waiter.done():
            waiter.cancel()


class AgentProcess:
    """A spawned agent program. `terminate()` ends it and everything it started, also on errors."""

    def __init__(self, process: asyncio.subprocess.Process, env: Mapping[str, str], mark: str,
                 tail_lines: int):
        self.process = process
        self.mark = mark
        self._redact = Redactor(env)
        self._stderr: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._stderr_task: asyncio.Task[None] | None = None
        if process.stderr is not None:
            self._stderr_task = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def start(cls, command: Sequence[str], *, cwd: str | Path, env: Mapping[str, str],
                    stdin_pipe: bool = True, stdout_pipe: bool = True, tail_lines: int = 40,
                    limit: int = 64 * 1024 * 1024) -> AgentProcess:
        """Start `command` in its own session with a process mark. stdin is /dev/null unless piped
        (a program that finds a terminal or an open stdin may wait for input)."""
        full_env, mark = marked_env(env)
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=str(cwd),
            env=full_env,
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if stdout_pipe else asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=limit,
        )
        return cls(process, full_env, mark, tail_lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        with contextlib.suppress(Exception):
            while True:
                raw = await self.process.stderr.readline()
                if not raw:
                    break
                self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    async def drain_stderr(self, timeout: float = 1.0) -> None:
        """Wait (bounded) until stderr is read to its end, so the tail holds the last lines."""
        if self._stderr_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout)

    def stderr_tail(self) -> str:
        """The last lines of stderr, redacted and without terminal escapes."""
        return self._redact(strip_ansi("\n".join(self._stderr)))

    async def wait_exit(self, timeout: float) -> bool:
        """True once the program itself has exited (its pipes may still be held open)."""
        return await _wait_exit(self.process, timeout)

    async def terminate(self, grace: float = 3.0) -> int | None:
        """SIGTERM the group, wait `grace` seconds, then SIGKILL what is left. Safe to call twice."""
        if self.process.returncode is None:
            _pids.kill_group(self.pid, signal.SIGTERM)
            with contextlib.suppress(asyncio.CancelledError):
                await _wait_exit(self.process, grace)
        await reap(self.mark, pid=self.pid if self.process.returncode is None else None,
                   pgid=self.pid, session=self.pid)
        if self.process.returncode is None:
            with contextlib.suppress(Exception):
                await _wait_exit(self.process, 5)
        if self._stderr_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._stderr_task, 1)
        return self.process.returncode


@dataclass
class ProcessOutcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    pid: int
    #: The start of the stream was dropped to keep within its limit (only the end is kept).
    stdout_truncated: bool = False
    stderr_truncated: bool = False


class _TailBuffer:
    """Keeps the last `limit` bytes of a stream (all of it when limit is None)."""

    def __init__(self, limit: int | None):
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._limit = limit
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._limit is not None and self._size > self._limit and len(self._chunks) > 1:
            self._size -= len(self._chunks.popleft())
            self.truncated = True

    def text(self) -> str:
        data = b"".join(self._chunks)
        if self._limit is not None and len(data) > self._limit:
            data = data[-self._limit:]
            self.truncated = True
        return data.decode("utf-8", "replace")


async def _drain(stream: asyncio.StreamReader | None, buffer: _TailBuffer) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        buffer.add(chunk)


async def run_process(command: Sequence[str], *, cwd: str | Path, timeout: float,
                      env: Mapping[str, str] | None = None, merge_stderr: bool = False,
                      stdout_limit: int | None = None, stderr_limit: int | None = 64 * 1024,
                      grace: float = 2.0) -> ProcessOutcome:
    """Run `command` to the end in its own session; on timeout or cancellation end it and
    everything it started (see the module docstring).

    Raises FileNotFoundError/PermissionError when the program cannot be started.
    """
    full_env, mark = marked_env(env)
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=str(cwd),
        env=full_env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    out = _TailBuffer(stdout_limit)
    err = _TailBuffer(stderr_limit)
    readers = [asyncio.create_task(_drain(process.stdout, out))]
    if not merge_stderr:
        readers.append(asyncio.create_task(_drain(process.stderr, err)))
    timed_out = False
    try:
        if not await _wait_exit(process, timeout):
            timed_out = True
            _pids.kill_group(process.pid, signal.SIGTERM)
            if not await _wait_exit(process, grace):
                _pids.kill_group(process.pid, signal.SIGKILL)
                await _wait_exit(process, 30)
        # The leader is gone; a grandchild may still hold the pipes open. Give the readers a
        # moment; whatever is left is ended below.
        _, pending = await asyncio.wait(readers, timeout=0.2 if timed_out else grace)
        if pending:
            await reap(mark, pgid=process.pid, session=process.pid)
            await asyncio.wait(pending, timeout=grace)
    finally:
        if process.returncode is None:  # cancelled (e.g. the session's time budget)
            _pids.kill_group(process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(_wait_exit(process, 30))
        # Nothing the command started may outlive it: its group, its session, and anything
        # carrying its mark (a grandchild that called setsid()).
        with contextlib.suppress(Exception):
            await asyncio.shield(reap(mark, pgid=process.pid, session=process.pid))
        for reader in readers:
            if not reader.done():
                reader.cancel()
        for reader in readers:
            with contextlib.suppress(BaseException):
                await reader
    stdout, stderr = out.text(), err.text()
    return ProcessOutcome(process.returncode, stdout, stderr, timed_out, process.pid,
                          stdout_truncated=out.truncated, stderr_truncated=err.truncated)
