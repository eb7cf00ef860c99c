"""Events of a plan-and-execute run.

    run_start → [clarification] → plan_created → approval → (task_start → coding_event* →
    task_end → [merge])* → integration_result* → run_end (always last; carries the result)

The planner's and the executor's own CodingEvents are forwarded as `coding_event`, with the
phase and, for a task, its id; the CodingEvent itself is in `event`.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from agenter._events import CodingEvent

__all__ = ["PlanEvent", "PlanEventType", "Phase"]


class PlanEventType(str, Enum):
    RUN_START = "run_start"
    CLARIFICATION = "clarification"
    PLAN_CREATED = "plan_created"
    APPROVAL = "approval"
    TASK_START = "task_start"
    CODING_EVENT = "coding_event"
    TASK_END = "task_end"
    MERGE = "merge"
    INTEGRATION_RESULT = "integration_result"
    RUN_END = "run_end"


class Phase(str, Enum):
    CLARIFICATION = "clarification"
    PLANNING = "planning"
    TEST_DESIGN = "test_design"
    APPROVAL = "approval"
    EXECUTION = "execution"
    INTEGRATION = "integration"
    REPORTING = "reporting"


class PlanEvent(BaseModel):
    type: PlanEventType
    phase: Phase
    task_id: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    event: CodingEvent | None = Field(default=None, description="The forwarded CodingEvent (coding_event only).")
    timestamp: float = Field(default_factory=time.time)

    _result: Any = PrivateAttr(default=None)

    @property
    def result(self) -> Any:
        """The PlanResult carried by run_end (None on other events)."""
        if self._result is not None:
            return self._result
        data = self.data.get("result") if self.type is PlanEventType.RUN_END else None
        if not isinstance(data, dict):
            return None
        from agenter.planner.report import PlanResult

        return PlanResult.model_validate(data)

    def to_json(self) -> str:
        """One NDJSON line."""
        return self.model_dump_json()
