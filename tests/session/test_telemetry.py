"""OpenTelemetry: spans for session › iteration › turn › tool call and validator, with GenAI
attributes, checked with the SDK's in-memory exporter; TRACEPARENT for agent programs; nothing
imported when OpenTelemetry is not in use."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from typing import Any, ClassVar

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agenter import AutonomousCodingAgent, BackendError, CodingStatus
from agenter.backends import BackendMessage, MessageType
from agenter.host import AgentProcess
from agenter.testing import FunctionBackend, TurnContext


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        found.setdefault(span.name, []).append(span)
    return found


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


def traceparent(span: ReadableSpan) -> str:
    return f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}"


async def test_a_run_with_a_retry_is_traced_span_by_span(tmp_path, spans):
    provider, exporter = spans
    seen_env: list[dict[str, str]] = []

    def turn(ctx: TurnContext):
        seen_env.append(ctx.backend.trace_env())
        ctx.use(input_tokens=100, output_tokens=20, cost_usd=0.02)
        content = "def f(:\n" if ctx.iteration == 1 else "def f():\n    return 1\n"
        return [
            BackendMessage(MessageType.TOOL_CALL, tool_name="Read", tool_call_id="r1", tool_input={"path": "m.py"}),
            BackendMessage(MessageType.COMMAND_START, tool_name="Bash", tool_call_id="b1",
                           details={"command": "pytest -q"}),
            BackendMessage(MessageType.TOOL_RESULT, "...", tool_name="Read", tool_call_id="r1"),
            BackendMessage(MessageType.COMMAND_END, "1 failed", tool_name="Bash", tool_call_id="b1", is_error=True,
                           details={"exit_code": 1}),
            ctx.write("m.py", content), "wrote m.py"]

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, tracer_provider=provider, model="claude-x")
    result = await agent.execute("write f", cwd=tmp_path)
    assert result.ok and result.iterations == 2

    found = by_name(exporter.get_finished_spans())
    (session,) = found["agenter.session"]
    iterations = found["agenter.iteration"]
    turns = found["invoke_agent function"]
    validators = found["agenter.validator syntax"]
    assert len(iterations) == len(turns) == len(validators) == 2
    assert parent_of(session) is None
    assert all(parent_of(i) == session.context.span_id for i in iterations)
    for iteration, agent_turn, validator in zip(iterations, turns, validators, strict=True):
        assert parent_of(agent_turn) == iteration.context.span_id
        assert parent_of(validator) == iteration.context.span_id
    tools = found["execute_tool Read"] + found["execute_tool Bash"]
    assert {parent_of(t) for t in tools} == {t.context.span_id for t in turns}
    assert len(found["execute_tool write_file"]) == 2  # announced, never finished: closed with the turn

    # GenAI attributes: the turn's own tokens and cost, the session's totals.
    first = turns[0].attributes
    assert first["gen_ai.operation.name"] == "invoke_agent" and first["gen_ai.agent.name"] == "function"
    assert first["gen_ai.request.model"] == "claude-x" and first["gen_ai.conversation.id"] == "function-session"
    assert first["gen_ai.usage.input_tokens"] == 100 and first["gen_ai.usage.output_tokens"] == 20
    assert first["agenter.cost_usd"] == pytest.approx(0.02)
    totals = session.attributes
    assert totals["gen_ai.usage.input_tokens"] == 200 and totals["agenter.cost_usd"] == pytest.approx(0.04)
    assert totals["agenter.status"] == "completed" and totals["agenter.iterations"] == 2
    bash = found["execute_tool Bash"][0]
    assert bash.attributes["gen_ai.tool.call.id"] == "b1" and bash.attributes["agenter.exit_code"] == 1
    assert bash.attributes["agenter.command"] == "pytest -q" and bash.status.status_code is StatusCode.ERROR
    assert found["execute_tool Read"][0].attributes["gen_ai.operation.name"] == "execute_tool"
    assert validators[0].status.status_code is StatusCode.ERROR and validators[0].attributes["agenter.passed"] is False
    assert validators[1].attributes["agenter.passed"] is True
    assert [i.attributes["agenter.passed"] for i in iterations] == [False, True]

    # Inside each turn the current span is the turn's: that is what an agent program continues.
    assert [env["TRACEPARENT"].rsplit("-", 1)[0] for env in seen_env] == [traceparent(t) for t in turns]


async def test_a_session_traces_each_request_under_it(tmp_path, spans):
    provider, exporter = spans
    agent = AutonomousCodingAgent(backend=FunctionBackend, tracer_provider=provider,
                                  turn=lambda ctx: [ctx.write(f"{len(ctx.prompts)}.py", "x = 1\n"), "ok"])
    async with agent.session(cwd=tmp_path) as session:
        await session.execute("one")
        await session.execute("two")
    found = by_name(exporter.get_finished_spans())
    (top,) = found["agenter.session"]
    requests = found["agenter.request"]
    assert [r.attributes["agenter.request"] for r in requests] == [1, 2]
    assert all(parent_of(r) == top.context.span_id for r in requests)
    assert {parent_of(i) for i in found["agenter.iteration"]} == {r.context.span_id for r in requests}
    assert top.attributes["agenter.requests"] == 2 and top.attributes["gen_ai.conversation.id"] == "function-session"


async def test_a_failed_run_marks_its_span(tmp_path, spans):
    provider, exporter = spans

    def broken(ctx: TurnContext):
        raise BackendError("the agent crashed", backend="function")

    result = await AutonomousCodingAgent(backend=FunctionBackend, turn=broken, tracer_provider=provider).execute(
        "p", cwd=tmp_path)
    assert result.status is CodingStatus.ERROR
    (session,) = by_name(exporter.get_finished_spans())["agenter.session"]
    assert session.status.status_code is StatusCode.ERROR and "crashed" in session.status.description


class ProgramBackend(FunctionBackend):
    """Starts a real program per turn with trace_env() in its environment, as agent CLIs do."""

    name: ClassVar[str] = "program"
    connect_env: ClassVar[dict[str, str]] = {}

    async def _connect(self, spec: Any) -> None:
        ProgramBackend.connect_env = self.trace_env()
        await super()._connect(spec)

    async def _turn(self, prompt: str):
        program = await AgentProcess.start(["sh", "-c", 'printf %s "$TRACEPARENT"'], cwd=self.cwd,
                                           env={**os.environ, **self.trace_env()}, stdin_pipe=False)
        try:
            assert program.process.stdout is not None
            said = (await asyncio.wait_for(program.process.stdout.read(), 10)).decode()
        finally:
            await program.terminate()
        yield BackendMessage(MessageType.TEXT, said)


async def test_an_agent_program_gets_the_turns_traceparent(tmp_path, spans):
    provider, exporter = spans
    agent = AutonomousCodingAgent(backend=ProgramBackend, turn=lambda ctx: None, tracer_provider=provider)
    result = await agent.execute("p", cwd=tmp_path, require_changes=False)
    found = by_name(exporter.get_finished_spans())
    (turn,) = found["invoke_agent program"]
    (session,) = found["agenter.session"]
    assert result.summary.startswith(traceparent(turn))  # what the program printed
    assert ProgramBackend.connect_env["TRACEPARENT"].startswith(traceparent(session))  # while connecting


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_without_opentelemetry_in_use_nothing_of_it_is_imported(tmp_path):
    proc = run_python(f"""
        import asyncio, sys
        from agenter import AutonomousCodingAgent
        from agenter.testing import FunctionBackend
        agent = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: [ctx.write("a.py", "a = 1\\n")])
        result = asyncio.run(agent.execute("p", cwd={str(tmp_path)!r}))
        assert result.ok, result
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        assert not loaded, loaded
        assert agent._settings is not None
        from agenter.backends.base import trace_env
        assert trace_env() == {{}}
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_the_global_tracer_provider_is_used_when_none_is_given(tmp_path):
    proc = run_python(f"""
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        from agenter import AutonomousCodingAgent
        from agenter.testing import FunctionBackend
        agent = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: [ctx.write("a.py", "a = 1\\n")])
        tracer = trace.get_tracer("app")
        with tracer.start_as_current_span("the caller's span") as outer:
            assert asyncio.run(agent.execute("p", cwd={str(tmp_path)!r})).ok
        spans = {{s.name: s for s in exporter.get_finished_spans()}}
        assert spans["agenter.session"].parent.span_id == outer.get_span_context().span_id
        print(sorted(spans))
    """)
    assert proc.returncode == 0, proc.stderr
    assert "agenter.session" in proc.stdout and "invoke_agent function" in proc.stdout
