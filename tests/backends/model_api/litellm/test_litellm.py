"""The litellm backend's context path (analysis and patch mode with litellm_context="prompt", the
default): real LiteLLM pointed at the scripted model server (its OpenAI provider with api_base),
for the options, LiteLLM's own price, retries, errors, structured output and the backend
contract (conformance suite, run by tests/backends/test_contract.py). Patch mode itself is proven
in tests/session/test_patch_mode.py, agenter's own agent on LiteLLM in test_litellm_harness.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends import load_backend
from agenter.backends.base import SessionSpec
from agenter.testing import ScriptedModelServer, disconnect, http_error, reply, text

from ..completion import Answer, completion_agent, proposal

# Not imported here: the backend imports LiteLLM itself, after telling it to use the price map it
# ships instead of fetching one from the network.
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed"),
    # LiteLLM reads pydantic fields the deprecated way on every streamed chunk, and declares
    # TypedDicts pydantic warns about.
    pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
    # LiteLLM takes seconds to import: under `make check` its tests share one worker.
    pytest.mark.xdist_group("litellm"),
]


def make_agent(server: ScriptedModelServer, mode: str = "patch", model: str = "openai/scripted-model",
               **options: Any) -> AutonomousCodingAgent:
    return completion_agent("litellm", server, mode, model, **options)


def _litellm_backend() -> Any:
    from agenter.backends.model_api.litellm import LiteLLMBackend

    return LiteLLMBackend


def test_registered_under_litellm():
    backend = _litellm_backend()
    assert load_backend("litellm") is backend
    # The class declares what agenter's own agent does with it (test_litellm_harness.py);
    # a session on the context path runs with the completion backends' capabilities.
    assert backend.capabilities.names() == [
        "text_completion", "streaming", "structured_output", "native_tool_loop", "custom_tools", "mcp",
        "filesystem_read", "filesystem_edit", "shell", "sandbox", "resume", "steering", "pause"]
    agent = AutonomousCodingAgent(backend="litellm", model="openai/gpt-5-mini", mode="patch")
    assert backend(agent._settings).capabilities.names() == ["text_completion", "streaming", "structured_output",
                                                             "sandbox"]


def test_model_is_required():
    with pytest.raises(ConfigurationError, match="needs model=.*LiteLLM model string"):
        AutonomousCodingAgent(backend="litellm", mode="patch")


def test_extra_arguments_may_not_override_the_backends_own():
    with pytest.raises(ConfigurationError, match="litellm_extra may not set api_base, stream"):
        AutonomousCodingAgent(backend="litellm", model="openai/x", mode="patch",
                              litellm_extra={"stream": False, "api_base": "http://x"})


async def test_patch_applied_with_extra_arguments_passed_on(tmp_path: Path):
    with ScriptedModelServer([proposal()]) as server:
        agent = make_agent(server, litellm_extra={"extra_headers": {"x-agenter-test": "yes"}})
        result = await agent.execute("Create a.py", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (tmp_path / "a.py").read_text() == "x = 1\n"
    assert server.model_requests[0].headers["x-agenter-test"] == "yes"
    body = server.model_requests[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert "```diff\ndiff --git a/a.py b/a.py\nnew file mode 100644\n" in result.summary


async def test_litellms_own_price_is_used(tmp_path: Path):
    import litellm

    usage = {"input_tokens": 1000, "output_tokens": 200}
    with ScriptedModelServer([reply(text("fine"), usage=usage)]) as server:
        result = await make_agent(server, mode="analysis", model="openai/gpt-4o-mini").execute("Q?", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (result.input_tokens, result.output_tokens) == (1000, 200)
    prompt_cost, completion_cost = litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=1000,
                                                          completion_tokens=200)
    assert result.total_cost_usd == pytest.approx(prompt_cost + completion_cost, abs=1e-6)
    assert result.total_cost_usd > 0


@pytest.mark.slow
async def test_unpriced_model_costs_zero_with_a_note(tmp_path: Path):
    with ScriptedModelServer([reply(text("fine"))]) as server:
        events = [e async for e in make_agent(server, mode="analysis").stream_execute("Q?", cwd=tmp_path)]
    assert events[-1]._result.total_cost_usd == 0
    assert any("no price known for model 'openai/scripted-model'" in e.data.get("content", "") for e in events)


async def test_structured_output_with_the_validated_fallback(tmp_path: Path):
    script = [http_error(400, "response_format json_schema not supported"), reply(text('{"answer": "x"}')),
              reply(text('{"answer": 7}'))]
    with ScriptedModelServer(script) as server:
        result = await make_agent(server, mode="analysis").execute("Q?", cwd=tmp_path, output_type=Answer)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Answer(answer=7)
    bodies = [r.body for r in server.model_requests]
    assert bodies[1]["response_format"] == {"type": "json_object"}
    assert "answer: Input should be a valid integer" in json.dumps(bodies[2])


@pytest.mark.parametrize("fault", ["429", "500", "drop"])
async def test_transient_failures_are_retried(tmp_path: Path, fault: str):
    first = disconnect(after_events=2) if fault == "drop" else http_error(int(fault))
    with ScriptedModelServer([first, proposal()]) as server:
        events = [e async for e in make_agent(server).stream_execute("Create a.py", cwd=tmp_path)]
    assert events[-1]._result.status is CodingStatus.COMPLETED, events[-1]._result.error
    assert any(e.data.get("content", "").startswith("retrying after") for e in events)
    assert len(server.model_requests) == 2


async def test_auth_failure_fails_at_once(tmp_path: Path):
    key = "sk-litellm-secret-42"
    with ScriptedModelServer([], default=http_error(401, f"invalid key {key}")) as server:
        agent = make_agent(server, api_key=key)
        backend = _litellm_backend()(agent._settings)
        await backend.connect(SessionSpec(cwd=tmp_path, mode="patch"))
        try:
            from agenter._errors import BackendError

            with pytest.raises(BackendError) as info:
                async for _ in backend.execute("Create a.py"):
                    pass
        finally:
            await backend.disconnect()
    assert info.value.kind == "auth" and info.value.status_code == 401
    assert key not in str(info.value)
    assert len(server.model_requests) == 1


def test_mcp_servers_are_refused_on_the_context_path():
    with pytest.raises(ConfigurationError, match="MCP servers run in agenter's own agent.*litellm_context='tools'"):
        AutonomousCodingAgent(backend="litellm", model="openai/x", mode="patch",
                              mcp_servers=[{"name": "s", "command": "true"}])
