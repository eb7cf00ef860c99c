"""PlanAndExecute: plan a task, then carry out each atomic task as a verified run.

Phases: clarification (only with a callback) → planning → test design → approval → execution
→ integration testing → reporting. One budget spans them all; see docs/planning.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import shutil
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from agenter._errors import ConfigurationError, RequirementError
from agenter._types import Budget, CodingResult, CodingStatus, describe_validation_error
from agenter.facade.agent import AutonomousCodingAgent
from agenter.host import Redactor, find_program
from agenter.planner.budget import BudgetPool
from agenter.planner.events import Phase, PlanEvent, PlanEventType
from agenter.planner.executor import Execution, TaskRunner, run_tests
from agenter.planner.plan import Plan, PlanTask, TestSpec, atomic_tasks, execution_order, walk
from agenter.planner.planner import Decompose, PlannerStopped, PlanningSteps, TestDesignMode
from agenter.planner.report import PhaseUsage, PlanResult, TaskReport, TaskStatus, TestOutcome
from agenter.planner.state import GitState, PlanState, read_state, write_state
from agenter.planner.workspaces import GitWorkspaces, InPlaceWorkspaces, WorkspaceError, write_test_files
from agenter.sandbox.paths import read_text_capped

__all__ = ["ApprovalCallback", "ClarifyCallback", "PlanAndExecute"]

#: Called with the planner's questions; returns the answers (a list in the same order, one text,
#: a {question: answer} dict, or None for no answers). May be async.
ClarifyCallback = Callable[[list[str]], Any]
#: Called with the plan; returns True (approve), False (reject) or a Plan (approve this edited
#: plan). May be async.
ApprovalCallback = Callable[[Plan], Any]

Workspaces = Literal["auto", "inplace", "worktree"]
_MAX_FILE_BYTES = 2 * 1024 * 1024
_END = object()


class PlanAndExecute:
    """Plans a coding task with one agent and executes each atomic task with another.

    `planner`: an AutonomousCodingAgent built with mode="analysis" (or a backend name), any
    backend with structured output; it may use its own model. `executor`: the agent that does
    each task (or a backend name). See docs/planning.md for every option.
    """

    def __init__(self, executor: AutonomousCodingAgent | str, planner: AutonomousCodingAgent | str | None = None, *,
                 decomposition: Decompose = "deliverables", max_depth: int = 2,
                 test_design: TestDesignMode = "none", parallel: int = 1, workspaces: Workspaces = "auto",
                 budget: Budget | None = None, on_clarify: ClarifyCallback | None = None,
                 on_approval: ApprovalCallback | None = None, auto_approve: bool = False,
                 max_plan_attempts: int = 2, max_debug_attempts: int = 1, test_timeout: float = 300.0):
        self.executor = _executor(executor)
        self.planner = _planner(planner)
        _choice(decomposition, ("none", "deliverables", "full"), "decomposition")
        _choice(test_design, ("none", "descriptions", "code"), "test_design")
        _choice(workspaces, ("auto", "inplace", "worktree"), "workspaces")
        for name, value, low in (("max_depth", max_depth, 1), ("parallel", parallel, 1),
                                 ("max_plan_attempts", max_plan_attempts, 1),
                                 ("max_debug_attempts", max_debug_attempts, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}", parameter=name)
        if not (isinstance(test_timeout, int | float) and test_timeout > 0):
            raise ConfigurationError(f"test_timeout must be > 0, got {test_timeout!r}", parameter="test_timeout")
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigurationError("budget must be a Budget", parameter="budget")
        if workspaces == "inplace" and parallel > 1:
            raise ConfigurationError("parallel tasks need their own workspaces: use workspaces='auto' or "
                                     "'worktree' with parallel > 1", parameter="workspaces")
        self.isolated = workspaces == "worktree" or (workspaces == "auto" and parallel > 1)
        if self.isolated and find_program("git") is None:
            raise RequirementError("parallel tasks run in git worktrees, but the git program was not found "
                                   "on PATH: install git, or use parallel=1", missing=["git"])
        for name, callback in (("on_clarify", on_clarify), ("on_approval", on_approval)):
            if callback is not None and not callable(callback):
                raise ConfigurationError(f"{name} must be callable", parameter=name)
        self.decomposition: Decompose = decomposition
        self.max_depth = max_depth
        self.test_design: TestDesignMode = test_design
        self.parallel = parallel
        self.budget = budget or Budget()
        self.on_clarify = on_clarify
        self.on_approval = on_approval
        self.auto_approve = auto_approve
        self.max_plan_attempts = max_plan_attempts
        self.max_debug_attempts = max_debug_attempts
        self.test_timeout = float(test_timeout)

    # ------------------------------------------------------------------ public
    async def execute(self, prompt: str | None = None, cwd: str | Path | None = None, *, plan: Plan | None = None,
                      plan_only: bool = False, allowed_write_paths: list[str] | None = None,
                      system_prompt: str | None = None, state_dir: str | Path | None = None,
                      resume: str | Path | None = None) -> PlanResult:
        """Plan (unless `plan` is given) and execute; returns the report. `plan_only=True` stops
        after planning and approval without running any task. `state_dir`: write the run's state
        there as it changes; `resume`: finish the run recorded in that folder (prompt and cwd may
        be left out; see docs/planning.md, "Resuming a run")."""
        result: PlanResult | None = None
        events = self.stream_execute(prompt, cwd, plan=plan, plan_only=plan_only,
                                     allowed_write_paths=allowed_write_paths, system_prompt=system_prompt,
                                     state_dir=state_dir, resume=resume)
        async with contextlib.aclosing(events):
            async for event in events:
                if event.type is PlanEventType.RUN_END:
                    result = event.result
        assert result is not None
        return result

    def execute_sync(self, prompt: str | None = None, cwd: str | Path | None = None, **options: Any) -> PlanResult:
        """For callers without an event loop."""
        coroutine = self.execute(prompt, cwd, **options)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coroutine).result()

    async def stream_execute(self, prompt: str | None = None, cwd: str | Path | None = None, *,
                             plan: Plan | None = None, plan_only: bool = False,
                             allowed_write_paths: list[str] | None = None, system_prompt: str | None = None,
                             state_dir: str | Path | None = None,
                             resume: str | Path | None = None) -> AsyncGenerator[PlanEvent, None]:
        """Yield PlanEvents as they happen; run_end is always last and carries the PlanResult.
        Closing the generator early stops every run and removes the worktrees."""
        restored: PlanState | None = None
        if resume is not None:
            restored = read_state(resume)
            prompt, cwd, plan = self._resumed(restored, prompt, cwd, plan, plan_only)
            allowed_write_paths = restored.request_fields.get("allowed_write_paths")
            system_prompt = restored.request_fields.get("system_prompt")
            state_dir = resume
        if cwd is None:
            raise ConfigurationError("cwd is needed (the repository to work in)", parameter="cwd")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigurationError("the prompt is empty", parameter="prompt")
        directory = Path(cwd).expanduser()
        if not directory.is_dir():
            raise ConfigurationError(f"cwd {str(directory)!r} is not a directory", parameter="cwd")
        if plan is not None:
            plan = self._check_plan(plan)
        elif self.planner is None and (self.decomposition != "none" or self.test_design != "none"
                                       or self.on_clarify is not None):
            raise ConfigurationError(
                "a planner is needed to plan (decomposition, test design, clarification): pass planner= "
                "(an AutonomousCodingAgent with mode='analysis', or a backend name), or a ready plan=",
                parameter="planner")
        run = _Run(self, prompt, directory.resolve(), plan=plan, plan_only=plan_only,
                   request_fields={"allowed_write_paths": allowed_write_paths, "system_prompt": system_prompt},
                   state_dir=Path(state_dir).expanduser() if state_dir is not None else None, restored=restored)
        worker = asyncio.create_task(run.main(), name="agenter-plan")
        try:
            while True:
                item = await run.queue.get()
                if item is _END:
                    break
                yield item
            await worker
        finally:
            if not worker.done():
                worker.cancel()
                with contextlib.suppress(BaseException):
                    await worker

    @staticmethod
    def _resumed(state: PlanState, prompt: str | None, cwd: str | Path | None, plan: Plan | None,
                 plan_only: bool) -> tuple[str, str, None]:
        """The recorded prompt and cwd; what the caller also passed must be the same."""
        if plan is not None or plan_only:
            raise ConfigurationError("resume= continues the recorded plan: plan= and plan_only= cannot be "
                                     "given with it", parameter="resume")
        if prompt is not None and prompt != state.prompt:
            raise ConfigurationError("resume=: the prompt differs from the recorded run's; leave it out to "
                                     "resume, or start a new run", parameter="prompt")
        if cwd is not None and Path(cwd).expanduser().resolve() != Path(state.cwd):
            raise ConfigurationError(f"resume=: the recorded run worked in {state.cwd!r}, not {str(cwd)!r}",
                                     parameter="cwd")
        return state.prompt, state.cwd, None

    def _check_plan(self, plan: Plan | dict[str, Any]) -> Plan:
        limit = 1 if self.decomposition == "deliverables" else self.max_depth
        try:
            data = plan.model_dump() if isinstance(plan, BaseModel) else plan
            return Plan.limited(limit).model_validate(data).as_plain()
        except ValidationError as exc:
            message, _ = describe_validation_error(exc, "plan")
            raise ConfigurationError(message, parameter="plan") from None


class _Run:
    """One plan-and-execute run: its state, its events, its phases."""

    def __init__(self, owner: PlanAndExecute, prompt: str, cwd: Path, *, plan: Plan | None, plan_only: bool,
                 request_fields: dict[str, Any], state_dir: Path | None = None, restored: PlanState | None = None):
        self.owner = owner
        self.prompt = prompt
        self.cwd = cwd
        self.plan = plan
        self.plan_only = plan_only
        self.request_fields = request_fields
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.pool = BudgetPool(owner.budget)
        self.result = PlanResult(status=CodingStatus.ERROR, plan_only=plan_only)
        self.reports: dict[str, TaskReport] = {}
        self.changed: set[str] = set()
        secrets = [*owner.executor.options.secrets(), *(owner.planner.options.secrets() if owner.planner else [])]
        self.redact = Redactor(extra=secrets)
        self.state_dir = state_dir
        self.restored = restored
        self.approved = False
        self.execution: Execution | None = None
        self.workspaces: GitWorkspaces | InPlaceWorkspaces | None = None
        self.applied = False
        self.started = time.monotonic() - (restored.elapsed_seconds if restored else 0.0)
        if restored is not None:
            self.pool.spent = restored.spent
            self.pool.started = self.started
            self.applied = restored.applied

    def save(self, ended: bool = False) -> None:
        """Write the run's state (planner/state.py); nothing without a state folder."""
        if self.state_dir is None:
            return
        execution, workspaces = self.execution, self.workspaces
        git = None
        if isinstance(workspaces, GitWorkspaces) and workspaces.base:
            git = GitState(kind=workspaces.kind, base=workspaces.base, head=workspaces.head,
                           scratch=workspaces.scratch,
                           store=str(workspaces.store) if workspaces.kind == "copy" and workspaces.store else None)
        elif self.restored is not None and self.restored.git is not None and execution is None:
            git = self.restored.git  # not set up again yet
        state = PlanState(status="ended" if ended else "running", prompt=self.prompt, cwd=str(self.cwd),
                          request_fields=self.request_fields, approved=self.approved, plan=self.plan,
                          result=self.result, git=git, applied=self.applied, spent=self.pool.spent,
                          elapsed_seconds=round(time.monotonic() - self.started, 3))
        if execution is not None:
            state.tasks = dict(execution.state)
            state.commits = dict(execution.commits)
            state.runs = list(execution.runs)
            state.budget_stop, state.budget_limit = execution.budget_stop, execution.budget_limit
            state.budget_hit = list(execution.budget_hit)
        elif self.restored is not None:
            state.tasks, state.commits, state.runs = self.restored.tasks, self.restored.commits, self.restored.runs
        write_state(self.state_dir, state)

    def emit(self, event: PlanEvent) -> None:
        if event.event is None:  # forwarded CodingEvents were redacted by their session
            redacted = self.redact.data(event.data)
            assert isinstance(redacted, dict)
            event.data = redacted
        self.queue.put_nowait(event)

    def record(self, phase: str, result: CodingResult) -> None:
        """Count a run's usage in its phase and in the totals (the pool counts it for the budget)."""
        self.result.phases.setdefault(phase, PhaseUsage()).add(result)
        self.result.add_usage(_usage(result))

    async def main(self) -> None:
        ended = False
        try:
            self.emit(PlanEvent(type=PlanEventType.RUN_START, phase=Phase.PLANNING, data={
                "prompt": self.prompt, "cwd": str(self.cwd), "budget": self.owner.budget.model_dump(),
                "parallel": self.owner.parallel, "decomposition": self.owner.decomposition,
                "test_design": self.owner.test_design,
                "state_dir": str(self.state_dir) if self.state_dir else None,
                "resumed": self.restored is not None}))
            if self.restored is not None and self.restored.status == "ended":
                self.result = self.restored.result  # it had ended: nothing is run again
                self.plan = self.result.plan
                return
            await self._phases()
            ended = True
        except PlannerStopped as stop:
            self._finish(stop.status, str(stop), stop.exceeded)
            ended = True
        except asyncio.CancelledError:
            self._finish(CodingStatus.ERROR, "the run was cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - reported truthfully, never hidden
            self._finish(CodingStatus.ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self.result.duration_seconds = round(time.monotonic() - self.started, 3)
            for report in self.result.tasks:
                report.roll_up()
            with contextlib.suppress(Exception):
                self.result.files = await asyncio.to_thread(self._read_files)
            self.result.error = self.redact(self.result.error) if self.result.error else None
            end = PlanEvent(type=PlanEventType.RUN_END, phase=Phase.REPORTING, data={
                "status": self.result.status.value, "tokens": self.result.total_tokens,
                "cost": self.result.total_cost_usd, "duration": self.result.duration_seconds,
                "summary": self.result.summary(), "result": self.result.model_dump(mode="json")})
            end._result = self.result
            # A run that ended is written as ended; one cancelled or stopped by an error of ours
            # stays resumable (its state as of its last step).
            with contextlib.suppress(Exception):
                if ended:
                    self.save(ended=True)
                    if self.state_dir is not None:
                        await asyncio.to_thread(shutil.rmtree, self.state_dir / "store", True)
            self.emit(end)
            self.queue.put_nowait(_END)

    def _finish(self, status: CodingStatus, error: str | None = None, exceeded: str | None = None) -> None:
        self.result.status = status
        self.result.error = error
        self.result.exceeded_limit = exceeded

    # ------------------------------------------------------------------ phases
    async def _phases(self) -> None:
        owner = self.owner
        steps = None
        if owner.planner is not None:
            steps = PlanningSteps(owner.planner, cwd=self.cwd, pool=self.pool, emit=self.emit, record=self.record,
                                  max_attempts=owner.max_plan_attempts,
                                  system_prompt=self.request_fields.get("system_prompt"))
        task = self.prompt
        plan = self.plan
        restored = self.restored
        if restored is not None and restored.plan is not None:
            self._restore_plan(restored)
            if not restored.approved and not await self._approve():
                return
            self.approved = True
            self.save()
            await self._execute()
            return
        if plan is None:
            if owner.on_clarify is not None and steps is not None:
                task = await self._clarify(steps, task)
            if steps is None:
                plan = Plan(root_task_description=task, tasks=[PlanTask(id="1", description=task)])
            else:
                plan = await steps.plan(task, owner.decomposition, owner.max_depth, owner.test_design)
                if owner.test_design != "none":
                    plan = await steps.design_tests(plan, owner.test_design)
        self._set_plan(plan, edited=False)
        if self.plan_only:
            self._finish(CodingStatus.COMPLETED)
            return
        self.save()
        if not await self._approve():
            return
        self.approved = True
        self.save()
        await self._execute()

    def _restore_plan(self, restored: PlanState) -> None:
        """The recorded plan and reports, as the killed run left them."""
        assert restored.plan is not None
        self.plan = restored.plan
        self.result = restored.result
        self.result.status, self.result.error, self.result.exceeded_limit = CodingStatus.ERROR, None, None
        self.reports = {report.id: report for report in self.result.walk()}
        self.emit(PlanEvent(type=PlanEventType.PLAN_CREATED, phase=Phase.PLANNING, data={
            "plan": self.plan.model_dump(mode="json"), "atomic_tasks": len(atomic_tasks(self.plan.tasks)),
            "order": execution_order(self.plan.tasks), "edited": False, "resumed": True}))

    async def _clarify(self, steps: PlanningSteps, task: str) -> str:
        questions = await steps.clarify(task)
        if not questions:
            return task
        answers = await _maybe_await(self.owner.on_clarify(list(questions)))  # type: ignore[misc]
        pairs = _pair_answers(questions, answers)
        self.result.clarifications = [{"question": q, "answer": a} for q, a in pairs]
        self.emit(PlanEvent(type=PlanEventType.CLARIFICATION, phase=Phase.CLARIFICATION,
                            data={"clarifications": self.result.clarifications}))
        if not any(a for _, a in pairs):
            return task
        return task + "\n\nClarifications from the user:\n" + "\n".join(
            f"- Q: {q}\n  A: {a or '(no answer)'}" for q, a in pairs)

    def _set_plan(self, plan: Plan, *, edited: bool) -> None:
        self.plan = plan
        self.result.plan = plan
        self.reports = {}
        self.result.tasks = [self._report(task, 1) for task in plan.tasks]
        self.emit(PlanEvent(type=PlanEventType.PLAN_CREATED, phase=Phase.PLANNING, data={
            "plan": plan.model_dump(mode="json"), "atomic_tasks": len(atomic_tasks(plan.tasks)),
            "order": execution_order(plan.tasks), "edited": edited}))

    def _report(self, task: PlanTask, depth: int) -> TaskReport:
        report = TaskReport(id=task.id, description=task.description, depth=depth, is_atomic=not task.sub_tasks,
                            sub_tasks=[self._report(sub, depth + 1) for sub in task.sub_tasks])
        self.reports[task.id] = report
        return report

    async def _approve(self) -> bool:
        owner = self.owner
        assert self.plan is not None
        if owner.on_approval is None or owner.auto_approve:
            self.emit(PlanEvent(type=PlanEventType.APPROVAL, phase=Phase.APPROVAL,
                                data={"approved": True, "automatic": True}))
            return True
        decision = await _maybe_await(owner.on_approval(self.plan.model_copy(deep=True)))
        if isinstance(decision, Plan | dict) and not isinstance(decision, bool):
            try:
                edited = owner._check_plan(decision)
            except ConfigurationError as exc:
                self._finish(CodingStatus.FAILED, f"the edited plan is invalid: {exc}")
                return False
            self._set_plan(edited, edited=True)
            self.emit(PlanEvent(type=PlanEventType.APPROVAL, phase=Phase.APPROVAL,
                                data={"approved": True, "edited": True}))
            return True
        approved = decision is True or decision is None
        self.emit(PlanEvent(type=PlanEventType.APPROVAL, phase=Phase.APPROVAL, data={"approved": approved}))
        if not approved:
            self._finish(CodingStatus.FAILED, "the plan was rejected at approval; nothing was run")
        return approved

    async def _execute(self) -> None:
        owner = self.owner
        assert self.plan is not None
        plan = self.plan
        restored = self.restored
        isolated = owner.isolated if restored is None or restored.git is None else True
        store = self.state_dir / "store" if self.state_dir is not None else None
        workspaces = GitWorkspaces(self.cwd, store=store) if isolated else InPlaceWorkspaces(self.cwd)
        runner = TaskRunner(owner.executor, plan=plan, pool=self.pool, emit=self.emit,
                            test_timeout=owner.test_timeout, request_fields=self.request_fields)
        execution = Execution(plan, self.reports, runner, workspaces, parallel=owner.parallel, pool=self.pool,
                              emit=self.emit, checkpoint=self.save)
        if restored is not None:
            execution.restore(restored.tasks, restored.commits, restored.runs)
            execution.budget_stop, execution.budget_limit = restored.budget_stop, restored.budget_limit
            execution.budget_hit = list(restored.budget_hit)
        self.workspaces, self.execution = workspaces, execution
        try:
            if isinstance(workspaces, GitWorkspaces) and restored is not None and restored.git is not None:
                git = restored.git
                await workspaces.resume(git.kind, git.base, git.head, git.scratch)
            else:
                await workspaces.setup()
            self.save()
            self.result.workspaces = workspaces.kind
            await execution.run()
            if isinstance(workspaces, GitWorkspaces) and not self.applied:
                # All of the merged changes reach cwd or none: a cancellation waits for the copy.
                applying = asyncio.ensure_future(workspaces.apply_back())
                try:
                    changed, outside = await asyncio.shield(applying)
                except asyncio.CancelledError:
                    await asyncio.wait({applying})
                    raise
                self.changed.update(changed)
                self.applied = True
                self.save()
                if outside:
                    raise WorkspaceError("tasks changed files outside cwd, which were not copied back: "
                                         + ", ".join(outside))
        finally:
            for run in execution.runs:
                self.record("execution", run)
            execution.runs.clear()  # counted: a later state must not count them again
            await workspaces.close()
        for report in self.reports.values():
            if report.is_atomic:
                self.changed.update(report.files)
                self.changed.update(report.test_files)
        failed = [r for r in self.reports.values() if r.is_atomic and r.status is not TaskStatus.COMPLETED]
        if failed:
            for test_id, test in self._integration_tests():
                outcome = TestOutcome(description=test.description, command=test.command, task_id=test_id,
                                      output="not run: not every task completed")
                self._attach(outcome)
            ids = ", ".join(r.id for r in failed)
            if execution.budget_hit:
                why = execution.budget_stop or f"the budget stopped task(s) {', '.join(execution.budget_hit)}"
                self._finish(CodingStatus.BUDGET_EXCEEDED, f"{len(failed)} task(s) not completed ({ids}): {why}",
                             execution.budget_limit or self.pool.exhausted() or "tokens")
            else:
                self._finish(CodingStatus.FAILED, f"{len(failed)} task(s) not completed: {ids}")
            return
        await self._integrate()

    # ------------------------------------------------------------------ integration
    def _integration_tests(self) -> list[tuple[str | None, TestSpec]]:
        assert self.plan is not None
        tests: list[tuple[str | None, TestSpec]] = [(task.id, test) for task, _, _ in walk(self.plan.tasks)
                                                     for test in task.integration_tests]
        return tests + [(None, test) for test in self.plan.overall_integration_tests]

    def _attach(self, outcome: TestOutcome) -> None:
        if outcome.task_id is None:
            self.result.integration.append(outcome)
        else:
            self.reports[outcome.task_id].integration.append(outcome)

    async def _integrate(self) -> None:
        owner = self.owner
        tests = self._integration_tests()
        written = await asyncio.to_thread(write_test_files, self.cwd, [t for _, t in tests])
        self.changed.update(written)
        outcomes = await run_tests(tests, self.cwd, self._test_timeout(), self.emit)
        attempt = 0
        while any(o.passed is False for o in outcomes) and attempt < owner.max_debug_attempts:
            attempt += 1
            key = f"debug-{attempt}"
            budget = self.pool.carve(key)
            if budget is None:
                break
            runner = TaskRunner(owner.executor, plan=self.plan or Plan(root_task_description=self.prompt, tasks=[
                PlanTask(id="1", description=self.prompt)]), pool=self.pool, emit=self.emit,
                test_timeout=owner.test_timeout, request_fields=self.request_fields)
            failing = [(task_id, test) for (task_id, test), o in zip(tests, outcomes, strict=True) if o.passed is False]
            report = TaskReport(id=key, description="fix the failing integration tests", is_atomic=True)
            self.emit(PlanEvent(type=PlanEventType.TASK_START, phase=Phase.INTEGRATION, task_id=key,
                                data={"description": report.description, "attempt": attempt,
                                      "budget": budget.model_dump()}))
            run = await runner.run(key, key, _debug_prompt(self.prompt, failing, outcomes),
                                   self.cwd, [t for _, t in tests if t.command], budget, Phase.INTEGRATION)
            self.record("integration", run.result)
            report.attempts = 1
            report.result = run.result
            report.run_status = run.result.status.value
            report.iterations = run.result.iterations
            report.files = sorted(run.result.files)
            report.validation = run.validation
            report.validators = run.validators
            report.tokens, report.cost_usd = run.result.total_tokens, run.result.total_cost_usd
            report.duration_seconds = run.result.duration_seconds
            fixed = run.result.status in (CodingStatus.COMPLETED, CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED)
            report.status = TaskStatus.COMPLETED if fixed else TaskStatus.FAILED
            report.reason = None if fixed else (run.result.error or "; ".join(run.result.validation_errors[:3]))
            self.result.debug_runs.append(report)
            self.changed.update(report.files)
            self.emit(PlanEvent(type=PlanEventType.TASK_END, phase=Phase.INTEGRATION, task_id=key, data={
                "status": report.status.value, "run_status": report.run_status, "files": report.files,
                "reason": report.reason}))
            outcomes = await run_tests(tests, self.cwd, self._test_timeout(), self.emit)
        for outcome in outcomes:
            self._attach(outcome)
        failed = [o for o in outcomes if o.passed is False]
        if failed:
            self._finish(CodingStatus.FAILED, f"{len(failed)} integration test(s) failed: "
                         + "; ".join(o.description for o in failed[:5]))
        else:
            self._finish(CodingStatus.COMPLETED)

    def _test_timeout(self) -> float:
        return max(min(self.owner.test_timeout, self.pool.remaining_time()), 1.0)

    def _read_files(self) -> dict[str, str | None]:
        return {path: read_text_capped(self.cwd / path, _MAX_FILE_BYTES) for path in sorted(self.changed)}


# ---------------------------------------------------------------------------------- helpers
def _executor(executor: Any) -> AutonomousCodingAgent:
    if isinstance(executor, str):
        return AutonomousCodingAgent(backend=executor)
    if not isinstance(executor, AutonomousCodingAgent):
        raise ConfigurationError("executor must be an AutonomousCodingAgent or a backend name", parameter="executor")
    if executor.mode == "analysis":
        raise ConfigurationError("the executor must be able to change files: build it with mode='autonomous' "
                                 "or mode='patch', not 'analysis'", parameter="executor")
    return executor


def _planner(planner: Any) -> AutonomousCodingAgent | None:
    if planner is None:
        return None
    if isinstance(planner, str):
        planner = AutonomousCodingAgent(backend=planner, mode="analysis")
    if not isinstance(planner, AutonomousCodingAgent):
        raise ConfigurationError("planner must be an AutonomousCodingAgent or a backend name", parameter="planner")
    if planner.mode != "analysis":
        raise ConfigurationError("the planner only reads and answers: build it with mode='analysis'",
                                 parameter="planner")
    if not planner.capabilities.structured_output:
        raise ConfigurationError(f"the planner's backend {planner.backend_name!r} cannot return structured output",
                                 parameter="planner")
    return planner


def _choice(value: Any, valid: tuple[str, ...], name: str) -> None:
    if value not in valid:
        raise ConfigurationError(f"invalid {name} {value!r}", parameter=name, valid=list(valid))


async def _maybe_await(value: Any | Awaitable[Any]) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _pair_answers(questions: list[str], answers: Any) -> list[tuple[str, str]]:
    if isinstance(answers, dict):
        return [(q, str(answers.get(q, "") or "")) for q in questions]
    if isinstance(answers, str):
        return [(q, answers if i == 0 else "") for i, q in enumerate(questions)]
    if isinstance(answers, list | tuple):
        values = [str(a) if a is not None else "" for a in answers]
        return [(q, values[i] if i < len(values) else "") for i, q in enumerate(questions)]
    return [(q, "") for q in questions]


def _debug_prompt(task: str, failing: list[tuple[str | None, TestSpec]], outcomes: list[TestOutcome]) -> str:
    lines = ["Every task of the plan for this goal is done, but integration tests fail. Find the cause "
             "and fix the code (not the tests) so that they pass.", "", "Goal:", task, "", "Failing tests:"]
    by_command = {o.command: o for o in outcomes if o.passed is False}
    for _, test in failing:
        lines.append(f"- {test.description} (command: {test.command})")
        outcome = by_command.get(test.command)
        if outcome is not None and outcome.output:
            lines.append("  " + outcome.output.replace("\n", "\n  ")[:4000])
    return "\n".join(lines)


def _usage(result: CodingResult) -> Any:
    from agenter._types import Usage

    return Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                 cache_read_tokens=result.cache_read_tokens, cache_write_tokens=result.cache_write_tokens,
                 cost_usd=result.total_cost_usd)


