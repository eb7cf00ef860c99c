"""The harness (model_api/_harness) is model-neutral, and the Anthropic wire keeps the protocol.

The loop itself is proven by the anthropic-sdk tests, which run it for real against the
scripted server; these are the pure checks of the seam between the harness and a wire."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agenter.backends.model_api._harness.wire import STOPS, ModelWire, WireRequest
from agenter.backends.model_api.anthropic_sdk._events import neutral_stop
from agenter.backends.model_api.anthropic_sdk._wire import AnthropicWire

HARNESS = Path(__file__).parents[2] / "agenter" / "backends" / "model_api" / "_harness"
#: Packages of model providers and their SDKs; only a wire module imports one.
PROVIDERS = ("anthropic", "openai", "litellm", "google", "boto3", "botocore", "httpx")


def _imported(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_the_harness_imports_no_provider_and_no_member():
    problems = []
    for path in sorted(HARNESS.glob("*.py")):
        for name in _imported(path):
            if name.split(".")[0] in PROVIDERS:
                problems.append(f"{path.name} imports {name}")
            if name.startswith("agenter.backends.model_api.") and not name.startswith(
                    "agenter.backends.model_api._harness"):
                problems.append(f"{path.name} imports a member of the family: {name}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("reason", "stop"), [
    ("end_turn", "end"), ("stop_sequence", "end"), ("pause_turn", "end"), (None, "end"), ("something_new", "end"),
    ("tool_use", "tool_use"), ("max_tokens", "max_tokens"), ("model_context_window_exceeded", "context_length"),
    ("refusal", "refusal"),
])
def test_anthropic_stop_reasons_in_the_neutral_vocabulary(reason, stop):
    assert neutral_stop(reason) == stop and stop in STOPS


def _wire(caching: bool = True) -> AnthropicWire:
    return AnthropicWire(None, model="claude-sonnet-4-5", prompt_caching=caching)


def test_the_anthropic_wire_keeps_the_protocol():
    wire = _wire()
    assert isinstance(wire, ModelWire)
    assert wire.features.native_tools and wire.features.cache_marks and wire.features.provider_tools
    assert wire.features.output_limit == 64000  # sonnet-4: the ceiling the harness escalates to
    assert AnthropicWire(None, model="some-new-model", prompt_caching=False).features.output_limit is None


TOOLS = [{"name": "read_file", "description": "Read.", "input_schema": {"type": "object"}},
         {"name": "refuse_task", "description": "Refuse.", "input_schema": {"type": "object"}}]
MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]


def test_a_loop_request_is_marked_for_the_cache_and_a_one_off_request_is_not():
    wire = _wire()
    params = wire.params(WireRequest(system="be good", messages=MESSAGES, tools=TOOLS, max_tokens=100))
    assert params["system"] == [{"type": "text", "text": "be good", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" in params["tools"][-1] and "cache_control" not in params["tools"][0]
    assert "cache_control" in params["messages"][-1]["content"][-1]
    # The harness's own lists are never marked (marks go on copies).
    assert "cache_control" not in TOOLS[-1] and "cache_control" not in MESSAGES[-1]["content"][-1]
    one_off = wire.params(WireRequest(system="sum up", messages=MESSAGES[:1], max_tokens=10, cache=False, timeout=5))
    assert one_off["system"] == [{"type": "text", "text": "sum up"}] and "tools" not in one_off
    assert "cache_control" not in one_off["messages"][0]["content"][-1] and one_off["timeout"] == 5
    uncached = _wire(caching=False).params(WireRequest(system="s", messages=MESSAGES, tools=TOOLS, max_tokens=1))
    assert "cache_control" not in str(uncached)


def test_sampling_thinking_and_tool_choice_map_to_the_messages_api():
    wire = _wire()
    params = wire.params(WireRequest(system="s", messages=MESSAGES, max_tokens=4096, thinking=2048, effort="high",
                                     tool_choice="any"))
    assert params["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert params["output_config"] == {"effort": "high"} and params["tool_choice"] == {"type": "any"}
    assert "temperature" not in params
    params = wire.params(WireRequest(system="s", messages=MESSAGES, max_tokens=10, thinking="adaptive",
                                     temperature=0.0))
    assert params["thinking"] == {"type": "adaptive"} and params["temperature"] == 0.0
    with pytest.raises(ValueError, match="output_schema"):
        wire.params(WireRequest(system="s", messages=MESSAGES, max_tokens=10, output_schema={"type": "object"}))
