"""ToolExecutor: runs one turn's tool calls and answers every one of them exactly once.

Calls run in the order given, grouped: consecutive calls whose spec is concurrency-safe run
together (bounded by a semaphore), everything else runs alone. Each call passes the permission
gate first. A result longer than the tool's max_result_chars is saved to a file in the results
folder and the model gets a preview and the path; an empty result becomes a short marker; an
exception becomes an error result. When the batch is aborted (the `abort` event, or the task
running it is cancelled), every call without a result gets a "cancelled" one, so each tool_use
still has its tool_result.

A call the gate defers (its decision's behavior is "defer": nobody can answer its question now
and the run is to pause) stops the batch there: the calls before it ran (or were denied) as
usual; it and every call after it get a "deferred" result, which is not an answer for the model
but the caller's cue to pause before them. Deferred results are not passed to `on_result`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agenter.tools.spec import ToolSpec

if TYPE_CHECKING:
    from agenter.permissions import PermissionDecision, PermissionGate

__all__ = ["ToolExecutor", "ToolResult", "ToolUse"]

log = logging.getLogger(__name__)

ToolStatus = Literal["ok", "error", "denied", "cancelled", "deferred"]

#: The content of a deferred call's result, and of the calls after it (not run).
DEFERRED_TEXT = "Not run: the call waits for a person's approval (the run pauses before it)."
AFTER_DEFERRED_TEXT = "Not run: an earlier call of the same response waits for a person's approval."
ToolRunner = Callable[[dict[str, Any]], Any]

DEFAULT_PREVIEW_CHARS = 2_000
DEFAULT_MAX_CONCURRENCY = 10


@dataclass(frozen=True)
class ToolUse:
    """One tool call the model made: its id, the tool's name, its input."""

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: ToolUse | Mapping[str, Any]) -> ToolUse:
        """A ToolUse, or an Anthropic-style {"type": "tool_use", "id", "name", "input"} block."""
        if isinstance(value, ToolUse):
            return value
        if isinstance(value, Mapping):
            return cls(id=str(value.get("id", "")), name=str(value.get("name", "")), input=value.get("input") or {})
        raise TypeError(f"a tool call must be a ToolUse or a tool_use block, got {type(value).__name__}")


@dataclass(frozen=True)
class ToolResult:
    """The answer to one ToolUse. `content` is what the model reads."""

    tool_use_id: str
    name: str
    content: str
    status: ToolStatus = "ok"
    saved_path: str | None = None
    decision: PermissionDecision | None = None
    duration: float = 0.0

    @property
    def is_error(self) -> bool:
        return self.status != "ok"

    def to_block(self) -> dict[str, Any]:
        """An Anthropic-style tool_result content block."""
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": self.tool_use_id, "content": self.content}
        if self.is_error:
            block["is_error"] = True
        return block


class ToolExecutor:
    """Runs batches of tool calls through an optional PermissionGate.

    tools: a mapping of name → tool, or tools with a `.name`. A tool is an agenter `Tool` (its
        `run(arguments)` is used) or any callable taking the input dict (sync ones run in a thread).
    specs: ToolSpec per tool name; else a tool's own `.spec` attribute; else ToolSpec() (fail-closed).
    gate: decides each call first; None runs every call (for trusted tools only).
    results_dir: where oversize results are saved (the run's folder); created when first needed;
        default a new temporary directory. The gate may read it.
    max_concurrency: bound on concurrency-safe calls running at once.
    on_result: called with each ToolResult as it is made (events); may be async.
    """

    def __init__(self, tools: Mapping[str, Any] | Iterable[Any], *, specs: Mapping[str, ToolSpec] | None = None,
                 gate: PermissionGate | None = None, results_dir: str | os.PathLike[str] | None = None,
                 max_concurrency: int = DEFAULT_MAX_CONCURRENCY, preview_chars: int = DEFAULT_PREVIEW_CHARS,
                 on_result: Callable[[ToolResult], Any] | None = None):
        if isinstance(tools, Mapping):
            self.tools: dict[str, Any] = dict(tools)
        else:
            self.tools = {}
            for tool in tools:
                name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
                if not isinstance(name, str):
                    raise TypeError(f"cannot tell the name of tool {tool!r}; pass a mapping of name to tool")
                self.tools[name] = tool
        self.specs: dict[str, ToolSpec] = dict(specs or {})
        self.gate = gate
        self.results_dir = Path(results_dir) if results_dir is not None else None
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.max_concurrency = max_concurrency
        self.preview_chars = preview_chars
        self.on_result = on_result
        self.last_results: list[ToolResult] | None = None
        self._saved = 0

    def spec_for(self, name: str) -> ToolSpec:
        spec = self.specs.get(name)
        if spec is None:
            own = getattr(self.tools.get(name), "spec", None)
            spec = own if isinstance(own, ToolSpec) else ToolSpec()
        return spec

    # ------------------------------------------------------------------ batches

    async def run_batch(self, calls: Sequence[ToolUse | Mapping[str, Any]], *,
                        abort: asyncio.Event | None = None) -> list[ToolResult]:
        """One result per call, in input order. Never raises for a tool's failure; if the task is
        cancelled, `last_results` holds the completed list (cancelled ones marked) and the
        cancellation propagates."""
        uses = [ToolUse.coerce(c) for c in calls]
        results: list[ToolResult | None] = [None] * len(uses)
        self.last_results = None
        try:
            for group in self._groups(uses):
                if abort is not None and abort.is_set():
                    break
                if len(group) > 1:
                    await self._run_concurrent(uses, group, results, abort)
                else:
                    await self._run_serial(uses, group[0], results, abort)
        except _Aborted:
            pass
        except _Deferred:
            results[:] = [result if result is not None else ToolResult(use.id, use.name, AFTER_DEFERRED_TEXT,
                                                                    status="deferred")
                          for use, result in zip(uses, results, strict=True)]
        except asyncio.CancelledError:
            self.last_results = await self._finish(uses, results)
            raise
        final = await self._finish(uses, results)
        self.last_results = final
        return final

    def _groups(self, uses: list[ToolUse]) -> list[list[int]]:
        groups: list[list[int]] = []
        run: list[int] = []
        for index, use in enumerate(uses):
            if use.name in self.tools and self.spec_for(use.name).concurrency_safe:
                run.append(index)
                continue
            if run:
                groups.append(run)
                run = []
            groups.append([index])
        if run:
            groups.append(run)
        return groups

    async def _run_serial(self, uses: list[ToolUse], index: int, results: list[ToolResult | None],
                          abort: asyncio.Event | None) -> None:
        use = uses[index]
        started = time.monotonic()
        denied, decision = await _guarded(self._decide(use), abort)
        if denied is not None and denied.status == "deferred":
            results[index] = denied
            raise _Deferred
        if denied is not None:
            results[index] = await self._emit(denied)
            return
        result = await _guarded(self._invoke(use, decision, started), abort)
        results[index] = await self._emit(result)

    async def _run_concurrent(self, uses: list[ToolUse], group: list[int], results: list[ToolResult | None],
                              abort: asyncio.Event | None) -> None:
        # Decisions first, in order (questions to a person come one at a time, in the model's order).
        allowed: list[tuple[int, PermissionDecision | None, float]] = []
        deferred = False
        for index in group:
            started = time.monotonic()
            denied, decision = await _guarded(self._decide(uses[index]), abort)
            if denied is not None and denied.status == "deferred":
                results[index], deferred = denied, True
                break  # the calls after it wait with it; those before it run
            if denied is not None:
                results[index] = await self._emit(denied)
            else:
                allowed.append((index, decision, started))
        semaphore = asyncio.Semaphore(self.max_concurrency)

        async def one(index: int, decision: PermissionDecision | None, started: float) -> None:
            async with semaphore:
                result = await self._invoke(uses[index], decision, started)
            results[index] = await self._emit(result)

        if allowed:
            await _guarded(asyncio.gather(*(one(i, d, s) for i, d, s in allowed)), abort)
        if deferred:
            raise _Deferred

    async def _finish(self, uses: list[ToolUse], results: list[ToolResult | None]) -> list[ToolResult]:
        final: list[ToolResult] = []
        for use, result in zip(uses, results, strict=True):
            if result is None:
                result = ToolResult(use.id, use.name, f"Cancelled: {use.name} was stopped before it finished "
                                                      "(the run was interrupted); it may not have run.",
                                    status="cancelled")
                try:
                    await self._emit(result)
                except asyncio.CancelledError:  # still cancelling: the result stands, events may be lost
                    pass
            final.append(result)
        return final

    # ------------------------------------------------------------------ one call

    async def _decide(self, use: ToolUse) -> tuple[ToolResult | None, PermissionDecision | None]:
        if use.name not in self.tools:
            names = ", ".join(sorted(self.tools)) or "none"
            return ToolResult(use.id, use.name, f"Error: there is no tool named {use.name!r} (available: {names}).",
                              status="error"), None
        if not isinstance(use.input, Mapping):
            return ToolResult(use.id, use.name, f"Error: the input of {use.name} must be an object, got "
                                                f"{type(use.input).__name__}.", status="error"), None
        if self.gate is None:
            return None, None
        try:
            decision = await self.gate.decide(self.spec_for(use.name).call(use.name, use.input))
        except Exception as exc:  # noqa: BLE001 - a call whose check fails is denied
            log.warning("permission check for %s failed: %s", use.name, exc)
            return ToolResult(use.id, use.name, f"Permission denied: the permission check failed "
                                                f"({type(exc).__name__}).", status="denied"), None
        if decision.behavior == "defer":
            return ToolResult(use.id, use.name, DEFERRED_TEXT, status="deferred", decision=decision), decision
        if not decision.allowed:
            return ToolResult(use.id, use.name, decision.reason, status="denied", decision=decision), decision
        return None, decision

    async def _invoke(self, use: ToolUse, decision: PermissionDecision | None, started: float) -> ToolResult:
        spec = self.spec_for(use.name)
        try:
            value = await self._call(self.tools[use.name], dict(use.input))
            text = _to_text(value)
            status: ToolStatus = "ok"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool's failure is the model's to read, not ours to raise
            text = f"Error: {type(exc).__name__}: {exc}" if str(exc) else f"Error: {type(exc).__name__}"
            status = "error"
        saved: str | None = None
        if not text.strip():
            text = f"({use.name} completed with no output)"
        elif len(text) > spec.max_result_chars:
            text, saved = await self._save(use, text)
        return ToolResult(use.id, use.name, text, status=status, saved_path=saved, decision=decision,
                          duration=time.monotonic() - started)

    @staticmethod
    async def _call(tool: Any, arguments: dict[str, Any]) -> Any:
        run = getattr(tool, "run", None)
        if callable(run) and inspect.iscoroutinefunction(run):
            return await run(arguments)
        target = run if callable(run) else tool
        if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(type(target).__call__):
            return await target(arguments)
        value = await asyncio.to_thread(target, arguments)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def _save(self, use: ToolUse, text: str) -> tuple[str, str]:
        """Save the full text; return (preview + path for the model, path)."""
        directory = self.results_dir
        if directory is None:
            directory = Path(tempfile.mkdtemp(prefix="agenter-tool-results-"))
            self.results_dir = directory
        self._saved += 1
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{use.name}-{use.id}")[:100] or "result"
        path = directory / f"{self._saved:04d}-{stem}.txt"
        await asyncio.to_thread(_write, path, text)
        if self.gate is not None:
            self.gate.add_read_root(directory)
        preview = text[: self.preview_chars]
        cut = preview.rfind("\n")
        if cut > self.preview_chars // 2:
            preview = preview[:cut]
        note = (f"\n\n[Output too long: {len(text):,} characters, the first {len(preview):,} shown above. The full "
                f"output is saved in {path}; read it in parts if you need more.]")
        return preview + note, str(path)

    async def _emit(self, result: ToolResult) -> ToolResult:
        if self.on_result is not None:
            try:
                value = self.on_result(result)
                if inspect.isawaitable(value):
                    await value
            except Exception as exc:  # noqa: BLE001 - an event hook must not change the result
                log.warning("on_result hook failed: %s: %s", type(exc).__name__, exc)
        return result


async def _guarded(awaitable: Awaitable[Any], abort: asyncio.Event | None) -> Any:
    """Await `awaitable`, cancelling it if `abort` is set first (then raise _Aborted)."""
    task = asyncio.ensure_future(awaitable)
    if abort is None:
        return await task
    waiter = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    raise _Aborted


class _Aborted(Exception):
    """The abort event was set: the batch stops, run_batch returns normally."""


class _Deferred(Exception):
    """A call was deferred: the batch stops there, run_batch returns normally."""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
