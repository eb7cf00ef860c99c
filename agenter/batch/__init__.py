"""Batch runs: many tasks, each in a workspace of its own, one result row per task.

    from agenter.batch import TaskDefaults, run_batch

    summary = await run_batch("tasks.jsonl", "results.jsonl", concurrency=8,
                              defaults=TaskDefaults(backend="anthropic-sdk", test_command="pytest -q"))

Rows are appended to the results file as tasks end; running again with the same file skips the
ids that already have a row, so an interrupted batch resumes. `engine="ray"` runs each task as a
Ray task (extra `agenter-sdk[ray]`). See docs/batch.md.
"""

from __future__ import annotations

from agenter.batch._engine import LocalExecutor, run_batch, run_batch_sync
from agenter.batch._models import (
    PASSED_STATUSES,
    BatchInputError,
    BatchLimits,
    BatchRow,
    BatchTask,
    RayOptions,
    TaskCap,
    TaskDefaults,
    load_tasks,
)
from agenter.batch._results import ResultsFile, read_rows
from agenter.batch._runner import RunSettings, run_task
from agenter.batch._summary import BatchSummary
from agenter.batch._workspace import Workspace, WorkspaceError, create_workspace, tree_diff
from agenter.batch.progress import BatchProgress, RichProgress
from agenter.batch.swebench import export_swebench, predictions

__all__ = [
    "PASSED_STATUSES",
    "BatchInputError",
    "BatchLimits",
    "BatchProgress",
    "BatchRow",
    "BatchSummary",
    "BatchTask",
    "LocalExecutor",
    "RayOptions",
    "ResultsFile",
    "RichProgress",
    "RunSettings",
    "TaskCap",
    "TaskDefaults",
    "Workspace",
    "WorkspaceError",
    "create_workspace",
    "export_swebench",
    "load_tasks",
    "predictions",
    "read_rows",
    "run_batch",
    "run_batch_sync",
    "run_task",
    "tree_diff",
]
