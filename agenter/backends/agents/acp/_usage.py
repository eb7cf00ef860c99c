"""Usage of an ACP session, from whatever the agent reports, into the backend's ledger.

ACP agents report usage in several ways, or not at all:

- `usage_update` notifications: `used` is the context size now (a floor for the input tokens of
  the prompt in flight: every model call re-reads the context) and `cost` the session's
  cumulative cost;
- `PromptResponse.usage` (unstable in ACP): the prompt's exact token counts;
- `PromptResponse._meta.quota` (Gemini CLI's extension): the prompt's input and output tokens,
  and the model that used them;
- nothing: the tokens are then estimated from the text exchanged, about four characters a
  token, so token and cost budgets still bite; the estimate is said once. The same estimate
  stands in while a prompt runs, until the agent's own figure arrives.
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
        #: The session's cumulative cost as the agent last reported it (kept with a paused run).
        self.reported_cost: float | None = None

    def carry_cost(self, total: float) -> None:
        """The agent goes on from this cumulative cost (a loaded session whose agent carries its
        cost on, claude-agent-acp): only what it reports beyond it is new."""
        self._cost.start_from(total)
        self.reported_cost = total

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
            self.reported_cost = float(cost.amount)
            self.ledger.add_cost(self._cost.cost(self.reported_cost))
        self.ledger.running(Usage(input_tokens=self._floor))

    def seen(self, message: BackendMessage) -> None:
        """A message of the turn: its text counts for the estimate."""
        # Text counts as its deltas arrive (the whole text that closes them is not counted again).
        if message.type in (MessageType.TEXT_DELTA, MessageType.THINKING_DELTA, MessageType.PLAN):
            self._chars_out += len(message.content)
        elif message.type in (MessageType.TOOL_CALL, MessageType.COMMAND_START):
            self._chars_out += len(json.dumps(message.tool_input, default=str)) if message.tool_input else 0
        elif message.type in (MessageType.TOOL_RESULT, MessageType.COMMAND_END):
            self._chars_in += len(message.content)
        else:
            return
        self._estimate_running()

    def file_text(self, *, read: int = 0, written: int = 0) -> None:
        """File content served to the agent (the model reads it) or written by it (the model wrote it)."""
        self._chars_in += read
        self._chars_out += written
        self._estimate_running()

    def finish(self, response: Any) -> str | None:
        """The prompt ended with this PromptResponse. Returns the estimate note, once."""
        cost = 0.0 if self._agent_prices else None
        exact, model = reported_usage(response)
        if exact is not None:
            if model and self.ledger.model is None:
                self.ledger.model = model
            self.ledger.settle(exact, cost)
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
        return Usage.estimate(input_chars=self._chars_in, output_chars=self._chars_out)

    def _estimate_running(self) -> None:
        if not self._reported:
            self.ledger.running(self._estimate())


def reported_usage(response: Any) -> tuple[Usage | None, str | None]:
    """A prompt's token counts from its response (`usage`, else Gemini CLI's `_meta.quota`), and
    the model when the agent names exactly one."""
    usage = getattr(response, "usage", None)
    if usage is not None:
        return Usage(input_tokens=int(usage.input_tokens or 0), output_tokens=int(usage.output_tokens or 0),
                     cache_read_tokens=int(usage.cached_read_tokens or 0),
                     cache_write_tokens=int(usage.cached_write_tokens or 0)), None
    quota = (getattr(response, "field_meta", None) or {}).get("quota")
    if not isinstance(quota, dict) or not isinstance(quota.get("token_count"), dict):
        return None, None
    counts = quota["token_count"]
    try:
        # Gemini's promptTokenCount, summed over the prompt's model calls: cached tokens included.
        found = Usage(input_tokens=int(counts.get("input_tokens") or 0),
                      output_tokens=int(counts.get("output_tokens") or 0))
    except (TypeError, ValueError):
        return None, None
    models = {m.get("model") for m in quota.get("model_usage") or [] if isinstance(m, dict)}
    model = models.pop() if len(models) == 1 else None
    return found, model if isinstance(model, str) else None
