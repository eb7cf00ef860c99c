"""aider-cli: the real Aider (pypi aider-chat in its own environment, .venv-aider, made by
scripts/install-aider.sh) against the scripted model server's OpenAI Chat Completions wire, through
LiteLLM. Aider has no sandbox: the runs use sandbox=False, and sandbox=True is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent
from agenter._errors import BackendError, ConfigurationError
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.cli._base import TurnState
from agenter.backends.cli._runner import parse_line
from agenter.backends.cli.aider import AiderCliBackend, AiderCliOptions
from agenter.testing import estimate_tokens, reply, text

from ..kit import Case
from . import cases

pytestmark = pytest.mark.agent


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return cases.aider(tmp_path)


async def test_a_300_kb_prompt(kit, tmp_path):
    await kit.check_big_prompt(tmp_path)
    assert not list(tmp_path.glob(".aider*"))  # history and caches stay out of the workspace


@pytest.mark.timeout(400)  # Aider's start measured, then one or two runs that wait out their budget
async def test_a_turn_stopped_by_the_time_budget_counts_what_aider_sent_as_an_estimate(kit, tmp_path):
    """Through execute(): Aider reports a call's tokens only once it is answered, so the call a
    time budget cut short counts the prompt Aider logged for it (its instructions, the chat's
    files and the task, not only agenter's message), marked as an estimate, and the result does
    not say 0. The budget must outlast Aider's start (about 5 s on a quiet machine, a minute at a
    load of 10 on two cores): it is measured first, and a run whose budget ran out before Aider
    sent anything must count nothing, and is tried again with a longer budget."""
    import time

    from agenter import Budget, CodingStatus
    from agenter.testing import hang

    (tmp_path / "roman.py").write_text("def roman(number):\n    pass\n" * 20)
    arrived: list[float] = []

    def note(request: Any) -> None:
        arrived.append(time.monotonic())
        return None  # the script answers

    warm = kit.server([reply(text("ok"))], handler=note)
    began = time.monotonic()
    first = await kit.agent(warm, aider_files=["roman.py"]).execute("Say ok.", cwd=tmp_path, require_changes=False)
    assert first.ok and arrived, first
    startup = arrived[0] - began
    for budget in (1.5 * startup + 5, 3 * startup + 10):
        arrived.clear()
        server = kit.server([], default=hang(), handler=note)
        agent = kit.agent(server, aider_files=["roman.py"], budget=Budget(max_time_seconds=budget))
        began = time.monotonic()
        result = await agent.execute("Write roman.py.", cwd=tmp_path)
        took = time.monotonic() - began
        assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time", result
        assert took < budget + 2, f"took {took:.1f} s with a budget of {budget:.1f} s"
        assert not kit.leftovers()
        if server.model_requests:
            break
        assert result.total_tokens == 0, result  # nothing reached the model: nothing is counted
    else:
        pytest.fail(f"Aider sent nothing within {budget:.0f} s (its first start took {startup:.0f} s)")
    sent = server.model_requests[0].body["messages"]
    processed = sum(estimate_tokens(m["content"]) for m in sent)
    assert "def roman(number)" in json.dumps(sent)  # the chat's file went with it
    assert result.input_tokens > 500 and abs(result.input_tokens - processed) <= 2 * len(sent), (result, processed)
    assert result.estimated_input_tokens == result.input_tokens and result.estimated_tokens == result.total_tokens


SUMMARY = "I asked you to write roman.py with roman(number), which turns an integer into Roman numerals."


def summarizer(request: Any) -> Any:
    """Answers Aider's chat-history summaries (its instructions open the request); the rest
    falls through to the script."""
    messages = request.body.get("messages") or [{}]
    return reply(text(SUMMARY)) if "summarize" in str(messages[0].get("content", ""))[:40] else None


def is_summary(record: Any) -> bool:
    return "summarize" in str(record.body["messages"][0]["content"])[:40]


@pytest.mark.timeout(300)  # two runs of Aider, each waiting for its summary at exit
async def test_aiders_chat_history_summaries_are_counted_as_estimates(kit, tmp_path):
    """Aider summarizes a long chat history with its weak model in a thread and prints no usage
    for it: after a run whose history passed the threshold (the summary is thrown away when
    Aider exits), and when the next run restores the history (the summary then shows in the
    main call's prompt). agenter counts them, marked as estimates, priced as the weak model."""
    code = "".join(f"x{i} = {i}  # the numerals I V X L C D M, added from the largest down\n" for i in range(30))
    server = kit.server([cases.whole_file("roman.py", code), cases.whole_file("roman.py", code + "y = 1\n")],
                               default=reply(text("ok")), handler=summarizer)
    backend = kit.backend(server, aider_max_chat_history_tokens=300, aider_weak_model="openai/gpt-4.1-mini")
    await backend.connect(SessionSpec(cwd=tmp_path))
    try:
        await kit.turn(backend, "Write roman.py.")
        await kit.turn(backend, "Add y.")
    finally:
        await backend.disconnect()
    usage = backend.usage()
    summaries = [r for r in server.model_requests if is_summary(r)]
    assert len(summaries) == 3 and {r.body["model"] for r in summaries} == {"gpt-4.1-mini"}
    sent = sum(estimate_tokens(m["content"]) for r in summaries for m in r.body["messages"])
    answered = len(summaries) * estimate_tokens(SUMMARY)
    # Aider's own figures are rounded ("1.2k"); the summaries' are agenter's estimate.
    assert abs(usage.estimated_input_tokens - sent) <= 3 * len(summaries), (usage, sent)
    assert abs(usage.estimated_output_tokens - answered) <= 3 * len(summaries), (usage, answered)
    # Nothing the server processed (prompts and replies, at its four characters a token) is
    # missing from the total: Aider's figures for its main calls (its tokenizer's count, which
    # runs higher on code), agenter's estimate for the summaries.
    processed = sum(estimate_tokens(m["content"]) + estimate_tokens(r.item.text)
                    for r in server.model_requests for m in r.body["messages"][:1]) + sum(
        estimate_tokens(m["content"]) for r in server.model_requests for m in r.body["messages"][1:])
    assert 0 < usage.estimated_tokens < usage.total_tokens
    assert usage.total_tokens >= 0.95 * processed, (usage, processed)


@pytest.mark.timeout(300)  # two runs of Aider
async def test_chat_histories_are_kept_for_resume_pruned_by_age_or_removed_at_the_end(kit, tmp_path):
    """A session's chat history stays for a later resume, in a folder only its owner reads;
    histories untouched for aider_history_days go when a session starts; aider_keep_history=False
    removes the session's own when it ends; resuming one that is gone is a configuration error."""
    import os
    import time

    from agenter._errors import ConfigurationError

    folder = kit.home / ".cache" / "agenter" / "aider-sessions"
    server = kit.server([reply(text("First.")), reply(text("Second."))])
    backend = kit.backend(server)
    await kit.one_turn(backend, tmp_path, "Say something.")
    kept = folder / f"{backend.session_id}.chat.md"
    assert "First." in kept.read_text() and (folder.stat().st_mode & 0o777) == 0o700
    old, recent = folder / "0ld.chat.md", folder / "recent.chat.md"
    old.write_text("# an old chat\n")
    recent.write_text("# a recent chat\n")
    stale = time.time() - 31 * 86400
    os.utime(old, (stale, stale))

    gone = kit.backend(server, aider_keep_history=False)
    await kit.one_turn(gone, tmp_path, "Say something else.")
    assert sorted(p.name for p in folder.iterdir()) == sorted([kept.name, recent.name])  # the old and its own: gone

    with pytest.raises(ConfigurationError, match="no aider-cli session"):
        await kit.backend(server).connect(SessionSpec(cwd=tmp_path, resume_session_id=gone.session_id))
    resumed = kit.backend(server, aider_history_days=None)
    await resumed.connect(SessionSpec(cwd=tmp_path, resume_session_id=backend.session_id))
    await resumed.disconnect()


def test_missing_program_names_the_install_command(kit):
    kit.check_missing_program("pipx install aider-chat")


def test_sandbox_is_refused_before_anything_runs():
    with pytest.raises(ConfigurationError) as caught:
        # Any executable stands in for aider when it is not installed: the sandbox is refused first.
        AutonomousCodingAgent(backend="aider-cli", program_path=cases.AIDER or sys.executable, sandbox=True)
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


async def test_the_first_message_is_the_task_as_bare_aider_gets_it(kit, tmp_path):
    """Measured (Qwen2.5-Coder-1.5B, the benchmark's pagination task): agenter's instructions before
    or after the task made the model repeat the message instead of answering; without them it fixed
    the file, as bare Aider did. What they said is enforced by agenter's answers and the chat's files.
    The user's own system prompt still goes first."""
    from agenter.backends.base import SessionSpec

    server = kit.server([reply(text("Done.")), reply(text("Done."))])
    await kit.one_turn(kit.backend(server), tmp_path, "Fix greet.py")
    sent = json.loads(server.model_requests[0].raw_body)
    message = next(m["content"] for m in sent["messages"] if "Fix greet.py" in str(m["content"]))
    assert message.startswith("Fix greet.py")
    for instruction in ("headless", "REFUSED:", "gitignore-style", "working directory"):
        assert instruction not in json.dumps(sent), instruction
    backend = kit.backend(server)
    await backend.connect(SessionSpec(cwd=tmp_path, system_prompt="Use tabs.", allowed_write_paths=["greet.py"]))
    try:
        await kit.turn(backend, "Fix greet.py")
    finally:
        await backend.disconnect()
    sent = json.loads(server.model_requests[1].raw_body)
    message = next(m["content"] for m in sent["messages"] if "Fix greet.py" in str(m["content"]))
    assert message.startswith("Use tabs.\n\n---\n\nFix greet.py") and "gitignore-style" not in message
