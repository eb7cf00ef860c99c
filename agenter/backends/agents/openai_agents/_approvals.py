"""Approvals that can wait on openai-agents (docs/approvals.md): the SDK's own pause, decided by
agenter's gate. Free of SDK imports: the SDK's approval items are read by shape.

Every function tool of the SDK's agent has a `needs_approval` check, which the SDK runs for each
call of a model response, in order, before any of them runs. The backend's check asks the gate
(`permit(call, defer=True)`): an allowed or denied call is decided there (its handler takes the
decision: the tool runs, or its result is the gate's reason); a call the gate defers "needs
approval", and so does every later call of the same response (pending without being asked, as on
agenter's own agent). The SDK then runs the calls before the deferred one and ends the run with
the others as interruptions; its `RunState` (`result.to_state()`, JSON) holds the whole run, and
a later process builds the same agent, reads the state back, approves the calls that are to run
(`state.approve`) and runs the SDK from there (`Runner.run_streamed(agent, state)`): an approved
call runs with its real result, exactly once, and the model's next request carries it.

`Approvals` is one turn's part: the decisions made before the calls ran, and the calls that wait.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agenter._types import PendingCall
from agenter.backends._pauses import pending_call
from agenter.permissions import PermissionDecision

__all__ = ["Approvals", "call_of"]


def call_of(item: Any) -> tuple[str, str, Any]:
    """(call id, tool name, arguments) of an SDK approval item (a ToolApprovalItem); arguments
    parsed when they are a JSON object, else the text as the model sent it."""
    raw = getattr(item, "raw_item", None)
    call_id = str(_field(raw, "call_id") or _field(raw, "id") or "")
    name = str(getattr(item, "tool_name", None) or _field(raw, "name") or "")
    text = _field(raw, "arguments")
    try:
        arguments = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        arguments = text
    return call_id, name, arguments


class Approvals:
    """One turn's permission decisions, made before the SDK runs the calls (taken by the tool
    handlers by call id), and the calls that wait for a person, in order."""

    def __init__(self) -> None:
        self._decided: dict[str, PermissionDecision] = {}
        self.waiting: list[PendingCall] = []

    def begin(self) -> None:
        """A new turn (or a paused one continued): nothing decided, nothing waits."""
        self._decided.clear()
        self.waiting = []

    @property
    def stopped(self) -> bool:
        """A call of the response waits: the calls after it wait too, without a question."""
        return bool(self.waiting)

    def decided(self, call_id: str, decision: PermissionDecision) -> None:
        self._decided[call_id] = decision

    def take(self, call_id: str) -> PermissionDecision | None:
        """The decision made for this call before it ran (None: none was made)."""
        return self._decided.pop(call_id, None)

    def wait(self, call: PendingCall) -> None:
        self.waiting.append(call)

    def strays(self, interruptions: Sequence[Any]) -> list[Any]:
        """The SDK's interruptions no check of agenter's made: a call whose arguments the SDK
        could not read as a JSON object (it stops at those before asking). The backend lets them
        run (their handler tells the model what is wrong)."""
        ours = {call.id for call in self.waiting}
        return [item for item in interruptions if call_of(item)[0] not in ours]

    def pending(self, interruptions: Sequence[Any]) -> list[PendingCall]:
        """The calls the SDK's run stopped before, in the order they were asked about."""
        stopped = {call_of(item)[0]: item for item in interruptions}
        known = [call for call in self.waiting if call.id in stopped]
        seen = {call.id for call in known}
        return known + [pending_call(call_id, name, arguments, needs_approval=True)
                        for call_id, name, arguments in map(call_of, stopped.values()) if call_id not in seen]


def _field(raw: Any, name: str) -> Any:
    if isinstance(raw, dict):
        return raw.get(name)
    return getattr(raw, name, None)
