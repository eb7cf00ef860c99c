"""Fallback chains through the facade: backend=[...] moves on for failures another backend can fix,
reverts what the failed attempt wrote, emits a FALLBACK event and lists every attempt."""

from __future__ import annotations

from typing import ClassVar

from agenter import AutonomousCodingAgent, BackendError, CodingEventType, CodingStatus
from agenter.testing import FunctionBackend, TurnContext


class OutOfQuota(FunctionBackend):
    name: ClassVar[str] = "out-of-quota"


class Healthy(FunctionBackend):
    name: ClassVar[str] = "healthy"


def partial_then_quota(ctx: TurnContext):
    ctx.write("half.py", "x = \n")
    raise BackendError("insufficient quota (HTTP 429)", status_code=429, kind="quota")


def complete(ctx: TurnContext):
    ctx.write("done.py", "x = 1\n")
    return "done"


async def test_a_quota_error_falls_back_and_the_partial_write_is_reverted(tmp_path):
    agent = AutonomousCodingAgent(backend=[(OutOfQuota, {"turn": partial_then_quota}),
                                           (Healthy, {"turn": complete})])
    events = [event async for event in agent.stream_execute("write it", cwd=tmp_path)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert not (tmp_path / "half.py").exists() and (tmp_path / "done.py").read_text() == "x = 1\n"
    assert [a["backend"] for a in result.attempts] == ["out-of-quota", "healthy"]
    assert result.attempts[0]["error_kind"] == "quota" and result.attempts[1]["status"] == "completed"
    fallback = [e for e in events if e.type is CodingEventType.FALLBACK]
    assert len(fallback) == 1 and "half.py" in str(fallback[0].data)


async def test_validation_failure_does_not_fall_back_by_default(tmp_path):
    def broken(ctx: TurnContext):
        ctx.write("bad.py", "def (:\n")
        return "done"

    agent = AutonomousCodingAgent(backend=[(OutOfQuota, {"turn": broken}), (Healthy, {"turn": complete})],
                                  max_iterations=1)
    result = await agent.execute("write it", cwd=tmp_path)
    assert result.status is CodingStatus.FAILED
    assert [a["backend"] for a in result.attempts] == ["out-of-quota"]
