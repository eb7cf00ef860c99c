"""The session's cheap paths: a changed file read with plain os.read (capped, regular files
only), queued messages taken without a timer, the time budget still enforced while waiting, a
mid-turn token budget still caught when usage moves, and no spans without a tracer provider."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenter import AutonomousCodingAgent, Budget
from agenter._types import Budget as BudgetModel
from agenter.backends.base import BackendMessage, MessageType
from agenter.sandbox.paths import read_text_capped
from agenter.session import loop
from agenter.session.budget import Limits
from agenter.session.telemetry import tracer_for
from agenter.testing import FunctionBackend, TurnContext


def test_a_changed_file_is_read_whole_up_to_the_cap(tmp_path: Path) -> None:
    small = tmp_path / "small.py"
    small.write_bytes("x = 'é'\n".encode())
    assert read_text_capped(small, loop.MAX_FILE_BYTES) == "x = 'é'\n"
    big = tmp_path / "big.txt"
    big.write_bytes(b"0123456789abcdef")
    assert read_text_capped(big, 10) == "0123456789\n[... truncated by agenter]"
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"0123456789")
    assert read_text_capped(exact, 10) == "0123456789"


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_a_file_holding_more_than_its_stat_size_is_read_on() -> None:
    """One read is enough when the file holds exactly the size fstat gave; a file that holds
    more (grown since, or /proc's size-0 files) is read on to its end."""
    text = read_text_capped("/proc/self/status", loop.MAX_FILE_BYTES)
    assert text is not None and "Name:" in text and "VmPeak" in text and os.stat("/proc/self/status").st_size == 0


def test_what_is_not_a_regular_file_is_not_read(tmp_path: Path) -> None:
    assert read_text_capped(tmp_path, loop.MAX_FILE_BYTES) is None
    assert read_text_capped(tmp_path / "missing", loop.MAX_FILE_BYTES) is None
    target = tmp_path / "target"
    target.write_text("secret\n")
    (tmp_path / "link").symlink_to(target)
    assert read_text_capped(tmp_path / "link", loop.MAX_FILE_BYTES) is None
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        assert read_text_capped(tmp_path / "fifo", loop.MAX_FILE_BYTES) is None  # O_NONBLOCK: never waits for a writer


async def test_items_come_in_order_and_a_hung_source_runs_out_of_time() -> None:
    async def quick() -> AsyncIterator[int]:
        for i in range(50):
            yield i

    limits = Limits(BudgetModel(max_time_seconds=5))
    assert [item async for item in loop._within_time(quick(), limits, "quick")] == list(range(50))

    async def hung() -> AsyncIterator[int]:
        yield 1
        await asyncio.sleep(3600)
        yield 2

    seen = []
    started = time.monotonic()
    with pytest.raises(loop._TimeUp):
        async for item in loop._within_time(hung(), Limits(BudgetModel(max_time_seconds=0.3)), "hung"):
            seen.append(item)
    assert seen == [1] and time.monotonic() - started < 3


async def test_one_timer_ends_a_stream_that_never_stops_flowing() -> None:
    """The time budget is one timer for the whole stream (not one per item): a source that keeps
    yielding, every item a wait, still runs out of time, and the timer is gone afterwards."""
    async def flowing() -> AsyncIterator[int]:
        i = 0
        while True:
            await asyncio.sleep(0.005)
            yield i
            i += 1

    running = asyncio.get_running_loop()
    before = len(running._scheduled)  # type: ignore[attr-defined]
    seen: list[int] = []
    started = time.monotonic()
    with pytest.raises(loop._TimeUp):
        async for item in loop._within_time(flowing(), Limits(BudgetModel(max_time_seconds=0.3)), "flowing"):
            seen.append(item)
            assert len(running._scheduled) <= before + 2  # type: ignore[attr-defined]  # the deadline, the sleep
    assert len(seen) > 5 and time.monotonic() - started < 3
    limits = Limits(BudgetModel(max_time_seconds=30))
    assert [item async for item in loop._within_time(_count(3), limits, "short")] == [0, 1, 2]
    assert not [h for h in running._scheduled if not h.cancelled() and h.when() > running.time() + 20]  # type: ignore[attr-defined]


async def _count(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


async def test_a_token_budget_stops_the_turn_when_usage_moves(tmp_path: Path) -> None:
    ran: list[int] = []

    async def turn(ctx: TurnContext) -> AsyncIterator[BackendMessage]:
        for i in range(20):
            ran.append(i)
            yield BackendMessage(MessageType.TEXT_DELTA, f"{i} ")
            yield BackendMessage(MessageType.TEXT_DELTA, "same usage ")
            if i == 3:
                ctx.use(input_tokens=2000, output_tokens=10)

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, validators=[])
    result = await agent.execute("go", cwd=tmp_path, budget=Budget(max_tokens=1000))
    assert result.status.value == "budget_exceeded" and result.exceeded_limit == "tokens"
    # The tokens are recorded after the fourth round; the first message after them stops the turn.
    assert ran == [0, 1, 2, 3, 4]


def test_no_spans_when_opentelemetry_is_imported_but_not_set_up() -> None:
    if "opentelemetry.trace" not in sys.modules:
        pytest.importorskip("opentelemetry.trace")
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a tracer provider is set in this process")
    assert tracer_for(None) is None
    assert tracer_for(trace.NoOpTracerProvider()) is not None  # one given is always used
