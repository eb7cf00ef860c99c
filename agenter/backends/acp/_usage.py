"""Usage of an ACP session, from whatever the agent reports, into the backend's ledger.

ACP agents report usage three ways, or not at all:

- `usage_update` notifications: `used` is the context size now (a floor for the input tokens of
  the prompt in flight: every model call re-reads the context) and `cost` the session's
  cumulative cost;
- `PromptResponse.usage` (unstable in ACP): the prompt's exact token counts;
- nothing (Gemini CLI 0.61): the tokens are then estimated from the text exchanged, about four
  characters a token, so token and cost budgets still bite; the estimate is said once.
"""

from __future__ import annotations

import json
from typing import Any

from agenter._types import Usage
from agenter.backends.base import BackendMessage, MessageType
from agenter.usage import RunningTotal, UsageLedger

#: Characters per token for the estimate (a common rule of thumb for English text and code).
CHARS_PER_TOKEN = 4

ESTIMATE_NOTE = (
    "this ACP agent reports no token usage: tokens are estimated from the text exchanged "
    f"(about {CHARS_PER_TOKEN} characters a token, a lower bound: the agent's own system prompt "
    "and repeated context are not seen)")


class SessionUsage:
    """One ACP session's usage. Per prompt: `start`, then what arrives, then `finish` (or
    `abandon` for a prompt cut off); budgets read the ledger at every step."""

    def __init__(self, ledger: UsageLedger):
        self.ledger = ledger
        self._cost = RunningTotal()
        self._agent_prices = False  # the agent reports cost itself: never price its tokens
        self._noted = False
        self._floor = 0
        self._reported = False
        self._chars_in = 0
        self._chars_out = 0

    def start(self, prompt: str) -> None:
        """A session/prompt is sent with this text."""
        self._floor = 0
        self._reported = False
        self._chars_in = len(prompt)
        self._chars_out = 0
        self._estimate_running()

    def update(self, used: int | None, cost: Any) -> None:
        """A usage_update: the context floor, and the cumulative cost (USD only)."""
        self._reported = True
        self._floor = max(self._floor, int(used or 0))
        if cost is not None and str(getattr(cost, "currency", "")).upper() == "USD":
            self._agent_prices = True
            self.ledger.add_cost(self._cost.cost(float(cost.amount)))
        self.ledger.running(Usage(input_tokens=self._floor))

    def seen(self, message: BackendMessage) -> None:
        """A message of the turn: its text counts for the estimate."""
        if message.type in (MessageType.TEXT, MessageType.THINKING, MessageType.PLAN):
            self._chars_out += len(message.content)
        elif message.type is MessageType.TOOL_CALL:
            self._chars_out += len(json.dumps(message.tool_input, default=str)) if message.tool_input else 0
        elif message.type is MessageType.TOOL_RESULT:
            self._chars_in += len(message.content)
        else:
            return
        self._estimate_running()

    def file_text(self, *, read: int = 0, written: int = 0) -> None:
        """File content served to the agent (the model reads it) or written by it (the model wrote it)."""
        self._chars_in += read
        self._chars_out += written
        self._estimate_running()

    def finish(self, exact: Any | None) -> str | None:
        """The prompt ended; `exact` is PromptResponse.usage. Returns the estimate note, once."""
        cost = 0.0 if self._agent_prices else None
        if exact is not None:
            self.ledger.settle(Usage(
                input_tokens=int(exact.input_tokens or 0), output_tokens=int(exact.output_tokens or 0),
                cache_read_tokens=int(exact.cached_read_tokens or 0),
                cache_write_tokens=int(exact.cached_write_tokens or 0)), cost)
            return None
        if self._reported:
            self.ledger.settle(Usage(input_tokens=self._floor), cost)
            return None
        self.ledger.settle(self._estimate(), cost)
        if self._noted:
            return None
        self._noted = True
        return ESTIMATE_NOTE

    def abandon(self) -> None:
        """The prompt was cut off: what it used so far still counts."""
        self.ledger.abandon_running()

    def _estimate(self) -> Usage:
        return Usage(input_tokens=-(-self._chars_in // CHARS_PER_TOKEN),
                     output_tokens=-(-self._chars_out // CHARS_PER_TOKEN))

    def _estimate_running(self) -> None:
        if not self._reported:
            self.ledger.running(self._estimate())
