"""Fallback chains: the chain's rules with in-process members (FunctionBackend), then the proof
with real programs: claude-cli gets a quota error after writing a file, codex-cli completes; the
partial write is undone and the result shows both attempts."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import BackendError, ConfigurationError, RequirementError
from agenter._events import CodingEventType
from agenter.backends._programs.claude import bundled_cli
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.cli.claude import ClaudeCliBackend
from agenter.backends.cli.codex import CodexCliBackend
from agenter.backends.fallback import FallbackOptions, fallback_chain
from agenter.testing import FunctionBackend, TurnContext, http_error, reply, text, tool_call

from .conftest import API_KEY, REPO, installed


def writes(path: str, content: str, *, then: BaseException | None = None, tokens: int = 100) -> Any:
    def turn(ctx: TurnContext) -> Any:
        ctx.write(path, content)
        ctx.use(input_tokens=tokens, output_tokens=10)
        if then is not None:
            raise then
        return f"wrote {path}"
    return turn


def refuses(ctx: TurnContext) -> Any:
    return ctx.refuse("not this one")


def member(turn: Any, **options: Any) -> tuple[type[Any], dict[str, Any]]:
    return (FunctionBackend, {"turn": turn, **options})


def chain_backend(*entries: Any, **options: Any) -> Any:
    cls = fallback_chain(*entries)
    settings = BackendSettings(model=None, tools=[], sandbox=True, options=FallbackOptions(**options))
    cls.check_settings(settings)
    return cls(settings)


async def run(backend: Any, cwd: Path, prompt: str = "Do the task.") -> list[Any]:
    await backend.connect(SessionSpec(cwd=cwd))
    try:
        async with contextlib.aclosing(backend.execute(prompt)) as stream:
            return [message async for message in stream]
    finally:
        await backend.disconnect()


# ------------------------------------------------------------------ the chain's rules
async def test_a_quota_error_moves_on_and_the_failed_attempts_writes_are_undone(tmp_path):
    (tmp_path / "app.py").write_text("original\n")
    quota = BackendError("out of credits", backend="first", kind="quota")
    first = member(lambda ctx: [ctx.write("app.py", "half done\n"), ctx.write("new/partial.txt", "x"),
                                ctx.use(input_tokens=100, output_tokens=10), (_ for _ in ()).throw(quota)])
    backend = chain_backend(first, member(writes("done.txt", "ok\n", tokens=50)))
    messages = await run(backend, tmp_path)

    assert (tmp_path / "app.py").read_text() == "original\n"
    assert not (tmp_path / "new").exists() and (tmp_path / "done.txt").read_text() == "ok\n"
    assert backend.last_turn().files.written == {"done.txt"} and not backend.last_turn().files.deleted
    (note,) = [m for m in messages if m.tool_name == "fallback"]
    assert note.type is MessageType.STATUS
    assert note.details["from"] == "function" and note.details["reason"] == "quota"
    assert note.details["reverted"] == ["app.py", "new/partial.txt"]
    attempts = [a.as_dict() for a in backend.attempts()]
    assert [(a["backend"], a["status"], a["error_kind"]) for a in attempts] == [
        ("function", "failed", "quota"), ("function", "completed", None)]
    assert [a["usage"]["input_tokens"] for a in attempts] == [100, 50]
    assert backend.usage().input_tokens == 150  # one budget spans the chain


async def test_failed_changes_can_be_kept_with_a_note(tmp_path):
    crash = BackendError("segfault", backend="first", kind="agent_crash")
    backend = chain_backend(member(writes("partial.txt", "x", then=crash)), member(writes("done.txt", "ok")),
                            failed_changes="keep")
    messages = await run(backend, tmp_path)
    assert (tmp_path / "partial.txt").exists()
    assert backend.last_turn().files.written == {"partial.txt", "done.txt"}
    (note,) = [m for m in messages if m.tool_name == "fallback"]
    assert note.details["kept"] == ["partial.txt"] and "changes kept: partial.txt" in note.content


async def test_a_failure_another_backend_cannot_fix_is_raised(tmp_path):
    bad_request = BackendError("invalid request", backend="first", kind="config")
    backend = chain_backend(member(writes("a.txt", "x", then=bad_request)), member(writes("b.txt", "y")))
    with pytest.raises(BackendError) as caught:
        await run(backend, tmp_path)
    assert caught.value.kind == "config" and not (tmp_path / "b.txt").exists()
    assert [(a.status, a.error_kind) for a in backend.attempts()] == [("failed", "config")]


async def test_a_refusal_does_not_move_on_unless_asked(tmp_path):
    backend = chain_backend(member(refuses), member(writes("b.txt", "y")))
    await run(backend, tmp_path)
    assert backend.last_turn().refusal is not None and not (tmp_path / "b.txt").exists()

    backend = chain_backend(member(refuses), member(writes("b.txt", "y")), fallback_on=["refusal"])
    await run(backend, tmp_path)
    assert backend.last_turn().refusal is None and (tmp_path / "b.txt").exists()
    assert [a.status for a in backend.attempts()] == ["refused", "completed"]


async def test_a_member_that_is_not_installed_is_skipped(tmp_path):
    missing = (ClaudeCliBackend, {"program_path": str(tmp_path / "no-claude"), "base_url": "http://127.0.0.1:9"})
    backend = chain_backend(missing, member(writes("b.txt", "y")))
    await run(backend, tmp_path / "..")
    attempts = backend.attempts()
    assert [(a.backend, a.status, a.error_kind) for a in attempts] == [
        ("claude-cli", "skipped", "missing_program"), ("function", "completed", None)]
    assert "npm install -g @anthropic-ai/claude-code" in (attempts[0].error or "")


async def test_when_every_member_left_is_skipped_the_last_failure_is_raised(tmp_path):
    quota = BackendError("quota exceeded", backend="first", kind="quota")
    missing = (ClaudeCliBackend, {"program_path": str(tmp_path / "no-claude"), "base_url": "http://127.0.0.1:9"})
    backend = chain_backend(member(writes("a.txt", "x", then=quota)), missing)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(BackendError) as caught:
        await run(backend, work)
    assert caught.value.kind == "quota" and not (work / "a.txt").exists()
    assert [a.status for a in backend.attempts()] == ["failed", "skipped"]


def test_a_chain_that_cannot_run_anywhere_fails_when_built(tmp_path):
    missing = (ClaudeCliBackend, {"program_path": str(tmp_path / "no-claude")})
    with pytest.raises(RequirementError) as caught:
        AutonomousCodingAgent(backend=fallback_chain(missing, missing), sandbox=False)
    assert "no backend of the chain" in str(caught.value)


def test_a_chain_promises_what_every_member_can_do():
    chain = fallback_chain("claude-cli", "aider-cli")
    assert chain.name == "fallback(claude-cli, aider-cli)"
    assert chain.capabilities.resume and chain.capabilities.filesystem_edit
    assert not chain.capabilities.shell and not chain.capabilities.sandbox  # aider has neither
    with pytest.raises(ConfigurationError) as unknown:
        AutonomousCodingAgent(backend=fallback_chain(member(refuses)), fallback_on=["quota", "bad-luck"])
    assert "bad-luck" in str(unknown.value)
    with pytest.raises(ConfigurationError) as caught:  # aider cannot honour sandbox=True
        AutonomousCodingAgent(backend=chain, sandbox=True)
    assert "aider-cli" in str(caught.value)


async def test_validation_failure_moves_on_when_asked(tmp_path):
    """Through the facade: the first member's file fails validation, the chain moves on at the
    retry; the second member gets the task and the errors."""
    prompts: list[str] = []

    def second(ctx: TurnContext) -> Any:
        prompts.append(ctx.prompt)
        ctx.write("main.py", "print('fixed')\n")
        return "fixed"

    chain = fallback_chain(member(writes("main.py", "def broken(:\n")), member(second))
    agent = AutonomousCodingAgent(backend=chain, fallback_on=["validation"], validators=["syntax"])
    result = await agent.execute("Write main.py", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (tmp_path / "main.py").read_text() == "print('fixed')\n"
    assert prompts[0].startswith("Task:\nWrite main.py") and "did not pass validation" in prompts[0]


async def test_the_fallback_note_reaches_the_event_stream(tmp_path):
    quota = BackendError("quota exceeded", backend="first", kind="quota")
    chain = fallback_chain(member(writes("a.txt", "x", then=quota)), member(writes("b.txt", "y")))
    agent = AutonomousCodingAgent(backend=chain)
    events = [event async for event in agent.stream_execute("Do it", cwd=tmp_path)]
    notes = [e for e in events if e.type is CodingEventType.FALLBACK]  # the facade's FALLBACK event
    assert len(notes) == 1 and notes[0].data["reason"] == "quota" and notes[0].data["to"] == "function"
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED and sorted(result.files) == ["b.txt"]


# ------------------------------------------------------------------ real programs
CLAUDE = installed(bundled_cli(), name="claude")
CODEX = installed(REPO / "node_modules" / ".bin" / "codex", name="codex")


@pytest.mark.agent
@pytest.mark.skipif(CLAUDE is None or CODEX is None, reason="needs the claude and codex programs")
async def test_claude_cli_gets_a_quota_error_and_codex_cli_completes(scripted_model_server, tmp_path):
    claude_server = scripted_model_server(
        [reply(tool_call("Write", {"file_path": "partial.txt", "content": "half\n"})), http_error(402)],
        handler=lambda request: None if request.tools else reply(text("ok")))
    codex_server = scripted_model_server([
        reply(tool_call("apply_patch", "*** Begin Patch\n*** Add File: done.txt\n+all done\n*** End Patch\n")),
        reply(text("Done."))])
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    common = {"api_key": API_KEY, "home": str(home), "max_retries": 0}
    chain = fallback_chain(
        (ClaudeCliBackend, {**common, "program_path": CLAUDE, "base_url": claude_server.base_url,
                            "model": "claude-sonnet-4-5"}),
        (CodexCliBackend, {**common, "program_path": CODEX, "base_url": codex_server.openai_base_url,
                           "model": "gpt-5.5"}))
    settings = BackendSettings(model=None, tools=[], sandbox=False, options=FallbackOptions())
    chain.check_settings(settings)
    backend = chain(settings)
    messages = await run(backend, work, "Write done.txt")

    assert not (work / "partial.txt").exists() and (work / "done.txt").read_text() == "all done\n"
    assert backend.last_turn().files.written == {"done.txt"}
    attempts = [a.as_dict() for a in backend.attempts()]
    assert [(a["backend"], a["status"], a["error_kind"]) for a in attempts] == [
        ("claude-cli", "failed", "quota"), ("codex-cli", "completed", None)]
    assert attempts[0]["reverted"] == ["partial.txt"]
    assert all(sum(a["usage"][k] for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens")) > 0
               for a in attempts)
    assert attempts[0]["cost_usd"] > 0 and backend.usage().cost_usd >= attempts[0]["cost_usd"]
    (note,) = [m for m in messages if m.tool_name == "fallback"]
    assert (note.details["from"], note.details["to"], note.details["reason"]) == ("claude-cli", "codex-cli", "quota")
    assert API_KEY not in str(attempts)
