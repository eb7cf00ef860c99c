"""Plan, then execute: a planner decomposes a task, and each atomic task is one verified run.

    from agenter import AutonomousCodingAgent
    from agenter.planner import PlanAndExecute

    runner = PlanAndExecute(
        planner=AutonomousCodingAgent(backend="anthropic-sdk", model="claude-opus-4-5", mode="analysis"),
        executor=AutonomousCodingAgent(backend="claude-code"),
        decomposition="full", test_design="descriptions", parallel=4)
    result = await runner.execute("Add a CLI with three subcommands", cwd="repo")
    print(result.summary())

See docs/planning.md. Names are loaded on first use, so `agenter.planner.cli` (the `agenter plan`
command's parser) imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Phase": "events", "PlanEvent": "events", "PlanEventType": "events",
    "Clarification": "plan", "Decomposition": "plan", "Plan": "plan", "PlanTask": "plan", "TestDesign": "plan",
    "TestSpec": "plan",
    "PhaseUsage": "report", "PlanResult": "report", "TaskReport": "report", "TaskStatus": "report",
    "TestOutcome": "report", "ValidationRecord": "report",
    "ApprovalCallback": "run", "ClarifyCallback": "run", "PlanAndExecute": "run",
    "WorkspaceError": "workspaces",
}

__all__ = [
    "ApprovalCallback", "Clarification", "ClarifyCallback", "Decomposition", "Phase", "PhaseUsage", "Plan",
    "PlanAndExecute", "PlanEvent", "PlanEventType", "PlanResult", "PlanTask", "TaskReport", "TaskStatus",
    "TestDesign", "TestOutcome", "TestSpec", "ValidationRecord", "WorkspaceError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agenter.planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agenter.planner.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from agenter.planner.events import Phase, PlanEvent, PlanEventType
    from agenter.planner.plan import Clarification, Decomposition, Plan, PlanTask, TestDesign, TestSpec
    from agenter.planner.report import (
        PhaseUsage,
        PlanResult,
        TaskReport,
        TaskStatus,
        TestOutcome,
        ValidationRecord,
    )
    from agenter.planner.run import ApprovalCallback, ClarifyCallback, PlanAndExecute
    from agenter.planner.workspaces import WorkspaceError
