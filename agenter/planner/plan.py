"""The plan: a root task, a tree of tasks (atomic ones are executed), and the tests.

The shape is the one planners are asked to return as structured output. Every rule a plan must
follow is checked when it is validated, so a malformed plan goes back to the planner as a
schema error it can fix (the backend's structured-output tool answers with the problems).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Clarification",
    "Decomposition",
    "Plan",
    "PlanTask",
    "TaskTests",
    "TestDesign",
    "TestSpec",
    "atomic_tasks",
    "dependencies",
    "execution_order",
    "find_task",
    "plan_depth",
    "walk",
]


def _none_to_list(value: Any) -> Any:
    # Strict structured-output schemas make optional fields nullable: a model may send null.
    return [] if value is None else value


def _tests(value: Any) -> Any:
    """A test given as a plain string (the seed's shape) is its description."""
    value = _none_to_list(value)
    if isinstance(value, list):
        return [{"description": item} if isinstance(item, str) else item for item in value]
    return value


def safe_relative_path(path: str) -> str | None:
    """The problem with a path a test file would be written to, or None when it is fine."""
    pure = PurePosixPath(path)
    if not path.strip() or pure.is_absolute():
        return "must be a relative path inside the working directory"
    if ".." in pure.parts:
        return "must not contain '..'"
    if pure.parts and pure.parts[0] == ".git":
        return "must not be inside .git"
    return None


class TestSpec(BaseModel):
    """One test: what it checks, and optionally how to run it.

    A test with a `command` is executable: it becomes a CommandValidator of its task (exit code 0
    passes). `path` and `code` are a test file written before the task runs.
    """

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="ignore")

    description: str = Field(min_length=1, description="What the test checks.")
    command: str | None = Field(default=None, description="Shell command that runs it (exit code 0 passes).")
    path: str | None = Field(default=None, description="Test file to write, relative to the working directory.")
    code: str | None = Field(default=None, description="Content of the test file at `path`.")

    @model_validator(mode="after")
    def _check(self) -> TestSpec:
        if self.command is not None and not self.command.strip():
            self.command = None
        if (self.path is None) != (self.code is None):
            raise ValueError("a test file needs both path and code")
        if self.path is not None:
            problem = safe_relative_path(self.path)
            if problem:
                raise ValueError(f"test path {self.path!r} {problem}")
        return self

    @property
    def executable(self) -> bool:
        return self.command is not None


class PlanTask(BaseModel):
    """One task of the plan. Atomic tasks are executed; the others are split into sub_tasks."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, description="Unique id, e.g. '1' or '2.1'.")
    description: str = Field(min_length=1, description="What to do, precisely enough for a coder.")
    is_atomic: bool = Field(default=True, description="True when one coding run can do it.")
    sub_tasks: list[PlanTask] = Field(default_factory=list, description="The parts of a non-atomic task.")
    depends_on: list[str] = Field(
        default_factory=list, description="Ids of tasks that must be done first; tasks without are independent.")
    unit_tests: list[TestSpec] = Field(default_factory=list, description="Tests that must pass when it is done.")
    integration_tests: list[TestSpec] = Field(
        default_factory=list, description="Tests run after the whole plan, for this task's deliverable.")

    _norm_lists = field_validator("sub_tasks", "depends_on", mode="before")(_none_to_list)
    _norm_tests = field_validator("unit_tests", "integration_tests", mode="before")(_tests)

    @field_validator("id")
    @classmethod
    def _strip_id(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("the id is empty")
        return value

    @model_validator(mode="after")
    def _atomic_has_no_parts(self) -> PlanTask:
        if self.is_atomic and self.sub_tasks:
            raise ValueError(f"task {self.id!r} is atomic but has sub_tasks; set is_atomic to false or "
                             "remove the sub_tasks")
        return self


class Plan(BaseModel):
    """The plan a planner returns (see the module docstring)."""

    model_config = ConfigDict(extra="ignore")

    #: Set on the subclass a run asks for (see `limited`): deeper plans are rejected.
    depth_limit: ClassVar[int | None] = None

    root_task_description: str = Field(min_length=1, description="The whole task, as understood.")
    tasks: list[PlanTask] = Field(min_length=1, description="The top-level tasks (deliverables), in order.")
    overall_integration_tests: list[TestSpec] = Field(
        default_factory=list, description="Tests of the whole result, run after every task is done.")

    _norm_tests = field_validator("overall_integration_tests", mode="before")(_tests)

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        problems = plan_problems(self.tasks, depth_limit=type(self).depth_limit)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def limited(cls, depth_limit: int | None) -> type[Plan]:
        """A Plan class that also rejects trees deeper than `depth_limit` (the planner's output type)."""
        if depth_limit == cls.depth_limit:
            return cls
        return type("Plan", (cls,), {"depth_limit": depth_limit, "__module__": __name__,
                                     "__doc__": cls.__doc__})

    def as_plain(self) -> Plan:
        """The same plan as a plain `Plan` (not a limited subclass)."""
        if type(self) is Plan:
            return self
        return Plan.model_validate(self.model_dump())


class Decomposition(BaseModel):
    """A planner's answer when asked to split one task."""

    model_config = ConfigDict(extra="ignore")

    depth_limit: ClassVar[int | None] = None

    sub_tasks: list[PlanTask] = Field(min_length=2, description="The parts, in order.")

    @model_validator(mode="after")
    def _consistent(self) -> Decomposition:
        problems = plan_problems(self.sub_tasks, depth_limit=type(self).depth_limit)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def limited(cls, depth_limit: int | None) -> type[Decomposition]:
        return type("Decomposition", (cls,), {"depth_limit": depth_limit, "__module__": __name__,
                                              "__doc__": cls.__doc__})


class Clarification(BaseModel):
    """The planner's questions about the task (none when it is clear)."""

    questions: list[str] = Field(default_factory=list, description="Questions for the user; empty when clear.")

    _norm = field_validator("questions", mode="before")(_none_to_list)


class TaskTests(BaseModel):
    task_id: str = Field(min_length=1)
    unit_tests: list[TestSpec] = Field(default_factory=list)

    _norm = field_validator("unit_tests", mode="before")(_tests)


class TestDesign(BaseModel):
    """Tests designed for a plan: unit tests per atomic task, and the overall integration tests."""

    __test__ = False
    model_config = ConfigDict(extra="ignore")

    #: Set on the subclass a run asks for: every test must then be executable code.
    require_code: ClassVar[bool] = False
    task_ids: ClassVar[frozenset[str]] = frozenset()

    tasks: list[TaskTests] = Field(default_factory=list)
    overall_integration_tests: list[TestSpec] = Field(default_factory=list)

    _norm_tasks = field_validator("tasks", mode="before")(_none_to_list)
    _norm_tests = field_validator("overall_integration_tests", mode="before")(_tests)

    @model_validator(mode="after")
    def _consistent(self) -> TestDesign:
        cls = type(self)
        problems = []
        for entry in self.tasks:
            if cls.task_ids and entry.task_id not in cls.task_ids:
                problems.append(f"task_id {entry.task_id!r} is not an atomic task of the plan "
                                f"(they are: {', '.join(sorted(cls.task_ids))})")
        if cls.require_code:
            for where, test in self._all_tests():
                if not test.executable or test.path is None:
                    problems.append(f"{where}: test {test.description!r} needs path, code and command")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _all_tests(self) -> Iterator[tuple[str, TestSpec]]:
        for entry in self.tasks:
            for test in entry.unit_tests:
                yield f"task {entry.task_id}", test
        for test in self.overall_integration_tests:
            yield "overall integration tests", test

    @classmethod
    def limited(cls, task_ids: set[str], require_code: bool) -> type[TestDesign]:
        return type("TestDesign", (cls,), {"task_ids": frozenset(task_ids), "require_code": require_code,
                                           "__module__": __name__, "__doc__": cls.__doc__})


# --------------------------------------------------------------------------- tree helpers
def walk(tasks: list[PlanTask], depth: int = 1,
         parents: tuple[PlanTask, ...] = ()) -> Iterator[tuple[PlanTask, int, tuple[PlanTask, ...]]]:
    """Every task, depth first in plan order, with its depth (top level: 1) and its ancestors."""
    for task in tasks:
        yield task, depth, parents
        yield from walk(task.sub_tasks, depth + 1, (*parents, task))


def plan_depth(tasks: list[PlanTask]) -> int:
    return max((depth for _, depth, _ in walk(tasks)), default=0)


def find_task(tasks: list[PlanTask], task_id: str) -> PlanTask | None:
    return next((task for task, _, _ in walk(tasks) if task.id == task_id), None)


def atomic_tasks(tasks: list[PlanTask]) -> list[PlanTask]:
    """The tasks that are executed: leaves of the tree, in plan order."""
    return [task for task, _, _ in walk(tasks) if not task.sub_tasks]


def _leaves_under(task: PlanTask) -> list[str]:
    return [leaf.id for leaf in atomic_tasks([task])]


def dependencies(tasks: list[PlanTask]) -> dict[str, set[str]]:
    """For each atomic task, the atomic tasks that must be done before it: its own depends_on and
    its ancestors', a non-atomic task standing for every leaf below it."""
    by_id = {task.id: task for task, _, _ in walk(tasks)}
    result: dict[str, set[str]] = {}
    for task, _, parents in walk(tasks):
        if task.sub_tasks:
            continue
        needed: set[str] = set()
        for holder in (*parents, task):
            for dep in holder.depends_on:
                if dep in by_id:
                    needed.update(_leaves_under(by_id[dep]))
        needed.discard(task.id)
        result[task.id] = needed
    return result


def execution_order(tasks: list[PlanTask]) -> list[str]:
    """Atomic task ids in dependency order, ties broken by plan order. Raises ValueError on a cycle."""
    leaves = [task.id for task in atomic_tasks(tasks)]
    position = {task_id: index for index, task_id in enumerate(leaves)}
    deps = dependencies(tasks)
    waiting = {task_id: set(deps[task_id]) for task_id in leaves}
    users: dict[str, list[str]] = {task_id: [] for task_id in leaves}
    for task_id, needed in deps.items():
        for dep in needed:
            users[dep].append(task_id)
    ready = [(position[t], t) for t in leaves if not waiting[t]]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, task_id = heapq.heappop(ready)
        order.append(task_id)
        for user in users[task_id]:
            waiting[user].discard(task_id)
            if not waiting[user]:
                heapq.heappush(ready, (position[user], user))
    if len(order) != len(leaves):
        stuck = sorted(set(leaves) - set(order), key=position.__getitem__)
        raise ValueError(f"the dependencies of tasks {', '.join(stuck)} form a cycle")
    return order


def plan_problems(tasks: list[PlanTask], *, depth_limit: int | None = None) -> list[str]:
    """What is wrong with a task tree, in words a planner can act on (empty: nothing)."""
    problems: list[str] = []
    seen: set[str] = set()
    by_id: dict[str, tuple[PlanTask, tuple[PlanTask, ...]]] = {}
    for task, depth, parents in walk(tasks):
        if task.id in seen:
            problems.append(f"task id {task.id!r} is used more than once; ids must be unique")
        seen.add(task.id)
        by_id[task.id] = (task, parents)
        if depth_limit is not None and depth > depth_limit:
            problems.append(f"task {task.id!r} is at depth {depth}, deeper than the limit of {depth_limit}; "
                            f"make its parent {parents[-1].id!r} atomic instead")
    for task, parents in by_id.values():
        for dep in task.depends_on:
            if dep not in by_id:
                problems.append(f"task {task.id!r} depends on unknown task {dep!r}")
            elif dep == task.id:
                problems.append(f"task {task.id!r} depends on itself")
            elif any(parent.id == dep for parent in parents):
                problems.append(f"task {task.id!r} depends on its own parent {dep!r}")
            elif any(sub.id == task.id for sub, _, _ in walk(by_id[dep][0].sub_tasks)):
                problems.append(f"task {task.id!r} depends on {dep!r}, which contains it")
            elif task.sub_tasks and any(sub.id == dep for sub, _, _ in walk(task.sub_tasks)):
                problems.append(f"task {task.id!r} depends on its own sub-task {dep!r}")
    if not problems:
        try:
            execution_order(tasks)
        except ValueError as exc:
            problems.append(str(exc))
    return problems
