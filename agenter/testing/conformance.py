"""The CodingBackend contract as a reusable test suite, for built-in backends and your own.

A backend is checked through a harness: an object that builds a fresh, unconnected backend
whose model plays a named scenario (usually by scripting `ScriptedModelServer` and pointing the
real agent program at it). The suite then drives the backend directly, the way the session does,
and checks what the contract promises:

- `disconnect()` is idempotent, also without a turn and after a failed one;
- a turn cancelled mid-way (a hung model) returns promptly and leaves no process behind;
- usage arrives while the turn streams, not only at its end;
- files written by the agent's tools, and files written and deleted by its shell, are in
  `modified_files()`;
- refusal and structured output work where the capabilities declare them;
- a model server error is a BackendError (with the HTTP status where the agent reports it).

With pytest:

    from agenter.testing import conformance

    @pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
    async def test_contract(check, my_harness, tmp_path):
        await check(my_harness, tmp_path)

Scenarios a harness plays (`supports(scenario)` says which it can):

- "write": write WRITE_PATH with WRITE_CONTENT using the agent's file tool, then end the turn.
- "shell": run SHELL_COMMAND in the agent's shell (creates SHELL_CREATED, deletes
  SHELL_DELETED, which the suite creates beforehand), then end the turn.
- "hang": the model never answers.
- "refuse": decline the task with REFUSAL_REASON, through the backend's refusal mechanism.
- "output": return OUTPUT_VALUE as structured output of ConformanceOutput.
- "fail": the model server answers HTTP 500 to every request.
- "usage": two model calls (a tool call such as reading a file, then a final text) whose
  replies report usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from agenter._errors import BackendError
from agenter.backends.base import BackendCapabilities, BackendMessage, CodingBackend, SessionSpec

__all__ = [
    "CHECKS", "OUTPUT_VALUE", "REFUSAL_REASON", "SHELL_COMMAND", "SHELL_CREATED", "SHELL_DELETED",
    "WRITE_CONTENT", "WRITE_PATH", "BackendHarness", "ConformanceOutput", "check_id",
]

WRITE_PATH = "conformance.txt"
WRITE_CONTENT = "written by the agent\n"
SHELL_CREATED = "made-by-shell.txt"
SHELL_DELETED = "deleted-by-shell.txt"
SHELL_COMMAND = f"printf made > {SHELL_CREATED} && rm {SHELL_DELETED}"
REFUSAL_REASON = "conformance refusal"
OUTPUT_VALUE = {"answer": 42}

#: How long a cancelled turn may take to return (the session allows 5 s).
CANCEL_SECONDS = 6.0
#: How long processes may take to disappear after disconnect().
EXIT_SECONDS = 3.0


class ConformanceOutput(BaseModel):
    answer: int


class BackendHarness(Protocol):
    """Builds backends under test; see the module docstring for the scenarios."""

    capabilities: BackendCapabilities
    #: Optional: the mode the suite connects in ("autonomous" when absent).
    # mode: str

    def supports(self, scenario: str) -> bool: ...

    def make(self, scenario: str, cwd: Path) -> CodingBackend | Awaitable[CodingBackend]: ...


Check = Callable[[BackendHarness, Path], Awaitable[None]]


def _skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


async def _make(harness: BackendHarness, scenario: str, cwd: Path) -> CodingBackend:
    if not harness.supports(scenario):
        _skip(f"the harness does not play the {scenario!r} scenario")
    made = harness.make(scenario, cwd)
    if isinstance(made, Awaitable):
        made = await made
    return made


def _spec(cwd: Path, **kwargs: Any) -> SessionSpec:
    return SessionSpec(cwd=cwd, **kwargs)


def _spec_for(harness: BackendHarness, cwd: Path, **kwargs: Any) -> SessionSpec:
    """The session spec in the harness's mode (`harness.mode`, default "autonomous")."""
    return SessionSpec(cwd=cwd, mode=getattr(harness, "mode", "autonomous"), **kwargs)


async def _run_turn(backend: CodingBackend, prompt: str) -> list[BackendMessage]:
    messages = []
    async with contextlib.aclosing(backend.execute(prompt)) as stream:
        async for message in stream:
            messages.append(message)
    return messages


def _processes_in(cwd: Path) -> set[int]:
    """Live processes (not zombies) whose working directory is inside cwd."""
    found: set[int] = set()
    root = str(cwd.resolve())
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                where = os.readlink(f"/proc/{entry}/cwd")
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    state = handle.read().rsplit(b")", 1)[-1].split()[0]
            except OSError:
                continue
            if state not in (b"Z", b"X") and (where == root or where.startswith(root + os.sep)):
                found.add(int(entry))
    return found


async def _assert_no_processes(cwd: Path) -> None:
    deadline = time.monotonic() + EXIT_SECONDS
    while (left := _processes_in(cwd)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not left, f"processes still running in the workspace after disconnect(): {sorted(left)}"


# ---------------------------------------------------------------------- checks
async def check_disconnect_is_idempotent(harness: BackendHarness, tmp_path: Path) -> None:
    """disconnect() twice after a turn, and disconnect() on a backend never connected."""
    never = await _make(harness, "write", tmp_path)
    await never.disconnect()
    await never.disconnect()
    backend = await _make(harness, "write", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path))
    try:
        await _run_turn(backend, f"Write {WRITE_PATH}.")
    finally:
        await backend.disconnect()
    await backend.disconnect()
    await _assert_no_processes(tmp_path)


async def check_tool_writes_are_reported(harness: BackendHarness, tmp_path: Path) -> None:
    backend = await _make(harness, "write", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path))
    try:
        await _run_turn(backend, f"Write {WRITE_PATH}.")
        changed = backend.last_turn().files
    finally:
        await backend.disconnect()
    assert (tmp_path / WRITE_PATH).read_text() == WRITE_CONTENT
    assert WRITE_PATH in changed.written, f"modified_files() = {changed}"


async def check_shell_changes_are_reported(harness: BackendHarness, tmp_path: Path) -> None:
    (tmp_path / SHELL_DELETED).write_text("old\n")
    backend = await _make(harness, "shell", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path))
    try:
        await _run_turn(backend, f"Run: {SHELL_COMMAND}")
        changed = backend.last_turn().files
    finally:
        await backend.disconnect()
    assert (tmp_path / SHELL_CREATED).exists() and not (tmp_path / SHELL_DELETED).exists()
    assert SHELL_CREATED in changed.written and SHELL_DELETED in changed.deleted, f"modified_files() = {changed}"


async def check_cancelled_turn_leaves_no_process(harness: BackendHarness, tmp_path: Path) -> None:
    """The session cancels the task consuming execute() (time budget): the turn must stop
    promptly, and after disconnect() nothing it started may run."""
    backend = await _make(harness, "hang", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path))
    try:
        task = asyncio.create_task(_run_turn(backend, "Do the task."))
        await asyncio.sleep(1.5)
        assert not task.done(), "the turn ended although the model never answered"
        started = time.monotonic()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, BackendError):
            await asyncio.wait_for(task, CANCEL_SECONDS)
        assert time.monotonic() - started < CANCEL_SECONDS
        assert isinstance(backend.last_turn().files.written, set)
    finally:
        await backend.disconnect()
    await _assert_no_processes(tmp_path)


async def check_usage_arrives_during_the_turn(harness: BackendHarness, tmp_path: Path) -> None:
    backend = await _make(harness, "usage", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path))
    seen_during: list[int] = []
    try:
        async with contextlib.aclosing(backend.execute("Look at the files, then answer.")) as stream:
            async for _ in stream:
                seen_during.append(backend.usage().total_tokens)
        final = backend.usage().total_tokens
    finally:
        await backend.disconnect()
    assert final > 0, "no usage reported"
    assert any(0 < tokens for tokens in seen_during[:-1]) or (seen_during and seen_during[0] > 0), (
        f"usage arrived only at the end of the turn (per message: {seen_during})")


async def check_refusal(harness: BackendHarness, tmp_path: Path) -> None:
    backend = await _make(harness, "refuse", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path))
    try:
        await _run_turn(backend, "Do something you must refuse.")
        refusal = backend.last_turn().refusal
    finally:
        await backend.disconnect()
    assert refusal is not None and REFUSAL_REASON in refusal.reason, f"refusal() = {refusal}"


async def check_structured_output(harness: BackendHarness, tmp_path: Path) -> None:
    if not harness.capabilities.structured_output:
        _skip("the backend declares no structured output")
    backend = await _make(harness, "output", tmp_path)
    await backend.connect(_spec_for(harness, tmp_path, output_type=ConformanceOutput))
    try:
        await _run_turn(backend, "Answer with the number 42.")
        output = backend.last_turn().output
    finally:
        await backend.disconnect()
    assert output == ConformanceOutput(**OUTPUT_VALUE), f"structured_output() = {output!r}"


async def check_model_failure_is_a_backend_error(harness: BackendHarness, tmp_path: Path) -> None:
    backend = await _make(harness, "fail", tmp_path)
    error: BaseException | None = None
    try:
        await backend.connect(_spec_for(harness, tmp_path))
        await asyncio.wait_for(_run_turn(backend, "Do the task."), 60)
    except BackendError as exc:
        error = exc
    finally:
        await backend.disconnect()
    assert isinstance(error, BackendError), "an HTTP 500 from the model did not raise BackendError"
    assert error.status_code in (None, 500)
    await _assert_no_processes(tmp_path)


CHECKS: list[Check] = [
    check_disconnect_is_idempotent,
    check_tool_writes_are_reported,
    check_shell_changes_are_reported,
    check_cancelled_turn_leaves_no_process,
    check_usage_arrives_during_the_turn,
    check_refusal,
    check_structured_output,
    check_model_failure_is_a_backend_error,
]


def check_id(check: Check) -> str:
    return check.__name__.removeprefix("check_")
