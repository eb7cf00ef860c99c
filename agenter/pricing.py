"""Cost estimates from token usage, priced by the `genai-prices` package.

Price ONE model response (or the usage of several responses of the same model that are each
below any tiered-price threshold). Tiered prices (e.g. higher rates above 200k input tokens)
apply per request, so backends should price every response as it arrives and add the costs
rather than pricing a session's cumulative usage at the end.

Token semantics: agenter's `Usage.input_tokens` EXCLUDES cache reads and writes (as Anthropic
reports them); genai-prices' `input_tokens` is the TOTAL input including cache reads and writes.
`estimate_cost` converts between the two.
"""

from __future__ import annotations

import functools
from typing import Any

from agenter._types import Usage

__all__ = ["estimate_cost", "is_known_model"]


def estimate_cost(model: str | None, usage: Usage, provider: str | None = None) -> float | None:
    """US dollars for `usage` on `model`, or None when genai-prices does not know the model.

    `provider` is a genai-prices provider id ("anthropic", "openai", "aws", "google", ...);
    without it the provider is inferred from the model name (a "provider/model" prefix is used
    when present). Callers record 0 cost for None and may tell the user the cost is unknown.
    """
    if not model:
        return None
    if not (usage.input_tokens or usage.output_tokens or usage.cache_read_tokens
            or usage.cache_write_tokens):
        return 0.0
    resolved = _resolve(model, provider)
    if resolved is None:
        return None
    provider_info, model_info = resolved
    from genai_prices import Usage as PriceUsage

    priced = PriceUsage(
        input_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    try:
        calculation = model_info.calc_price(priced, provider_info)
    except (LookupError, ValueError):  # no price for this date/unit: unknown rather than wrong
        return None
    return float(calculation.total_price)


def is_known_model(model: str | None, provider: str | None = None) -> bool:
    """Whether genai-prices can price `model` (so a 0 cost would mean 'free', not 'unknown')."""
    return bool(model) and _resolve(model, provider) is not None  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def _resolve(model: str, provider: str | None) -> tuple[Any, Any] | None:
    """(provider, model) objects from genai-prices' snapshot, or None; cached per model."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    for model_ref, provider_id in _candidates(model, provider):
        try:
            return snapshot.find_provider_model(model_ref, None, provider_id, None)
        except LookupError:
            continue
    return None


def _candidates(model: str, provider: str | None) -> list[tuple[str, str | None]]:
    candidates: list[tuple[str, str | None]] = []
    if provider:
        candidates.append((model, provider))
    if "/" in model:  # "anthropic/claude-sonnet-5-5" (litellm style)
        prefix, _, rest = model.partition("/")
        candidates.append((rest, provider or prefix))
        candidates.append((rest, None))
    candidates.append((model, None))
    return candidates
