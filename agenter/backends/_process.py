"""Agent programs as child processes: own process group, bounded stderr tail, kill by pid."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|AUTH)", re.IGNORECASE)
_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-\.]{8,}"),
    re.compile(r"(?i)(x-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',]{6,}"),
]


class Redactor:
    """Removes API keys from text that may reach a log, an event or an exception.

    Secrets are the values of environment variables whose names look secret (…KEY, …TOKEN, …),
    collected once, plus anything shaped like a key (sk-…, Bearer …, x-api-key: …).
    """

    def __init__(self, env: Mapping[str, str] | None = None, extra: list[str] | None = None):
        sources = dict(os.environ)
        if env:
            sources.update(env)
        secrets = {v for k, v in sources.items() if v and len(v) >= 8 and _SECRET_ENV.search(k)}
        secrets.update(s for s in (extra or []) if s and len(s) >= 4)
        self._secrets = sorted(secrets, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[REDACTED]")
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
        return text


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """One-off redaction; prefer a Redactor when redacting many strings."""
    return Redactor(env)(text)


class AgentProcess:
    """A spawned agent program. `terminate()` ends its whole process group, also on errors."""

    def __init__(self, process: asyncio.subprocess.Process, env: Mapping[str, str], tail_lines: int):
        self.process = process
        self._env = env
        self._stderr: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._stderr_task: asyncio.Task[None] | None = None
        if process.stderr is not None:
            self._stderr_task = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def start(cls, command: Sequence[str], *, cwd: str | Path, env: Mapping[str, str],
                    stdin_pipe: bool = True, stdout_pipe: bool = True, tail_lines: int = 40,
                    limit: int = 16 * 1024 * 1024) -> AgentProcess:
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=str(cwd),
            env=dict(env),
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if stdout_pipe else asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # own process group: terminate() reaches grandchildren
            limit=limit,
        )
        return cls(process, env, tail_lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        with contextlib.suppress(Exception):
            async for raw in self.process.stderr:
                self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def stderr_tail(self) -> str:
        return redact("\n".join(self._stderr), self._env)

    async def terminate(self, grace: float = 3.0) -> int | None:
        """SIGTERM the group, wait `grace` seconds, then SIGKILL. Safe to call twice."""
        if self.process.returncode is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self.process.wait(), grace)
        # Whether the leader went on SIGTERM or not, nothing else in its group may outlive it.
        self._signal_group(signal.SIGKILL)
        if self.process.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.process.wait(), 5)
        if self._stderr_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._stderr_task, 1)
        return self.process.returncode

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)
