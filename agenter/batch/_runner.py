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


async def run_task(task: BatchTask, defaults: TaskDefaults, settings: RunSettings, *,
                   cap: TaskCap | None = None, on_cost: Callable[[str, float], Any] | None = None,
                   agents: AgentCache | None = None,
                   remove_later: Callable[[Workspace], Any] | None = None) -> BatchRow:
    """Run one task in a workspace of its own and return its row (see the module docstring).

    `on_cost(task_id, cost_so_far)` is called as the session reports its running cost.
    `remove_later(workspace)` takes the workspace's removal off the task's path (the caller
    then owns it); without it the workspace is removed before the row is returned.
    """
    from agenter._events import CodingEventType
    from agenter._types import CodingRequest

    started, clock = time.time(), time.perf_counter()
    backend, name, model, options, validators = task_config(task, defaults)
    row = BatchRow(id=task.id, status="error", backend=name, model=model, repository=public_url(task.repository),
                   started_at=started, metadata=dict(task.metadata), worker=worker_info())
    redact = Redactor(extra=[value for key, value in options.items()
                             if isinstance(value, str) and _SECRET_OPTION.search(key)])
    workspace = None
    session_ended = False
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
        agent_clock = time.perf_counter()
        result: dict[str, Any] | None = None
        async with contextlib.aclosing(agent.stream_execute(request)) as events:
            async for event in events:
                if event.type is CodingEventType.ITERATION_END and on_cost is not None:
                    on_cost(task.id, float(event.data.get("cost") or 0.0))
                elif event.type is CodingEventType.SESSION_END:
                    result = event.data.get("result")
        row.agent_seconds = round(time.perf_counter() - agent_clock, 4)
        if result is None:
            raise RuntimeError("the coding session ended without a result")
        _fill(row, result)
        session_ended = True
        row.diff = await workspace.diff(row.files)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a task's crash is its row, never a lost batch
        problem = redact(public_url(_describe(exc)))
        if session_ended:
            # The session ended but its diff could not be taken: keep its outcome, say what is missing.
            row.diff_error = problem
        else:
            row.status, row.error, row.error_kind = "error", problem, error_kind(exc)
    finally:
        if workspace is not None and not settings.keep_workspaces:
            if remove_later is not None:
                remove_later(workspace)
            else:
                with contextlib.suppress(Exception):
                    await asyncio.shield(workspace.remove())
        row.finished_at = time.time()
        row.duration_seconds = round(time.perf_counter() - clock, 4)
    return row


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


def _session_error_kind(error: str) -> str:
    # The session reports a backend failure as text; its kind arrives with CodingResult.error_kind
    # where the session sets it. Until then: the one case we can name for sure, else unknown.
    if error.startswith("session cancelled"):
        return "cancelled"
    return "unknown"
