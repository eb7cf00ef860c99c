"""aider-cli: the real Aider (pypi aider-chat in its own environment, .venv-aider, made by
scripts/install-aider.sh) against the scripted model server's OpenAI Chat Completions wire, through
LiteLLM. Aider has no sandbox: the runs use sandbox=False, and sandbox=True is refused."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from agenter import AutonomousCodingAgent
from agenter._errors import BackendError, ConfigurationError
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.cli._base import TurnState
from agenter.backends.cli._runner import parse_line
from agenter.backends.cli.aider import AiderCliBackend, AiderCliOptions
from agenter.testing import conformance, reply, text

from .conftest import REPO, CliCase, conformance_checks, installed, need

AIDER = installed(REPO / ".venv-aider" / "bin" / "aider", name="aider")
pytestmark = pytest.mark.agent


def whole_file(path: str, content: str) -> Any:
    """A reply in Aider's "whole" edit format: the file name, then the whole file fenced."""
    return reply(text(f"Here it is.\n\n{path}\n```\n{content}```\n"))


@pytest.fixture
def case() -> CliCase:
    return CliCase(
        backend=AiderCliBackend, program=need(AIDER, "Aider (scripts/install-aider.sh)"), wire="openai",
        model="openai/gpt-4.1", startup=8.0, options={"aider_edit_format": "whole"},
        write=whole_file,
        output=lambda value: reply(text("The answer: " + json.dumps(value))))


@pytest.mark.parametrize("check", conformance_checks(slow=True), ids=conformance.check_id)
async def test_conformance(check, kit, tmp_path):
    await check(kit.harness(), tmp_path)


async def test_resume_continues_the_same_session(kit, tmp_path):
    # A short first prompt: Aider summarizes a long history with its weak model, a request of its own.
    await kit.check_resume(tmp_path, second_turn=False, big_prompt=False)


async def test_a_300_kb_prompt(kit, tmp_path):
    await kit.check_big_prompt(tmp_path)
    assert not list(tmp_path.glob(".aider*"))  # history and caches stay out of the workspace


async def test_http_errors_end_in_their_class(kit, tmp_path):
    await kit.check_error_classes(tmp_path)


async def test_time_budget_with_a_hung_model(kit, tmp_path):
    # The facade builds agents in autonomous mode only for backends with a shell; Aider runs none
    # headless (agenter answers no to its shell questions), so the session runs on the backend directly.
    await kit.check_time_budget(tmp_path, session_only=True)


def test_missing_program_names_the_install_command(kit):
    kit.check_missing_program("pipx install aider-chat")


def test_sandbox_is_refused_before_anything_runs():
    with pytest.raises(ConfigurationError) as caught:
        # Any executable stands in for aider when it is not installed: the sandbox is refused first.
        AutonomousCodingAgent(backend="aider-cli", program_path=AIDER or sys.executable, sandbox=True)
    assert "sandbox=False" in str(caught.value)


# ------------------------------------------------------------------ Aider's output, line by line
def backend() -> AiderCliBackend:
    options = AiderCliOptions(max_retries=1)
    return AiderCliBackend(BackendSettings(model="openai/gpt-4.1", tools=[], sandbox=False, options=options))


def feed(target: AiderCliBackend, lines: list[str], turn: TurnState) -> list[Any]:
    return [m for line in lines for m in target.parse_event(parse_line(line.encode()), turn)]


def test_the_reply_is_told_apart_from_aiders_own_lines():
    target, turn = backend(), TurnState()
    messages = feed(target, [
        "Aider v0.86.2", "Main model: openai/gpt-4.1 with whole edit format", "Git repo: none", "",
        "REFUSED: the task asks for credentials", "",
        "Tokens: 1.8k sent, 1.2k cache hit, 23 received. Cost: $0.0039 message, $0.0039 session.",
    ], turn)
    assert [m.type for m in messages] == [MessageType.TEXT]
    assert turn.final_text == "REFUSED: the task asks for credentials"
    usage = target.ledger.total
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1800, 1200, 23)
    assert usage.cost_usd == pytest.approx(0.0039)


def test_retries_beyond_max_retries_fail_with_the_errors_class():
    target, turn = backend(), TurnState()
    feed(target, ["litellm.RateLimitError: RateLimitError: OpenAIException - too many", "requests",
                  "Retrying in 0.2 seconds..."], turn)
    with pytest.raises(BackendError) as caught:
        feed(target, ["litellm.RateLimitError: RateLimitError: OpenAIException - too many requests",
                      "Retrying in 0.5 seconds..."], turn)
    assert caught.value.kind == "rate_limit"


def test_an_error_without_a_status_takes_the_kind_of_its_exception():
    target, turn = backend(), TurnState()
    feed(target, ["litellm.ContextWindowExceededError: the conversation does not fit"], turn)
    target.parse_event(parse_line(b""), turn)
    with pytest.raises(BackendError) as caught:
        target.conclude(turn, 0, "")
    assert caught.value.kind == "context_length"


def test_applied_edits_are_tracked_and_the_file_name_is_not_reply_text(tmp_path):
    target, turn = backend(), TurnState()
    # The workspace as connect() would set it, with the file as Aider wrote it.
    target._cwd, target._spec = tmp_path, SessionSpec(cwd=tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    messages = feed(target, ["Here it is.", "", "pkg/mod.py", "```", "X = 1", "```", "",
                             "Tokens: 602 sent, 16 received.", "", "pkg/mod.py", "Applied edit to pkg/mod.py"], turn)
    assert [m.type for m in messages] == [MessageType.TEXT, MessageType.FILE_EDIT]
    assert turn.final_text == "Here it is.\n\npkg/mod.py\n```\nX = 1\n```"
    assert messages[1].details == {"path": "pkg/mod.py", "lines_added": 1, "lines_removed": 0}
    assert target._tracked.written == {"pkg/mod.py"}
    assert target.last_messages(turn) == []  # the file name before "Applied edit" is Aider's, not a note


async def test_applied_edits_arrive_with_their_line_counts(kit, tmp_path):
    (tmp_path / "old.txt").write_text("one\ntwo\nthree\n")
    messages = await kit.run(tmp_path, [reply(text("Here.\n\nold.txt\n```\none\n2\n2b\nthree\n```\n\n"
                                                   "notes.md\n```\nhi\nthere\n```\n"))],
                             aider_files=["old.txt"])
    assert sorted(kit.vocabulary(messages)) == [("edit", "notes.md", 2, 0), ("edit", "old.txt", 2, 1)]
    assert (tmp_path / "notes.md").read_text() == "hi\nthere\n"
    assert (tmp_path / "old.txt").read_text() == "one\n2\n2b\nthree\n"


async def test_the_first_message_asks_for_the_change_in_the_reply(kit, tmp_path):
    # Told to change files "directly in the working directory", a small model answers that it
    # will and writes no file listing; Aider's model edits by replying, so it is told that.
    from agenter.backends._prompts import AUTONOMOUS_CONTRACT, REPLY_CONTRACT

    server = kit.server([reply(text("Done."))])
    await kit.one_turn(kit.backend(server), tmp_path, "Fix greet.py")
    sent = json.loads(server.model_requests[0].raw_body)
    message = next(m["content"] for m in sent["messages"] if "Fix greet.py" in str(m["content"]))
    assert message.startswith(REPLY_CONTRACT + "\n\n") and message.rstrip().endswith("---\n\nFix greet.py")
    assert AUTONOMOUS_CONTRACT not in json.dumps(sent)
    # Declining is for harmful or impossible tasks only (a small model declined a stub to complete).
    assert ("Decline only a task that is harmful or cannot be done in this repository at all: then reply with "
            "one line starting with 'REFUSED:' and the reason. A hard or unclear task, or failing tests, is not a "
            "reason to decline: do your best.") in message
