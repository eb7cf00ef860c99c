"""The litellm backend: real LiteLLM pointed at the scripted model server (its OpenAI provider with
api_base), for the options, LiteLLM's own price, retries, errors, structured output and the
backend contract (conformance suite). Patch mode itself is proven in tests/test_patch_mode.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends import load_backend
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.backends.capabilities import CapabilityError
from agenter.testing import ScriptedModelServer, conformance, disconnect, hang, http_error, reply, text

# Not imported here: the backend imports LiteLLM itself, after telling it to use the price map it
# ships instead of fetching one from the network.
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed"),
    # LiteLLM reads pydantic fields the deprecated way on every streamed chunk, and declares
    # TypedDicts pydantic warns about.
    pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
]


def make_agent(server: ScriptedModelServer, mode: str = "patch", model: str = "openai/scripted-model",
               **options: Any) -> AutonomousCodingAgent:
    settings: dict[str, Any] = {"base_url": server.openai_base_url, "api_key": "test-key", "max_retry_wait": 0.0}
    settings.update(options)
    return AutonomousCodingAgent(backend="litellm", model=model, mode=mode, **settings)


def proposal(path: str = "a.py", content: str = "x = 1\n") -> Any:
    change = {"path": path, "operation": "create", "new_path": None, "diff": None, "search_replace": None,
              "content": content}
    return reply(text(json.dumps({"summary": f"Create {path}.", "files": [change]})))


class Answer(BaseModel):
    answer: int


def _litellm_backend() -> Any:
    from agenter.backends.model_api.litellm import LiteLLMBackend

    return LiteLLMBackend


def test_registered_under_litellm():
    backend = _litellm_backend()
    assert load_backend("litellm") is backend
    assert backend.capabilities.names() == ["text_completion", "streaming", "structured_output", "sandbox"]


def test_autonomous_mode_fails_fast():
    with pytest.raises(CapabilityError) as info:
        AutonomousCodingAgent(backend="litellm", model="openai/gpt-5-mini")
    assert str(info.value).startswith("Cannot run in autonomous mode with backend=litellm.\nRequired capabilities:\n"
                                      "- filesystem_edit\n- native_tool_loop\nAvailable capabilities:\n"
                                      "- text_completion\n- streaming\n- structured_output\n- sandbox\n"
                                      "Instead: run it in patch mode (mode='patch')")


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


# ---------------------------------------------------------------------- conformance


class _Harness:
    """LiteLLM backends playing the conformance scenarios (patch mode; 'output' in analysis)."""

    def __init__(self) -> None:
        self.capabilities = _litellm_backend().capabilities
        self.servers: list[ScriptedModelServer] = []

    def supports(self, scenario: str) -> bool:
        # A completion backend changes no file itself: patch mode's writes are the session's
        # (tests/test_patch_mode.py proves them end to end).
        return scenario in {"hang", "refuse", "output", "fail", "usage"}

    def make(self, scenario: str, cwd: Path) -> Any:
        options: dict[str, Any] = {"max_retry_wait": 0.0}
        script: list[Any] = []
        default: Any = None
        if scenario == "hang":
            default = hang()
        elif scenario == "refuse":
            default = reply(text(f"REFUSED: {conformance.REFUSAL_REASON}"))
        elif scenario == "output":
            default = reply(text(json.dumps(conformance.OUTPUT_VALUE)))
        elif scenario == "fail":
            default = http_error(500, "model down")
            options["max_retries"] = 1
        else:  # usage: a read step, then the proposal
            (cwd / "notes.txt").write_text("notes\n")
            options["context_tokens"] = 0
            script = [reply(text('{"read_files": []}'), usage={"input_tokens": 50, "output_tokens": 5}), proposal()]
        server = ScriptedModelServer(script, default=default).start()
        self.servers.append(server)
        return _mode_backend("analysis" if scenario == "output" else "patch", server, options)

    def close(self) -> None:
        for server in self.servers:
            server.stop()


def _mode_backend(mode: str, server: ScriptedModelServer, options: dict[str, Any]) -> Any:
    from agenter.backends.model_api.litellm import LiteLLMBackend, LiteLLMOptions

    class ModeBackend(LiteLLMBackend):
        # The suite connects in autonomous mode, which a completion backend refuses.
        async def _connect(self, spec: SessionSpec) -> None:
            spec.mode = mode
            await super()._connect(spec)

    settings = BackendSettings(model="openai/scripted-model", tools=[], sandbox=True, options=LiteLLMOptions(
        base_url=server.openai_base_url, api_key="test-key", **options))
    return ModeBackend(settings)


@pytest.fixture
def harness():
    made = _Harness()
    yield made
    made.close()


@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, harness, tmp_path):
    await check(harness, tmp_path)
