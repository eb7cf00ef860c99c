"""The openai backend against the scripted model server: wires, structured output and its
fallback, retries, errors, usage, options, and the backend contract (conformance suite, run by tests/backends/test_contract.py).

Patch mode itself is proven in tests/session/test_patch_mode.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import BackendError, ConfigurationError
from agenter.backends import load_backend
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.backends.model_api.openai_compat import OpenAICompatBackend, OpenAIOptions
from agenter.testing import ScriptedModelServer, disconnect, hang, http_error, reply, text, thinking

from ..completion import Answer, completion_agent, proposal


def make_agent(server: ScriptedModelServer, mode: str = "patch", model: str = "scripted-model",
               **options: Any) -> AutonomousCodingAgent:
    return completion_agent("openai", server, mode, model, **options)


# ---------------------------------------------------------------------- registry and options


def test_registered_under_openai():
    assert load_backend("openai") is OpenAICompatBackend
    # The class declares what its tool loop can do (tests/backends/model_api/openai_compat/test_openai_harness.py); a
    # backend on the context path has the completion backends' capabilities.
    assert OpenAICompatBackend.capabilities.names() == [
        "text_completion", "streaming", "structured_output", "native_tool_loop", "custom_tools", "mcp",
        "filesystem_read", "filesystem_edit", "shell", "sandbox", "resume", "steering", "pause"]
    settings = BackendSettings(model="m", tools=[], sandbox=True, mode="patch", options=OpenAIOptions(api_key="k"))
    assert OpenAICompatBackend(settings).capabilities.names() == [
        "text_completion", "streaming", "structured_output", "sandbox"]


def test_model_is_required():
    with pytest.raises(ConfigurationError, match=r"needs model=\.\.\."):
        AutonomousCodingAgent(backend="openai", mode="patch", api_key="k")


def test_api_key_is_required_without_base_url(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="no OpenAI API key: set OPENAI_API_KEY"):
        AutonomousCodingAgent(backend="openai", model="gpt-5-mini", mode="patch")
    # A local server needs none.
    AutonomousCodingAgent(backend="openai", model="qwen", mode="patch", base_url="http://127.0.0.1:8080/v1")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigurationError) as info:
        AutonomousCodingAgent(backend="openai", model="m", mode="patch", api_key="k", wire="chat")
    assert "openai_wire" in str(info.value) and "allowed_commands" in str(info.value)


def test_custom_tools_are_refused():
    def lookup(name: str) -> str:
        """Look something up."""
        return name

    # On the context path the model calls no tool: refused when the agent is built.
    with pytest.raises(ConfigurationError, match="custom tools run in agenter's own agent"):
        AutonomousCodingAgent(backend="openai", model="m", mode="patch", api_key="k", tools=[lookup])


def test_a_network_rule_needs_the_sandbox():
    # Network rules are enforced by the bash tool's sandbox: without it they fail when built.
    with pytest.raises(ConfigurationError, match="network rules other than 'allow network' need sandbox=True"):
        AutonomousCodingAgent(backend="openai", model="m", api_key="k", sandbox=False, permissions=["deny network"])


# ---------------------------------------------------------------------- wires


async def test_responses_wire_sends_instructions_and_text_format(tmp_path: Path):
    with ScriptedModelServer([proposal()]) as server:
        result = await make_agent(server, openai_wire="responses", max_tokens=1234).execute("Create a.py",
                                                                                              cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    request = server.model_requests[0]
    assert request.wire == "openai-responses"
    body = request.body
    assert "You are working on a task in a repository" in body["instructions"]
    assert body["text"]["format"]["type"] == "json_schema" and body["text"]["format"]["strict"] is True
    assert body["max_output_tokens"] == 1234
    assert "store" not in body  # only sent to the OpenAI API itself


async def test_chat_wire_sends_max_tokens_to_a_compatible_server(tmp_path: Path):
    with ScriptedModelServer([proposal()]) as server:
        await make_agent(server, max_tokens=777, temperature=0.2,
                         openai_extra_body={"top_k": 20}).execute("Create a.py", cwd=tmp_path)
    body = server.model_requests[0].body
    assert body["max_tokens"] == 777 and "max_completion_tokens" not in body
    assert body["temperature"] == 0.2 and body["top_k"] == 20
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_without_streaming(tmp_path: Path, wire: str):
    with ScriptedModelServer([proposal()]) as server:
        result = await make_agent(server, stream=False, openai_wire=wire).execute("Create a.py", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert server.model_requests[0].body.get("stream") in (None, False)
    assert (tmp_path / "a.py").read_text() == "x = 1\n"


async def test_reasoning_is_a_thinking_event(tmp_path: Path):
    with ScriptedModelServer([reply(thinking("Let me think."), text("The answer."))]) as server:
        events = [e async for e in make_agent(server, mode="analysis").stream_execute("Why?", cwd=tmp_path)]
    thoughts = [e.data["content"] for e in events if e.data.get("message_type") == "thinking"]
    assert thoughts == ["Let me think."]


# ---------------------------------------------------------------------- structured output


async def test_structured_output_steps_down_when_the_server_refuses_the_format(tmp_path: Path):
    script = [http_error(400, "response_format json_schema is not supported by this server"),
              http_error(400, "response_format type json_object is not supported"),
              reply(text('Here it is: ```json\n{"answer": 42}\n```'))]
    with ScriptedModelServer(script) as server:
        events = [e async for e in make_agent(server, mode="analysis").stream_execute(
            "The answer?", cwd=tmp_path, output_type=Answer)]
    result = events[-1]._result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Answer(answer=42)
    bodies = [r.body for r in server.model_requests]
    assert bodies[0]["response_format"]["type"] == "json_schema"
    assert bodies[1]["response_format"] == {"type": "json_object"}
    assert "response_format" not in bodies[2]
    assert "matching this JSON schema" in json.dumps(bodies[2])  # the schema went into the prompt
    notes = [e.data["content"] for e in events if e.data.get("message_type") == "status"]
    assert any("refused the response format" in n and "JSON mode" in n for n in notes)
    assert any("refused the response format" in n and "the prompt" in n for n in notes)


async def test_an_unrelated_bad_request_does_not_step_down(tmp_path: Path):
    with ScriptedModelServer([http_error(400, "model 'x' does not exist")]) as server:
        result = await make_agent(server, mode="analysis").execute("Q?", cwd=tmp_path, output_type=Answer)
    assert result.status is CodingStatus.ERROR
    assert "error 400" in (result.error or "") and len(server.model_requests) == 1


async def test_prompt_mode_never_sends_a_response_format(tmp_path: Path):
    with ScriptedModelServer([reply(text('{"answer": 1}'))]) as server:
        result = await make_agent(server, mode="analysis", structured_output="prompt").execute(
            "Q?", cwd=tmp_path, output_type=Answer)
    assert result.output == Answer(answer=1)
    assert "response_format" not in server.model_requests[0].body


# ---------------------------------------------------------------------- retries and errors


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transient_errors_are_retried(tmp_path: Path, status: int):
    with ScriptedModelServer([http_error(status), proposal()]) as server:
        events = [e async for e in make_agent(server).stream_execute("Create a.py", cwd=tmp_path)]
    assert events[-1]._result.status is CodingStatus.COMPLETED
    notes = [e.data["content"] for e in events if e.data.get("message_type") == "status"]
    assert any(n.startswith(f"retrying after {status} (retry 1/4") for n in notes)


async def test_dropped_stream_is_retried(tmp_path: Path):
    with ScriptedModelServer([disconnect(after_events=2), proposal()]) as server:
        events = [e async for e in make_agent(server).stream_execute("Create a.py", cwd=tmp_path)]
    assert events[-1]._result.status is CodingStatus.COMPLETED
    assert any("retrying after a connection error" in e.data.get("content", "") for e in events)


async def test_auth_failure_is_not_retried_and_never_shows_the_key(tmp_path: Path):
    key = "sk-test-very-secret-value-123"
    with ScriptedModelServer([], default=http_error(401, f"Incorrect API key provided: {key}")) as server:
        agent = make_agent(server, api_key=key)
        backend = OpenAICompatBackend(agent._settings)
        await backend.connect(SessionSpec(cwd=tmp_path, mode="patch"))
        try:
            with pytest.raises(BackendError) as info:
                async for _ in backend.execute("Create a.py"):
                    pass
        finally:
            await backend.disconnect()
        result = await agent.execute("Create a.py", cwd=tmp_path)
    assert info.value.kind == "auth" and info.value.status_code == 401
    assert key not in str(info.value) and "authentication failed (401)" in str(info.value)
    assert len(server.model_requests) == 2  # one per run: no retry
    assert result.status is CodingStatus.ERROR and key not in (result.error or "")


async def test_retries_give_up_with_the_status(tmp_path: Path):
    with ScriptedModelServer([], default=http_error(429, "slow down")) as server:
        result = await make_agent(server, max_retries=2).execute("Create a.py", cwd=tmp_path)
    assert result.status is CodingStatus.ERROR
    assert result.error == "OpenAI-compatible API error 429 after 3 attempts: slow down"
    assert len(server.model_requests) == 3


async def test_retry_after_is_honoured_within_the_cap(tmp_path: Path):
    import time

    with ScriptedModelServer([http_error(429, headers={"retry-after": "0.4"}), proposal()]) as server:
        started = time.monotonic()
        result = await make_agent(server, max_retry_wait=1.0).execute("Create a.py", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert time.monotonic() - started >= 0.4


# ---------------------------------------------------------------------- usage


async def test_usage_counts_cached_tokens_apart_and_is_priced(tmp_path: Path):
    usage = {"input_tokens": 1200, "output_tokens": 100, "cache_read_input_tokens": 1000}
    with ScriptedModelServer([reply(text("fine"), usage=usage)]) as server:
        result = await make_agent(server, mode="analysis", model="gpt-4o-mini").execute("Q?", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    # The server reports prompt_tokens 2200 of which cached_tokens 1000: agenter counts input
    # without the cached part.
    assert (result.input_tokens, result.cache_read_tokens, result.output_tokens) == (1200, 1000, 100)
    # gpt-4o-mini: $0.15/M input, $0.075/M cached input, $0.60/M output
    assert result.total_cost_usd == pytest.approx(1200 * 0.15e-6 + 1000 * 0.075e-6 + 100 * 0.6e-6, rel=1e-3)


async def test_a_request_cancelled_after_it_was_sent_counts_its_prompt_as_an_estimate(tmp_path: Path):
    """On the context path, through execute(): a paid API bills the prompt of a request it
    received, so the time budget cancelling a request the model never answers still counts its
    prompt, marked as agenter's estimate. The budget is set past this machine's time to a
    request (a run measures it, once the imports are done)."""
    import time

    from agenter import Budget
    from agenter.testing import estimate_tokens

    (tmp_path / "notes.txt").write_text("hello " * 1000)
    arrived: list[float] = []

    def note(request: Any) -> None:
        arrived.append(time.monotonic())
        return None  # the script answers

    with ScriptedModelServer([reply(text("ok")), reply(text("ok"))], handler=note) as warm:
        await make_agent(warm, mode="analysis").execute("Say ok.", cwd=tmp_path, require_changes=False)
        began = time.monotonic()
        await make_agent(warm, mode="analysis").execute("Say ok.", cwd=tmp_path, require_changes=False)
    budget = max(2.0, 3 * (arrived[1] - began))
    with ScriptedModelServer([], default=hang()) as server:
        agent = make_agent(server, mode="analysis", budget=Budget(max_time_seconds=budget))
        result = await agent.execute("Summarize notes.txt.", cwd=tmp_path, require_changes=False)
        sent = server.wait_for_requests(1)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    prompt = sum(estimate_tokens(m["content"]) for m in sent[0].body["messages"])
    assert result.input_tokens > 1000 and abs(result.input_tokens - prompt) <= len(sent[0].body["messages"])
    assert result.estimated_input_tokens == result.input_tokens and result.estimated_tokens == result.total_tokens


async def test_an_error_answer_costs_no_tokens_and_reported_usage_is_not_an_estimate(tmp_path: Path):
    with ScriptedModelServer([http_error(500, "down"), reply(text("fine"), usage={"input_tokens": 30,
                                                                                   "output_tokens": 4})]) as server:
        result = await make_agent(server, mode="analysis").execute("Q?", cwd=tmp_path, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (result.input_tokens, result.output_tokens, result.estimated_tokens) == (30, 4, 0)


async def test_the_session_spec_chooses_the_path_at_connect(tmp_path: Path):
    """Code that drives the backend directly: a patch spec runs the context path, an autonomous
    one agenter's own agent (whatever mode the settings were built with)."""
    settings = BackendSettings(model="m", tools=[], sandbox=True, options=OpenAIOptions(
        base_url="http://127.0.0.1:9/v1", api_key="k"))
    for mode, context in (("patch", True), ("autonomous", False)):
        backend = OpenAICompatBackend(settings)
        try:
            await backend.connect(SessionSpec(cwd=tmp_path, mode=mode))
            assert backend.context_path is context and backend.capabilities.resume is not context
        finally:
            await backend.disconnect()
