"""One task, start to end: its workspace, its agent run, its diff, its row. Never raises for the
task's own failures: whatever goes wrong becomes the row's error (only cancellation passes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenter._errors import BackendError, ConfigurationError, RequirementError
from agenter._types import Budget
from agenter.batch._models import PASSED_STATUSES, BatchRow, BatchTask, TaskCap, TaskDefaults
from agenter.batch._results import worker_info
from agenter.batch._workspace import Workspace, WorkspaceError, create_workspace, public_url
from agenter.host.redact import Redactor

#: What a paused row keeps of each waiting call (its input, a file's content say, is left out).
_PENDING_FIELDS = ("id", "tool", "paths", "command", "rule", "reason", "needs_approval")
_SECRET_OPTION = re.compile(r"(key|token|secret|password|auth)", re.IGNORECASE)


@dataclass(frozen=True)
class RunSettings:
    """Where workspaces go and whether they stay (the same for every task of a batch)."""

    workspace_root: str | None = None
    keep_workspaces: bool = False
    git_cache: str | None = None

    def root(self) -> Path:
        return Path(self.workspace_root) if self.workspace_root else Path(tempfile.gettempdir()) / "agenter-batch"


def error_kind(exc: BaseException) -> str:
    """The row's error class for an exception raised outside the coding session."""
    if isinstance(exc, BackendError):
        return exc.kind
    if isinstance(exc, RequirementError):
        return "missing_program"
    if isinstance(exc, ConfigurationError):
        return "config"
    if isinstance(exc, WorkspaceError):
        return "workspace"
    return "crash"


def _describe(exc: BaseException) -> str:
    from agenter._errors import AgenterError

    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, AgenterError) else f"{type(exc).__name__}: {text}"


class AgentCache:
    """Agents by configuration: building one checks options and requirements, which tasks
    with the same backend, model, options and validators need only once per process."""

    def __init__(self) -> None:
        self._agents: dict[str, Any] = {}

    def get(self, backend: Any, model: str | None, options: dict[str, Any], validators: list[Any] | None,
            sandbox: bool) -> Any:
        from agenter.facade.agent import AutonomousCodingAgent

        key = json.dumps([_identity(backend), model, options, [_identity(v) for v in validators or []]
                          if validators is not None else None, sandbox], sort_keys=True, default=_identity)
        agent = self._agents.get(key)
        if agent is None:
            agent = AutonomousCodingAgent(backend=backend, model=model, validators=validators, sandbox=sandbox,
                                          **options)
            self._agents[key] = agent
        return agent


def _identity(value: Any) -> Any:
    if isinstance(value, str | int | float | bool | None):
        return value
    return f"{type(value).__qualname__}@{id(value)}"


def task_config(task: BatchTask, defaults: TaskDefaults) -> tuple[Any, str, str | None, dict[str, Any], list[Any] | None]:
    """(backend, backend name, model, options, validators) of a task over the batch defaults."""
    own_backend = task.backend is not None and task.backend != defaults.backend_name
    backend: Any = task.backend if own_backend else defaults.backend
    name = task.backend if own_backend and task.backend else defaults.backend_name
    options = dict(task.options) if own_backend else {**defaults.options, **task.options}
    validators: list[Any] | None = list(task.validators) if task.validators is not None else (
        list(defaults.validators) if defaults.validators is not None else None)
    test_command = task.test_command or defaults.test_command
    if test_command:
        validators = [*(validators if validators is not None else ["syntax"]), f"command:{test_command}"]
    return backend, name, task.model or defaults.model, options, validators


def task_budget(task: BatchTask, defaults: TaskDefaults, cap: TaskCap | None) -> tuple[Budget | None, list[str]]:
    """The task's budget (its fields over the batch's) lowered to what the batch still allows,
    and the limits the batch lowered."""
    budget = defaults.budget
    if task.budget is not None:
        own = {name: getattr(task.budget, name) for name in task.budget.model_fields_set}
        budget = Budget(**{**(budget.model_dump() if budget else {}), **own}) if budget else task.budget
    capped: list[str] = []
    if cap is None:
        return budget, capped
    current = budget or Budget()
    update: dict[str, Any] = {}
    if cap.max_cost_usd is not None and (current.max_cost_usd is None or cap.max_cost_usd < current.max_cost_usd):
        update["max_cost_usd"] = max(cap.max_cost_usd, 1e-9)
        capped.append("cost")
    if cap.max_time_seconds is not None and (current.max_time_seconds is None
                                             or cap.max_time_seconds < current.max_time_seconds):
        update["max_time_seconds"] = max(cap.max_time_seconds, 0.001)
        capped.append("time")
    return (current.model_copy(update=update) if update else budget), capped


_AGENTS = AgentCache()


class _NotContinued(Exception):
    """agent.approve refused before the paused run went on (an unknown or used handle, an
    answer for a call that is not pending, the store out of reach, the workspace gone): the
    task stays paused."""


async def run_task(task: BatchTask, defaults: TaskDefaults, settings: RunSettings, *,
                   cap: TaskCap | None = None, on_cost: Callable[[str, float], Any] | None = None,
                   agents: AgentCache | None = None,
                   remove_later: Callable[[Workspace], Any] | None = None) -> BatchRow:
    """Run one task in a workspace of its own and return its row (see the module docstring).

    `on_cost(task_id, cost_so_far)` is called as the session reports its running cost.
    `remove_later(workspace)` takes the workspace's removal off the task's path (the caller
    then owns it); without it the workspace is removed before the row is returned. A task whose
    run pauses keeps its workspace (its row names it): approve_task continues there.
    """
    from agenter._types import CodingRequest

    started, clock = time.time(), time.perf_counter()
    backend, name, model, options, validators = task_config(task, defaults)
    row = _new_row(task, name, model, started)
    redact = _redactor(options)
    workspace = None
    try:
        budget, row.capped_by_batch = task_budget(task, defaults, cap)
        agent = (agents or _AGENTS).get(backend, model, options, validators, defaults.sandbox)
        row.model = agent.model or model
        workspace = await create_workspace(task.repository, task.commit, settings.root(), task.id,
                                           git_cache=Path(settings.git_cache) if settings.git_cache else None)
        row.commit = workspace.commit
        if settings.keep_workspaces:
            row.workspace = str(workspace.path)
        request = CodingRequest(prompt=task.prompt, cwd=workspace.cwd, budget=budget,
                                system_prompt=task.system_prompt or defaults.system_prompt,
                                allowed_write_paths=task.allowed_write_paths)
        await _session(row, agent.stream_execute(request), workspace, task.id, on_cost, redact)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a task's crash is its row, never a lost batch
        row.status, row.error, row.error_kind = "error", redact(public_url(_describe(exc))), error_kind(exc)
    finally:
        await _end(row, workspace, settings, remove_later, clock)
    return row


async def approve_task(task: BatchTask, defaults: TaskDefaults, settings: RunSettings, paused: BatchRow,
                       answers: Any, *, on_cost: Callable[[str, float], Any] | None = None,
                       agents: AgentCache | None = None) -> BatchRow:
    """Continue a paused task (its row `paused`) with `answers` (agent.approve's decisions) in
    the workspace it paused in, on an agent of the task's configuration, and return its new row:
    as run_task's, with the whole run's files, diff, tokens and cost (they carry over), PAUSED
    again if a later call asks. When the run cannot go on (see _NotContinued) the row is the
    paused one again with `error` saying why, so its handle is not lost."""
    started, clock = time.time(), time.perf_counter()
    backend, name, model, options, validators = task_config(task, defaults)
    row = _new_row(task, name, model, started)
    row.commit, row.capped_by_batch = paused.commit, list(paused.capped_by_batch)
    redact = _redactor(options)
    workspace = None
    continued = True
    try:
        workspace = _kept_workspace(task, paused)
        agent = (agents or _AGENTS).get(backend, model, options, validators, defaults.sandbox)
        row.model = agent.model or model
        if settings.keep_workspaces:
            row.workspace = str(workspace.path)
        assert paused.resume_handle is not None
        await _session(row, agent.stream_approve(paused.resume_handle, answers), workspace, task.id, on_cost,
                       redact, approving=True)
    except asyncio.CancelledError:
        raise
    except _NotContinued as exc:
        continued = False
        problem = redact(public_url(str(exc)))
        return paused.model_copy(update={"error": f"not continued: {problem}", "error_kind": "approve",
                                         "finished_at": time.time()})
    except Exception as exc:  # noqa: BLE001 - a task's crash is its row, never a lost batch
        row.status, row.error, row.error_kind = "error", redact(public_url(_describe(exc))), error_kind(exc)
    finally:
        if continued:
            # Removed here, not later: the batch folder it was kept in goes with its last workspace.
            await _end(row, workspace, settings, None, clock)
            if workspace is not None and not row.paused and not settings.keep_workspaces:
                _remove_empty_parent(workspace.path)
    return row


def _new_row(task: BatchTask, backend: str, model: str | None, started: float) -> BatchRow:
    return BatchRow(id=task.id, status="error", backend=backend, model=model, repository=public_url(task.repository),
                    started_at=started, metadata=dict(task.metadata), worker=worker_info())


def _redactor(options: dict[str, Any]) -> Redactor:
    return Redactor(extra=[value for key, value in options.items()
                           if isinstance(value, str) and _SECRET_OPTION.search(key)])


def _kept_workspace(task: BatchTask, paused: BatchRow) -> Workspace:
    """The workspace a paused task's row names, as run_task made it."""
    if not paused.paused or not paused.resume_handle:
        raise _NotContinued(f"task {task.id!r} is not paused (its row's status: {paused.status})")
    if not paused.workspace or not Path(paused.workspace).is_dir():
        raise _NotContinued(f"the paused task's workspace {paused.workspace!r} is gone (removed, or on another "
                            "machine); run the task again (retry paused)")
    path = Path(paused.workspace)
    cwd = Path(paused.workspace_cwd) if paused.workspace_cwd else path
    if paused.commit:
        return Workspace(path=path, cwd=cwd, kind="git", commit=paused.commit)
    return Workspace(path=path, cwd=cwd, kind="copy", source=Path(task.repository).expanduser().resolve())


async def _session(row: BatchRow, events: Any, workspace: Workspace, task_id: str,
                   on_cost: Callable[[str, float], Any] | None, redact: Redactor, *, approving: bool = False) -> None:
    """Stream a coding session's events into the row, then take its diff. With `approving`, a
    failure before the first event (approve's checks) is a _NotContinued."""
    from agenter._events import CodingEventType

    agent_clock = time.perf_counter()
    result: dict[str, Any] | None = None
    seen = False
    try:
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                seen = True
                if event.type is CodingEventType.ITERATION_END and on_cost is not None:
                    on_cost(task_id, float(event.data.get("cost") or 0.0))
                elif event.type is CodingEventType.SESSION_END:
                    result = event.data.get("result")
    except Exception as exc:
        if approving and not seen:
            raise _NotContinued(_describe(exc)) from exc
        raise
    row.agent_seconds = round(time.perf_counter() - agent_clock, 4)
    if result is None:
        raise RuntimeError("the coding session ended without a result")
    _fill(row, result)
    try:
        row.diff = await workspace.diff(row.files)
    except Exception as exc:  # noqa: BLE001 - the session ended: keep its outcome, say what is missing
        row.diff_error = redact(public_url(_describe(exc)))


async def _end(row: BatchRow, workspace: Workspace | None, settings: RunSettings,
               remove_later: Callable[[Workspace], Any] | None, clock: float) -> None:
    """A paused task's workspace stays (named in its row); any other is removed unless kept."""
    if workspace is not None and row.paused:
        row.workspace, row.workspace_cwd = str(workspace.path), str(workspace.cwd)
    elif workspace is not None and not settings.keep_workspaces:
        if remove_later is not None:
            remove_later(workspace)
        else:
            with contextlib.suppress(Exception):
                await asyncio.shield(workspace.remove())
    row.finished_at = time.time()
    row.duration_seconds = round(time.perf_counter() - clock, 4)


def _remove_empty_parent(path: Path) -> None:
    """The batch folder a paused task's workspace was kept in, once nothing else is in it."""
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def _fill(row: BatchRow, result: dict[str, Any]) -> None:
    """Copy a session's result (the redacted copy its SESSION_END event carries) into the row."""
    row.status = str(result.get("status") or "error")
    row.files = sorted(result.get("files") or {})
    row.summary = str(result.get("summary") or "")
    row.iterations = int(result.get("iterations") or 0)
    row.cost_usd = float(result.get("total_cost_usd") or 0.0)
    row.usage = {key: int(result.get(key) or 0) for key in (
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")}
    row.error = result.get("error")
    row.exceeded_limit = result.get("exceeded_limit")
    errors = list(result.get("validation_errors") or [])
    row.validation = {"passed": row.status in PASSED_STATUSES, "errors": errors}
    row.refusal_reason = result.get("refusal_reason")
    row.permission_denials = list(result.get("permission_denials") or [])
    if row.status == "error":
        row.error_kind = result.get("error_kind") or _session_error_kind(row.error or "")
    row.model = result.get("model") or row.model
    row.resume_handle = result.get("resume_handle")
    row.pending = [{key: call.get(key) for key in _PENDING_FIELDS} for call in result.get("pending") or []
                   if isinstance(call, dict)]


def _session_error_kind(error: str) -> str:
    # The session reports a backend failure as text; its kind arrives with CodingResult.error_kind
    # where the session sets it. Until then: the one case we can name for sure, else unknown.
    if error.startswith("session cancelled"):
        return "cancelled"
    return "unknown"
