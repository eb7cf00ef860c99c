"""ToolSpec defaults and the ToolExecutor: batching, permissions, result handling, cancellation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agenter._errors import ConfigurationError
from agenter.permissions import PermissionGate, PermissionPolicy, ToolCall
from agenter.tools import tool
from agenter.tools.executor import ToolExecutor, ToolResult, ToolUse
from agenter.tools.spec import DEFAULT_MAX_RESULT_CHARS, ToolSpec

# ---------------------------------------------------------------------------------------------
# ToolSpec


def test_spec_defaults_fail_closed() -> None:
    spec = ToolSpec()
    assert (spec.kind, spec.read_only, spec.destructive, spec.concurrency_safe, spec.requires_permission) == (
        "custom", False, True, False, True)
    assert spec.max_result_chars == DEFAULT_MAX_RESULT_CHARS


def test_read_only_spec_is_not_destructive_unless_it_says_so() -> None:
    assert ToolSpec(read_only=True).destructive is False
    assert ToolSpec(destructive=False).destructive is False
    with pytest.raises(ConfigurationError):
        ToolSpec(read_only=True, destructive=True)
    with pytest.raises(ConfigurationError):
        ToolSpec(max_result_chars=0)
    with pytest.raises(ConfigurationError):
        ToolSpec(kind="magic")  # type: ignore[arg-type]


def test_spec_builds_the_call_the_gate_judges() -> None:
    spec = ToolSpec(kind="edit", path_fields=("path", "extra"))
    call = spec.call("write_file", {"path": "src/a.py", "extra": ["b", "c"], "content": "x"})
    assert (call.kind, call.name, call.paths, call.destructive) == ("edit", "write_file", ("src/a.py", "b", "c"), True)
    shell = ToolSpec(kind="shell", command_field="cmd").call("run", {"cmd": "ls"})
    assert shell.command == "ls"
    mcp = ToolSpec(kind="mcp", mcp_server="gh", read_only=True).call("list_issues", {})
    assert (mcp.target, mcp.read_only) == ("gh/list_issues", True)


# ---------------------------------------------------------------------------------------------
# Batching


def sleeper(seconds: float, log: list[tuple[str, float, float]] | None = None):
    async def run(arguments: dict) -> str:
        started = time.monotonic()
        await asyncio.sleep(seconds)
        if log is not None:
            log.append((arguments.get("n", ""), started, time.monotonic()))
        return f"slept {arguments.get('n', '')}"

    return run


def uses(name: str, count: int) -> list[ToolUse]:
    return [ToolUse(id=f"t{i}", name=name, input={"n": str(i)}) for i in range(count)]


async def test_concurrency_safe_calls_run_together() -> None:
    executor = ToolExecutor({"look": sleeper(0.3)}, specs={"look": ToolSpec(read_only=True, concurrency_safe=True)})
    started = time.monotonic()
    results = await executor.run_batch(uses("look", 5))
    elapsed = time.monotonic() - started
    assert elapsed < 0.8, elapsed  # about 0.3 s
    assert [r.content for r in results] == [f"slept {i}" for i in range(5)]


async def test_unmarked_calls_run_one_at_a_time() -> None:
    executor = ToolExecutor({"act": sleeper(0.3)})
    started = time.monotonic()
    results = await executor.run_batch(uses("act", 5))
    elapsed = time.monotonic() - started
    assert 1.45 <= elapsed < 3.0, elapsed  # about 1.5 s
    assert [r.tool_use_id for r in results] == [f"t{i}" for i in range(5)]


async def test_only_consecutive_safe_calls_are_grouped() -> None:
    log: list[tuple[str, float, float]] = []
    executor = ToolExecutor({"look": sleeper(0.1, log), "act": sleeper(0.1, log)},
                            specs={"look": ToolSpec(read_only=True, concurrency_safe=True)})
    batch = [ToolUse("1", "look", {"n": "a"}), ToolUse("2", "look", {"n": "b"}), ToolUse("3", "act", {"n": "c"}),
             ToolUse("4", "look", {"n": "d"}), ToolUse("5", "look", {"n": "e"})]
    results = await executor.run_batch(batch)
    assert [r.tool_use_id for r in results] == ["1", "2", "3", "4", "5"]
    times = {name: (start, end) for name, start, end in log}
    assert times["c"][0] >= max(times["a"][1], times["b"][1]) - 0.01  # the serial call waits for the group
    assert min(times["d"][0], times["e"][0]) >= times["c"][1] - 0.01  # and the next group waits for it
    assert abs(times["d"][0] - times["e"][0]) < 0.05


async def test_concurrency_is_bounded() -> None:
    active = 0
    most = 0

    async def look(arguments: dict) -> str:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.05)
        active -= 1
        return "ok"

    executor = ToolExecutor({"look": look}, specs={"look": ToolSpec(concurrency_safe=True)}, max_concurrency=2)
    await executor.run_batch(uses("look", 6))
    assert most == 2


# ---------------------------------------------------------------------------------------------
# Results


async def test_oversize_result_is_saved_with_a_preview(tmp_path) -> None:
    big = "".join(f"line {i:07d}\n" for i in range(160_000))  # about 2 MB
    assert len(big) > 2_000_000
    gate = PermissionGate("bypass", tmp_path / "ws", home="/home/u")
    executor = ToolExecutor({"dump": lambda arguments: big}, results_dir=tmp_path / "run" / "tool-results", gate=gate)
    [result] = await executor.run_batch([ToolUse("big-1", "dump", {})])
    assert result.status == "ok" and result.saved_path is not None
    saved = Path(result.saved_path)
    assert saved.parent == tmp_path / "run" / "tool-results"
    assert saved.read_text() == big
    assert len(result.content) < 3_000
    assert result.content.startswith("line 0000000\n")
    assert str(saved) in result.content and f"{len(big):,} characters" in result.content
    # The model may read the saved file even though it is outside the workspace.
    assert (await gate.decide(ToolCall.read(str(saved)))).allowed


async def test_max_result_chars_comes_from_the_spec(tmp_path) -> None:
    executor = ToolExecutor({"t": lambda a: "x" * 50}, specs={"t": ToolSpec(max_result_chars=10)},
                            results_dir=tmp_path)
    [result] = await executor.run_batch([ToolUse("1", "t", {})])
    assert result.saved_path is not None and "50 characters" in result.content


async def test_oversize_without_a_results_dir_uses_a_temporary_one() -> None:
    executor = ToolExecutor({"t": lambda a: "y" * 200}, specs={"t": ToolSpec(max_result_chars=100)})
    [result] = await executor.run_batch([ToolUse("1", "t", {})])
    assert result.saved_path is not None and Path(result.saved_path).read_text() == "y" * 200


@pytest.mark.parametrize("value", ["", "   \n", None, b""])
async def test_empty_result_becomes_a_marker(value) -> None:
    executor = ToolExecutor({"quiet": lambda arguments: value})
    [result] = await executor.run_batch([ToolUse("1", "quiet", {})])
    assert (result.status, result.content) == ("ok", "(quiet completed with no output)")


async def test_non_text_results_become_json() -> None:
    executor = ToolExecutor({"data": lambda arguments: {"a": [1, 2]}})
    [result] = await executor.run_batch([ToolUse("1", "data", {})])
    assert result.content == '{"a": [1, 2]}'


async def test_exceptions_become_error_results() -> None:
    def broken(arguments: dict) -> str:
        raise ValueError("bad input")

    async def ok(arguments: dict) -> str:
        return "fine"

    executor = ToolExecutor({"broken": broken, "ok": ok})
    results = await executor.run_batch([ToolUse("1", "broken", {}), ToolUse("2", "ok", {}), ToolUse("3", "nope", {})])
    assert [r.status for r in results] == ["error", "ok", "error"]
    assert results[0].content == "Error: ValueError: bad input"
    assert "no tool named 'nope'" in results[2].content
    assert results[0].to_block() == {"type": "tool_result", "tool_use_id": "1", "content": results[0].content,
                                     "is_error": True}
    assert results[1].to_block() == {"type": "tool_result", "tool_use_id": "2", "content": "fine"}


async def test_agenter_tools_and_blocks() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    executor = ToolExecutor([add], specs={"add": ToolSpec(read_only=True, concurrency_safe=True)})
    results = await executor.run_batch([
        {"type": "tool_use", "id": "x1", "name": "add", "input": {"a": 2, "b": 3}},
        {"type": "tool_use", "id": "x2", "name": "add", "input": {"a": "two"}},
    ])
    assert results[0].content == "5"
    assert results[1].status == "error" and "ValidationError" in results[1].content


async def test_results_are_reported_as_they_come() -> None:
    seen: list[ToolResult] = []
    executor = ToolExecutor({"t": lambda a: "x"}, on_result=seen.append)
    results = await executor.run_batch(uses("t", 3))
    assert seen == results


# ---------------------------------------------------------------------------------------------
# Permissions


async def test_each_call_passes_the_gate_first(tmp_path) -> None:
    ran: list[str] = []

    def write(arguments: dict) -> str:
        ran.append(arguments["path"])
        return "written"

    gate = PermissionGate(PermissionPolicy(rules=["deny edit:secrets/**"], mode="accept_edits"), tmp_path,
                          home="/home/u")
    executor = ToolExecutor({"write": write}, specs={"write": ToolSpec(kind="edit", path_fields=("path",))}, gate=gate)
    results = await executor.run_batch([ToolUse("1", "write", {"path": "src/a.py"}),
                                        ToolUse("2", "write", {"path": "secrets/k"}),
                                        ToolUse("3", "write", {"path": ".git/hooks/pre-commit"})])
    assert [r.status for r in results] == ["ok", "denied", "denied"]
    assert ran == ["src/a.py"]
    assert "deny edit:secrets/**" in results[1].content
    assert results[2].decision is not None and results[2].decision.stage == "safety"
    assert len(gate.decisions) == 3


async def test_a_tool_that_declares_nothing_is_not_run_headless(tmp_path) -> None:
    ran = []
    executor = ToolExecutor({"deploy": lambda a: ran.append(1)}, gate=PermissionGate(None, tmp_path, home="/h"))
    [result] = await executor.run_batch([ToolUse("1", "deploy", {})])
    assert result.status == "denied" and ran == []


async def test_concurrent_group_is_decided_in_order(tmp_path) -> None:
    asked: list[str] = []

    async def answer(request) -> bool:
        asked.append(request.call.input["n"])
        await asyncio.sleep(0.01 * (5 - len(asked)))
        return request.call.input["n"] != "2"

    gate = PermissionGate(None, tmp_path, home="/h", on_permission=answer)
    executor = ToolExecutor({"look": sleeper(0.01)}, specs={"look": ToolSpec(concurrency_safe=True)}, gate=gate)
    results = await executor.run_batch(uses("look", 4))
    assert asked == ["0", "1", "2", "3"]
    assert [r.status for r in results] == ["ok", "ok", "denied", "ok"]


# ---------------------------------------------------------------------------------------------
# Every tool_use gets exactly one tool_result, also on abort


async def test_abort_event_answers_every_call() -> None:
    abort = asyncio.Event()

    async def slow(arguments: dict) -> str:
        await asyncio.sleep(10)
        return "never"

    async def quick(arguments: dict) -> str:
        return "done"

    executor = ToolExecutor({"slow": slow, "quick": quick, "look": slow},
                            specs={"look": ToolSpec(concurrency_safe=True)})
    batch = [ToolUse("1", "quick", {}), ToolUse("2", "look", {}), ToolUse("3", "look", {}), ToolUse("4", "slow", {}),
             ToolUse("5", "quick", {})]
    asyncio.get_running_loop().call_later(0.2, abort.set)
    started = time.monotonic()
    results = await executor.run_batch(batch, abort=abort)
    assert time.monotonic() - started < 2
    assert [r.tool_use_id for r in results] == ["1", "2", "3", "4", "5"]
    assert [r.status for r in results] == ["ok", "cancelled", "cancelled", "cancelled", "cancelled"]
    assert all(r.is_error for r in results[1:])


async def test_cancelling_the_task_still_answers_every_call() -> None:
    started_event = asyncio.Event()

    async def slow(arguments: dict) -> str:
        started_event.set()
        await asyncio.sleep(10)
        return "never"

    executor = ToolExecutor({"slow": slow, "quick": lambda a: "done"})
    batch = [ToolUse("a", "quick", {}), ToolUse("b", "slow", {}), ToolUse("c", "quick", {})]
    task = asyncio.create_task(executor.run_batch(batch))
    await asyncio.wait_for(started_event.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert executor.last_results is not None
    assert [(r.tool_use_id, r.status) for r in executor.last_results] == [
        ("a", "ok"), ("b", "cancelled"), ("c", "cancelled")]


async def test_abort_while_waiting_for_an_answer(tmp_path) -> None:
    abort = asyncio.Event()

    async def never(request) -> bool:
        await asyncio.sleep(10)
        return True

    gate = PermissionGate(None, tmp_path, home="/h", on_permission=never, ask_timeout=30)
    executor = ToolExecutor({"t": lambda a: "x"}, gate=gate)
    asyncio.get_running_loop().call_later(0.1, abort.set)
    results = await executor.run_batch(uses("t", 2), abort=abort)
    assert [r.status for r in results] == ["cancelled", "cancelled"]


# ---------------------------------------------------------------------------------------------
# A deferred call (on_ask="pause"): the batch stops there


async def test_a_deferred_call_stops_the_batch_there(tmp_path) -> None:
    ran: list[str] = []
    reported: list[str] = []

    def write(arguments: dict) -> str:
        ran.append(arguments["path"])
        return "written"

    gate = PermissionGate(PermissionPolicy(rules=["ask edit:secret.txt"], mode="bypass"), tmp_path, home="/h",
                          on_ask="pause")
    executor = ToolExecutor({"write": write}, specs={"write": ToolSpec(kind="edit", path_fields=("path",))},
                            gate=gate, on_result=lambda result: reported.append(result.tool_use_id))
    results = await executor.run_batch([ToolUse("1", "write", {"path": "a.txt"}),
                                        ToolUse("2", "write", {"path": "secret.txt"}),
                                        ToolUse("3", "write", {"path": "b.txt"})])
    assert [r.status for r in results] == ["ok", "deferred", "deferred"]
    assert ran == ["a.txt"] and reported == ["1"]  # deferred results are no answers for the model
    assert results[1].decision is not None and results[1].decision.deferred
    assert "waits for a person's approval" in results[1].content and "earlier call" in results[2].content
    assert len(gate.decisions) == 2  # the call after the deferred one was not decided


async def test_a_deferred_call_in_a_concurrent_group_lets_the_calls_before_it_run(tmp_path) -> None:
    ran: list[str] = []

    def look(arguments: dict) -> str:
        ran.append(arguments["path"])
        return "seen"

    gate = PermissionGate(PermissionPolicy(rules=["ask read:private/**"], mode="bypass"), tmp_path, home="/h",
                          on_ask="pause")
    executor = ToolExecutor({"look": look}, specs={"look": ToolSpec(kind="read", read_only=True, concurrency_safe=True,
                                                                    path_fields=("path",))}, gate=gate)
    results = await executor.run_batch([ToolUse(str(i), "look", {"path": path})
                                        for i, path in enumerate(["a", "b", "private/k", "c"])])
    assert [r.status for r in results] == ["ok", "ok", "deferred", "deferred"]
    assert sorted(ran) == ["a", "b"]
