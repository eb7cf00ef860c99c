"""The agent CLIs' streams in the event vocabulary: commands with exit codes, file edits with
line counts, raw payloads kept. Each program's output was recorded from the real program against
the scripted model server (recorded/): the model wrote a.txt (three lines), replaced "two" in
old.txt ("one/two/three") with two lines, and ran `echo hi; exit 3` (Codex then deleted a.txt,
Claude Code, Gemini CLI ran `echo ok` too). Pure mapping rules get plain unit tests here; each
program's test file runs it for real."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from agenter.backends._edits import diff_counts, line_count, text_counts
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.cli._base import TurnState
from agenter.backends.cli._runner import Line, parse_line

RECORDED = Path(__file__).parent / "recorded"


def _backend(module: str, cls: str, options: str, workspace: str, **opts: Any) -> Any:
    import importlib

    mod = importlib.import_module(f"agenter.backends.cli.{module}")
    backend = getattr(mod, cls)(BackendSettings(model=None, tools=[], sandbox=False,
                                                options=getattr(mod, options)(**opts)))
    # The recorded run's workspace, as connect() would set it: paths are judged against it.
    backend._cwd, backend._spec = Path(workspace), SessionSpec(cwd=Path(workspace))
    return backend


def _feed(backend: Any, name: str) -> list[Any]:
    turn = TurnState()
    messages = []
    for text in (RECORDED / name).read_text().splitlines():
        data = json.loads(text)
        messages += backend.parse_event(Line(text, data), turn)
    return messages + backend.last_messages(turn)


def _vocabulary(messages: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m.type is MessageType.COMMAND_START:
            out.append(("start", m.details["command"]))
        elif m.type is MessageType.COMMAND_END:
            out.append(("end", m.details["exit_code"]))
        elif m.type is MessageType.FILE_EDIT:
            out.append(("edit", m.details["path"], m.details["lines_added"], m.details["lines_removed"]))
    return out


# ---------------------------------------------------------------------- the shared counting rules
def test_line_counts_from_diffs_and_texts():
    diff = "Index: a\n===\n--- a\n+++ a\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n+2b\n three\n"
    assert diff_counts(diff) == (2, 1)
    assert diff_counts("--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+--- not a header\n") == (1, 0)
    assert text_counts("one\ntwo\nthree\n", "one\n2\n2b\nthree\n") == (2, 1)
    assert text_counts(None, "a\nb") == (2, 0) and text_counts("a\nb\n", None) == (0, 2)
    assert text_counts("same\n", "same\n") == (0, 0)
    assert line_count("a\nb") == line_count("a\nb\n") == 2 and line_count(None) == 0


def test_text_counts_are_a_diff_of_the_two_texts_and_skip_what_they_share():
    """Lines shared at both ends are set aside before difflib runs: one edit in a 20k-line file
    is counted exactly (and fast), and any pair of texts gets counts of a valid line diff."""
    import random

    big = [f"line {i}" for i in range(20_000)]
    edited = big[:9_000] + ["new a", "new b"] + big[9_001:]
    assert text_counts("\n".join(big), "\n".join(edited)) == (2, 1)
    rng = random.Random(7)
    for _ in range(3000):
        old = [rng.choice("abcde") for _ in range(rng.randint(0, 12))]
        new = list(old)
        for _ in range(rng.randint(0, 4)):
            at = rng.randint(0, len(new))
            if rng.random() < 0.5:
                new.insert(at, rng.choice("abcdefg"))
            elif new:
                del new[min(at, len(new) - 1)]
        added, removed = text_counts("\n".join(old), "\n".join(new))
        assert added - removed == len(new) - len(old) and 0 <= added <= len(new) and 0 <= removed <= len(old)


# ---------------------------------------------------------------------- claude-cli
def test_claude_cli_bash_exit_codes_edit_counts_and_text_deltas():
    backend = _backend("claude", "ClaudeCliBackend", "ClaudeCliOptions", "/tmp/rec-claude-7t0k0b5q")
    messages = _feed(backend, "claude.jsonl")
    assert _vocabulary(messages) == [("edit", "a.txt", 3, 0), ("edit", "old.txt", 2, 1),
                                     ("start", "echo hi; exit 3"), ("end", 3), ("start", "echo ok"), ("end", 0)]
    edit = next(m for m in messages if m.type is MessageType.FILE_EDIT and m.content == "old.txt")
    assert edit.raw["tool_use_result"]["structuredPatch"][0]["lines"] == [" one", "-two", "+2", "+2b", " three"]
    ended = [m for m in messages if m.type is MessageType.COMMAND_END]
    assert ended[0].is_error and ended[0].raw["is_error"] and ended[1].raw["tool_use_result"]["stdout"] == "ok"
    assert all(m.raw is not None for m in messages if m.type in (MessageType.COMMAND_START, MessageType.TOOL_CALL))
    # The final answer streamed, then whole (the session shows the deltas and drops the copy).
    kinds = [m.type for m in messages]
    deltas = [m.content for m in messages if m.type is MessageType.TEXT_DELTA]
    assert "".join(deltas) == "Done." and kinds.index(MessageType.TEXT_DELTA) < kinds.index(MessageType.TEXT)


def test_claude_cli_deltas_are_cut_at_whitespace_and_redacted_whole():
    backend = _backend("claude", "ClaudeCliBackend", "ClaudeCliOptions", "/tmp/w")
    backend.redact.add("sk-live-SECRET-123456")
    turn = TurnState()

    def event(data: dict[str, Any]) -> list[Any]:
        line = {"type": "stream_event", "parent_tool_use_id": None, "event": data}
        return list(backend.parse_event(Line(json.dumps(line), line), turn))

    out = event({"type": "message_start", "message": {}})
    out += event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    for piece in ("The key is sk-live-SE", "CRET-123456 and", " more"):
        out += event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})
    out += event({"type": "content_block_stop", "index": 0})
    pieces = [m.content for m in out]
    assert all(m.type is MessageType.TEXT_DELTA for m in out) and "sk-live" not in "".join(pieces)
    assert pieces == ["The key is ", "[REDACTED] ", "and ", "more"]


def test_claude_cli_compaction():
    backend = _backend("claude", "ClaudeCliBackend", "ClaudeCliOptions", "/tmp/w")
    line = {"type": "system", "subtype": "compact_boundary", "session_id": "s",
            "compact_metadata": {"trigger": "auto", "pre_tokens": 150000, "post_tokens": 9000}}
    (message,) = backend.parse_event(Line(json.dumps(line), line), TurnState())
    assert message.type is MessageType.COMPACTED and message.raw == line
    assert message.details == {"tokens_before": 150000, "tokens_after": 9000, "trigger": "auto"}


# ---------------------------------------------------------------------- codex-cli
def test_codex_cli_commands_and_file_changes_with_counts_from_the_rollout(tmp_path):
    sessions = tmp_path / "sessions" / "2026" / "11" / "22"
    sessions.mkdir(parents=True)
    shutil.copy(RECORDED / "codex-rollout.jsonl",
                sessions / "rollout-2026-11-22T21-39-43-01a20533-63a4-7333-908a-dd852261d4cc.jsonl")
    backend = _backend("codex", "CodexCliBackend", "CodexCliOptions", "/tmp/rec-codex-utye3rhr")
    backend.home_dir = tmp_path
    messages = _feed(backend, "codex.jsonl")
    assert _vocabulary(messages) == [("edit", "a.txt", 3, 0), ("edit", "old.txt", 2, 1),
                                     ("start", "/bin/bash -lc 'echo hi; exit 3'"), ("end", 3), ("edit", "a.txt", 0, 3)]
    edits = [m for m in messages if m.type is MessageType.FILE_EDIT]
    assert edits[1].raw["unified_diff"] == "@@ -1,3 +1,4 @@\n one\n-two\n+2\n+2b\n three\n"
    assert "content" not in edits[0].raw  # an added file's whole text stays out of the event
    # The edits follow their items, not the end of the run: the rollout had them already.
    kinds = [m.type for m in messages]
    assert kinds.index(MessageType.FILE_EDIT) < kinds.index(MessageType.COMMAND_START)
    assert backend._tracked.deleted == {"a.txt"}


def test_codex_cli_change_counts_without_a_rollout_record(tmp_path):
    from agenter.backends.cli._codex_rollout import change_counts

    (tmp_path / "new.py").write_text("a\nb\n")
    assert change_counts({}, {"path": "new.py", "kind": "add"}, tmp_path / "new.py") == (2, 0)
    assert change_counts({"type": "delete", "content": "x\ny\n"}, {"kind": "delete"}, tmp_path / "gone") == (0, 2)
    assert change_counts({"type": "update", "unified_diff": "@@ -1 +1 @@\n-a\n+b\n"}, {}, tmp_path / "x") == (1, 1)


# ---------------------------------------------------------------------- gemini-cli
def test_gemini_cli_exit_codes_and_diffs_from_its_chat_recording(tmp_path):
    chats = tmp_path / ".gemini" / "tmp" / "rec-gemini-nj83ra11" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(RECORDED / "gemini-chat.jsonl", chats / "session-2026-11-22T21-40-9dd93102.jsonl")
    backend = _backend("gemini", "GeminiCliBackend", "GeminiCliOptions", "/tmp/rec-gemini-nj83ra11")
    backend._gemini_home = tmp_path
    messages = _feed(backend, "gemini.jsonl")
    assert _vocabulary(messages) == [("edit", "a.txt", 3, 0), ("edit", "old.txt", 2, 1),
                                     ("start", "echo hi; exit 3"), ("end", 3), ("start", "echo ok"), ("end", 0)]
    edit = next(m for m in messages if m.type is MessageType.FILE_EDIT and m.content == "old.txt")
    assert "@@ -1,3 +1,4 @@" in edit.raw["recorded"]["resultDisplay"]["fileDiff"]
    kinds = [m.type for m in messages]
    assert kinds.index(MessageType.COMMAND_END) < kinds.index(MessageType.TEXT_DELTA)  # order kept


def test_gemini_cli_without_its_chat_recording_counts_from_the_input(tmp_path):
    backend = _backend("gemini", "GeminiCliBackend", "GeminiCliOptions", "/tmp/rec-gemini-nj83ra11")
    backend._gemini_home = tmp_path  # nothing recorded there
    messages = _feed(backend, "gemini.jsonl")
    assert _vocabulary(messages) == [("edit", "a.txt", 3, 0), ("edit", "old.txt", 2, 1),
                                     ("start", "echo hi; exit 3"), ("end", None), ("start", "echo ok"), ("end", None)]


def test_gemini_cli_exit_code_from_what_the_model_was_told():
    from agenter.backends.cli.gemini import shell_exit_code

    assert shell_exit_code("success", "<untrusted_context>\nOutput: hi\nExit Code: 3\nProcess Group PGID: 1\n") == 3
    assert shell_exit_code("success", "<untrusted_context>\nOutput: ok\nProcess Group PGID: 1\n") == 0
    assert shell_exit_code("success", "Output: (empty)\nSignal: 9\n") is None
    assert shell_exit_code("error", "Command rejected by policy") is None
    assert shell_exit_code("success", "A summary of the output.") is None


# ---------------------------------------------------------------------- opencode-cli
def test_opencode_cli_bash_exit_codes_and_edit_counts():
    backend = _backend("opencode", "OpenCodeCliBackend", "OpenCodeCliOptions", "/tmp/rec-opencode-15u8_m0k")
    messages = _feed(backend, "opencode.jsonl")
    assert _vocabulary(messages) == [("edit", "a.txt", 3, 0), ("edit", "old.txt", 2, 1),
                                     ("start", "echo hi; exit 3"), ("end", 3)]
    end = next(m for m in messages if m.type is MessageType.COMMAND_END)
    assert end.raw["state"]["metadata"]["exit"] == 3
    edit = next(m for m in messages if m.type is MessageType.FILE_EDIT and m.content == "old.txt")
    assert edit.raw["state"]["metadata"]["filediff"] == {**edit.raw["state"]["metadata"]["filediff"],
                                                         "additions": 2, "deletions": 1}


def test_opencode_cli_edit_counts_fall_back_to_the_diff_then_the_input():
    from agenter.backends.cli.opencode import edit_counts

    assert edit_counts("edit", {}, {"diff": "--- x\n+++ x\n@@ -1 +1,2 @@\n-a\n+b\n+c\n"}) == (2, 1)
    assert edit_counts("edit", {"oldString": "a\nb", "newString": "c"}, {}) == (1, 2)
    assert edit_counts("write", {"content": "1\n2\n3\n"}, {"exists": False}) == (3, 0)


# ---------------------------------------------------------------------- aider-cli
def test_aider_cli_counts_edits_from_the_file_before_and_after(tmp_path):
    backend = _backend("aider", "AiderCliBackend", "AiderCliOptions", str(tmp_path))
    backend._before = {"old.txt": "one\ntwo\nthree\n"}  # read before the run: the chat's files
    # What Aider wrote (its recorded run): old.txt rewritten, new.txt created.
    (tmp_path / "old.txt").write_text("one\n2\n2b\nthree\n")
    (tmp_path / "new.txt").write_text("n1\nn2\n")
    turn = TurnState()
    messages = [m for text in (RECORDED / "aider.txt").read_text().splitlines()
                for m in backend.parse_event(parse_line(text.encode()), turn)]
    assert _vocabulary(messages) == [("edit", "new.txt", 2, 0), ("edit", "old.txt", 2, 1)]
    assert messages[-1].raw == {"line": "Applied edit to old.txt"}
    assert backend._before["old.txt"] == "one\n2\n2b\nthree\n"  # a second edit counts from here
