"""What the built-in tools declare to the permission gate and the executor, and the executor the
tool loop runs each response's calls with.

Every tool call becomes a `ToolCall` the gate judges: file reads and searches are `read` calls of
their path, writes and deletes `edit` calls, the bash tool a `shell` call of its command, custom
tools whatever their `ToolSpec` says (the fail-closed defaults when they declare nothing).
Reads and searches are safe to run side by side; everything else runs alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from agenter.permissions import ToolCall
from agenter.tools.executor import ToolExecutor, ToolResult, ToolUse
from agenter.tools.spec import ToolSpec

if TYPE_CHECKING:
    from agenter.backends.base import BackendMessage, ToolReply
    from agenter.permissions import PermissionDecision, PermissionGate

#: File tools that only read; the others write or delete.
READ_TOOLS = frozenset({"read_file", "list_directory", "glob", "grep"})


def _path_of(arguments: Mapping[str, Any], default: str | None) -> tuple[str, ...]:
    value = arguments.get("path", default)
    if value is None:
        return ()
    return (value if isinstance(value, str) else str(value),)


@dataclass(frozen=True)
class BuiltinSpec(ToolSpec):
    """A ToolSpec whose ToolCall is built by `to_call(name, input)` (a tool whose kind depends
    on its input, or whose path has a default)."""

    to_call: Callable[[str, Mapping[str, Any]], ToolCall] | None = None

    @override
    def call(self, name: str, input: Mapping[str, Any] | None) -> ToolCall:
        data: Mapping[str, Any] = input if isinstance(input, Mapping) else {}
        if self.to_call is None:
            return super().call(name, data)
        return self.to_call(name, data)


def _read_call(name: str, arguments: Mapping[str, Any]) -> ToolCall:
    # Directory tools without a path search the working directory.
    default = None if name == "read_file" else "."
    return ToolCall(kind="read", name=name, paths=_path_of(arguments, default), input=dict(arguments),
                    read_only=True, destructive=False)


def _edit_call(name: str, arguments: Mapping[str, Any]) -> ToolCall:
    return ToolCall(kind="edit", name=name, paths=_path_of(arguments, None), input=dict(arguments))


def _text_editor_call(name: str, arguments: Mapping[str, Any]) -> ToolCall:
    if arguments.get("command") == "view":
        return _read_call(name, arguments)
    return _edit_call(name, arguments)


def _shell_call(name: str, arguments: Mapping[str, Any]) -> ToolCall:
    command = arguments.get("command")
    return ToolCall(kind="shell", name=name, command=command if isinstance(command, str) else "",
                    input=dict(arguments))


def file_tool_spec(name: str, max_result_chars: int) -> ToolSpec:
    if name in READ_TOOLS:
        return BuiltinSpec(kind="read", read_only=True, concurrency_safe=True, max_result_chars=max_result_chars, path_fields=("path",), to_call=_read_call)
    return BuiltinSpec(kind="edit", max_result_chars=max_result_chars, path_fields=("path",), to_call=_edit_call)


def text_editor_spec(max_result_chars: int) -> ToolSpec:
    return BuiltinSpec(kind="edit", max_result_chars=max_result_chars, path_fields=("path",),
                       to_call=_text_editor_call)


def shell_spec(max_result_chars: int) -> ToolSpec:
    return BuiltinSpec(kind="shell", max_result_chars=max_result_chars, command_field="command",
                       to_call=_shell_call)


def custom_tool_spec(tool: Any) -> ToolSpec:
    """The tool's own `spec` when it declares one, else the fail-closed defaults."""
    spec = getattr(tool, "spec", None)
    return spec if isinstance(spec, ToolSpec) else ToolSpec()


# ---------------------------------------------------------------------------------------------


@dataclass
class _Running:
    use: ToolUse
    is_error: bool = False


_RUNNING: contextvars.ContextVar[_Running] = contextvars.ContextVar("agenter_harness_tool_call")
#: The id of the tool call the gate is deciding (the key of a person's answer to a paused call).
DECIDING: contextvars.ContextVar[str] = contextvars.ContextVar("agenter_harness_deciding")


class ReplyTool:
    """Adapts `handler(name, arguments) -> ToolReply` to the executor: the reply's text is the
    result and its error flag is kept (an error reply is not an exception)."""

    def __init__(self, handler: Callable[[str, dict[str, Any]], Awaitable[ToolReply]]):
        self._handler = handler

    async def run(self, arguments: dict[str, Any]) -> str:
        running = _RUNNING.get()
        reply = await self._handler(running.use.name, arguments)
        running.is_error = reply.is_error
        return reply.text


class TurnExecutor(ToolExecutor):
    """The shared ToolExecutor, plus: each call that passed the gate is announced through
    `on_start(use)` and runs only once that returns (the backend reports the tool call and waits
    until the session has taken the report), and a tool's own error flag is kept."""

    def __init__(self, tools: Mapping[str, Any], *, on_start: Callable[[ToolUse], Awaitable[None]],
                 **kwargs: Any):
        super().__init__(tools, **kwargs)
        self._on_start = on_start

    @override
    async def _decide(self, use: ToolUse) -> tuple[ToolResult | None, PermissionDecision | None]:
        token = DECIDING.set(use.id)  # the gate's call knows which tool_use it is
        try:
            return await super()._decide(use)
        finally:
            DECIDING.reset(token)

    @override
    async def _invoke(self, use: ToolUse, decision: Any, started: float) -> ToolResult:
        await self._on_start(use)
        running = _Running(use)
        token = _RUNNING.set(running)
        try:
            result = await super()._invoke(use, decision, started)
        finally:
            _RUNNING.reset(token)
        if running.is_error and result.status == "ok":
            result = dataclasses.replace(result, status="error")
        return result


class Relay:
    """Messages from the executor's task to the turn; a tool call's report waits until the turn
    has handed it on (`announce` returns once the taken future is set)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[BackendMessage, asyncio.Future[None] | None] | None] = asyncio.Queue()

    async def announce(self, message: BackendMessage) -> None:
        taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((message, taken))
        await taken

    def post(self, message: BackendMessage) -> None:
        self._queue.put_nowait((message, None))

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def next(self) -> tuple[BackendMessage, asyncio.Future[None] | None] | None:
        """The next message and its taken future (None for posted ones); None once closed."""
        return await self._queue.get()


class PermitGate:
    """The gate as the executor uses it, with decisions through the backend's `permit` (so
    denials are recorded for result.permission_denials and every decision becomes an event)."""

    def __init__(self, permit: Callable[[ToolCall], Awaitable[PermissionDecision]],
                 gate: Callable[[], PermissionGate | None]):
        self._permit = permit
        self._gate = gate

    async def decide(self, call: ToolCall) -> PermissionDecision:
        return await self._permit(call)

    def add_read_root(self, path: str | os.PathLike[str]) -> None:
        gate = self._gate()
        if gate is not None:
            gate.add_read_root(path)
