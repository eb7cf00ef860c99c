"""session.steer on Claude Code: its streaming input, and where the CLI takes a message in.

The CLI reads user messages on stdin while a turn runs (claude-agent-sdk's `client.query()` on a
connected client). What it does with one, as recorded against Claude Code 2.1.332 and the
scripted model server:

- sent while a tool call runs, the CLI adds it to the running turn, with the tool's result in
  the next model request (framed by the CLI as a message the user sent while Claude worked);
- sent while the model writes an answer without tool calls (or before its first answer comes),
  the turn ends with its result first, and the CLI then starts a turn of its own for the
  message. That turn belongs to the agenter request that sent the steer: the backend reads on
  past the first result until the turn that took the message in ends, so its output is not
  left for the next request to read (where it would answer one message behind).

Each message goes with a `uuid`; the CLI lists the uuids a turn took in (`user_message_uuids`
on the next assistant message, stream event or result), which is when the message is reported
STEERED, and whether a result came in between says which of the two it was.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agenter.backends._steer import steered, undelivered
from agenter.backends.base import BackendMessage

#: Seconds the CLI may take to start the turn of a message it has not taken in when a turn ends.
FOLLOW_UP_TIMEOUT = 60.0
#: Where a message landed: in the running turn, or in a turn the CLI started for it.
IN_TURN = "claude-code streaming input: after the tool calls, with their results"
NEW_TURN = "claude-code streaming input: after the model's answer, in a turn the CLI started for it: the request goes on"


class Steering:
    """The steers of one claude-code backend for the turn that runs (`open` while it takes them)."""

    def __init__(self) -> None:
        self.open = False
        #: The CLI never started the turn it owed a steer: the backend stops it (no stray turn).
        self.abandoned = False
        self._client: Any = None
        self._sent: dict[str, tuple[str, int]] = {}  # uuid -> (text, results seen when it was sent)
        self._results = 0
        self._writes: set[asyncio.Task[None]] = set()
        self._notes: list[BackendMessage] = []

    def start(self, client: Any) -> None:
        """A turn starts on this connected ClaudeSDKClient."""
        self.open, self.abandoned, self._client, self._results = True, False, client, 0
        self._sent.clear()
        self._notes.clear()

    def send(self, text: str) -> None:
        """Write the message to the CLI's stdin now (in a task: steer() is not async)."""
        message_id = str(uuid.uuid4())
        self._sent[message_id] = (text, self._results)
        task = asyncio.ensure_future(self._write(self._client, message_id, text))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, client: Any, message_id: str, text: str) -> None:
        from claude_agent_sdk import ClaudeSDKError

        message = {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None,
                   "uuid": message_id}

        async def one() -> AsyncIterator[dict[str, Any]]:
            yield message

        try:
            await client.query(one())
        except (ClaudeSDKError, OSError) as exc:  # the CLI is gone or its stdin closed: said with the turn's events
            if self._sent.pop(message_id, None) is not None:
                self._notes.append(undelivered(text, f"it could not be written to Claude Code ({exc})"))

    def landed(self, message: Any) -> list[BackendMessage]:
        """Before the CLI's message is translated: STEERED for the steers it says it took in (and
        the notes of writes that failed)."""
        out, self._notes = self._notes, []
        taken = [*(getattr(message, "user_message_uuids", None) or []), getattr(message, "user_message_uuid", None)]
        for message_id in taken:
            sent = self._sent.pop(message_id, None) if isinstance(message_id, str) else None
            if sent is not None:
                text, results = sent
                out.append(steered(text, IN_TURN if results == self._results else NEW_TURN))
        return out

    async def after_result(self) -> bool:
        """A turn of the CLI ended: True when a steer is still to be taken in (the CLI starts a
        turn for it, which this request reads too); False closes steering for this turn."""
        self._results += 1
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)
        if self._sent:
            return True
        self.open = False
        return False

    def close(self, why: str) -> list[BackendMessage]:
        """The turn ends: STATUS for each steer not taken in, and no more writes."""
        self.open = False
        for task in list(self._writes):
            task.cancel()
        out = [*self._notes, *(undelivered(text, why) for text, _ in self._sent.values())]
        self._sent.clear()
        self._notes = []
        return out
