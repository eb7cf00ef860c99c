"""Task rows, batch-wide defaults and limits, and result rows: the data of a batch."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agenter._cliargs import read_text_input
from agenter._errors import ConfigurationError
from agenter._types import Budget, describe_validation_error

#: Statuses whose validators passed (the pass rate counts these).
PASSED_STATUSES = frozenset({"completed", "completed_with_limit_exceeded"})
#: A task whose run waits for a person's approval: neither passed nor failed (docs/approvals.md).
PAUSED_STATUS = "paused"
#: The answers a paused task's calls take (agent.approve's decisions).
ANSWERS = ("allow", "deny", "always")


class BatchTask(BaseModel):
    """One line of a tasks file: what to do, on which repository, with which overrides.

    `repository` is a local path (a git repository is checked out at `commit`, default HEAD; a
    plain folder is copied) or a git URL (`commit` then names what to check out, default the
    remote's HEAD). Overrides left out take the batch's defaults.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, description="Unique in the batch; the results file is keyed by it.")
    repository: str = Field(min_length=1, description="A local path or a git URL.")
    prompt: str = Field(min_length=1)
    commit: str | None = Field(default=None, description="Commit, tag or branch to check out (git only).")
    validators: list[str] | None = Field(
        default=None, description="Validator names: syntax, security, command:CMD (default: the batch's).")
    test_command: str | None = Field(default=None, description="Run as a blocking CommandValidator.")
    budget: Budget | None = Field(default=None, description="Budget fields that replace the batch's.")
    backend: str | None = None
    model: str | None = None
    options: dict[str, Any] = Field(default_factory=dict, description="Backend options (merged over the batch's).")
    system_prompt: str | None = None
    allowed_write_paths: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict, description="Copied into the result row as is.")

    @field_validator("id", "repository")
    @classmethod
    def _stripped(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @field_validator("prompt")
    @classmethod
    def _non_blank_prompt(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the prompt is empty")
        return value


@dataclass(frozen=True)
class TaskDefaults:
    """What every task gets unless its row says otherwise.

    `options` are keyword arguments of AutonomousCodingAgent for `backend` (base_url, api_key,
    ...); they apply to tasks that run on that backend, not to a task that names another one.
    `validators` takes names or validator objects (objects must be picklable for Ray).
    """

    backend: str | type[Any] = "anthropic-sdk"
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    validators: list[Any] | None = None
    test_command: str | None = None
    budget: Budget | None = None
    sandbox: bool = True
    system_prompt: str | None = None

    @property
    def backend_name(self) -> str:
        if isinstance(self.backend, str):
            return self.backend
        return str(getattr(self.backend, "name", self.backend.__name__))


@dataclass(frozen=True)
class BatchLimits:
    """One budget over the whole batch, on top of each task's own.

    No task starts once either is spent, and a task that starts gets at most what is left
    (its own budget is lowered to it, and its row says so in `capped_by_batch`).
    """

    max_cost_usd: float | None = None
    max_time_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_cost_usd", "max_time_seconds"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigurationError(f"{name} must be > 0, got {value!r}", parameter=name)


@dataclass(frozen=True)
class TaskCap:
    """What the batch still allows the task that starts now."""

    max_cost_usd: float | None = None
    max_time_seconds: float | None = None


@dataclass(frozen=True)
class RayOptions:
    """How tasks run on Ray.

    address: a cluster to join ("auto", "ray://host:10001", ...); None starts a local one.
    num_cpus: CPUs of the local cluster (default: the machine's). num_cpus_per_task and
    resources_per_task: what each task asks for, e.g. {"agent_slots": 1} for a custom resource
    that caps agents per node (a local cluster gets as many slots as the batch's concurrency).
    max_retries: attempts after a lost worker. init_kwargs: more ray.init arguments.
    """

    address: str | None = None
    num_cpus: int | None = None
    num_cpus_per_task: float = 1.0
    resources_per_task: dict[str, float] = field(default_factory=dict)
    max_retries: int = 3
    log_to_driver: bool = False
    init_kwargs: dict[str, Any] = field(default_factory=dict)


class BatchRow(BaseModel):
    """One task's outcome, one line of the results file."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: str = Field(description="A CodingStatus value; error also for a task that crashed outside its session.")
    files: list[str] = Field(default_factory=list, description="Paths the session changed, relative to its cwd.")
    diff: str = Field(default="", description="Unified diff of `files` against the checked-out commit.")
    validation: dict[str, Any] = Field(default_factory=lambda: {"passed": False, "errors": []},
                                       description="passed and errors.")
    usage: dict[str, int] = Field(default_factory=dict)
    cost_usd: float = 0.0
    duration_seconds: float = Field(default=0.0, description="The whole task: workspace, agent, diff, clean-up.")
    agent_seconds: float = Field(default=0.0, description="The coding session alone.")
    iterations: int = 0
    summary: str = ""
    error: str | None = None
    error_kind: str | None = Field(default=None, description="A BackendError kind, or workspace, config, crash, "
                                                              "worker_lost, cancelled.")
    exceeded_limit: str | None = None
    refusal_reason: str | None = None
    permission_denials: list[dict[str, Any]] = Field(default_factory=list)
    diff_error: str | None = Field(default=None, description="Why the diff is missing when the session ended.")
    capped_by_batch: list[str] = Field(default_factory=list)
    backend: str = ""
    model: str | None = None
    repository: str = ""
    commit: str | None = Field(default=None, description="The commit the workspace was checked out at.")
    workspace: str | None = Field(default=None, description="Kept workspace (keep_workspaces=True, or a paused "
                                                            "task's: where its approval continues).")
    workspace_cwd: str | None = Field(default=None, description="Where the agent worked in a paused task's "
                                                                "workspace (a subfolder for a folder of a repository).")
    resume_handle: str | None = Field(default=None, description="A paused task's handle: run_batch(approve=...) "
                                                                "or `agenter batch --approve ID` continues it.")
    pending: list[dict[str, Any]] = Field(default_factory=list, description="A paused task's waiting calls: id, "
                                          "tool, paths, command, rule, reason, needs_approval.")
    worker: dict[str, Any] = Field(default_factory=dict, description="host and pid that ran the task.")
    started_at: float = 0.0
    finished_at: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status in PASSED_STATUSES

    @property
    def paused(self) -> bool:
        return self.status == PAUSED_STATUS


class BatchInputError(ConfigurationError):
    """A tasks file or task list that cannot be run: names the lines and what is wrong."""

    def __init__(self, problems: list[str]):
        shown = problems[:10]
        more = f"\n... and {len(problems) - 10} more" if len(problems) > 10 else ""
        super().__init__("invalid tasks:\n" + "\n".join(shown) + more, parameter="tasks")
        self.problems = problems


def _task(data: Any, where: str, problems: list[str]) -> BatchTask | None:
    if isinstance(data, BatchTask):
        return data
    if not isinstance(data, dict):
        problems.append(f"{where}: a task is a JSON object, got {type(data).__name__}")
        return None
    try:
        return BatchTask.model_validate(data)
    except ValidationError as exc:
        message, _ = describe_validation_error(exc, "task")
        ident = data.get("id")
        problems.append(f"{where}{f' (id {ident!r})' if isinstance(ident, str) else ''}: {message}")
        return None


def _resolve_repository(task: BatchTask, base: Path | None) -> BatchTask:
    """Relative local paths are relative to the tasks file's folder (so a file is portable)."""
    from agenter.batch._workspace import is_git_url

    if base is None or is_git_url(task.repository) or Path(task.repository).expanduser().is_absolute():
        return task
    return task.model_copy(update={"repository": str((base / task.repository).resolve())})


def load_tasks(source: str | Path | Iterable[BatchTask | dict[str, Any]]) -> list[BatchTask]:
    """Tasks from a JSONL file (one JSON object a line, blank lines skipped) or from objects.

    Every problem is collected first, then raised as one BatchInputError naming the lines:
    unreadable JSON, unknown or invalid fields, duplicate ids. A file that cannot be read as text
    (missing, compressed, binary) is a ConfigurationError saying so.
    """
    problems: list[str] = []
    tasks: list[BatchTask] = []
    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        text = read_text_input(path, "the tasks file", parameter="tasks")
        base = path.resolve().parent
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"line {number}: not JSON ({exc.msg})")
                continue
            task = _task(data, f"line {number}", problems)
            if task is not None:
                tasks.append(_resolve_repository(task, base))
    else:
        for index, item in enumerate(source):
            task = _task(item, f"task {index}", problems)
            if task is not None:
                tasks.append(_resolve_repository(task, Path.cwd()))
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            problems.append(f"duplicate id {task.id!r}")
        seen.add(task.id)
    if problems:
        raise BatchInputError(problems)
    return tasks
