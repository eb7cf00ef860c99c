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


@dataclass
class Crossed:
    """A limit that was crossed: which, where (the request's budget or the session's), and why."""

    limit: str
    description: str
    session: bool = False


class Limits:
    """The budgets one request runs under: its own, and in a multi-request session the
    session's too. Usage is the backend's cumulative figure; each budget counts from its base.
    """

    def __init__(self, budget: Budget, *, base: Usage | None = None, session: BudgetTracker | None = None,
                 session_base: Usage | None = None, session_iterations: int | None = None,
                 carried: Usage | None = None, carried_seconds: float = 0.0):
        """`session_iterations`: iterations the session's earlier requests ran, or None when the
        session's budget does not count iterations. `carried` and `carried_seconds`: what the
        request spent before it paused (a paused run continued counts on from there)."""
        self.request = BudgetTracker(budget, started=time.monotonic() - max(carried_seconds, 0.0))
        self.base = base or Usage()
        self.carried = carried or Usage()
        self.session = session
        self.session_base = session_base or Usage()
        self.session_iterations = session_iterations

    def usage(self, total: Usage) -> Usage:
        """The request's own usage (with what it spent before a pause)."""
        return total.minus(self.base) + self.carried

    def elapsed(self) -> float:
        return self.request.elapsed()

    def remaining_time(self) -> float:
        if self.session is None:
            return self.request.remaining_time()
        return min(self.request.remaining_time(), self.session.remaining_time())

    def crossed(self, total: Usage, *, iterations_done: int | None = None) -> Crossed | None:
        """The first limit crossed, the request's before the session's, or None."""
        own = self.usage(total)
        limit = self.request.exceeded(own, iterations_done=iterations_done)
        if limit:
            return Crossed(limit, self.request.describe(limit, own))
        if self.session is None:
            return None
        spent = total.minus(self.session_base)
        done = None
        if iterations_done is not None and self.session_iterations is not None:
            done = self.session_iterations + iterations_done
        limit = self.session.exceeded(spent, iterations_done=done)
        if limit:
            return Crossed(limit, "session " + self.session.describe(limit, spent), session=True)
        return None

    def describe(self, limit: str, total: Usage, *, session: bool = False) -> str:
        if session and self.session is not None:
            return "session " + self.session.describe(limit, total.minus(self.session_base))
        return self.request.describe(limit, self.usage(total))

    def time_by_session(self) -> bool:
        """True when the session's time runs out before the request's."""
        return self.session is not None and self.session.remaining_time() < self.request.remaining_time()

    def describe_time(self, total: Usage) -> str:
        """Why the time ran out: the budget with the least time left."""
        return self.describe(TIME, total, session=self.time_by_session())
