"""estimate_cost: genai-prices lookups and the mapping of agenter's token semantics onto theirs."""

from __future__ import annotations

import pytest

from agenter._types import Usage
from agenter.usage import _resolve, estimate_cost, is_known_model

# claude-sonnet-4-5 list prices (USD per million tokens, below the 200k tier):
# input 3, output 15, cache read 0.30, cache write (5 min) 3.75.
SONNET = "claude-sonnet-4-5"


def test_input_and_output_priced_per_million():
    cost = estimate_cost(SONNET, Usage(input_tokens=1000, output_tokens=1000))
    assert cost == pytest.approx(0.003 + 0.015)


def test_cache_reads_are_not_billed_as_fresh_input():
    # Ours: input_tokens excludes cache reads. 1000 uncached + 10_000 cache reads.
    cost = estimate_cost(SONNET, Usage(input_tokens=1000, cache_read_tokens=10_000))
    assert cost == pytest.approx(1000 * 3e-6 + 10_000 * 0.3e-6)


def test_cache_writes_billed_at_write_rate():
    cost = estimate_cost(SONNET, Usage(input_tokens=0, cache_write_tokens=10_000))
    assert cost == pytest.approx(10_000 * 3.75e-6)


def test_only_cache_reads_without_fresh_input_is_priced():
    # genai-prices requires input_tokens when cache tokens are given; we always pass the total.
    assert estimate_cost(SONNET, Usage(cache_read_tokens=100_000)) == pytest.approx(0.03)


def test_dated_model_id_and_provider_prefix_resolve():
    dated = estimate_cost("claude-sonnet-4-5-20250929", Usage(input_tokens=1000))
    prefixed = estimate_cost("anthropic/claude-sonnet-4-5", Usage(input_tokens=1000))
    assert dated == prefixed == pytest.approx(0.003)


def test_explicit_provider():
    assert estimate_cost(SONNET, Usage(input_tokens=1000), provider="anthropic") == pytest.approx(0.003)
    assert estimate_cost("gpt-4o", Usage(input_tokens=1000), provider="openai") is not None


def test_unknown_model_is_none_not_zero():
    assert estimate_cost("no-such-model-xyz", Usage(input_tokens=1000)) is None
    assert estimate_cost(None, Usage(input_tokens=1000)) is None
    assert not is_known_model("no-such-model-xyz")
    assert is_known_model(SONNET)


def test_zero_usage_costs_nothing():
    assert estimate_cost(SONNET, Usage()) == 0.0


def test_lookups_are_cached_per_model():
    _resolve.cache_clear()
    for _ in range(5):
        estimate_cost(SONNET, Usage(input_tokens=10))
        estimate_cost("no-such-model-xyz", Usage(input_tokens=10))
    info = _resolve.cache_info()
    assert info.misses == 2
    assert info.hits == 8


def test_long_context_tier_applies_per_request():
    # Above 200k input tokens per request Sonnet 4.5 costs 6/M: price requests one at a time.
    assert estimate_cost(SONNET, Usage(input_tokens=300_000)) == pytest.approx(1.8)


def test_a_response_below_every_tier_is_priced_from_the_cached_rates_exactly():
    import random

    from agenter.usage import UsageLedger

    rng = random.Random(7)
    for model in ("claude-sonnet-4-5", "gpt-4o", "claude-opus-4-1"):
        ledger = UsageLedger(model)
        for _ in range(50):
            usage = Usage(input_tokens=rng.randrange(0, 60_000), output_tokens=rng.randrange(0, 30_000),
                          cache_read_tokens=rng.randrange(0, 30_000), cache_write_tokens=rng.randrange(0, 9_000))
            exact = estimate_cost(model, usage)
            assert exact is not None
            assert abs(ledger.price(usage) - exact) <= 1e-12 * max(exact, 1.0)
