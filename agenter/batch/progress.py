"""Progress of a batch: the interface the engines report to, and a live display with rich."""

from __future__ import annotations

import time
from typing import Any, Protocol

from agenter.batch._models import BatchRow
from agenter.batch._summary import BatchSummary


class BatchProgress(Protocol):
    """What a batch reports while it runs (all calls on the batch's event loop)."""

    def start(self, total: int, skipped: int) -> None: ...

    def task_started(self, task_id: str) -> None: ...

    def cost(self, cost_usd: float) -> None:
        """The batch's cost so far: finished tasks plus what running ones reported."""

    def task_finished(self, row: BatchRow) -> None: ...

    def close(self, summary: BatchSummary | None) -> None: ...


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class RichProgress:
    """A status line (done, failed, running, pending, cost, elapsed, ETA) with a line printed
    for every task that ends, and the summary at the end. Writes to stderr."""

    def __init__(self, console: Any = None, *, show_tasks: bool = True):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.show_tasks = show_tasks
        self.total = self.pending = self.running = self.passed = self.failed = 0
        self.cost_usd = 0.0
        self.started = time.monotonic()
        self._live: Any = None

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        finished = self.passed + self.failed
        eta = "–"
        if finished and (self.pending or self.running):
            eta = _duration(elapsed / finished * (self.pending + self.running))
        return (f"done {self.passed} · failed {self.failed} · running {self.running} · pending {self.pending} · "
                f"${self.cost_usd:.4f} · {_duration(elapsed)} · ETA {eta}")

    def __rich__(self) -> str:
        return self.line()

    def start(self, total: int, skipped: int) -> None:
        from rich.live import Live

        self.total, self.pending = total, total - skipped
        self.started = time.monotonic()
        if skipped:
            self.console.print(f"[dim]{skipped} of {total} tasks already have a row: skipped[/]")
        self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
        self._live.start()

    def task_started(self, task_id: str) -> None:
        self.pending -= 1
        self.running += 1

    def cost(self, cost_usd: float) -> None:
        self.cost_usd = cost_usd

    def task_finished(self, row: BatchRow) -> None:
        from rich.markup import escape

        self.running -= 1
        if row.passed:
            self.passed += 1
        elif not row.paused:
            self.failed += 1
        if not self.show_tasks:
            return
        mark = "[green]✓[/]" if row.passed else "[yellow]‖[/]" if row.paused else "[red]✗[/]"
        detail = f"{row.iterations} it · ${row.cost_usd:.4f} · {row.duration_seconds:.1f} s"
        problem = ""
        if row.paused:
            waiting = ", ".join(f"{call.get('tool')} {' '.join(call.get('paths') or []) or call.get('command') or ''}"
                                .strip() for call in row.pending if call.get("needs_approval", True))
            problem = f": waits for approval of {escape(waiting[:160])}"
        elif not row.passed and (row.error or row.exceeded_limit):
            kind = f" ({row.error_kind})" if row.error_kind else ""
            first = (row.error or f"limit: {row.exceeded_limit}").strip().splitlines()
            problem = f"{kind}: {escape(first[0][:160]) if first else ''}"
        self.console.print(f"{mark} {escape(row.id)} {escape(row.status)}{problem} · {detail}")

    def close(self, summary: BatchSummary | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if summary is not None:
            for text in summary.lines():
                self.console.print(text, highlight=False, markup=False)
