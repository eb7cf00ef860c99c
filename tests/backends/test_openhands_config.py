"""The openhands backend's configuration errors and pure bookkeeping (runs on Python 3.11 too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agenter import AutonomousCodingAgent, ConfigurationError, RequirementError, Usage
from agenter.backends.agents.openhands import OpenHandsBackend, OpenHandsOptions
from agenter.backends.agents.openhands._events import MetricsCursor, error_status_code, observation_text, response_usage
from agenter.backends.base import BackendSettings
from agenter.host.requirements import missing_requirements
from agenter.tools import tool
from agenter.usage import UsageLedger, estimate_cost

PY311 = sys.version_info < (3, 12)
SDK_MISSING = bool(missing_requirements(OpenHandsBackend.requirements(None)))  # type: ignore[arg-type]


def settings(**overrides) -> BackendSettings:
    values = {"model": "openai/gpt-4o", "tools": [], "sandbox": False, "options": OpenHandsOptions()}
    values.update(overrides)
    return BackendSettings(**values)


def test_sandbox_true_is_a_configuration_error_that_says_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match="sandbox=False") as caught:
        OpenHandsBackend.validate_settings(settings(sandbox=True))
    assert caught.value.parameter == "sandbox"
    assert "--no-sandbox" in str(caught.value)  # the CLI's name for it


@pytest.mark.skipif(SDK_MISSING, reason="the OpenHands SDK is not installed here")
def test_the_facade_checks_at_init() -> None:
    # sandbox=True is the facade's default: the error comes before any run
    with pytest.raises(ConfigurationError, match="sandbox=False"):
        AutonomousCodingAgent(backend="openhands", model="openai/gpt-4o")


def test_the_python_version_comes_before_the_sandbox() -> None:
    """On Python 3.11 the first thing a user learns is that they need 3.12, not to drop the
    sandbox (which would only lead to the next error)."""
    requirements = OpenHandsBackend.requirements(settings())
    assert requirements[0].problem() is None or requirements[0].problem().startswith("Python >= 3.12")
    if PY311:
        with pytest.raises(RequirementError) as caught:
            AutonomousCodingAgent(backend="openhands", model="openai/gpt-4o")  # sandbox=True
        assert "sandbox" not in str(caught.value)
        assert caught.value.missing[0].startswith("Python >= 3.12")


def test_a_model_is_required() -> None:
    with pytest.raises(ConfigurationError, match="provider/model") as caught:
        OpenHandsBackend.validate_settings(settings(model=None))
    assert caught.value.parameter == "model"


def test_unknown_option_is_rejected_by_the_facade() -> None:
    with pytest.raises(ConfigurationError):
        AutonomousCodingAgent(backend="openhands", model="openai/gpt-4o", sandbox=False, base_ulr="x")


def test_tool_names_of_openhands_are_reserved() -> None:
    @tool
    def terminal(command: str) -> str:
        """Shadow OpenHands' terminal."""
        return command

    with pytest.raises(ConfigurationError, match="terminal") as caught:
        OpenHandsBackend.check_tool_names([terminal])
    assert caught.value.parameter == "tools"


@pytest.mark.skipif(not PY311, reason="the Python 3.11 path")
def test_python_311_gets_a_clear_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="Python >= 3.12") as caught:
        AutonomousCodingAgent(backend="openhands", model="openai/gpt-4o", sandbox=False)
    assert "agenter-sdk[openhands]" in str(caught.value)
    assert isinstance(caught.value, RequirementError)
    assert missing_requirements(OpenHandsBackend.requirements(settings()))


@pytest.mark.skipif(not PY311, reason="the Python 3.11 path")
async def test_python_311_connect_raises_the_same_error(tmp_path: Path) -> None:
    from agenter.backends.base import SessionSpec

    backend = OpenHandsBackend(settings())
    with pytest.raises(ConfigurationError, match="Python >= 3.12"):
        await backend.connect(SessionSpec(cwd=tmp_path))
    await backend.disconnect()


def test_old_option_names_keep_working() -> None:
    options = OpenHandsOptions(num_retries=1, max_output_tokens=512, retry_min_wait=0, retry_max_wait=5,
                               api_version="2024-06-01", stream=False, max_steps=7, terminal_type="tmux",
                               extra_headers={"X-Team": "a"})
    assert (options.max_retries, options.max_tokens, options.openhands_retry_min_wait) == (1, 512, 0)
    assert (options.max_retry_wait, options.openhands_api_version, options.openhands_stream) == (5.0, "2024-06-01", False)
    assert (options.openhands_max_steps, options.openhands_terminal_type) == (7, "tmux")
    assert options.openhands_extra_headers == {"X-Team": "a"}
    with pytest.raises(ConfigurationError, match="num_retries"):
        OpenHandsOptions(num_retries=1, max_retries=2)


def test_request_timeout_takes_fractions_of_a_second() -> None:
    assert OpenHandsOptions(request_timeout=2.5).request_timeout == 2.5


def test_terminal_env_values_that_look_secret_are_redacted() -> None:
    backend = OpenHandsBackend(settings(options=OpenHandsOptions(env={"MY_SERVICE_TOKEN": "tok-0123456789abc"})))
    assert "tok-0123456789abc" not in backend.redact("the token is tok-0123456789abc")


def test_api_key_is_secret() -> None:
    options = OpenHandsOptions(api_key="sk-secret-value-123456")
    assert "sk-secret-value-123456" not in repr(options)
    assert "sk-secret-value-123456" not in str(options.model_dump())


def test_importing_the_backend_does_not_import_openhands_or_litellm() -> None:
    code = ("import sys, agenter.backends.agents.openhands; "
            "print(any(m.startswith(('openhands', 'litellm')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- usage bookkeeping ------------------------------------------------------------------------

def record(prompt: int, completion: int, cache_read: int = 0, cache_write: int = 0):
    return SimpleNamespace(prompt_tokens=prompt, completion_tokens=completion,
                           cache_read_tokens=cache_read, cache_write_tokens=cache_write)


def settle(ledger: UsageLedger, cursor: MetricsCursor, metrics) -> Usage:
    """What the backend does with each look at OpenHands' metrics."""
    responses, cost = cursor.take(metrics)
    if cost is not None:
        ledger.settle(sum(responses, Usage()), cost=cost)
    else:
        for usage in responses:
            ledger.settle(usage)
    return ledger.total


def test_prompt_tokens_without_the_cached_ones_are_input() -> None:
    usage = response_usage(record(1000, 10, cache_read=600, cache_write=100))
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (300, 600, 100, 10)
    assert response_usage(record(10, 1, cache_read=50)).input_tokens == 0  # never negative


def test_usage_is_cumulative_and_excludes_cached_tokens_from_input() -> None:
    ledger, cursor = UsageLedger("openai/gpt-4o"), MetricsCursor()
    metrics = SimpleNamespace(token_usages=[record(1000, 10, cache_read=600)], accumulated_cost=0.002)
    first = settle(ledger, cursor, metrics)
    assert (first.input_tokens, first.cache_read_tokens, first.output_tokens) == (400, 600, 10)
    assert first.cost_usd == pytest.approx(0.002)
    metrics.token_usages.append(record(2000, 20))
    metrics.accumulated_cost = 0.005
    second = settle(ledger, cursor, metrics)
    assert (second.input_tokens, second.output_tokens) == (2400, 30)
    assert second.cost_usd == pytest.approx(0.005)
    assert settle(ledger, cursor, metrics) == second  # nothing new, nothing added


def test_a_cost_seen_before_its_tokens_is_not_counted_twice() -> None:
    """OpenHands records a response's cost, then its tokens: a look in between sees the cost alone."""
    ledger, cursor = UsageLedger("openai/gpt-4o"), MetricsCursor()
    metrics = SimpleNamespace(token_usages=[], accumulated_cost=0.003)
    assert settle(ledger, cursor, metrics).cost_usd == 0.0
    metrics.token_usages.append(record(1000, 10))
    total = settle(ledger, cursor, metrics)
    assert total.cost_usd == pytest.approx(0.003) and total.input_tokens == 1000


def test_cost_from_genai_prices_when_litellm_has_none() -> None:
    ledger, cursor = UsageLedger("openai/gpt-4o"), MetricsCursor()
    metrics = SimpleNamespace(token_usages=[record(1000, 100), record(3000, 50)], accumulated_cost=0.0)
    total = settle(ledger, cursor, metrics)
    expected = (estimate_cost("openai/gpt-4o", Usage(input_tokens=1000, output_tokens=100))
                + estimate_cost("openai/gpt-4o", Usage(input_tokens=3000, output_tokens=50)))
    assert expected > 0
    assert total.cost_usd == pytest.approx(expected)


def test_unknown_model_costs_nothing_rather_than_failing() -> None:
    ledger = UsageLedger("my-provider/no-such-model-xyz")
    total = settle(ledger, MetricsCursor(), SimpleNamespace(token_usages=[record(100, 10)], accumulated_cost=0.0))
    assert (total.input_tokens, total.cost_usd) == (100, 0.0)
    assert "no-such-model-xyz" in (ledger.take_note() or "")


def test_observation_text_strips_terminal_escapes() -> None:
    observation = SimpleNamespace(to_llm_content=[SimpleNamespace(text="\x1b[?2004lhello \x1b[31mred\x1b[0m\n")])
    assert observation_text(observation) == "hello red"


def test_status_code_is_found_in_the_cause_chain() -> None:
    inner = Exception("boom")
    inner.status_code = 503  # type: ignore[attr-defined]
    outer = RuntimeError("run failed")
    outer.__cause__ = inner
    assert error_status_code(outer) == 503
    assert error_status_code(RuntimeError("x")) is None
