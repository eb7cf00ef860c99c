"""Run a validator's command: own process group, bounded output, timeout that kills the group."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ProcessOutcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    pid: int


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


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _wait_exit(process: asyncio.subprocess.Process, timeout: float) -> bool:
    """Wait until the process itself has exited; True if it did within timeout.

    Process.wait() also waits for the pipes to close, which a grandchild that inherited
    them can postpone forever, so poll returncode (set as soon as the child is reaped).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    waiter = asyncio.ensure_future(process.wait())
    try:
        while process.returncode is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait({waiter}, timeout=min(0.1, remaining))
        return True
    finally:
        if not waiter.done():
            waiter.cancel()


async def run_process(command: Sequence[str], *, cwd: str | Path, timeout: float,
                      env: Mapping[str, str] | None = None, merge_stderr: bool = False,
                      stdout_limit: int | None = None, stderr_limit: int | None = 64 * 1024,
                      grace: float = 2.0) -> ProcessOutcome:
    """Run `command` in cwd in its own session; on timeout or cancellation kill its group.

    Raises FileNotFoundError/PermissionError when the program cannot be started.
    """
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=str(cwd),
        env=dict(env) if env is not None else None,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        start_new_session=True,  # own process group: the timeout reaches grandchildren too
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
            _signal_group(process.pid, signal.SIGTERM)
            if not await _wait_exit(process, grace):
                _signal_group(process.pid, signal.SIGKILL)
                await _wait_exit(process, 30)
        # The leader is gone; a grandchild may still hold the pipes open. Give the readers a
        # moment, then make sure nothing of the group survives.
        _, pending = await asyncio.wait(readers, timeout=grace)
        if pending:
            _signal_group(process.pid, signal.SIGKILL)
            await asyncio.wait(pending, timeout=grace)
    finally:
        if process.returncode is None:  # cancelled (e.g. the session's time budget)
            _signal_group(process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(_wait_exit(process, 30))
        _signal_group(process.pid, signal.SIGKILL)  # leftovers in the group, if any
        for reader in readers:
            if not reader.done():
                reader.cancel()
        for reader in readers:
            with contextlib.suppress(BaseException):
                await reader
    return ProcessOutcome(process.returncode, out.text(), err.text(), timed_out, process.pid)
