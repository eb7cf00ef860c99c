"""Batch runs: many tasks, each in a workspace of its own, one result row per task.

    from agenter.batch import TaskDefaults, run_batch

    summary = await run_batch("tasks.jsonl", "results.jsonl", concurrency=8,
                              defaults=TaskDefaults(backend="anthropic-sdk", test_command="pytest -q"))

Rows are appended to the results file as tasks end; running again with the same file skips the
ids that already have a row, so an interrupted batch resumes. `engine="ray"` runs each task as a
Ray task (extra `agenter-sdk[ray]`). A task whose run pauses for approval (on_ask="pause") gets
a row with status "paused" and keeps its workspace; `run_batch(..., approve={task_id: "allow"})`
continues it there later. See docs/batch.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Loaded on first use: `agenter batch --help` and the CLI's parser import agenter.batch.cli,
# which must not pull in pydantic and the facade.
_EXPORTS: dict[str, str] = {
    "run_batch": "_engine", "run_batch_sync": "_engine", "LocalExecutor": "_engine",
    "PASSED_STATUSES": "_models", "BatchInputError": "_models", "BatchLimits": "_models",
    "BatchRow": "_models", "BatchTask": "_models", "RayOptions": "_models", "TaskCap": "_models",
    "TaskDefaults": "_models", "load_tasks": "_models",
    "ResultsFile": "_results", "read_rows": "_results",
    "RunSettings": "_runner", "run_task": "_runner", "approve_task": "_runner", "PAUSED_STATUS": "_models",
    "BatchSummary": "_summary",
    "Workspace": "_workspace", "WorkspaceError": "_workspace", "create_workspace": "_workspace",
    "tree_diff": "_workspace",
    "BatchProgress": "progress", "RichProgress": "progress",
    "export_swebench": "swebench", "predictions": "swebench",
}

__all__ = ["PAUSED_STATUS", "approve_task", "BatchInputError", "BatchLimits", "BatchProgress", "BatchRow", "BatchSummary", "BatchTask",
    "LocalExecutor", "PASSED_STATUSES", "RayOptions", "ResultsFile", "RichProgress", "RunSettings",
    "TaskCap", "TaskDefaults", "Workspace", "WorkspaceError", "create_workspace", "export_swebench",
    "load_tasks", "predictions", "read_rows", "run_batch", "run_batch_sync", "run_task", "tree_diff"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agenter.batch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agenter.batch.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from agenter.batch._engine import LocalExecutor as LocalExecutor
    from agenter.batch._engine import run_batch as run_batch
    from agenter.batch._engine import run_batch_sync as run_batch_sync
    from agenter.batch._models import PASSED_STATUSES as PASSED_STATUSES
    from agenter.batch._models import PAUSED_STATUS as PAUSED_STATUS
    from agenter.batch._models import BatchInputError as BatchInputError
    from agenter.batch._models import BatchLimits as BatchLimits
    from agenter.batch._models import BatchRow as BatchRow
    from agenter.batch._models import BatchTask as BatchTask
    from agenter.batch._models import RayOptions as RayOptions
    from agenter.batch._models import TaskCap as TaskCap
    from agenter.batch._models import TaskDefaults as TaskDefaults
    from agenter.batch._models import load_tasks as load_tasks
    from agenter.batch._results import ResultsFile as ResultsFile
    from agenter.batch._results import read_rows as read_rows
    from agenter.batch._runner import RunSettings as RunSettings
    from agenter.batch._runner import approve_task as approve_task
    from agenter.batch._runner import run_task as run_task
    from agenter.batch._summary import BatchSummary as BatchSummary
    from agenter.batch._workspace import Workspace as Workspace
    from agenter.batch._workspace import WorkspaceError as WorkspaceError
    from agenter.batch._workspace import create_workspace as create_workspace
    from agenter.batch._workspace import tree_diff as tree_diff
    from agenter.batch.progress import BatchProgress as BatchProgress
    from agenter.batch.progress import RichProgress as RichProgress
    from agenter.batch.swebench import export_swebench as export_swebench
    from agenter.batch.swebench import predictions as predictions
