"""claude-cli: the real `claude` (the one bundled with claude-agent-sdk unless another is on PATH)
against the scripted model server's Anthropic wire."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from pydantic import BaseModel

from agenter._errors import ConfigurationError
from agenter.backends._programs.claude import bundled_cli
from agenter.backends.base import MessageType, SessionSpec
from agenter.backends.cli.claude import ClaudeCliBackend
from agenter.testing import conformance, reply, text, tool_call

from .conftest import CliCase, installed, need

CLI = installed(shutil.which("claude"), bundled_cli())
HAVE_SANDBOX = bool(shutil.which("bwrap") and shutil.which("socat"))
pytestmark = pytest.mark.agent


def side_requests(request: Any) -> Any:
    """Claude Code may ask for a title or a summary (no tools): answer without using the script."""
    return None if request.tools else reply(text("ok"))


@pytest.fixture
def case() -> CliCase:
    return CliCase(
        backend=ClaudeCliBackend, program=need(CLI, "Claude Code"), wire="anthropic", model="claude-sonnet-4-5",
        write=lambda path, content: reply(tool_call("Write", {"file_path": path, "content": content})),
        shell=lambda command: reply(tool_call("Bash", {"command": command, "description": "Run it"})),
        read=lambda path: reply(tool_call("Glob", {"pattern": "*.txt"})),
        output=lambda value: reply(tool_call("StructuredOutput", value)),
        sandbox=HAVE_SANDBOX, handler=side_requests)


@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(check, kit, tmp_path):
    await check(kit.harness(), tmp_path)


async def test_resume_continues_the_same_session_and_a_300_kb_prompt_arrives(kit, tmp_path):
    await kit.check_resume(tmp_path)


async def test_http_errors_end_in_their_class(kit, tmp_path):
    await kit.check_error_classes(tmp_path)


async def test_time_budget_with_a_hung_model(kit, tmp_path):
    await kit.check_time_budget(tmp_path)


def test_missing_program_names_the_install_command(kit):
    kit.check_missing_program("npm install -g @anthropic-ai/claude-code")


async def test_the_command_line_and_what_the_model_is_told(kit, tmp_path):
    class Answer(BaseModel):
        value: int

    server = kit.server([reply(tool_call("StructuredOutput", {"value": 7}))])
    backend = kit.backend(server, claude_allowed_tools=["Read", "Bash"])
    await backend.connect(SessionSpec(cwd=tmp_path, output_type=Answer, system_prompt="House rule: be terse."))
    try:
        messages = await kit.turn(backend, "What is seven?")
    finally:
        await backend.disconnect()
    assert backend.structured_output() == Answer(value=7)
    request = server.model_requests[0].model_request
    assert "House rule: be terse." in request.system_text and "REFUSED:" in request.system_text
    assert "What is seven?" in request.last_user_text
    assert [m.tool_name for m in messages if m.type is MessageType.TOOL_CALL] == ["StructuredOutput"]
    assert backend.usage().total_tokens > 0 and backend.usage().cost_usd > 0


def test_sandbox_needs_bubblewrap_and_socat_on_linux():
    requirements = ClaudeCliBackend.requirements(_settings(sandbox=True))
    assert {getattr(r, "name", None) for r in requirements} >= {"claude", "bwrap", "socat"}
    assert {getattr(r, "name", None) for r in ClaudeCliBackend.requirements(_settings(sandbox=False))} == {"claude"}


def test_an_unknown_home_directory_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError):
        ClaudeCliBackend.validate_settings(_settings(sandbox=False, home=str(tmp_path / "missing")))


def _settings(*, sandbox: bool, **options: Any) -> Any:
    from agenter.backends.base import BackendSettings
    from agenter.backends.cli.claude import ClaudeCliOptions

    return BackendSettings(model=None, tools=[], sandbox=sandbox, options=ClaudeCliOptions(**options))


def test_result_cost_counts_this_run_only():
    from agenter.backends.cli.claude import _run_cost

    result = json.loads('{"total_cost_usd": 0.5, "model_usage_since_last_result": '
                        '{"a": {"costUSD": 0.1}, "b": {"costUSD": 0.05}}}')
    assert _run_cost(result) == pytest.approx(0.15)
    assert _run_cost({"total_cost_usd": 0.5}) is None


def test_streamed_text_goes_out_as_deltas_and_thinking_whole():
    from agenter.backends.cli._base import TurnState
    from agenter.backends.cli._runner import Line

    def stream(event: dict[str, Any]) -> dict[str, Any]:
        return {"type": "stream_event", "event": event}

    backend, turn = ClaudeCliBackend(_settings(sandbox=False)), TurnState()
    events = [
        stream({"type": "message_start"}),
        stream({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}}),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm "}}),
        stream({"type": "content_block_stop", "index": 0}),
        stream({"type": "content_block_start", "index": 1, "content_block": {"type": "text"}}),
        stream({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello wor"}}),
        stream({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ld"}}),
        stream({"type": "content_block_stop", "index": 1}),
        {"type": "assistant", "message": {"id": "m1", "model": "claude-x", "content": [
            {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Hello world"}]}},
    ]
    messages = [m for e in events for m in backend.parse_event(Line(json.dumps(e), e), turn)]
    assert [(m.type, m.content) for m in messages] == [
        (MessageType.TEXT_DELTA, "Hello "), (MessageType.TEXT_DELTA, "world"), (MessageType.THINKING, "hmm"),
        (MessageType.TEXT, "Hello world")]


def test_an_unavailable_sandbox_says_what_to_install():
    from agenter.backends.cli._base import TurnState
    from agenter.backends.cli._runner import Line

    backend, turn = ClaudeCliBackend(_settings(sandbox=True)), TurnState()
    event = {"type": "result", "is_error": True, "subtype": "error_during_execution",
             "result": "Sandbox is unavailable on this machine"}
    list(backend.parse_event(Line(json.dumps(event), event), turn))
    assert turn.error is not None and "bubblewrap" in turn.error and "sandbox=False" in turn.error


async def test_edits_and_commands_arrive_in_the_event_vocabulary(kit, tmp_path):
    (tmp_path / "old.txt").write_text("one\ntwo\nthree\n")
    messages = await kit.run(tmp_path, [
        reply(tool_call("Write", {"file_path": "notes.md", "content": "hi\nthere\n"})),
        reply(tool_call("Read", {"file_path": str(tmp_path / "old.txt")})),
        reply(tool_call("Edit", {"file_path": str(tmp_path / "old.txt"), "old_string": "two\n",
                                 "new_string": "2\n2b\n"})),
        reply(tool_call("Bash", {"command": "echo hi; exit 3", "description": "Fail"})),
        reply(text("Done."))])
    assert kit.vocabulary(messages) == [("edit", "notes.md", 2, 0), ("edit", "old.txt", 2, 1),
                                        ("start", "echo hi; exit 3"), ("end", 3)]
    assert (tmp_path / "notes.md").read_text() == "hi\nthere\n"
    assert (tmp_path / "old.txt").read_text() == "one\n2\n2b\nthree\n"
    kinds = [m.type for m in messages]
    assert kinds.index(MessageType.TOOL_CALL) < kinds.index(MessageType.FILE_EDIT)
    assert MessageType.USAGE in kinds and "".join(m.content for m in messages if m.type is MessageType.TEXT_DELTA) == "Done."
    assert all(m.raw is not None for m in messages if m.type in (MessageType.COMMAND_END, MessageType.FILE_EDIT))
