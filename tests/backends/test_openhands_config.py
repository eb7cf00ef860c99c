"""The openhands backend's configuration errors and pure bookkeeping (runs on Python 3.11 too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agenter import AutonomousCodingAgent, ConfigurationError, Usage
from agenter.backends.base import BackendSettings
from agenter.backends.openhands import OpenHandsBackend, OpenHandsOptions, runtime_problem
from agenter.backends.openhands._runtime import UsageMeter, error_status_code, observation_text, relative_path
from agenter.usage import estimate_cost
from agenter.tools import tool


def settings(**overrides) -> BackendSettings:
    values = {"model": "openai/gpt-4o", "tools": [], "sandbox": False, "options": OpenHandsOptions()}
    values.update(overrides)
    return BackendSettings(**values)


def test_sandbox_true_is_a_configuration_error_that_says_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match="sandbox=False") as caught:
        OpenHandsBackend.check_settings(settings(sandbox=True))
    assert caught.value.parameter == "sandbox"


def test_the_facade_checks_at_init() -> None:
    # sandbox=True is the facade's default: the error comes before any run, on any Python
    with pytest.raises(ConfigurationError, match="sandbox=False"):
        AutonomousCodingAgent(backend="openhands", model="openai/gpt-4o")


def test_a_model_is_required() -> None:
    with pytest.raises(ConfigurationError, match="provider/model") as caught:
        OpenHandsBackend.check_settings(settings(model=None))
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
        OpenHandsBackend.check_settings(settings(tools=[terminal]))
    assert caught.value.parameter == "tools"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the Python 3.11 path")
def test_python_311_gets_a_clear_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="Python >= 3.12") as caught:
        AutonomousCodingAgent(backend="openhands", model="openai/gpt-4o", sandbox=False)
    assert "agenter[openhands]" in str(caught.value)
    assert runtime_problem() is not None


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the Python 3.11 path")
async def test_python_311_connect_raises_the_same_error(tmp_path: Path) -> None:
    from agenter.backends.base import SessionSpec

    backend = OpenHandsBackend(settings())
    with pytest.raises(ConfigurationError, match="Python >= 3.12"):
        await backend.connect(SessionSpec(cwd=tmp_path))
    await backend.disconnect()


def test_api_key_is_secret() -> None:
    options = OpenHandsOptions(api_key="sk-secret-value-123456")
    assert "sk-secret-value-123456" not in repr(options)
    assert "sk-secret-value-123456" not in str(options.model_dump())


def test_importing_the_backend_does_not_import_openhands_or_litellm() -> None:
    code = ("import sys, agenter.backends.openhands; "
            "print(any(m.startswith(('openhands', 'litellm')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- usage bookkeeping ------------------------------------------------------------------------

def record(prompt: int, completion: int, cache_read: int = 0, cache_write: int = 0):
    return SimpleNamespace(prompt_tokens=prompt, completion_tokens=completion,
                           cache_read_tokens=cache_read, cache_write_tokens=cache_write)


def test_usage_is_cumulative_and_excludes_cached_tokens_from_input() -> None:
    meter = UsageMeter("openai/gpt-4o")
    metrics = SimpleNamespace(token_usages=[record(1000, 10, cache_read=600)], accumulated_cost=0.002)
    first = meter.update(metrics)
    assert (first.input_tokens, first.cache_read_tokens, first.output_tokens) == (400, 600, 10)
    assert first.cost_usd == pytest.approx(0.002)
    metrics.token_usages.append(record(2000, 20))
    metrics.accumulated_cost = 0.005
    second = meter.update(metrics)
    assert (second.input_tokens, second.output_tokens) == (2400, 30)
    assert second.cost_usd == pytest.approx(0.005)
    assert meter.update(metrics) == second  # nothing new, nothing added


def test_cost_from_genai_prices_when_litellm_has_none() -> None:
    meter = UsageMeter("openai/gpt-4o")
    metrics = SimpleNamespace(token_usages=[record(1000, 100), record(3000, 50)], accumulated_cost=0.0)
    total = meter.update(metrics)
    expected = (estimate_cost("openai/gpt-4o", Usage(input_tokens=1000, output_tokens=100))
                + estimate_cost("openai/gpt-4o", Usage(input_tokens=3000, output_tokens=50)))
    assert expected > 0
    assert total.cost_usd == pytest.approx(expected)


def test_unknown_model_costs_nothing_rather_than_failing() -> None:
    meter = UsageMeter("my-provider/no-such-model-xyz")
    total = meter.update(SimpleNamespace(token_usages=[record(100, 10)], accumulated_cost=0.0))
    assert (total.input_tokens, total.cost_usd) == (100, 0.0)


def test_relative_path() -> None:
    cwd = Path("/work/repo")
    assert relative_path("/work/repo/src/a.py", cwd) == "src/a.py"
    assert relative_path("src/../b.py", cwd) == "b.py"
    assert relative_path("/etc/passwd", cwd) is None
    assert relative_path("/work/repo/../other/x", cwd) is None


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
