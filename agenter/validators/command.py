"""CommandValidator: any shell command (tests, linters, type checkers) as a check."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from agenter.host.process import run_process
from agenter.validators._base import ValidationResult

TAIL_LINES = 60
TAIL_CHARS = 4000


def output_tail(text: str, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last `lines` lines of text, at most `chars` characters."""
    tail = "\n".join(text.rstrip().splitlines()[-lines:])
    if len(tail) > chars:
        tail = "..." + tail[-chars:]
    return tail


def _exit_text(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"signal {-returncode}"
    return f"exit code {returncode}"


class CommandValidator:
    """Runs a command in cwd; a non-zero exit is a failure carrying the output's tail.

    command: a shell string (run with /bin/sh -c) or an argv list (run directly).
    It runs whatever files changed, so it is never skipped. On timeout the command's whole
    process group is killed and the result says it timed out.
    env: extra environment variables, added to the current environment.
    """

    def __init__(self, command: str | list[str], *, timeout: float = 300.0, blocking: bool = True,
                 name: str | None = None, env: Mapping[str, str] | None = None):
        if isinstance(command, str):
            if not command.strip():
                from agenter._errors import ConfigurationError

                raise ConfigurationError("CommandValidator needs a command", parameter="command")
            self.argv = ["/bin/sh", "-c", command]
            self.display = command
        else:
            self.argv = [str(part) for part in command]
            if not self.argv:
                from agenter._errors import ConfigurationError

                raise ConfigurationError("CommandValidator needs a command", parameter="command")
            self.display = shlex.join(self.argv)
        self.command = command
        self.timeout = timeout
        self.blocking = blocking
        self.name = name or f"command:{self.display}"
        self.env = dict(env) if env else None
        self.last_pid: int | None = None  # pid of the last run; lets tests check it is gone

    def __repr__(self) -> str:
        return f"CommandValidator({self.display!r}, timeout={self.timeout:g}, blocking={self.blocking})"

    async def validate(self, files: list[str], cwd: Path) -> ValidationResult:
        from agenter.host import redact  # output may echo API keys from the env

        # Python's bytecode cache of its own for this run: a .pyc in the workspace's __pycache__
        # is trusted while the source keeps its size and its mtime in seconds, so a file the
        # agent rewrote within the second, to the same size (`a * b` -> `a - b`), was judged as
        # its old code (seen in a patch-mode test: the retry's fix failed the check it passes).
        cache = tempfile.mkdtemp(prefix="agenter-pycache-")
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, **(self.env or {})}
        started = time.perf_counter()
        try:
            outcome = await run_process(self.argv, cwd=cwd, timeout=self.timeout, env=env,
                                        merge_stderr=True, stdout_limit=256 * 1024)
        except OSError as exc:
            return ValidationResult(validator=self.name, passed=False, blocking=self.blocking,
                                    errors=[f"could not run {self.display!r}: {exc.strerror or exc}"])
        finally:
            await asyncio.to_thread(shutil.rmtree, cache, True)
        self.last_pid = outcome.pid
        elapsed = time.perf_counter() - started
        tail = redact(output_tail(outcome.stdout), self.env)
        if outcome.timed_out:
            error = f"{self.display!r} timed out after {self.timeout:g}s and was killed"
            return ValidationResult(validator=self.name, passed=False, blocking=self.blocking,
                                    errors=[error + (f"; last output:\n{tail}" if tail else "")],
                                    details=tail or None)
        if outcome.returncode != 0:
            return ValidationResult(
                validator=self.name, passed=False, blocking=self.blocking,
                errors=[f"{self.display!r} failed with {_exit_text(outcome.returncode)}"
                        + (f":\n{tail}" if tail else " (no output)")],
                details=tail or None,
            )
        short_tail = redact(output_tail(outcome.stdout, 10, 1000), self.env)
        return ValidationResult(validator=self.name, passed=True, blocking=self.blocking,
                                details=f"{self.display!r} passed in {elapsed:.1f}s"
                                + (f"\n{short_tail}" if short_tail else ""))
