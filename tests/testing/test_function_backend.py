"""FunctionBackend: the in-process double users test their pipelines with, held to the same
contract as every real backend (agenter.testing.conformance)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenter import AutonomousCodingAgent, BackendError, CodingStatus, tool
from agenter.backends import BackendSettings
from agenter.testing import FunctionBackend, FunctionOptions, TurnContext, conformance


class FunctionHarness:
    capabilities = FunctionBackend.capabilities

    def supports(self, scenario: str) -> bool:
        return True

    def make(self, scenario: str, cwd: Path) -> FunctionBackend:
        turns = {
            "write": lambda ctx: [ctx.write(conformance.WRITE_PATH, conformance.WRITE_CONTENT), "done"],
            "shell": _shell,
            "hang": _hang,
            "refuse": lambda ctx: ctx.refuse(conformance.REFUSAL_REASON),
            "output": lambda ctx: (ctx.output(conformance.OUTPUT_VALUE), None)[1],
            "fail": _fail,
            "usage": _usage,
        }
        options = FunctionOptions(turn=turns[scenario])
        return FunctionBackend(BackendSettings(model=None, tools=[], sandbox=True, options=options))


async def _shell(ctx: TurnContext):
    process = await asyncio.create_subprocess_shell(conformance.SHELL_COMMAND, cwd=ctx.cwd)
    await process.wait()
    yield "ran it"


async def _hang(ctx: TurnContext):
    yield "thinking"
    await asyncio.sleep(3600)


def _fail(ctx: TurnContext):
    raise BackendError("model server error (HTTP 500)", status_code=500)


async def _usage(ctx: TurnContext):
    ctx.use(input_tokens=1000, output_tokens=50)
    yield "looked at the files"
    ctx.use(input_tokens=1100, output_tokens=20)
    yield "done"


@pytest.fixture
def harness() -> FunctionHarness:
    return FunctionHarness()


@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, harness, tmp_path):
    await check(harness, tmp_path)


async def test_custom_tool_errors_reach_the_model_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICE_API_KEY", "tool-secret-value-123")
    replies = []

    @tool
    def lookup(ticket: str) -> str:
        """Look up a ticket."""
        raise RuntimeError("backend said: key tool-secret-value-123 rejected")

    async def turn(ctx: TurnContext):
        reply = await ctx.call_tool("lookup", {"ticket": "T-1"})
        replies.append(reply)
        ctx.write("a.py", "a = 1\n")
        yield "done"

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, tools=[lookup])
    result = await agent.execute("use the tool", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert replies[0].is_error and "RuntimeError" in replies[0].text
    assert "tool-secret-value-123" not in replies[0].text
    with pytest.raises(RuntimeError):
        lookup("T-2")  # a Tool is still callable as the function


async def test_a_sync_tool_still_running_is_reported_not_hidden(tmp_path):
    """The time budget cancels a turn while a sync tool sleeps in its thread: the turn waits for
    it (bounded), so the file it writes is in the result."""
    import time as _time

    @tool
    def slow_write(name: str) -> str:
        """Write a file slowly."""
        _time.sleep(1.0)
        (tmp_path / name).write_text("late\n")
        return "written"

    async def turn(ctx: TurnContext):
        yield "calling"
        await ctx.call_tool("slow_write", {"name": "late.txt"})
        yield "after"

    from agenter import Budget

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, tools=[slow_write])
    result = await agent.execute("go", cwd=tmp_path, budget=Budget(max_time_seconds=0.5))
    assert result.status is CodingStatus.BUDGET_EXCEEDED
    assert (tmp_path / "late.txt").exists()
    assert result.files == {"late.txt": "late\n"}


async def test_permission_gate_safety_checks_hold_by_default(tmp_path):
    from agenter.permissions import ToolCall

    decisions = []

    async def turn(ctx: TurnContext):
        decisions.append(await ctx.permit(ToolCall.shell("git push --force origin main")))
        decisions.append(await ctx.permit(ToolCall.edit(".git/hooks/pre-commit")))
        decisions.append(await ctx.permit(ToolCall.shell("pytest -q")))
        ctx.write("a.py", "a = 1\n")
        yield "done"

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn)
    events = [e async for e in agent.stream_execute("p", cwd=tmp_path)]
    result = events[-1].result
    assert [d.allowed for d in decisions] == [False, False, True]
    assert result.status is CodingStatus.COMPLETED
    assert {d["tool"] for d in result.permission_denials} == {"shell", "edit"} or len(result.permission_denials) == 2
    permission_events = [e for e in events if e.data.get("message_type") == "permission"]
    assert len(permission_events) == 3 and permission_events[0].data["tool_input"]["decision"] == "deny"


async def test_ask_rules_go_to_the_callback_with_a_deadline(tmp_path):
    from agenter.permissions import ToolCall

    asked = []

    async def never_answers(request):
        asked.append(request.question)
        await asyncio.sleep(60)

    async def turn(ctx: TurnContext):
        decision = await ctx.permit(ToolCall.shell("npm publish"))
        ctx.write("a.py", "a = 1\n")
        yield decision.reason

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, permissions=["ask shell:npm publish*"],
                                  on_permission=never_answers, permission_timeout=0.3)
    result = await agent.execute("p", cwd=tmp_path)
    assert asked and result.permission_denials and result.permission_denials[0]["tool"]


def test_a_policy_the_backend_cannot_enforce_fails_at_construction():
    from agenter import ConfigurationError

    class Unwired(FunctionBackend):
        permission_kinds = frozenset({"edit"})

    with pytest.raises(ConfigurationError, match="cannot enforce permission rules for: shell"):
        AutonomousCodingAgent(backend=Unwired, turn=[], permissions=["deny shell:git push*"])
