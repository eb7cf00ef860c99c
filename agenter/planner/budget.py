"""One budget for every phase of a plan-and-execute run, carved into one Budget per run.

Each planner, task or debugging run gets a Budget its session enforces inside its turns. Time is
shared: every run ends by the overall deadline. Tokens and cost are divided: a run gets what
is neither spent nor reserved by runs still going, split between the runs that may start now,
so parallel tasks together can never spend more than the whole.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from agenter._types import Budget, CodingResult, Usage
from agenter.session.budget import COST, TIME, TOKENS

__all__ = ["BudgetPool"]


@dataclass
class BudgetPool:
    budget: Budget
    started: float = field(default_factory=time.monotonic)
    spent: Usage = field(default_factory=Usage)
    _reserved: dict[str, tuple[int, float]] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining_time(self) -> float:
        limit = self.budget.max_time_seconds
        return math.inf if limit is None else limit - self.elapsed()

    def exhausted(self) -> str | None:
        """The limit that leaves nothing for another run (tokens, cost, time), or None."""
        tokens, cost = self._unreserved()
        if tokens is not None and tokens < 1:
            return TOKENS
        if cost is not None and cost <= 0:
            return COST
        if self.remaining_time() <= 0:
            return TIME
        return None

    def describe(self, limit: str) -> str:
        b = self.budget
        if limit == TOKENS:
            return f"token budget spent: {self.spent.total_tokens} of {b.max_tokens} tokens"
        if limit == COST:
            return f"cost budget spent: ${self.spent.cost_usd:.4f} of ${b.max_cost_usd or 0:.4f}"
        return f"time budget spent: {self.elapsed():.1f} s of {b.max_time_seconds or 0:g} s"

    def carve(self, key: str, share: int = 1, max_iterations: int | None = None) -> Budget | None:
        """A Budget for run `key`: 1/`share` of what is unreserved (tokens, cost), the time left.
        None when nothing is left; the amount is reserved until `settle(key, ...)`."""
        if self.exhausted():
            return None
        share = max(share, 1)
        tokens, cost = self._unreserved()
        run_tokens = None if tokens is None else max(tokens // share, 1)
        run_cost = None if cost is None else cost / share
        remaining = self.remaining_time()
        self._reserved[key] = (run_tokens or 0, run_cost or 0.0)
        return Budget(max_tokens=run_tokens, max_cost_usd=run_cost,
                      max_time_seconds=None if remaining == math.inf else max(remaining, 0.001),
                      max_iterations=max_iterations or self.budget.max_iterations)

    def settle(self, key: str, result: CodingResult | None) -> Usage:
        """Release run `key`'s reservation and count what it really used."""
        self._reserved.pop(key, None)
        if result is None:
            return Usage()
        usage = Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                      cache_read_tokens=result.cache_read_tokens, cache_write_tokens=result.cache_write_tokens,
                      cost_usd=result.total_cost_usd)
        self.spent = self.spent + usage
        return usage

    def _unreserved(self) -> tuple[int | None, float | None]:
        b = self.budget
        held_tokens = sum(t for t, _ in self._reserved.values())
        held_cost = sum(c for _, c in self._reserved.values())
        tokens = None if b.max_tokens is None else b.max_tokens - self.spent.total_tokens - held_tokens
        cost = None if b.max_cost_usd is None else b.max_cost_usd - self.spent.cost_usd - held_cost
        return tokens, cost
