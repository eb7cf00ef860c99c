"""The summary at the end of a batch: pass rate, cost, task times, statuses."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from agenter.batch._models import BatchRow


def percentile(values: list[float], share: float) -> float | None:
    """Nearest-rank percentile (share in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)), 1) - 1]


@dataclass
class BatchSummary:
    """The batch as the results file has it now, and what this run did.

    Over every task of the batch that has a row (this run's and earlier runs'): `statuses`,
    `passed`, `paused` (waiting for approval: neither passed nor failed), `pass_rate` (of the
    rows that are not paused), `cost_usd`, `p50_seconds`/`p95_seconds` (a task's whole duration)
    and `error_kinds`. This run only: `ran`, `skipped` (had a row already), `not_run` (no
    row: not started when the batch's budget ran out, or stopped by an interruption), `run_cost_usd`, `wall_seconds`.
    """

    total: int = 0
    with_row: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    passed: int = 0
    paused: int = 0
    pass_rate: float | None = None
    cost_usd: float = 0.0
    p50_seconds: float | None = None
    p95_seconds: float | None = None
    error_kinds: dict[str, int] = field(default_factory=dict)
    ran: int = 0
    skipped: int = 0
    not_run: int = 0
    run_cost_usd: float = 0.0
    wall_seconds: float = 0.0
    stopped: str | None = None
    unreadable_lines: int = 0

    @property
    def complete(self) -> bool:
        """Every task has a row."""
        return self.with_row == self.total

    @property
    def all_passed(self) -> bool:
        return self.complete and self.passed == self.total

    @classmethod
    def of(cls, task_ids: list[str], rows: dict[str, BatchRow], this_run: list[BatchRow], **run: Any) -> BatchSummary:
        mine = [rows[i] for i in task_ids if i in rows]
        durations = [row.duration_seconds for row in mine]
        passed = sum(row.passed for row in mine)
        paused = sum(row.paused for row in mine)
        decided = len(mine) - paused
        p50, p95 = percentile(durations, 0.5), percentile(durations, 0.95)
        return cls(
            total=len(task_ids), with_row=len(mine),
            statuses=dict(Counter(row.status for row in mine).most_common()),
            passed=passed, paused=paused, pass_rate=passed / decided if decided else None,
            cost_usd=round(sum(row.cost_usd for row in mine), 6),
            p50_seconds=round(p50, 3) if p50 is not None else None,
            p95_seconds=round(p95, 3) if p95 is not None else None,
            error_kinds=dict(Counter(row.error_kind for row in mine if row.error_kind).most_common()),
            ran=len(this_run), run_cost_usd=round(sum(row.cost_usd for row in this_run), 6), **run)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The summary as a few lines of plain text."""
        rate = f"{self.pass_rate:.1%}" if self.pass_rate is not None else "n/a"
        out = [f"{self.with_row}/{self.total} tasks have a row · passed {self.passed} ({rate}) · "
               f"cost ${self.cost_usd:.4f}" + (f" · paused {self.paused} (waiting for approval)" if self.paused else "")]
        if self.p50_seconds is not None:
            out.append(f"time per task: p50 {self.p50_seconds:.2f} s · p95 {self.p95_seconds:.2f} s")
        if self.statuses:
            out.append("statuses: " + ", ".join(f"{name} {count}" for name, count in self.statuses.items()))
        if self.error_kinds:
            out.append("errors: " + ", ".join(f"{name} {count}" for name, count in self.error_kinds.items()))
        run = (f"this run: {self.ran} ran, {self.skipped} already done, {self.not_run} without a row · "
               f"${self.run_cost_usd:.4f} · {self.wall_seconds:.1f} s")
        out.append(run + (f" · stopped: {self.stopped}" if self.stopped else ""))
        if self.unreadable_lines:
            out.append(f"{self.unreadable_lines} line(s) of the results file could not be read (skipped)")
        return out
