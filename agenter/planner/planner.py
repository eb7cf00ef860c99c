"""The planner's phases: clarification, planning (with recursive decomposition), test design.

Each step is one run of the planner agent in analysis mode with a pydantic output type, so any
backend with structured output can plan. A plan that breaks a rule is rejected by the output
type itself and the backend sends the problems back to the model; a run that still ends without
a valid answer is asked again with the errors, up to `max_attempts` runs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel

from agenter._events import CodingEventType
from agenter._types import CodingRequest, CodingResult, CodingStatus
from agenter.facade.agent import AutonomousCodingAgent
from agenter.planner.budget import BudgetPool
from agenter.planner.events import Phase, PlanEvent, PlanEventType
from agenter.planner.plan import (
    Clarification,
    Decomposition,
    Plan,
    PlanTask,
    TestDesign,
    atomic_tasks,
    walk,
)

__all__ = ["Decompose", "PlannerStopped", "PlanningSteps", "TestDesignMode"]

Decompose = Literal["none", "deliverables", "full"]
TestDesignMode = Literal["none", "descriptions", "code"]
_Out = TypeVar("_Out", bound=BaseModel)

_DONE = (CodingStatus.COMPLETED, CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED)
_READ_ONLY = ("Read what you need in the working directory, but change nothing: only plan. Return your "
              "answer as the structured output you are asked for.")


class PlannerStopped(Exception):
    """A planner run ended without an answer: its status says why (error, budget, refusal, failed)."""

    def __init__(self, status: CodingStatus, message: str, exceeded: str | None = None):
        super().__init__(message)
        self.status = status
        self.exceeded = exceeded


class PlanningSteps:
    """Runs the planner agent for one plan-and-execute run; every run's result is recorded."""

    def __init__(self, agent: AutonomousCodingAgent, *, cwd: Path, pool: BudgetPool,
                 emit: Callable[[PlanEvent], None], record: Callable[[str, CodingResult], None],
                 max_attempts: int = 2, system_prompt: str | None = None):
        self.agent = agent
        self.cwd = cwd
        self.pool = pool
        self.emit = emit
        self.record = record
        self.max_attempts = max_attempts
        self.system_prompt = system_prompt
        self._runs = 0

    # ------------------------------------------------------------------ phases
    async def clarify(self, task: str) -> list[str]:
        prompt = "\n".join([
            "Before this coding task is planned, decide whether it is clear enough to plan.", _READ_ONLY, "",
            "Task:", task, "",
            "Return the questions you need the user to answer (at most 5), only about what you cannot "
            "decide yourself from the task and the repository. Return no questions when the task is clear.",
        ])
        answer = await self._ask(prompt, Clarification, Phase.CLARIFICATION)
        return [q.strip() for q in answer.questions if q.strip()][:5]

    async def plan(self, task: str, mode: Decompose, max_depth: int, test_design: TestDesignMode) -> Plan:
        """The plan for `task`; non-atomic tasks without sub-tasks are split by further runs."""
        if mode == "none":
            return Plan(root_task_description=task, tasks=[PlanTask(id="1", description=task)])
        limit = 1 if mode == "deliverables" else max_depth
        prompt = _plan_prompt(task, mode, limit, test_design)
        plan = (await self._ask(prompt, Plan.limited(limit), Phase.PLANNING)).as_plain()
        if mode == "deliverables":
            for top in plan.tasks:
                top.is_atomic = True
            return plan
        await self._decompose(plan, plan.tasks, 1, limit, ())
        return Plan.model_validate(plan.model_dump())  # the whole tree checked once more

    async def design_tests(self, plan: Plan, mode: TestDesignMode) -> Plan:
        """Unit tests for every atomic task and overall integration tests, added to the plan."""
        leaves = {task.id for task in atomic_tasks(plan.tasks)}
        prompt = _test_prompt(plan, mode, leaves)
        design = await self._ask(prompt, TestDesign.limited(leaves, mode == "code"), Phase.TEST_DESIGN)
        by_id = {task.id: task for task, _, _ in walk(plan.tasks)}
        for entry in design.tasks:
            by_id[entry.task_id].unit_tests.extend(entry.unit_tests)
        plan.overall_integration_tests.extend(design.overall_integration_tests)
        return Plan.model_validate(plan.model_dump())

    # ------------------------------------------------------------------ internals
    async def _decompose(self, plan: Plan, tasks: list[PlanTask], depth: int, limit: int,
                         parents: tuple[PlanTask, ...]) -> None:
        for task in tasks:
            if task.sub_tasks:
                await self._decompose(plan, task.sub_tasks, depth + 1, limit, (*parents, task))
                continue
            if task.is_atomic:
                continue
            if depth >= limit:
                task.is_atomic = True  # the depth limit: this task is done in one run
                continue
            prompt = _decompose_prompt(plan, task, parents, limit - depth)
            answer = await self._ask(prompt, Decomposition.limited(limit - depth), Phase.PLANNING)
            task.sub_tasks = _renamed(answer.sub_tasks, task.id, {t.id for t, _, _ in walk(plan.tasks)})
            task.is_atomic = False
            await self._decompose(plan, task.sub_tasks, depth + 1, limit, (*parents, task))

    async def _ask(self, prompt: str, output_type: type[_Out], phase: Phase) -> _Out:
        """One planner answer of `output_type`, asking again with the errors when a run ends without it."""
        problems = ""
        for attempt in range(1, self.max_attempts + 1):
            self._runs += 1
            key = f"planner-{self._runs}"
            budget = self.pool.carve(key)
            if budget is None:
                limit = self.pool.exhausted() or "tokens"
                raise PlannerStopped(CodingStatus.BUDGET_EXCEEDED, self.pool.describe(limit), limit)
            text = prompt if not problems else (
                f"{prompt}\n\nYour previous answer was not accepted:\n{problems}\nReturn a corrected answer.")
            request = CodingRequest(prompt=text, cwd=self.cwd, budget=budget, output_type=output_type,
                                    require_changes=False, system_prompt=self.system_prompt)
            result: CodingResult | None = None
            try:
                events = self.agent.stream_execute(request)
                async with contextlib.aclosing(events):
                    async for event in events:
                        self.emit(PlanEvent(type=PlanEventType.CODING_EVENT, phase=phase,
                                            data={"attempt": attempt}, event=event))
                        if event.type is CodingEventType.SESSION_END:
                            result = event.result
            finally:
                self.pool.settle(key, result)
            assert result is not None
            self.record(phase.value, result)
            if result.status in _DONE and isinstance(result.output, output_type):
                return result.output
            if result.status in (CodingStatus.ERROR, CodingStatus.BUDGET_EXCEEDED, CodingStatus.REFUSED):
                reason = result.error or result.refusal_reason or result.status.value
                raise PlannerStopped(result.status, f"the planner stopped ({phase.value}): {reason}",
                                     result.exceeded_limit)
            problems = "\n".join(f"- {e}" for e in (result.validation_errors or [result.error or "no answer"]))
        raise PlannerStopped(CodingStatus.FAILED,
                             f"the planner gave no valid {output_type.__name__} in {self.max_attempts} run(s) "
                             f"({phase.value}): {problems.strip()}")


def _renamed(sub_tasks: list[PlanTask], parent_id: str, taken: set[str]) -> list[PlanTask]:
    """Sub-task ids made unique in the plan: 'parent.local' (depends_on follows)."""
    mapping: dict[str, str] = {}
    for task, _, _ in walk(sub_tasks):
        new = task.id if task.id.startswith(f"{parent_id}.") else f"{parent_id}.{task.id}"
        while new in taken or new in mapping.values():
            new += "'"
        mapping[task.id] = new
    for task, _, _ in walk(sub_tasks):
        task.id = mapping[task.id]
        task.depends_on = [mapping.get(dep, dep) for dep in task.depends_on]
    return sub_tasks


def _test_rules(test_design: TestDesignMode) -> str:
    if test_design != "none":
        return "- Leave unit_tests and integration tests empty: tests are designed in a later step."
    return ("- unit_tests: what must hold when an atomic task is done. Give a test a `command` (a shell "
            "command run in the working directory; exit code 0 passes) when one can check it; it then "
            "decides whether the task is done.\n"
            "- overall_integration_tests: tests of the whole result, run after every task is done.")


def _plan_prompt(task: str, mode: Decompose, limit: int, test_design: TestDesignMode) -> str:
    if mode == "deliverables":
        shape = ("- List the deliverables as top-level tasks. Each is done by one coding run: is_atomic true, "
                 "no sub_tasks.")
    else:
        shape = (f"- Split the work into deliverables (top-level tasks). A task one coding run can do is "
                 f"atomic. A larger one has is_atomic false and sub_tasks; the tree has at most {limit} "
                 f"levels. You may leave a non-atomic task's sub_tasks empty: it is split in a later step.")
    return "\n".join([
        "Plan this coding task before any code is written.", _READ_ONLY, "",
        "Task:", task, "",
        "Rules:",
        shape,
        "- Give every task a unique id ('1', '2', ...; '1.1', '1.2' for sub-tasks) and a description a "
        "coder can act on alone: name the files, functions and behaviour. The coder sees only the overall "
        "task, its own task and what was done before it.",
        "- Tasks are independent unless depends_on lists the ids that must be done first. Independent "
        "tasks may run at the same time in separate copies of the repository, so two independent tasks "
        "should not edit the same file.",
        _test_rules(test_design),
    ])


def _decompose_prompt(plan: Plan, task: PlanTask, parents: tuple[PlanTask, ...], levels: int) -> str:
    lines = ["Split one task of a coding plan into sub-tasks.", _READ_ONLY, "",
             "Overall task:", plan.root_task_description, ""]
    if parents:
        lines += ["Part of: " + " > ".join(f"{p.id} {p.description}" for p in parents)]
    lines += [f"Task to split ({task.id}): {task.description}", "",
              "Rules:",
              "- Two or more sub_tasks, in order, that together do the task and nothing else.",
              "- Ids are local ('1', '2', ...); depends_on names sibling sub-task ids.",
              ("- Each sub-task is atomic (one coding run)." if levels <= 1 else
               f"- A sub-task too large for one coding run may be non-atomic, {levels - 1} more level(s) at most."),
              "- Independent sub-tasks may run at the same time: they should not edit the same file."]
    return "\n".join(lines)


def _test_prompt(plan: Plan, mode: TestDesignMode, leaves: set[str]) -> str:
    if mode == "code":
        how = ("Every test is executable: `path` (a new test file, relative to the working directory), "
               "`code` (its whole content) and `command` (a shell command run in the working directory "
               "that runs it; exit code 0 passes). The files are written before the coder starts, and the "
               "coder must make them pass, so test behaviour, not implementation details.")
    else:
        how = ("Each test has a description of what must hold, and a `command` (a shell command run in "
               "the working directory; exit code 0 passes) when one can check it.")
    return "\n".join([
        "Design the tests for this coding plan.", _READ_ONLY, "",
        "Plan:", json.dumps(plan.model_dump(mode="json"), indent=1), "",
        f"Give unit tests for each atomic task (ids: {', '.join(sorted(leaves))}) that show it is done, "
        "and overall integration tests for the whole result.", how,
    ])

