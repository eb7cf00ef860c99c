"""Plan, then execute: a planner decomposes a task, and each atomic task is one verified run.

    from agenter import AutonomousCodingAgent
    from agenter.planner import PlanAndExecute

    runner = PlanAndExecute(
        planner=AutonomousCodingAgent(backend="anthropic-sdk", model="claude-opus-4-5", mode="analysis"),
        executor=AutonomousCodingAgent(backend="claude-code"),
        decomposition="full", test_design="descriptions", parallel=4)
    result = await runner.execute("Add a CLI with three subcommands", cwd="repo")
    print(result.summary())

See docs/planning.md.
"""

from agenter.planner.events import Phase, PlanEvent, PlanEventType
from agenter.planner.plan import Clarification, Decomposition, Plan, PlanTask, TestDesign, TestSpec
from agenter.planner.report import PhaseUsage, PlanResult, TaskReport, TaskStatus, TestOutcome, ValidationRecord
from agenter.planner.run import ApprovalCallback, ClarifyCallback, PlanAndExecute
from agenter.planner.workspaces import WorkspaceError

__all__ = [
    "ApprovalCallback",
    "Clarification",
    "ClarifyCallback",
    "Decomposition",
    "Phase",
    "PhaseUsage",
    "Plan",
    "PlanAndExecute",
    "PlanEvent",
    "PlanEventType",
    "PlanResult",
    "PlanTask",
    "TaskReport",
    "TaskStatus",
    "TestDesign",
    "TestOutcome",
    "TestSpec",
    "ValidationRecord",
    "WorkspaceError",
]
