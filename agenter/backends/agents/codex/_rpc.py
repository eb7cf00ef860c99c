"""JSON-RPC over `codex app-server`'s stdio: one JSON object per line, both directions."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agenter._errors import BackendError
from agenter.host import AgentProcess

log = logging.getLogger("agenter.backends.agents.codex")

#: Answers a server request (method, params) with a result dict, or raises LookupError (unknown).
RequestHandler = Callable[[str, dict[str, Any]], dict[str, Any]]


@dataclass
class Notification:
    method: str
    params: dict[str, Any]


@dataclass
class Closed:
    """The connection ended: the process exited, or it broke the protocol."""

    reason: str


class AppServerConnection:
    """Requests with ids and futures; notifications into a queue; server requests answered at once.

    Server requests (approvals, user input) are answered from the reader task so that a turn
    can never block on them; the handler also reports its decisions as notifications.
    """

    def __init__(self, process: AgentProcess, handle_request: RequestHandler,
                 observe: Callable[[Notification], None] | None = None, *, backend: str,
                 redact: Callable[[str], str]):
        self.process = process
        self.backend = backend
        self._redact = redact
        self._handle_request = handle_request
        self._observe = observe
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[Notification | Closed] = asyncio.Queue()
        self.closed: Closed | None = None
        self._reader = asyncio.create_task(self._read())

    # ------------------------------------------------------------------ outgoing
    async def request(self, method: str, params: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        if self.closed is not None:
            raise self._error(f"cannot send {method}: {self.closed.reason}")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            try:
                self._write({"id": request_id, "method": method, "params": params or {}})
                await self._drain()
            except BackendError:
                # The process died under us: report why (exit code, stderr), not the broken pipe.
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(self._reader), 3)
                if self.closed is not None:
                    raise self._error(f"cannot send {method}: {self.closed.reason}") from None
                raise
            try:
                return await asyncio.wait_for(future, timeout)
            except TimeoutError:
                raise self._error(f"codex app-server did not answer {method} within {timeout:.0f} s") from None
        finally:
            self._pending.pop(request_id, None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self._write(message)

    def send_nowait(self, method: str, params: dict[str, Any]) -> None:
        """Fire a request without waiting for its answer (turn/interrupt while being cancelled)."""
        with contextlib.suppress(Exception):
            self._write({"id": next(self._ids), "method": method, "params": params})

    def _write(self, message: dict[str, Any]) -> None:
        stdin = self.process.process.stdin
        if stdin is None or stdin.is_closing():
            raise self._error("codex app-server's stdin is closed")
        stdin.write((json.dumps(message) + "\n").encode())

    async def _drain(self) -> None:
        stdin = self.process.process.stdin
        if stdin is not None:
            with contextlib.suppress(ConnectionError):
                await stdin.drain()

    def _error(self, message: str) -> BackendError:
        return BackendError(message, backend=self.backend, stderr_tail=self.process.stderr_tail() or None)

    # ------------------------------------------------------------------ incoming
    async def _read(self) -> None:
        stdout = self.process.process.stdout
        assert stdout is not None
        reason = "codex app-server closed its output"
        try:
            while True:
                try:
                    raw = await stdout.readline()
                except ValueError:  # a line longer than the stream limit
                    reason = "codex app-server sent a line longer than the 16 MiB limit"
                    break
                if not raw:
                    code = await self._exit_code()
                    reason = ("codex app-server exited" if code is None
                              else f"codex app-server exited with code {code}")
                    break
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                try:
                    message = json.loads(line)
                    if not isinstance(message, dict):
                        raise ValueError("not an object")
                except ValueError:
                    reason = f"codex app-server sent a malformed line: {self._redact(line[:200])!r}"
                    break
                self._dispatch(message)
        except asyncio.CancelledError:
            reason = "connection closed by agenter"
            raise
        except Exception as exc:  # noqa: BLE001 - never let the reader die silently
            reason = f"reading from codex app-server failed: {exc!r}"
        finally:
            self._close(reason)

    async def _exit_code(self) -> int | None:
        code = None
        with contextlib.suppress(asyncio.TimeoutError):
            code = await asyncio.wait_for(self.process.process.wait(), 2)
        # Let the stderr reader catch up so the error carries the program's last words.
        stderr_task = getattr(self.process, "_stderr_task", None)
        if stderr_task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(stderr_task), 1)
        return code

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            self._answer(message)
        elif "id" in message:
            future = self._pending.get(message["id"])
            if future is None or future.done():
                return
            if "error" in message:
                error = message["error"] or {}
                future.set_exception(BackendError(
                    f"codex app-server rejected the request: {error.get('message', error)}",
                    backend=self.backend))
            else:
                future.set_result(message.get("result") or {})
        elif "method" in message:
            notification = Notification(message["method"], message.get("params") or {})
            if self._observe is not None:  # in order with server requests, before the queue
                try:
                    self._observe(notification)
                except Exception:
                    log.exception("observing %s failed", notification.method)
            self.events.put_nowait(notification)

    def _answer(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params") or {}
        try:
            result = self._handle_request(method, params)
            reply: dict[str, Any] = {"id": message["id"], "result": result}
        except LookupError:
            reply = {"id": message["id"], "error": {"code": -32601, "message": f"{method} is not supported"}}
        except Exception as exc:
            log.exception("answering %s failed", method)
            reply = {"id": message["id"], "error": {"code": -32603, "message": str(exc)}}
        with contextlib.suppress(Exception):
            self._write(reply)

    def _close(self, reason: str) -> None:
        if self.closed is not None:
            return
        self.closed = Closed(reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self._error(reason))
        self.events.put_nowait(self.closed)

    async def aclose(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
