"""session.steer on Codex: the bookkeeping of `turn/steer` for one turn, free of I/O.

Codex takes input for a running turn with `turn/steer` (threadId, expectedTurnId, input,
clientUserMessageId). Taking it only queues it: Codex records it (a `userMessage` item carrying
our client id) when it next asks the model, and sends it with that request: after the tool calls
that ran (with their results), after an answer (the turn then goes on instead of ending), or,
when the model had not answered yet, with the task (Codex asks again). So a steer is reported
STEERED once its item is recorded and the model moves on (the next response's first item, or
its usage), in order with the turn's other events. A STATUS names one Codex refused (the turn
was over), one it took but never recorded before the turn ended, and one recorded only as the
turn ended, which the model has not read. Recorded against Codex 0.169 and the scripted model
server; openai/codex#40805 describes the queueing.
"""

from __future__ import annotations

import itertools
from typing import Any

from agenter.backends._steer import steered, undelivered
from agenter.backends.base import BackendMessage, MessageType

#: Codex items that are tool calls: a steer recorded after one goes with the calls' results.
TOOL_ITEMS = frozenset({"commandExecution", "fileChange", "mcpToolCall", "dynamicToolCall", "webSearch",
                        "imageView", "collabAgentToolCall"})
#: Codex items of the model's answer: a steer recorded after one keeps the turn going.
ANSWER_ITEMS = frozenset({"agentMessage", "reasoning", "plan"})


class Steering:
    """The steers of one backend: waiting to be sent, sent and not yet recorded by Codex."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.waiting: list[str] = []
        self._sent: dict[str, str] = {}  # clientUserMessageId -> text
        self._recorded: list[BackendMessage] = []  # STEERED, once the model moves on
        self._after: str | None = None  # the turn's last completed item other than user input

    def start_turn(self) -> None:
        self.waiting.clear()
        self._sent.clear()
        self._recorded.clear()
        self._after = None

    def take(self) -> list[str]:
        """The steers waiting to be sent (now sent)."""
        waiting, self.waiting = self.waiting, []
        return waiting

    def request(self, thread_id: str, turn_id: str, text: str) -> dict[str, Any]:
        """The `turn/steer` params for one message; it counts as sent."""
        client_id = f"agenter-steer-{next(self._ids)}"
        self._sent[client_id] = text
        return {"threadId": thread_id, "expectedTurnId": turn_id, "clientUserMessageId": client_id,
                "input": [{"type": "text", "text": text, "text_elements": []}]}

    def refused(self, params: dict[str, Any]) -> None:
        """Codex refused the request built for params: it will not be recorded."""
        self._sent.pop(params["clientUserMessageId"], None)

    def completed(self, item: dict[str, Any]) -> None:
        """An item/completed of the running turn (a steer's item is recorded, not yet reported)."""
        kind = item.get("type")
        if kind != "userMessage":
            self._after = kind
            return
        text = self._sent.pop(item.get("clientId") or "", None)
        if text is not None:
            self._recorded.append(steered(text, self.where()))

    def model_moved(self) -> list[BackendMessage]:
        """The model answers a request made after the recorded steers: they landed (STEERED)."""
        recorded, self._recorded = self._recorded, []
        return recorded

    def where(self) -> str:
        """Where a steer recorded now lands, said as the harness says it."""
        if self._after in TOOL_ITEMS:
            return "codex turn/steer: after the tool calls, with their results"
        if self._after in ANSWER_ITEMS:
            return "codex turn/steer: after the model's answer: the turn goes on"
        if self._after is None:
            return "codex turn/steer: with the task, before the model's first answer"
        return "codex turn/steer: before the turn's next model request"

    def unrecorded(self) -> list[BackendMessage]:
        """At the turn's end: what was taken but never reached the model, as STATUS messages."""
        out = [undelivered(text, "the turn ended first") for text in self.take()]
        out += [undelivered(text, "Codex took it, but the turn ended before the model read it")
                for text in self._sent.values()]
        out += [BackendMessage(MessageType.STATUS, content=(
                    "a steering message was recorded only as the turn ended, after the model's last request: "
                    f"the model has not read it ({message.content[:80]!r}), though Codex put it in the "
                    "thread's history"), details={"steer_late": message.content})
                for message in self._recorded]
        self._sent.clear()
        self._recorded.clear()
        return out

