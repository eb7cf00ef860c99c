"""One runner for every agent CLI: start the program, hand it the prompt, read its output lines.

The program runs through `agenter.host.AgentProcess` (its own session and process group, a process
mark, a redacted stderr tail read concurrently). The prompt goes through stdin, written by a task
of its own and then closed, so a 300 KB prompt never meets an argv limit and a program that
finishes reading before it writes cannot deadlock us. A program that asks questions on stdin
(Aider) gets them answered instead: its invocation names the shape of a question (a `question`
pattern), stdin stays open, and an unfinished output line of that shape is handed over as a
question line, which the caller answers with `answer()`. Such a program's stdin is never closed
while it runs: at the end of its input it would take each question's default. Output is split into lines by hand, without
StreamReader's line limit: a 5 MB JSON line parses like a short one.

Ending a run is one call, `stop()`: the group gets SIGTERM, then whatever is left is killed. It
runs when the run's `async with` block exits for any reason, the session's time budget
cancelling the turn included, so nothing a run started outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenter._errors import BackendError
from agenter.host import AgentProcess

__all__ = ["Invocation", "Line", "LineSplitter", "ProgramRun", "parse_line", "start_program"]

#: Bytes asked for per read of stdout.
CHUNK = 256 * 1024
#: After the program exited, how long a descendant still holding stdout may keep it open.
EXIT_DRAIN_SECONDS = 2.0


@dataclass
class Invocation:
    """How to start a program for one turn: its argv, its whole environment, and its stdin."""

    argv: list[str]
    env: Mapping[str, str]
    #: Written to stdin and then closed; None: stdin is /dev/null.
    stdin: bytes | None = None
    #: Temporary files the invocation needs (a prompt file, a schema); removed after the run.
    files: list[Path] = field(default_factory=list)
    #: The shape of a question the program asks on stdin (matched at the end of an output line
    #: that has not ended yet). Set: stdin stays open, and each question is a Line with
    #: `question=True` for the caller to answer with ProgramRun.answer().
    question: re.Pattern[str] | None = None


@dataclass
class Line:
    """One output line: its text, and the JSON object when the line is one."""

    text: str
    data: dict[str, Any] | None = None
    #: An unfinished line the program is waiting on: a question to answer (see Invocation.question).
    question: bool = False


class LineSplitter:
    """Splits a byte stream into lines of any length (no limit, unlike StreamReader.readline)."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            self._pending.append(chunk)  # joined once, when its line ends: no quadratic copying
            return []
        parts = chunk.split(b"\n")
        if self._pending:
            parts[0] = b"".join([*self._pending, parts[0]])
            self._pending = []
        tail = parts.pop()
        if tail:
            self._pending.append(tail)
        return parts

    def pending(self) -> bytes:
        """The line begun but not ended yet (kept)."""
        if len(self._pending) > 1:
            self._pending = [b"".join(self._pending)]
        return self._pending[0] if self._pending else b""

    def flush(self) -> bytes | None:
        """The last line when the stream ended without a newline."""
        if not self._pending:
            return None
        rest, self._pending = b"".join(self._pending), []
        return rest


def parse_line(raw: bytes) -> Line:
    """A Line, JSON-decoded when it is a JSON object."""
    text = raw.decode("utf-8", "replace").rstrip("\r")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            return Line(text)
        if isinstance(data, dict):
            return Line(text, data)
    return Line(text)


class ProgramRun:
    """A started program. Iterate `lines()`, then `wait()` for its exit code; `stop()` ends it."""

    def __init__(self, process: AgentProcess, invocation: Invocation):
        self.process = process
        self._invocation = invocation
        self._writer: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[int | None] | None = None
        if invocation.stdin is not None or invocation.question is not None:
            self._writer = asyncio.create_task(self._write_stdin(invocation.stdin or b"",
                                                                 close=invocation.question is None))

    @classmethod
    async def start(cls, invocation: Invocation, cwd: str | Path) -> ProgramRun:
        """Raises FileNotFoundError/PermissionError when the program cannot be started."""
        process = await AgentProcess.start(invocation.argv, cwd=cwd, env=invocation.env,
                                           stdin_pipe=invocation.stdin is not None or invocation.question is not None)
        return cls(process, invocation)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def stderr_tail(self) -> str:
        return self.process.stderr_tail()

    async def _write_stdin(self, data: bytes, *, close: bool = True) -> None:
        stdin = self.process.process.stdin
        assert stdin is not None
        # A program that exits (or closes stdin) before reading everything is not our failure:
        # its exit code and output tell what happened.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if data:
                stdin.write(data)
                await stdin.drain()
        if close:
            with contextlib.suppress(Exception):
                stdin.close()

    async def answer(self, text: str) -> None:
        """Answer the program's question (a line is written to its stdin)."""
        if self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)  # the initial input goes first
        stdin = self.process.process.stdin
        if stdin is None:
            raise BackendError("the program's stdin is not open for answers", backend="cli")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(text.encode() + b"\n")
            await stdin.drain()

    async def lines(self, *, idle_timeout: float | None = None, backend: str = "cli") -> AsyncGenerator[Line, None]:
        """stdout, line by line, as it arrives. With idle_timeout, a program silent for that long
        fails with a BackendError (kind transient)."""
        splitter = LineSplitter()
        question = self._invocation.question
        async with contextlib.aclosing(self._chunks(idle_timeout, backend)) as chunks:
            async for chunk in chunks:
                for raw in splitter.feed(chunk):
                    yield parse_line(raw)
                if question is not None:
                    asked = splitter.pending().decode("utf-8", "replace")
                    if asked and question.search(asked):
                        splitter.flush()
                        yield Line(asked.rstrip("\r"), question=True)
        rest = splitter.flush()
        if rest is not None:
            yield parse_line(rest)

    async def _chunks(self, idle_timeout: float | None, backend: str) -> AsyncGenerator[bytes, None]:
        stdout = self.process.process.stdout
        assert stdout is not None
        loop = asyncio.get_running_loop()
        last_data = loop.time()
        exited_at: float | None = None
        while True:
            read = asyncio.ensure_future(stdout.read(CHUNK))
            try:
                while not read.done():
                    # Wake up now and then: the program may have exited while a descendant it
                    # left behind holds stdout open, and then EOF never comes.
                    await asyncio.wait({read}, timeout=0.5)
                    if read.done():
                        break
                    now = loop.time()
                    if self.process.returncode is not None:
                        exited_at = exited_at if exited_at is not None else now
                        if now - exited_at > EXIT_DRAIN_SECONDS:
                            return
                    elif idle_timeout is not None and now - last_data > idle_timeout:
                        raise BackendError(f"the {backend} program printed nothing for {idle_timeout:g} s "
                                           "(idle_timeout)", backend=backend, kind="transient",
                                           stderr_tail=self.stderr_tail() or None)
            finally:
                if not read.done():
                    read.cancel()
            chunk = read.result()
            if not chunk:
                return
            last_data = loop.time()
            yield chunk

    async def wait(self, timeout: float = 10.0) -> int | None:
        """The exit code once the program exited (None if it has not within timeout)."""
        await self.process.wait_exit(timeout)
        return self.process.returncode

    async def stop(self, grace: float = 1.0) -> int | None:
        """End the program and everything it started. Safe to call twice; a cancellation while
        it runs does not interrupt the kill."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(grace))
        try:
            return await asyncio.shield(self._stopping)
        except asyncio.CancelledError:
            await asyncio.wait({self._stopping}, timeout=grace + 5)
            raise

    async def _stop(self, grace: float) -> int | None:
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        try:
            return await self.process.terminate(grace)
        finally:
            for path in self._invocation.files:
                with contextlib.suppress(OSError):
                    os.unlink(path)


@contextlib.asynccontextmanager
async def start_program(invocation: Invocation, cwd: str | Path, *, grace: float = 1.0) -> AsyncIterator[ProgramRun]:
    """Start a program for one turn; it is ended when the block exits, however it exits."""
    try:
        run = await ProgramRun.start(invocation, cwd)
    except BaseException:
        for path in invocation.files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    try:
        yield run
    finally:
        await run.stop(grace)
