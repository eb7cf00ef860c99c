"""codex-cli: the real `codex exec --json` (npm @openai/codex, pinned in package.json) against the
scripted model server's OpenAI Responses wire, in Codex's workspace-write sandbox."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from agenter.backends._programs.codex import token_usage, toml_value
from agenter.backends.base import MessageType, SessionSpec
from agenter.backends.cli._runner import Line
from agenter.backends.cli.codex import CodexCliBackend
from agenter.testing import conformance, reply, text, tool_call

from .conftest import REPO, CliCase, installed, need

CODEX = installed(REPO / "node_modules" / ".bin" / "codex", name="codex")
pytestmark = pytest.mark.agent


def shell(command: str) -> Any:
    return reply(tool_call("exec_command", {"cmd": command, "yield_time_ms": 30_000}))


def write(path: str, content: str) -> Any:
    body = "".join(f"+{line}\n" for line in content.splitlines())
    return reply(tool_call("apply_patch", f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"))


@pytest.fixture
def case() -> CliCase:
    return CliCase(backend=CodexCliBackend, program=need(CODEX, "the Codex CLI (npm install)"), wire="openai",
                   model="gpt-5.5", write=write, shell=shell, read=lambda path: shell(f"cat {path} || true"),
                   output=lambda value: reply(text(json.dumps(value))), sandbox=True)


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
    kit.check_missing_program("npm install -g @openai/codex")


async def test_the_sandbox_refuses_a_write_outside_the_workspace(kit, tmp_path):
    outside = tmp_path / "outside.txt"
    work = tmp_path / "work"
    work.mkdir()
    server = kit.server([shell(f"printf no > {outside}; printf yes > inside.txt"), reply(text("Tried."))])
    backend = kit.backend(server)
    await backend.connect(SessionSpec(cwd=work))
    try:
        messages = await kit.turn(backend, "Write both files.")
    finally:
        await backend.disconnect()
    assert not outside.exists() and (work / "inside.txt").read_text() == "yes"
    assert backend.modified_files().written == {"inside.txt"}
    assert [m.details["path"] for m in messages if m.type is MessageType.FILE_EDIT] == []  # the shell wrote it
    assert any(m.type is MessageType.COMMAND_END for m in messages)


async def test_structured_output_uses_a_strict_output_schema(kit, tmp_path):
    class Answer(BaseModel):
        value: int
        note: str | None = None

    server = kit.server([reply(text('{"value": 7, "note": null}'))])
    backend = kit.backend(server)
    await backend.connect(SessionSpec(cwd=tmp_path, output_type=Answer))
    try:
        await kit.turn(backend, "What is seven?")
    finally:
        await backend.disconnect()
    assert backend.structured_output() == Answer(value=7)
    schema = server.model_requests[0].body["text"]["format"]["schema"]
    assert schema["additionalProperties"] is False and set(schema["required"]) == {"value", "note"}


def test_cached_input_and_cache_writes_are_counted_apart():
    usage = token_usage({"input_tokens": 1000, "cached_input_tokens": 600, "output_tokens": 10})
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (400, 600, 10)
    usage = token_usage({"input_tokens": 1000, "cached_input_tokens": 600, "cache_write_input_tokens": 100,
                         "output_tokens": 10})
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (300, 600, 100)
    assert token_usage(None) == token_usage({"input_tokens": "many"}) == token_usage({})


def test_a_config_value_toml_cannot_hold_fails_when_the_agent_is_built():
    import tomllib

    from agenter._errors import ConfigurationError
    from agenter.backends.base import BackendSettings
    from agenter.backends.cli.codex import CodexCliOptions

    def settings(**options: Any) -> Any:
        return BackendSettings(model=None, tools=[], sandbox=False, options=CodexCliOptions(**options))

    with pytest.raises(ConfigurationError, match=r"codex_config\['model'\]"):
        CodexCliBackend.validate_settings(settings(codex_config={"model": None}))
    CodexCliBackend.validate_settings(settings(codex_config={"model": "m", "features": {"x": [1, 2.5, True]}}))
    backend = CodexCliBackend(settings(base_url="http://127.0.0.1:1/v1", max_retries=2, api_key="k",
                                       codex_network_access=True))
    # Each override as command() passes it (-c key=<TOML value>), read back as TOML.
    parsed = {key: tomllib.loads(f"v = {toml_value(value)}")["v"] for key, value in backend.config().items()}
    assert parsed["model_providers.agenter"] == {"name": "agenter", "base_url": "http://127.0.0.1:1/v1",
                                                 "wire_api": "responses", "env_key": "AGENTER_CODEX_API_KEY",
                                                 "request_max_retries": 2, "stream_max_retries": 2}
    assert parsed["sandbox_mode"] == "danger-full-access" and parsed["sandbox_workspace_write.network_access"] is True



def test_events_become_messages_and_a_failed_turn_an_auth_error():
    from agenter.backends.base import BackendSettings
    from agenter.backends.cli._base import TurnState
    from agenter.backends.cli.codex import CodexCliOptions

    backend = CodexCliBackend(BackendSettings(model=None, tools=[], sandbox=False, options=CodexCliOptions()))
    turn = TurnState()
    lines: list[dict[str, Any]] = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "item.started", "item": {"id": "1", "type": "command_execution", "command": "ls"}},
        {"type": "item.completed", "item": {"id": "1", "type": "command_execution", "command": "ls",
                                            "aggregated_output": "denied", "exit_code": 1, "status": "failed"}},
        {"type": "item.completed", "item": {"id": "2", "type": "agent_message", "text": "Hello"}},
        {"type": "error", "message": "Reconnecting... 1/5"},
        {"type": "turn.failed", "error": {"message": "unexpected status 401 Unauthorized: bad key"}},
    ]
    messages = [m for data in lines for m in backend.parse_event(Line(json.dumps(data), data), turn)]
    assert backend.session_id == "t-1" and turn.final_text == "Hello" and turn.finished
    assert [m.type for m in messages] == [MessageType.COMMAND_START, MessageType.COMMAND_END, MessageType.TEXT,
                                          MessageType.ERROR]
    assert messages[0].details == {"command": "ls"}
    assert messages[1].is_error and messages[1].details == {"exit_code": 1}
    error = backend.failure(turn, 1, "")
    assert (error.kind, error.status_code) == ("auth", 401)


async def test_commands_and_file_changes_arrive_in_the_event_vocabulary(kit, tmp_path):
    (tmp_path / "old.txt").write_text("one\ntwo\nthree\n")
    patch = ("*** Begin Patch\n*** Add File: notes.md\n+hi\n+there\n*** Update File: old.txt\n@@\n one\n-two\n"
             "+2\n+2b\n three\n*** End Patch\n")
    messages = await kit.run(tmp_path, [reply(tool_call("apply_patch", patch)), shell("echo hi; exit 3"),
                                        reply(text("Done."))])
    assert kit.vocabulary(messages) == [("edit", "notes.md", 2, 0), ("edit", "old.txt", 2, 1),
                                        ("start", "/bin/bash -lc 'echo hi; exit 3'"), ("end", 3)]
    assert (tmp_path / "notes.md").read_text() == "hi\nthere\n"
    assert (tmp_path / "old.txt").read_text() == "one\n2\n2b\nthree\n"
    assert all(m.raw is not None for m in messages if m.type in (MessageType.COMMAND_END, MessageType.FILE_EDIT))
