"""run_batch: tasks through an engine with bounded concurrency, one budget over the batch, rows
written as tasks end, and the resume rule (ids that already have a row are skipped)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from agenter._errors import ConfigurationError
from agenter._types import CodingStatus
from agenter.batch._models import (
    ANSWERS,
    BatchLimits,
    BatchRow,
    BatchTask,
    RayOptions,
    TaskCap,
    TaskDefaults,
    load_tasks,
)
from agenter.batch._results import ResultsFile, check_writable, crash_row, read_rows
from agenter.batch._runner import AgentCache, RunSettings, approve_task, run_task
from agenter.batch._summary import BatchSummary
from agenter.batch._workspace import Workspace, remove_tree
from agenter.batch.progress import BatchProgress

log = logging.getLogger("agenter.batch")

CostCallback = Callable[[str, float], Any]


class Executor(Protocol):
    """Runs one task somewhere and returns its row (an engine: in this process, or on Ray)."""

    async def run(self, task: BatchTask, cap: TaskCap | None, on_cost: CostCallback) -> BatchRow: ...

    async def approve(self, task: BatchTask, paused: BatchRow, answers: Any, on_cost: CostCallback) -> BatchRow:
        """Continue a paused task where its workspace is (approve_task)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Job:
    """What the batch does with one task: run it, or continue its paused row with answers."""

    task: BatchTask
    paused: BatchRow | None = None
    answers: Any = None


class LocalExecutor:
    """Tasks as asyncio tasks of this process."""

    def __init__(self, defaults: TaskDefaults, settings: RunSettings):
        self.defaults = defaults
        self.settings = settings
        self._agents = AgentCache()
        self._removals: set[asyncio.Task[None]] = set()

    async def run(self, task: BatchTask, cap: TaskCap | None, on_cost: CostCallback) -> BatchRow:
        return await run_task(task, self.defaults, self.settings, cap=cap, on_cost=on_cost, agents=self._agents,
                              remove_later=self._remove_later)

    async def approve(self, task: BatchTask, paused: BatchRow, answers: Any, on_cost: CostCallback) -> BatchRow:
        return await approve_task(task, self.defaults, self.settings, paused, answers, on_cost=on_cost,
                                  agents=self._agents)

    def _remove_later(self, workspace: Workspace) -> None:
        # The row need not wait for the removal (tens of ms on a busy disk); close() waits for all.
        removal = asyncio.create_task(workspace.remove())
        self._removals.add(removal)
        removal.add_done_callback(self._removals.discard)

    async def close(self) -> None:
        if self._removals:
            await asyncio.gather(*self._removals, return_exceptions=True)


class _Batch:
    """The scheduler: keeps at most `concurrency` tasks running and the batch within its limits."""

    def __init__(self, executor: Executor, results: ResultsFile, rows: dict[str, BatchRow], concurrency: int,
                 limits: BatchLimits, progress: BatchProgress | None, on_row: Callable[[BatchRow], Any] | None):
        self.executor = executor
        self.results = results
        self.rows = rows
        self.concurrency = concurrency
        self.limits = limits
        self.progress = progress
        self.on_row = on_row
        self.this_run: list[BatchRow] = []
        self.running: dict[asyncio.Task[None], str] = {}
        self.live_cost: dict[str, float] = {}
        self.finished_cost = 0.0
        self.started = time.monotonic()
        self.launched = 0
        self.stopped: str | None = None

    def spent(self) -> float:
        return self.finished_cost + sum(self.live_cost.values())

    def _on_cost(self, task_id: str, cost: float) -> None:
        if task_id in self.live_cost:
            self.live_cost[task_id] = cost
            if self.progress is not None:
                self.progress.cost(self.spent())

    def _cap(self) -> TaskCap | str:
        """What a task starting now may use, or why none may start."""
        cost = time_left = None
        if self.limits.max_cost_usd is not None:
            cost = self.limits.max_cost_usd - self.spent()
            if cost <= 0:
                return f"the batch's cost budget (${self.limits.max_cost_usd}) is spent"
        if self.limits.max_time_seconds is not None:
            time_left = self.limits.max_time_seconds - (time.monotonic() - self.started)
            if time_left <= 0:
                return f"the batch's time budget ({self.limits.max_time_seconds} s) ran out"
        return TaskCap(max_cost_usd=cost, max_time_seconds=time_left)

    async def _one(self, job: Job, cap: TaskCap) -> None:
        task, before = job.task, (job.paused.cost_usd if job.paused is not None else 0.0)
        try:
            if job.paused is None:
                row = await self.executor.run(task, cap, self._on_cost)
            else:
                # A continued run's cost includes what it spent before it paused (an earlier batch's).
                row = await self.executor.approve(task, job.paused, job.answers,
                                                  lambda tid, cost: self._on_cost(tid, max(cost - before, 0.0)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an engine failure is the task's row, never a lost batch
            log.exception("task %s: the engine failed", task.id)
            row = crash_row(task, exc) if job.paused is None else job.paused.model_copy(update={
                "error": f"not continued: the engine failed ({type(exc).__name__}: {exc})", "error_kind": "approve"})
        await self.results.append(row)
        self.this_run.append(row)
        self.rows[row.id] = row
        self.live_cost.pop(task.id, None)
        self.finished_cost += max(row.cost_usd - before, 0.0)
        if self.progress is not None:
            self.progress.task_finished(row)
            self.progress.cost(self.spent())
        if self.on_row is not None:
            try:
                outcome = self.on_row(row)
                if asyncio.iscoroutine(outcome):
                    await outcome
            except Exception:  # the caller's callback must not lose the batch
                log.exception("on_row failed for task %s", task.id)

    async def _wait_one(self) -> None:
        done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
        for finished in done:
            self.running.pop(finished, None)
            finished.result()  # a row that could not be written ends the batch: resume needs it

    async def run(self, todo: list[Job]) -> None:
        try:
            for job in todo:
                task = job.task
                while len(self.running) >= self.concurrency:
                    await self._wait_one()
                cap = self._cap()
                if isinstance(cap, str):
                    self.stopped = cap
                    break
                self.launched += 1
                self.live_cost[task.id] = 0.0
                if self.progress is not None:
                    self.progress.task_started(task.id)
                self.running[asyncio.create_task(self._one(job, cap), name=f"batch-task-{task.id}")] = task.id
            while self.running:
                await self._wait_one()
        except BaseException as exc:
            if self.stopped is None:
                interrupted = isinstance(exc, asyncio.CancelledError | KeyboardInterrupt)
                self.stopped = "interrupted" if interrupted else f"{type(exc).__name__}: {exc}"
            await self._cancel_running()
            raise

    async def _cancel_running(self) -> None:
        """Stop the tasks still running; they write no row, so a re-run does them again."""
        for task in self.running:
            task.cancel()
        if self.running:
            with contextlib.suppress(BaseException):
                await asyncio.shield(asyncio.gather(*self.running, return_exceptions=True))
        self.running.clear()


def _check_engine(engine: str) -> None:
    """An unknown engine, or Ray without ray installed: an error before anything is made."""
    if engine == "ray":
        from agenter.batch._ray import import_ray

        import_ray()
    elif engine != "local":
        raise ConfigurationError(f"unknown engine {engine!r}", parameter="engine", valid=["local", "ray"])


def _executor(engine: str, defaults: TaskDefaults, settings: RunSettings, ray: RayOptions | None,
              concurrency: int) -> Executor:
    if engine == "ray":
        # Imported here only: the rest of agenter never needs ray.
        from agenter.batch._ray import RayExecutor

        return RayExecutor(defaults, settings, ray or RayOptions(), concurrency=concurrency)
    return LocalExecutor(defaults, settings)


def _todo(tasks: list[BatchTask], rows: dict[str, BatchRow], retry: Collection[str],
          answers: Mapping[str, Any] | None = None) -> list[Job]:
    """What this run does: the tasks without a row, or whose row's status is retried, and the
    paused tasks answered (continued, not run again)."""
    answers = answers or {}
    return [Job(t, rows[t.id], answers[t.id]) if t.id in answers else Job(t) for t in tasks
            if t.id in answers or t.id not in rows or rows[t.id].status in retry]


def _answer_problem(answer: Any, row: BatchRow) -> str | None:
    if isinstance(answer, str):
        return None if answer in ANSWERS else f"answer {answer!r} is not one of {', '.join(ANSWERS)}"
    if not isinstance(answer, Mapping):
        return f"an answer is {', '.join(ANSWERS)} or a dict of call ids to those, got {type(answer).__name__}"
    waiting = [str(call.get("id")) for call in row.pending]
    for call, value in answer.items():
        if call not in waiting:
            return f"call {call!r} is not pending in task {row.id!r} (pending: {', '.join(waiting) or 'none'})"
        if value not in ANSWERS:
            return f"answer {value!r} for call {call!r} is not one of {', '.join(ANSWERS)}"
    return None


def _answers(approve: str | Mapping[str, Any] | None, tasks: list[BatchTask],
             rows: dict[str, BatchRow], out: Path) -> dict[str, Any]:
    """The answers of each paused task to continue: a ConfigurationError (one line) for an id
    that is no task, has no row or is not paused, or an answer agent.approve would refuse."""
    if approve is None:
        return {}
    ids = {task.id for task in tasks}
    if isinstance(approve, str):
        problem = None if approve in ANSWERS else f"approve {approve!r} is not one of {', '.join(ANSWERS)}"
        if problem:
            raise ConfigurationError(problem, parameter="approve", valid=list(ANSWERS))
        return {task_id: approve for task_id, row in rows.items() if task_id in ids and row.paused}
    if not isinstance(approve, Mapping):
        raise ConfigurationError("approve is allow, deny, always (every paused task) or a dict of task ids to "
                                 f"answers, got {type(approve).__name__}", parameter="approve")
    for task_id, answer in approve.items():
        row = rows.get(task_id)
        if task_id not in ids:
            problem = f"approve: {task_id!r} is not a task of this batch"
        elif row is None:
            problem = f"approve: task {task_id!r} has no row in {str(out)!r} (it has not run)"
        elif not row.paused:
            problem = f"approve: task {task_id!r} is not paused (its row's status: {row.status})"
        else:
            problem = _answer_problem(answer, row)
            problem = f"approve: task {task_id!r}: {problem}" if problem else None
        if problem:
            raise ConfigurationError(problem, parameter="approve")
    return dict(approve)


def _uses_defaults(tasks: list[BatchTask], defaults: TaskDefaults) -> bool:
    return any(not task.backend or task.backend == defaults.backend_name for task in tasks)


_STATUSES = [status.value for status in CodingStatus]


def _check_defaults(defaults: TaskDefaults, *, requirements: bool) -> None:
    """Build the agent of the batch's defaults once, so a bad option or a missing program is one
    error before anything runs, not a failed row for every task. On Ray the workers' machines
    are what count, so only the options are checked here."""
    from agenter._errors import RequirementError
    from agenter.batch._runner import task_config

    probe = BatchTask(id="defaults", repository=".", prompt="check")
    backend, _, model, options, validators = task_config(probe, defaults)
    try:
        AgentCache().get(backend, model, options, validators, defaults.sandbox)
    except RequirementError:
        if requirements:
            raise
    except ConfigurationError as exc:
        raise ConfigurationError(f"the batch's defaults: {exc}", parameter=exc.parameter) from None


async def run_batch(tasks: str | Path | Iterable[BatchTask | dict[str, Any]], out: str | Path, *,
                    defaults: TaskDefaults | None = None, concurrency: int = 4, limits: BatchLimits | None = None,
                    keep_workspaces: bool = False, workspace_root: str | Path | None = None,
                    git_cache: str | Path | None = None, retry: Collection[str] = (),
                    engine: Literal["local", "ray"] = "local", ray: RayOptions | None = None,
                    progress: BatchProgress | None = None,
                    on_row: Callable[[BatchRow], Any] | None = None,
                    approve: str | Mapping[str, Any] | None = None) -> BatchSummary:
    """Run every task that has no row in `out` yet and append one row per task as it ends.

    tasks: a JSONL file or BatchTask objects (or dicts). defaults: backend, model, options,
    validators and budget for every task. concurrency: tasks at once. limits: one cost and time
    budget over the batch. retry: statuses whose rows do not count as done (e.g. {"error"}), so
    those tasks run again. engine "ray" runs each task as a Ray task (ray: a RayOptions).
    on_row(row) is called (and awaited if async) after each row is written.
    approve continues paused tasks (rows with status paused, from this or an earlier run, in this
    or another process): a dict of task ids to answers ("allow", "deny", "always", or a dict of
    call ids to those), or one answer for every paused task. Each goes on in the workspace it
    paused in, on an agent of its configuration (whose conversation store must be the one it
    paused with), and its new row follows the paused one (read_rows keeps the last).
    Returns the summary; an interrupted batch writes no row for the tasks it stopped.
    """
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ConfigurationError(f"concurrency must be a positive integer, got {concurrency!r}",
                                 parameter="concurrency")
    unknown = sorted(set(retry) - set(_STATUSES))
    if unknown:
        raise ConfigurationError(f"unknown status to retry: {', '.join(unknown)}", parameter="retry",
                                 valid=_STATUSES)
    task_list = load_tasks(tasks)
    defaults = defaults or TaskDefaults()
    # Every usage error is found before anything is made (no results file, no folder for it):
    # the engine, the results file's place, and the defaults the tasks to run would use.
    _check_engine(engine)
    out = Path(out).expanduser()
    check_writable(out, "the results file", parameter="out")
    known = read_rows(out)[0]
    todo = _todo(task_list, known, retry, _answers(approve, task_list, known, out))
    if _uses_defaults([job.task for job in todo], defaults):
        _check_defaults(defaults, requirements=engine == "local")
    # A folder of this batch's own under the root: whatever a lost worker or an interruption left
    # in it (on this machine) is removed at the end with it.
    base = Path(workspace_root).expanduser() if workspace_root else Path(tempfile.gettempdir()) / "agenter-batch"
    batch_root = base / f"batch-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    settings = RunSettings(workspace_root=str(batch_root), keep_workspaces=keep_workspaces,
                           git_cache=str(git_cache) if git_cache else None)
    wall = time.monotonic()
    summary: BatchSummary | None = None
    batch: _Batch | None = None
    results = ResultsFile(out)
    results.open()  # locked first, then read: no other batch can add rows in between
    try:
        rows, unreadable = read_rows(results.path)
        todo = _todo(task_list, rows, retry, _answers(approve, task_list, rows, out))
        skipped = len(task_list) - len(todo)
        executor = _executor(engine, defaults, settings, ray, concurrency)
        batch = _Batch(executor, results, rows, concurrency, limits or BatchLimits(), progress, on_row)
        if progress is not None:
            progress.start(len(task_list), skipped)
        try:
            await batch.run(todo)
        finally:
            with contextlib.suppress(Exception):
                await executor.close()
            summary = BatchSummary.of([t.id for t in task_list], rows, batch.this_run, skipped=skipped,
                                      not_run=len(todo) - len(batch.this_run),
                                      wall_seconds=round(time.monotonic() - wall, 3), stopped=batch.stopped,
                                      unreadable_lines=unreadable)
            if progress is not None:
                progress.close(summary)
    finally:
        results.close()
        if not keep_workspaces:
            kept = {row.workspace for row in (batch.this_run if batch is not None else []) if row.paused}
            await asyncio.shield(asyncio.to_thread(_remove_batch_root, batch_root, kept))
    assert summary is not None
    return summary


def _remove_batch_root(root: Path, kept: set[str | None]) -> None:
    """The batch's folder of workspaces, but for the paused tasks' (their approval goes on there)."""
    if not any(kept):
        remove_tree(root)
        return
    with contextlib.suppress(OSError):
        for child in root.iterdir():
            if str(child) not in kept:
                remove_tree(child)


def run_batch_sync(tasks: str | Path | Iterable[BatchTask | dict[str, Any]], out: str | Path,
                   **options: Any) -> BatchSummary:
    """run_batch for callers without an event loop."""
    return asyncio.run(run_batch(tasks, out, **options))
