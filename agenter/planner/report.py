"""The report of a plan-and-execute run: a tree of tasks with status, files, validation, usage
and cost, as data (PlanResult) and as a readable summary (PlanResult.summary())."""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from agenter._types import CodingResult, CodingStatus, Usage
from agenter.planner.plan import Plan

__all__ = ["PhaseUsage", "PlanResult", "TaskReport", "TaskStatus", "TestOutcome", "ValidationRecord"]


class TaskStatus(str, Enum):
    PENDING = "pending"        # not run (plan_only, or the run stopped before it)
    COMPLETED = "completed"    # its run completed (and, with worktrees, merged)
    FAILED = "failed"          # its run did not complete; `reason` says why
    SKIPPED = "skipped"        # not started: a dependency failed or the budget was spent


class ValidationRecord(BaseModel):
    """One validator's verdict on a task's last iteration."""

    validator: str
    passed: bool
    errors: list[str] = Field(default_factory=list)
    skipped: bool = False


class TestOutcome(BaseModel):
    """One integration test: passed, failed, or not run (a description without a command)."""

    __test__ = False

    description: str
    command: str | None = None
    task_id: str | None = Field(default=None, description="The task whose integration test it is; None: overall.")
    passed: bool | None = None
    output: str = ""


class PhaseUsage(BaseModel):
    runs: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    duration_seconds: float = 0.0

    def add(self, result: CodingResult) -> None:
        self.runs += 1
        self.tokens += result.total_tokens
        self.cost_usd = round(self.cost_usd + result.total_cost_usd, 6)
        self.duration_seconds = round(self.duration_seconds + result.duration_seconds, 3)


class TaskReport(BaseModel):
    """One task of the plan and what became of it. Non-atomic tasks report their sub_tasks."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    description: str
    depth: int = 1
    is_atomic: bool = True
    status: TaskStatus = TaskStatus.PENDING
    reason: str | None = None
    run_status: str | None = Field(default=None, description="CodingStatus of its (last) run.")
    attempts: int = 0
    iterations: int = 0
    files: list[str] = Field(default_factory=list, description="Files its run changed.")
    test_files: list[str] = Field(default_factory=list, description="Test files written before it ran.")
    validators: list[str] = Field(default_factory=list, description="Validators its run had.")
    validation: list[ValidationRecord] = Field(default_factory=list, description="Its last iteration's verdicts.")
    merge: str | None = Field(default=None, description="With worktrees: how its changes came back.")
    tokens: int = 0
    cost_usd: float = 0.0
    duration_seconds: float = 0.0
    result: CodingResult | None = None
    integration: list[TestOutcome] = Field(default_factory=list)
    sub_tasks: list[TaskReport] = Field(default_factory=list)

    def walk(self) -> Iterator[TaskReport]:
        yield self
        for sub in self.sub_tasks:
            yield from sub.walk()

    def roll_up(self) -> None:
        """A non-atomic task's status, files and usage from its sub-tasks."""
        if self.is_atomic or not self.sub_tasks:
            return
        for sub in self.sub_tasks:
            sub.roll_up()
        statuses = {sub.status for sub in self.sub_tasks}
        if statuses == {TaskStatus.COMPLETED}:
            self.status = TaskStatus.COMPLETED
        elif statuses == {TaskStatus.PENDING}:
            self.status = TaskStatus.PENDING
        elif TaskStatus.FAILED in statuses or TaskStatus.SKIPPED in statuses:
            self.status = TaskStatus.FAILED
            done = sum(sub.status is TaskStatus.COMPLETED for sub in self.sub_tasks)
            self.reason = f"{done} of {len(self.sub_tasks)} sub-tasks completed"
        else:
            self.status = TaskStatus.PENDING
        self.files = sorted({f for sub in self.sub_tasks for f in sub.files})
        self.tokens = sum(sub.tokens for sub in self.sub_tasks)
        self.cost_usd = round(sum(sub.cost_usd for sub in self.sub_tasks), 6)
        self.duration_seconds = round(sum(sub.duration_seconds for sub in self.sub_tasks), 3)


class PlanResult(BaseModel):
    """The truthful outcome of a plan-and-execute run.

    COMPLETED only when every task completed and every integration test passed; otherwise the
    status says what stopped it (FAILED, BUDGET_EXCEEDED, REFUSED, ERROR) and `tasks` shows which
    parts were done.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    status: CodingStatus
    plan: Plan | None = None
    plan_only: bool = False
    tasks: list[TaskReport] = Field(default_factory=list)
    integration: list[TestOutcome] = Field(default_factory=list, description="Overall integration tests.")
    debug_runs: list[TaskReport] = Field(default_factory=list, description="Debugging runs after failed tests.")
    clarifications: list[dict[str, str]] = Field(default_factory=list)
    files: dict[str, str | None] = Field(default_factory=dict, description="Changed files in cwd -> content.")
    phases: dict[str, PhaseUsage] = Field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    total_cost_usd: float = 0.0
    duration_seconds: float = 0.0
    error: str | None = None
    exceeded_limit: str | None = None
    workspaces: str = Field(default="inplace", description="inplace, worktree or copy.")

    @property
    def ok(self) -> bool:
        return self.status is CodingStatus.COMPLETED

    def walk(self) -> Iterator[TaskReport]:
        """Every task report, depth first in plan order."""
        for task in self.tasks:
            yield from task.walk()

    def task(self, task_id: str) -> TaskReport:
        for report in self.walk():
            if report.id == task_id:
                return report
        raise KeyError(task_id)

    def add_usage(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.total_tokens = (self.input_tokens + self.output_tokens + self.cache_read_tokens
                             + self.cache_write_tokens)
        self.total_cost_usd = round(self.total_cost_usd + usage.cost_usd, 6)

    def summary(self) -> str:
        """A readable report: the status, the task tree, the tests, usage and cost."""
        lines = [f"{self.status.value.upper()}"
                 + (" (plan only)" if self.plan_only else "")
                 + f" - {self.total_tokens} tokens, ${self.total_cost_usd:.4f}, {self.duration_seconds:.1f} s"]
        if self.error:
            lines.append(f"  {self.error}")
        if self.plan is not None:
            lines.append(f"Task: {_short(self.plan.root_task_description, 100)}")
        for task in self.tasks:
            _task_lines(task, lines)
        tests = [*(t for report in self.walk() for t in report.integration), *self.integration]
        if tests:
            lines.append("Integration tests:")
            for test in tests:
                mark = {True: "passed", False: "FAILED", None: "not run"}[test.passed]
                owner = f" [{test.task_id}]" if test.task_id else ""
                lines.append(f"  {mark:8} {_short(test.description, 70)}{owner}"
                             + (f"  ({test.command})" if test.command else ""))
        for run in self.debug_runs:
            lines.append(f"Debugging run: {run.status.value}" + (f" - {run.reason}" if run.reason else "")
                         + (f"; files: {', '.join(run.files)}" if run.files else ""))
        if self.phases:
            lines.append("Usage: " + ", ".join(
                f"{name} {phase.tokens} tok ${phase.cost_usd:.4f}" for name, phase in self.phases.items()
                if phase.runs))
        if self.files:
            lines.append(f"Files changed: {', '.join(sorted(self.files))}")
        return "\n".join(lines)

    def to_coding_result(self) -> CodingResult:
        """The run as one CodingResult (for code that expects a single run's result)."""
        errors = [f"task {t.id}: {t.reason}" for t in self.walk()
                  if t.is_atomic and t.status in (TaskStatus.FAILED, TaskStatus.SKIPPED) and t.reason]
        errors += [f"integration test failed: {t.description}" for t in self._all_integration() if t.passed is False]
        return CodingResult(
            status=self.status, files=dict(self.files), summary=self.summary(),
            iterations=sum(t.iterations for t in self.walk() if t.is_atomic),
            input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read_tokens, cache_write_tokens=self.cache_write_tokens,
            total_tokens=self.total_tokens, total_cost_usd=self.total_cost_usd,
            duration_seconds=self.duration_seconds, output=self.plan, error=self.error,
            exceeded_limit=self.exceeded_limit, validation_errors=errors, backend="planner")

    def _all_integration(self) -> list[TestOutcome]:
        return [*(t for report in self.walk() for t in report.integration), *self.integration]


_MARKS = {TaskStatus.COMPLETED: "[x]", TaskStatus.FAILED: "[!]", TaskStatus.SKIPPED: "[-]",
          TaskStatus.PENDING: "[ ]"}


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _task_lines(task: TaskReport, lines: list[str]) -> None:
    indent = "  " * task.depth
    head = f"{indent}{_MARKS[task.status]} {task.id} {_short(task.description, 70)}"
    details: list[str] = []
    if task.is_atomic and task.attempts:
        details.append(f"{task.run_status or task.status.value}")
        if task.attempts > 1:
            details.append(f"{task.attempts} runs")
        if task.validation:
            passed = sum(v.passed for v in task.validation if not v.skipped)
            ran = sum(not v.skipped for v in task.validation)
            details.append(f"validators {passed}/{ran} passed")
        details.append(f"{task.tokens} tok, ${task.cost_usd:.4f}")
    if details:
        head += "  (" + "; ".join(details) + ")"
    lines.append(head)
    if task.reason and task.status is not TaskStatus.COMPLETED:
        lines.append(f"{indent}    {_short(task.reason, 160)}")
    if task.is_atomic and task.files:
        lines.append(f"{indent}    files: {', '.join(task.files)}")
    if task.merge and task.merge != "merged":
        lines.append(f"{indent}    merge: {task.merge}")
    for sub in task.sub_tasks:
        _task_lines(sub, lines)
