"""Execution and integration: each atomic task one verified run of the executor agent, in
dependency order, independent ones in parallel worktrees; then the integration tests and, when
they fail, a bounded debugging run."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenter._events import CodingEventType
from agenter._types import CodingRequest, CodingResult, CodingStatus
from agenter.facade.agent import AutonomousCodingAgent
from agenter.planner.budget import BudgetPool
from agenter.planner.events import Phase, PlanEvent, PlanEventType
from agenter.planner.plan import Plan, PlanTask, TestSpec, dependencies, execution_order, walk
from agenter.planner.report import TaskReport, TaskStatus, TestOutcome, ValidationRecord
from agenter.planner.workspaces import GitWorkspaces, InPlaceWorkspaces, write_test_files
from agenter.validators import CommandValidator, ValidatorChain

__all__ = ["Execution", "TaskRunner", "run_tests", "with_validators"]

_DONE_LIST_LIMIT = 30


def with_validators(agent: AutonomousCodingAgent, extra: Sequence[Any]) -> AutonomousCodingAgent:
    """The same agent (backend, options, settings) with `extra` validators after its own."""
    clone = copy.copy(agent)
    clone._validators = ValidatorChain([*agent._validators.validators, *extra])
    clone.raise_on_budget_exceeded = False  # a task's budget stop is a task result, not an exception
    return clone


def test_validators(tests: Sequence[TestSpec], timeout: float) -> list[CommandValidator]:
    return [CommandValidator(test.command, timeout=timeout) for test in tests if test.command]


@dataclass
class TaskRun:
    """One run of a task: its result, its last verdicts, the files written for it."""

    result: CodingResult
    validation: list[ValidationRecord] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)
    validators: list[str] = field(default_factory=list)


class TaskRunner:
    """Runs one atomic task (or a debugging task) as a full session of the executor agent."""

    def __init__(self, agent: AutonomousCodingAgent, *, plan: Plan, pool: BudgetPool,
                 emit: Callable[[PlanEvent], None], test_timeout: float,
                 request_fields: dict[str, Any]):
        self.agent = agent
        self.plan = plan
        self.pool = pool
        self.emit = emit
        self.test_timeout = test_timeout
        self.request_fields = request_fields

    async def run(self, key: str, task_id: str | None, prompt: str, cwd: Path, tests: Sequence[TestSpec],
                  budget: Any, phase: Phase = Phase.EXECUTION) -> TaskRun:
        """Write the tests' files, run the session with the tests as validators, forward its events."""
        test_files = await asyncio.to_thread(write_test_files, cwd, list(tests))
        validators = test_validators(tests, self.test_timeout)
        agent = with_validators(self.agent, validators)
        request = CodingRequest(prompt=prompt, cwd=cwd, budget=budget, **self.request_fields)
        result: CodingResult | None = None
        verdicts: list[ValidationRecord] = []
        try:
            events = agent.stream_execute(request)
            async with contextlib.aclosing(events):
                async for event in events:
                    self.emit(PlanEvent(type=PlanEventType.CODING_EVENT, phase=phase, task_id=task_id, event=event))
                    if event.type is CodingEventType.ITERATION_START:
                        verdicts = []
                    elif event.type is CodingEventType.VALIDATION_RESULT:
                        data = event.data
                        verdicts.append(ValidationRecord(validator=data["validator"], passed=data["passed"],
                                                         errors=list(data.get("errors") or []),
                                                         skipped=bool(data.get("skipped"))))
                    elif event.type is CodingEventType.SESSION_END:
                        result = event.result
        finally:
            self.pool.settle(key, result)
        assert result is not None  # the facade always ends with SESSION_END
        names = [v.name for v in agent._validators.validators]
        return TaskRun(result=result, validation=verdicts, test_files=test_files, validators=names)


def task_prompt(plan: Plan, task: PlanTask, parents: Sequence[PlanTask], done: Sequence[PlanTask],
                test_files: Sequence[str], note: str | None = None) -> str:
    lines = ["You are doing one task of a larger plan. Do this task completely, and only this task: "
             "other runs do the rest of the plan.", "",
             "Overall goal:", plan.root_task_description, ""]
    if parents:
        lines.append("Part of: " + " > ".join(f"{p.id} {p.description}" for p in parents))
    lines += [f"Your task ({task.id}):", task.description]
    if done:
        lines += ["", "Already done (their changes are in the working directory):"]
        lines += [f"- {t.id}: {t.description}" for t in done[-_DONE_LIST_LIMIT:]]
    if task.unit_tests:
        lines += ["", "When you are done, these must hold:"]
        for test in task.unit_tests:
            lines.append(f"- {test.description}" + (f" (checked by running: {test.command})" if test.command else ""))
    if test_files:
        lines += ["", "Test files already written for this task (make them pass; do not weaken them): "
                  + ", ".join(test_files)]
    if note:
        lines += ["", note]
    return "\n".join(lines)


class Execution:
    """Schedules the atomic tasks of a plan (see the module docstring). Reports are updated in place."""

    def __init__(self, plan: Plan, reports: dict[str, TaskReport], runner: TaskRunner,
                 workspaces: InPlaceWorkspaces | GitWorkspaces, *, parallel: int, pool: BudgetPool,
                 emit: Callable[[PlanEvent], None], checkpoint: Callable[[], None] | None = None):
        self.plan = plan
        self.reports = reports
        self.runner = runner
        self.workspaces = workspaces
        self.parallel = parallel
        self.pool = pool
        self.emit = emit
        self.order = execution_order(plan.tasks)
        self.deps = dependencies(plan.tasks)
        self.tasks: dict[str, tuple[PlanTask, tuple[PlanTask, ...]]] = {
            task.id: (task, parents) for task, _, parents in walk(plan.tasks)}
        # pending → running → finished → merged, or failed / skipped
        self.state: dict[str, str] = dict.fromkeys(self.order, "pending")
        self.commits: dict[str, str | None] = {}
        self.runs: list[CodingResult] = []
        #: Why the budget stopped tasks (the limit's description), and which tasks it stopped.
        self.budget_stop: str | None = None
        self.budget_limit: str | None = None
        self.budget_hit: list[str] = []
        #: Called after every change a resumed run must know (the run writes its state).
        self.checkpoint = checkpoint or (lambda: None)

    def restore(self, states: dict[str, str], commits: dict[str, str | None], runs: list[CodingResult]) -> None:
        """Continue a killed run's execution: merged, failed and skipped tasks stay as they were,
        a finished one is merged from its commit, a running one runs again (see planner/state.py)."""
        for task_id in self.order:
            state = states.get(task_id, "pending")
            self.state[task_id] = "pending" if state == "running" else state
            if state == "running":
                # The killed attempt left no result: the task's next run is the one it reports.
                report = self.reports[task_id]
                report.attempts = max(report.attempts - 1, 0)
        self.commits.update(commits)
        self.runs.extend(runs)

    @property
    def isolated(self) -> bool:
        return isinstance(self.workspaces, GitWorkspaces)

    async def run(self) -> None:
        running: dict[asyncio.Task[None], str] = {}
        next_merge = 0
        try:
            while True:
                next_merge = await self._merge_ready(next_merge)
                self._skip_blocked()
                self._start_ready(running)
                if not running:
                    # Nothing runs, so nothing is reserved: a task that could not start now never will.
                    for task_id in self.order:
                        if self.state[task_id] == "pending":
                            self.budget_hit.append(task_id)
                            self._skip(task_id, "not started: " + (self.budget_stop or "the budget is spent"))
                    if all(self.state[t] in ("merged", "failed", "skipped") for t in self.order):
                        return
                    continue
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    running.pop(finished)
                    finished.result()  # a bug in our own code is not swallowed
        finally:
            for pending in running:
                pending.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    # ------------------------------------------------------------------ scheduling
    def _skip_blocked(self) -> None:
        for task_id in self.order:
            if self.state[task_id] != "pending":
                continue
            blocked = [d for d in sorted(self.deps[task_id]) if self.state[d] in ("failed", "skipped")]
            if blocked:
                self._skip(task_id, f"not started: it depends on {', '.join(blocked)}, which did not complete")

    def _start_ready(self, running: dict[asyncio.Task[None], str]) -> None:
        for task_id in self.order:
            if len(running) >= self.parallel:
                return
            if self.state[task_id] != "pending" or any(self.state[d] != "merged" for d in self.deps[task_id]):
                continue
            waiting = sum(1 for t in self.order if self.state[t] == "pending")
            share = max(min(self.parallel - len(running), waiting), 1)
            budget = self.pool.carve(task_id, share=share)
            if budget is None:  # spent, or all of it reserved by the runs still going
                self.budget_limit = self.pool.exhausted() or "tokens"
                self.budget_stop = self.pool.describe(self.budget_limit)
                return
            self.state[task_id] = "running"
            self.checkpoint()
            running[asyncio.create_task(self._run_task(task_id, budget), name=f"agenter-task-{task_id}")] = task_id

    async def _merge_ready(self, index: int) -> int:
        """Merge finished tasks in execution order, as far as the order allows."""
        while index < len(self.order):
            task_id = self.order[index]
            state = self.state[task_id]
            if state == "finished":
                await self._merge(task_id)
            elif state not in ("failed", "skipped", "merged"):
                return index
            index += 1
        return index

    def _skip(self, task_id: str, reason: str) -> None:
        self.state[task_id] = "skipped"
        report = self.reports[task_id]
        report.status = TaskStatus.SKIPPED
        report.reason = reason
        self.emit(PlanEvent(type=PlanEventType.TASK_END, phase=Phase.EXECUTION, task_id=task_id,
                            data={"status": "skipped", "reason": reason}))
        self.checkpoint()

    # ------------------------------------------------------------------ one task
    async def _run_task(self, task_id: str, budget: Any, note: str | None = None) -> None:
        task, parents = self.tasks[task_id]
        report = self.reports[task_id]
        key = task_id if report.attempts == 0 else f"{task_id}#{report.attempts + 1}"
        workspace: Path | None = None
        try:
            workspace = await self.workspaces.acquire(key)
            done = [self.tasks[t][0] for t in self.order if self.state[t] == "merged"]
            planned_files = [t.path for t in task.unit_tests if t.path]
            prompt = task_prompt(self.plan, task, parents, done, planned_files, note)
            report.attempts += 1
            self.emit(PlanEvent(type=PlanEventType.TASK_START, phase=Phase.EXECUTION, task_id=task_id, data={
                "description": task.description, "attempt": report.attempts, "workspace": str(workspace),
                "budget": budget.model_dump()}))
            run = await self.runner.run(key, task_id, prompt, workspace, task.unit_tests, budget)
            self.runs.append(run.result)
            _record_run(report, run)
            completed = run.result.status in (CodingStatus.COMPLETED, CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED)
            if completed and isinstance(self.workspaces, GitWorkspaces):
                self.commits[task_id] = await self.workspaces.commit(key, f"agenter task {task_id}")
            if completed:
                self.state[task_id] = "finished" if self.isolated else "merged"
                report.status = TaskStatus.COMPLETED
                report.reason = None
            else:
                self.state[task_id] = "failed"
                report.status = TaskStatus.FAILED
                report.reason = _failure_reason(run.result)
                if run.result.status is CodingStatus.BUDGET_EXCEEDED:
                    self.budget_hit.append(task_id)
                    self.budget_limit = run.result.exceeded_limit or self.budget_limit
                if self.isolated:
                    report.merge = "not merged (the task failed)"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a workspace failure fails this task, not the run
            self.pool.settle(key, None)
            self.state[task_id] = "failed"
            report.status = TaskStatus.FAILED
            report.reason = f"{type(exc).__name__}: {exc}"
        finally:
            if self.state[task_id] != "finished" and workspace is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.workspaces.release(key))
        self._task_end(task_id)

    async def _merge(self, task_id: str) -> None:
        """Merge a finished task; on a conflict, run it again on the merged tree and merge that."""
        assert isinstance(self.workspaces, GitWorkspaces)
        report = self.reports[task_id]
        key = task_id if report.attempts <= 1 else f"{task_id}#{report.attempts}"
        outcome = await self.workspaces.merge(key, self.commits.get(task_id), f"agenter: merge task {task_id}")
        await self.workspaces.release(key)
        if outcome.merged:
            self.state[task_id] = "merged"
            report.merge = "nothing to merge" if outcome.nothing_to_merge else (
                "merged after a re-run" if report.attempts > 1 else "merged")
            self.checkpoint()  # the task merged and the merged state, in one write
            self._merge_event(task_id, report.merge, [])
            return
        self._merge_event(task_id, "conflict", outcome.conflicts)
        if report.attempts > 1:
            self._fail_merge(task_id, outcome.conflicts)
            return
        budget = self.pool.carve(f"{task_id}#2")
        if budget is None:
            self._fail_merge(task_id, outcome.conflicts)
            return
        note = ("Your task was done once in a separate copy, but those changes conflicted with work merged "
                f"meanwhile ({', '.join(outcome.conflicts)}). Do the task again on the current files, "
                "keeping what the other tasks did.")
        self.state[task_id] = "running"
        await self._run_task(task_id, budget, note)
        if self.state[task_id] == "finished":
            await self._merge(task_id)

    def _fail_merge(self, task_id: str, conflicts: list[str]) -> None:
        report = self.reports[task_id]
        self.state[task_id] = "failed"
        report.status = TaskStatus.FAILED
        report.merge = "not merged (conflict)"
        report.reason = f"its changes conflict with tasks merged before it: {', '.join(conflicts)}"
        self._task_end(task_id)

    def _merge_event(self, task_id: str, outcome: str, conflicts: list[str]) -> None:
        self.emit(PlanEvent(type=PlanEventType.MERGE, phase=Phase.EXECUTION, task_id=task_id,
                            data={"outcome": outcome, "conflicts": conflicts}))

    def _task_end(self, task_id: str) -> None:
        self.checkpoint()
        report = self.reports[task_id]
        self.emit(PlanEvent(type=PlanEventType.TASK_END, phase=Phase.EXECUTION, task_id=task_id, data={
            "status": report.status.value, "run_status": report.run_status, "reason": report.reason,
            "files": report.files, "validation": [v.model_dump() for v in report.validation],
            "tokens": report.tokens, "cost": report.cost_usd, "attempt": report.attempts}))


def _record_run(report: TaskReport, run: TaskRun) -> None:
    result = run.result
    report.result = result
    report.run_status = result.status.value
    report.iterations = result.iterations
    report.files = sorted(result.files)
    report.test_files = run.test_files
    report.validators = run.validators
    report.validation = run.validation
    report.tokens += result.total_tokens
    report.cost_usd = round(report.cost_usd + result.total_cost_usd, 6)
    report.duration_seconds = round(report.duration_seconds + result.duration_seconds, 3)


def _failure_reason(result: CodingResult) -> str:
    if result.status is CodingStatus.REFUSED:
        return f"refused: {result.refusal_reason or 'no reason given'}"
    detail = result.error or "; ".join(result.validation_errors[:3]) or result.summary
    return f"{result.status.value}: {detail}"


async def run_tests(tests: Sequence[tuple[str | None, TestSpec]], cwd: Path, timeout: float,
                    emit: Callable[[PlanEvent], None]) -> list[TestOutcome]:
    """Run each executable test in cwd; a test without a command is reported as not run."""
    outcomes: list[TestOutcome] = []
    for task_id, test in tests:
        outcome = TestOutcome(description=test.description, command=test.command, task_id=task_id)
        if test.command:
            verdict = await CommandValidator(test.command, timeout=timeout).validate([], cwd)
            outcome.passed = verdict.passed
            outcome.output = "\n".join(verdict.errors) if not verdict.passed else (verdict.details or "")
        else:
            outcome.output = "not run: the test has no command"
        outcomes.append(outcome)
        emit(PlanEvent(type=PlanEventType.INTEGRATION_RESULT, phase=Phase.INTEGRATION, task_id=task_id,
                       data=outcome.model_dump()))
    return outcomes
