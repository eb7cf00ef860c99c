"""Budget tracking: which limit, if any, a session has crossed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agenter._types import Budget, Usage

TOKENS = "tokens"
COST = "cost"
TIME = "time"
ITERATIONS = "iterations"


@dataclass
class BudgetTracker:
    """Wall clock runs from construction. Tokens count everything the model processed
    (input, output, cache reads and writes); cost is what the backend or genai-prices estimated."""

    budget: Budget
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining_time(self) -> float:
        limit = self.budget.max_time_seconds
        return float("inf") if limit is None else limit - self.elapsed()

    def exceeded(self, usage: Usage, *, iterations_done: int | None = None) -> str | None:
        """The first limit crossed, or None. Iterations count only when `iterations_done` is given."""
        b = self.budget
        if b.max_tokens is not None and usage.total_tokens > b.max_tokens:
            return TOKENS
        if b.max_cost_usd is not None and usage.cost_usd > b.max_cost_usd:
            return COST
        if self.remaining_time() <= 0:
            return TIME
        if iterations_done is not None and iterations_done >= self.budget.max_iterations:
            return ITERATIONS
        return None

    def describe(self, limit: str, usage: Usage) -> str:
        b = self.budget
        if limit == TOKENS:
            return f"token budget exceeded: {usage.total_tokens} > {b.max_tokens} tokens"
        if limit == COST:
            return f"cost budget exceeded: ${usage.cost_usd:.4f} > ${b.max_cost_usd or 0:.4f}"
        if limit == TIME:
            return f"time budget exceeded: {self.elapsed():.1f} s > {b.max_time_seconds or 0:g} s"
        return f"iteration budget exhausted: {b.max_iterations} iterations"
