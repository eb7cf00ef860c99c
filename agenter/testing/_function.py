"""FunctionBackend: an in-process backend double whose turns are your functions.

For pipeline tests that need agenter's real session (budgets, validators, retries, events)
without a model or an agent program:

    from agenter import AutonomousCodingAgent
    from agenter.testing import FunctionBackend, TurnContext

    def turn(ctx: TurnContext):
        ctx.write("hello.py", "print('hi')\\n")
        ctx.use(input_tokens=120, output_tokens=30)
        return "wrote hello.py"

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn)

A turn function receives a TurnContext and may return None, a string (the agent's text), a
BackendMessage, a list of those, or an (async) iterator of them; it may be async and may raise
(a BackendError is an agent failure). `turn=` takes one function for every turn, or a list with
one function per turn (the last one repeats).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from agenter._types import Usage
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BaseBackend,
    MessageType,
    SessionSpec,
    ToolReply,
)
from agenter.permissions import PermissionDecision, ToolCall

__all__ = ["FunctionBackend", "FunctionOptions", "TurnContext"]

TurnFunction = Callable[["TurnContext"], Any]


class FunctionOptions(BackendOptions):
    """Options of FunctionBackend (keyword arguments of AutonomousCodingAgent)."""

    turn: TurnFunction | list[TurnFunction] = Field(
        description="The turn function, or one per turn (the last repeats).")
    connect_delay: float = Field(default=0.0, ge=0, description="Seconds connect() takes.")
    on_disconnect: Callable[[], Any] | None = Field(default=None, description="Called when the backend disconnects.")


class TurnContext:
    """What a turn function sees and can do: the prompt, the workspace, and the agent's moves."""

    def __init__(self, backend: FunctionBackend, prompt: str):
        self.backend = backend
        self.prompt = prompt

    @property
    def iteration(self) -> int:
        """1 for the first turn of the session, 2 for the first retry, ..."""
        return len(self.backend.prompts)

    @property
    def prompts(self) -> list[str]:
        """Every prompt this session's backend received, this one last."""
        return list(self.backend.prompts)

    @property
    def cwd(self) -> Path:
        return self.backend.cwd

    @property
    def spec(self) -> SessionSpec:
        return self.backend.spec

    def write(self, path: str, content: str) -> BackendMessage:
        """Write a file as an agent's file tool would (reported in modified_files)."""
        target = self.cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        self.backend.track(written=[path])
        return BackendMessage(MessageType.TOOL_CALL, tool_name="write_file", tool_input={"path": path})

    def delete(self, path: str) -> BackendMessage:
        (self.cwd / path).unlink()
        self.backend.track(deleted=[path])
        return BackendMessage(MessageType.TOOL_CALL, tool_name="delete_file", tool_input={"path": path})

    def use(self, *, input_tokens: int = 0, output_tokens: int = 0, cache_read_tokens: int = 0,
            cache_write_tokens: int = 0, cost_usd: float | None = None) -> None:
        """Record one model response's usage (priced by model unless cost_usd is given)."""
        self.backend.ledger.settle(Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                                         cache_read_tokens=cache_read_tokens,
                                         cache_write_tokens=cache_write_tokens), cost=cost_usd)

    def refuse(self, reason: str, category: str | None = None) -> BackendMessage:
        self.backend.refuse({"reason": reason, "category": category})
        return BackendMessage(MessageType.TOOL_CALL, tool_name="refuse_task",
                              tool_input={"reason": reason, "category": category})

    def output(self, value: BaseModel | dict[str, Any]) -> ToolReply:
        """Return structured output (validated against the request's output_type)."""
        data = value.model_dump() if isinstance(value, BaseModel) else value
        return self.backend.accept_output(data)

    async def permit(self, call: ToolCall) -> PermissionDecision:
        """Ask the session's permission gate, as a backend does before running a tool."""
        return await self.backend.permit(call)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolReply:
        """Call one of the agent's custom tools the way a model would."""
        for tool in self.backend.settings.tools:
            if tool.name == name:
                return await self.backend.run_tool(tool, arguments or {})
        return ToolReply(f"Unknown tool {name!r}.", is_error=True)


class FunctionBackend(BaseBackend[FunctionOptions]):
    """A backend whose turns are Python functions (see the module docstring)."""

    name: ClassVar[str] = "function"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True,
        resume=True)
    options_model: ClassVar[type[BackendOptions]] = FunctionOptions
    #: The turn function asks the gate itself (TurnContext.permit), so every kind can be enforced.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell", "network", "mcp", "custom"})

    def __init__(self, settings: Any):
        super().__init__(settings)
        self.prompts: list[str] = []

    async def _connect(self, spec: SessionSpec) -> None:
        if self.options.connect_delay:
            await asyncio.sleep(self.options.connect_delay)
        self._session_id = "function-session"

    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        self.prompts.append(prompt)
        turns = self.options.turn
        if isinstance(turns, Sequence):
            if not turns:
                return
            function = turns[min(len(self.prompts), len(turns)) - 1]
        else:
            function = turns
        result = function(TurnContext(self, prompt))
        if inspect.isawaitable(result):
            result = await result
        if hasattr(result, "__aiter__"):
            async for item in result:
                if item is not None:
                    yield _message(item)
            return
        if result is None:
            return
        if isinstance(result, str | BackendMessage):
            result = [result]
        for item in result:
            if item is not None:
                yield _message(item)

    async def _disconnect(self) -> None:
        callback = self.options.on_disconnect
        if callback is not None:
            outcome = callback()
            if inspect.isawaitable(outcome):
                await outcome


def _message(item: Any) -> BackendMessage:
    if isinstance(item, BackendMessage):
        return item
    if isinstance(item, str):
        return BackendMessage(MessageType.TEXT, item)
    if isinstance(item, ToolReply):
        return BackendMessage(MessageType.TOOL_RESULT, item.text, is_error=item.is_error)
    raise TypeError(f"a turn function yielded {type(item).__name__}; expected str or BackendMessage")
