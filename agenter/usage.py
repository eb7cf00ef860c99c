"""Usage and cost: a backend's ledger of what its model calls used, priced by `genai-prices`.

Price ONE model response at a time (tiered prices, e.g. higher rates above 200k input tokens,
apply per request): a backend settles each finished response into its UsageLedger, which prices
it once. While a response streams, the ledger estimates its cost from per-token rates looked up
once per model, so budgets see cost as it arrives without pricing every chunk.

Token semantics: agenter's `Usage.input_tokens` EXCLUDES cache reads and writes (as Anthropic
reports them); genai-prices' `input_tokens` is the TOTAL input including cache reads and writes.
`estimate_cost` converts between the two.

One failure policy: a model genai-prices does not know, or any pricing error, costs 0 and is
reported once (`UsageLedger.take_note`), never raised.

Loading the price table (importing genai-prices, its snapshot of every provider) takes 60-80 ms
in a fresh process (most of a second without bytecode). `UsageLedger.preload()` does it in a
thread (BaseBackend.connect starts it once the agent is up, while the first request is under
way), so pricing the first response does not wait; every load of the table goes through one
lock, so a lookup that comes early waits for the preload instead of importing the same package
at the same time in a second thread.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from agenter._types import Usage

__all__ = ["RunningTotal", "UsageLedger", "context_window", "estimate_cost", "is_known_model"]

log = logging.getLogger("agenter.usage")


def estimate_cost(model: str | None, usage: Usage, provider: str | None = None) -> float | None:
    """US dollars for `usage` on `model`, or None when the price is unknown.

    `provider` is a genai-prices provider id ("anthropic", "openai", "aws", "google", ...);
    without it the provider is inferred from the model name (a "provider/model" prefix is used
    when present).
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
    return bool(model) and _resolve(model or "", provider) is not None


def context_window(model: str | None, provider: str | None = None) -> int | None:
    """The model's context window in tokens, as genai-prices knows it (None: unknown)."""
    if not model:
        return None
    try:
        resolved = _resolve(model, provider)
    except Exception as exc:  # noqa: BLE001 - a pricing data problem must not stop a run
        log.debug("looking up %s failed: %s", model, exc)
        return None
    window = getattr(resolved[1], "context_window", None) if resolved is not None else None
    return int(window) if isinstance(window, int | float) and window > 0 else None


#: Held while genai-prices is imported and its snapshot built: one thread loads, others wait.
_load_lock = threading.Lock()


def _snapshot() -> Any:
    with _load_lock:
        from genai_prices import data_snapshot

        return data_snapshot.get_snapshot()


@functools.lru_cache(maxsize=256)
def _resolve(model: str, provider: str | None) -> tuple[Any, Any] | None:
    """(provider, model) objects from genai-prices' snapshot, or None; cached per model."""
    snapshot = _snapshot()
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


_RATE_UNIT = 100_000  # below every tier threshold genai-prices knows


@functools.lru_cache(maxsize=256)
def _rates(model: str, provider: str | None) -> tuple[float, float, float, float] | None:
    """Dollars per token for (input, output, cache read, cache write), or None when unknown."""
    unit = _RATE_UNIT
    figures = []
    for usage in (Usage(input_tokens=unit), Usage(output_tokens=unit), Usage(cache_read_tokens=unit),
                  Usage(cache_write_tokens=unit)):
        cost = estimate_cost(model, usage, provider)
        if cost is None:
            return None
        figures.append(cost / unit)
    return figures[0], figures[1], figures[2], figures[3]


def _priced(usage: Usage, rates: tuple[float, float, float, float]) -> float:
    return (usage.input_tokens * rates[0] + usage.output_tokens * rates[1]
            + usage.cache_read_tokens * rates[2] + usage.cache_write_tokens * rates[3])


def _warm(model: str | None, provider: str | None) -> None:
    """Load the price table and, when the model is known, its per-token rates (a preload)."""
    try:
        if model:
            _rates(model, provider)
        else:
            _snapshot()
    except Exception as exc:  # noqa: BLE001 - the lookup itself will try again and note it
        log.debug("preloading prices for %s failed: %s", model, exc)


def _safe_cost(model: str | None, usage: Usage, provider: str | None) -> float | None:
    try:
        return estimate_cost(model, usage, provider)
    except Exception as exc:  # noqa: BLE001 - a pricing data problem must not stop a run
        log.debug("pricing %s failed: %s", model, exc)
        return None


class UsageLedger:
    """A backend session's usage: settled responses plus the response in flight.

    `settle(usage)` records one finished response and prices it (once); `running(usage)` replaces
    the figure of the response still streaming (cost estimated from per-token rates);
    `abandon_running()` keeps the tokens of a response that was cut off. `total` is what
    budgets read.
    """

    def __init__(self, model: str | None = None, provider: str | None = None):
        self.model = model
        self.provider = provider
        self._settled = Usage()
        self._running = Usage()
        self._unpriced: str | None = None
        self._noted: set[str] = set()
        self._preload: threading.Thread | None = None

    def preload(self) -> threading.Thread:
        """Load the price table (and this model's rates) in a daemon thread, so pricing the first
        response costs nothing; returns the thread. Lookups that come before it is done wait
        for it. Calling it again returns the same thread."""
        if self._preload is None:
            self._preload = threading.Thread(target=_warm, args=(self.model, self.provider),
                                             name="agenter-price-preload", daemon=True)
            self._preload.start()
        return self._preload

    @property
    def total(self) -> Usage:
        return self._settled + self._running if self._running.total_tokens else self._settled

    @property
    def settled(self) -> Usage:
        """Finished responses only (no estimate for the one in flight)."""
        return self._settled

    def settle(self, usage: Usage, cost: float | None = None) -> Usage:
        """Add one finished response; `cost` when the agent reported it, else priced here."""
        self._running = Usage()
        if cost is None:
            cost = self.price(usage)
        priced = usage.model_copy(update={"cost_usd": max(cost, 0.0)})
        self._settled = self._settled + priced
        return priced

    def running(self, usage: Usage, cost: float | None = None) -> None:
        """The response in flight, so far (replaces the previous in-flight figure); `cost` when
        the agent reports it, else estimated from per-token rates."""
        estimate = self._estimate(usage) if cost is None else max(cost, 0.0)
        self._running = usage.model_copy(update={"cost_usd": estimate})

    def abandon_running(self) -> None:
        """A response that ended early (dropped, cancelled): its tokens were still spent."""
        self._settled = self._settled + self._running
        self._running = Usage()

    def add_cost(self, cost: float) -> None:
        """Cost the agent reported apart from tokens."""
        if cost > 0:
            self._settled = self._settled + Usage(cost_usd=cost)

    def replace(self, total: Usage) -> None:
        """Set the session total outright (an agent that reports exact session totals)."""
        self._settled, self._running = total, Usage()

    def price(self, usage: Usage) -> float:
        """Exact cost of one response; 0 (noted once) when the model has no known price."""
        if not usage.total_tokens:
            return 0.0
        if usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens < _RATE_UNIT:
            # Below every tier threshold a response costs its tokens times the per-token rates,
            # looked up once per model: microseconds instead of a price calculation per response.
            try:
                rates = _rates(self.model, self.provider) if self.model else None
            except Exception:  # noqa: BLE001 - see _safe_cost
                rates = None
            if rates is not None:
                return _priced(usage, rates)
        cost = _safe_cost(self.model, usage, self.provider)
        if cost is None:
            self._unpriced = self.model or "(unknown model)"
            return 0.0
        return cost

    def _estimate(self, usage: Usage) -> float:
        if not usage.total_tokens or not self.model:
            return 0.0
        try:
            rates = _rates(self.model, self.provider)
        except Exception:  # noqa: BLE001 - see price()
            rates = None
        if rates is None:
            self._unpriced = self.model
            return 0.0
        return _priced(usage, rates)

    def take_note(self) -> str | None:
        """Once per model: the note that its cost could not be priced."""
        model = self._unpriced
        if model is None or model in self._noted:
            return None
        self._noted.add(model)
        return f"no price known for model {model!r}: its cost is recorded as 0"


class RunningTotal:
    """Turns running totals an agent reports (per process, per thread) into increments.

    A figure that goes down means the agent restarted its count: the new figure is the increment.
    """

    def __init__(self) -> None:
        self._usage: Usage | None = None
        self._cost: float | None = None

    def usage(self, total: Usage) -> Usage:
        last, self._usage = self._usage, total
        if last is None or not total.covers(last):
            return total.model_copy(update={"cost_usd": 0.0})
        return total.minus(last).model_copy(update={"cost_usd": 0.0})

    def cost(self, total: float) -> float:
        last, self._cost = self._cost, total
        if last is None or total < last:
            return max(total, 0.0)
        return total - last

    def start_from(self, cost: float | None = None, *, usage: Usage | None = None) -> None:
        """The agent carries its count on from `cost` and/or `usage` (a resumed session's totals,
        restored by the agent): only what it reports beyond them is new."""
        if cost is not None:
            self._cost = cost
        if usage is not None:
            self._usage = usage

    def reset(self) -> None:
        self._usage = self._cost = None
