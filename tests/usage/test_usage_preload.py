"""UsageLedger.preload: the price table loads in a thread while the agent starts; lookups that
come early wait for it rather than import genai-prices a second time at once. What depends on a
fresh interpreter (nothing imported yet) runs in one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from agenter import usage
from agenter._types import Usage
from agenter.usage import UsageLedger, estimate_cost


def fresh(code: str) -> str:
    """Run `code` in a new interpreter (genai-prices not imported yet); its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_preload_imports_the_table_and_the_models_rates_off_the_calling_thread():
    out = fresh("""
        import sys, threading
        from agenter.usage import UsageLedger, _rates
        assert "genai_prices" not in sys.modules
        ledger = UsageLedger("gpt-5.5", "openai")
        thread = ledger.preload()
        assert thread is not threading.current_thread() and thread.daemon
        thread.join(60)
        assert "genai_prices" in sys.modules
        print(_rates.cache_info().currsize)
    """)
    assert out == "1"


def test_a_lookup_right_after_the_preload_waits_for_it_and_prices_correctly():
    # The settle races the preload thread: both need genai-prices; one loads it, the other waits.
    out = fresh("""
        from agenter._types import Usage
        from agenter.usage import UsageLedger
        ledger = UsageLedger("claude-sonnet-4-5", "anthropic")
        ledger.preload()
        priced = ledger.settle(Usage(input_tokens=1000, output_tokens=1000))
        ledger.running(Usage(output_tokens=1000))
        print(round(priced.cost_usd, 6), round(ledger.total.cost_usd, 6), ledger.take_note())
    """)
    assert out == "0.018 0.033 None"


def test_preload_without_a_model_loads_the_table_only():
    out = fresh("""
        import sys
        from agenter.usage import UsageLedger, _rates
        UsageLedger().preload().join(60)
        print("genai_prices" in sys.modules, _rates.cache_info().currsize)
    """)
    assert out == "True 0"


def test_preload_of_an_unknown_model_is_quiet_and_the_note_comes_from_the_lookup():
    ledger = UsageLedger("no-such-model-xyz-preload")
    ledger.preload().join(60)
    assert ledger.take_note() is None  # the preload itself notes nothing
    assert ledger.settle(Usage(input_tokens=10)).cost_usd == 0.0
    note = ledger.take_note()
    assert note is not None and "no-such-model-xyz-preload" in note


def test_preload_twice_is_one_thread():
    ledger = UsageLedger("gpt-5.5", "openai")
    first = ledger.preload()
    assert ledger.preload() is first
    first.join(60)
    assert not first.is_alive()


def test_a_lookup_waits_while_the_table_is_being_loaded():
    # Hold the load lock as the preload thread does while it imports: the lookup must wait for
    # it, not load the table beside it.
    usage._resolve.cache_clear()
    finished = threading.Event()
    result: list[float | None] = []

    def lookup() -> None:
        result.append(estimate_cost("gpt-5.5", Usage(input_tokens=100_000), "openai"))
        finished.set()

    with usage._load_lock:
        worker = threading.Thread(target=lookup, daemon=True)
        worker.start()
        assert not finished.wait(0.3)
    worker.join(30)
    assert finished.is_set() and result[0] == pytest.approx(estimate_cost("gpt-5.5", Usage(input_tokens=100_000),
                                                                          "openai"))


async def test_connect_starts_the_preload_once_the_agent_is_up(tmp_path):
    from agenter.backends.base import BackendSettings, SessionSpec
    from agenter.testing import FunctionBackend, FunctionOptions

    connected: list[bool] = []

    def turn(ctx):  # the preload was started by connect, before any turn
        connected.append(ctx.backend.ledger._preload is not None)
        ctx.use(input_tokens=1000, output_tokens=1000)
        return "done"

    backend = FunctionBackend(BackendSettings(model="claude-sonnet-4-5", tools=[], sandbox=False,
                                              options=FunctionOptions(turn=turn)))
    assert backend.ledger._preload is None
    await backend.connect(SessionSpec(cwd=tmp_path))
    try:
        assert backend.ledger._preload is not None
        [message async for message in backend.execute("go")]
    finally:
        await backend.disconnect()
    assert connected == [True]
    assert backend.usage().cost_usd == pytest.approx(0.018)
