"""Events a session emits, in this order:

SESSION_START → (ITERATION_START → BACKEND_MESSAGE* → VALIDATION_START → VALIDATION_RESULT*
→ ITERATION_END)+ → COMPLETED | FAILED | REFUSED | PAUSED → SESSION_END (always last).

What the agent did arrives as BACKEND_MESSAGE events; `event.kind` names it in one vocabulary
for every backend (text_delta, tool_call_started, command_finished, file_edited, ...; see
docs/observability.md), and `data["raw"]` keeps the backend's own payload where it gave one.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr


class CodingEventType(str, Enum):
    # The lifecycle: the `type` of every event.
    SESSION_START = "session_start"
    ITERATION_START = "iteration_start"
    BACKEND_MESSAGE = "backend_message"
    VALIDATION_START = "validation_start"
    VALIDATION_RESULT = "validation_result"
    ITERATION_END = "iteration_end"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"
    PAUSED = "paused"  # calls wait for a person: data holds pending (the calls) and resume_handle
    SESSION_END = "session_end"
    FALLBACK = "fallback"  # a fallback chain moved on: data holds from, to, reason, reverted, kept
    # What the agent did: the `kind` of a BACKEND_MESSAGE event.
    TEXT_DELTA = "text_delta"  # a piece of streamed text; a streamed text is not repeated whole
    TEXT = "text"  # a whole text that was not streamed
    THINKING_DELTA = "thinking_delta"
    THINKING = "thinking"
    TOOL_CALL_STARTED = "tool_call_started"
    TOOL_CALL_FINISHED = "tool_call_finished"
    COMMAND_STARTED = "command_started"  # a shell command (also a tool call)
    COMMAND_FINISHED = "command_finished"  # data["exit_code"] where the agent reports it
    FILE_EDITED = "file_edited"  # data["path"], data["lines_added"], data["lines_removed"]
    PERMISSION_DECISION = "permission_decision"
    USAGE_UPDATED = "usage_updated"  # data["usage"]: running totals of the request
    CONTEXT_COMPACTED = "context_compacted"
    ERROR = "error"  # a problem the agent reported and survived
    STATUS = "status"
    PLAN = "plan"
    STEERED = "steered"  # data["text"]: a user message that reached the running agent; data["where"]


#: The kinds a BACKEND_MESSAGE event can have.
MESSAGE_KINDS = frozenset({
    CodingEventType.TEXT_DELTA, CodingEventType.TEXT, CodingEventType.THINKING_DELTA,
    CodingEventType.THINKING, CodingEventType.TOOL_CALL_STARTED, CodingEventType.TOOL_CALL_FINISHED,
    CodingEventType.COMMAND_STARTED, CodingEventType.COMMAND_FINISHED, CodingEventType.FILE_EDITED,
    CodingEventType.PERMISSION_DECISION, CodingEventType.USAGE_UPDATED,
    CodingEventType.CONTEXT_COMPACTED, CodingEventType.ERROR, CodingEventType.STATUS, CodingEventType.PLAN,
    CodingEventType.STEERED,
})


class CodingEvent(BaseModel):
    type: CodingEventType
    data: dict[str, Any] = Field(default_factory=dict)
    timestamp: float = Field(default_factory=time.time)

    _result: Any = PrivateAttr(default=None)

    @property
    def kind(self) -> CodingEventType:
        """What happened, in one vocabulary: the lifecycle type, or for a BACKEND_MESSAGE what
        the agent did (TOOL_CALL_STARTED, TEXT_DELTA, ...)."""
        if self.type is not CodingEventType.BACKEND_MESSAGE:
            return self.type
        try:
            return CodingEventType(self.data.get("kind"))
        except ValueError:  # an event of an older agenter, or a kind this one does not know
            return CodingEventType.BACKEND_MESSAGE

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
