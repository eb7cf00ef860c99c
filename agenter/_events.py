"""Events a session emits, in this order:

SESSION_START → (ITERATION_START → BACKEND_MESSAGE* → VALIDATION_START → VALIDATION_RESULT*
→ ITERATION_END)+ → COMPLETED | FAILED | REFUSED → SESSION_END (always last).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr


class CodingEventType(str, Enum):
    SESSION_START = "session_start"
    ITERATION_START = "iteration_start"
    BACKEND_MESSAGE = "backend_message"
    VALIDATION_START = "validation_start"
    VALIDATION_RESULT = "validation_result"
    ITERATION_END = "iteration_end"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"
    SESSION_END = "session_end"


class CodingEvent(BaseModel):
    type: CodingEventType
    data: dict[str, Any] = Field(default_factory=dict)
    timestamp: float = Field(default_factory=time.time)

    _result: Any = PrivateAttr(default=None)

    @property
    def result(self) -> Any:
        """The CodingResult carried by SESSION_END (None on other events): the raw result when the
        event comes straight from a session, else rebuilt from the (redacted) event data."""
        if self._result is not None:
            return self._result
        data = self.data.get("result") if self.type is CodingEventType.SESSION_END else None
        if not isinstance(data, dict):
            return None
        from agenter._types import CodingResult

        return CodingResult.model_validate(data)

    def to_json(self) -> str:
        """One NDJSON line (the CLI's --json format)."""
        return self.model_dump_json()
