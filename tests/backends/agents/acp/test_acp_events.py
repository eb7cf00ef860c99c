"""The acp backend's event mapping (agenter/backends/agents/acp/_events.py), fed session/update payloads
recorded from the real agents (claude-agent-acp 0.23.1, codex-acp 0.16.0, Gemini CLI 0.61.0,
OpenCode 1.18.33) running against the scripted model server; the workspace path is shortened to
/w/repo and long payloads are trimmed to the fields that matter."""

from __future__ import annotations

import os
from typing import Any

import pytest

from agenter.backends._edits import text_counts as line_counts
from agenter.backends.agents.acp._events import UpdateMapper, command_of, exit_code, result_text
from agenter.backends.base import BackendMessage, MessageType

REPO = "/w/repo"


def mapper() -> UpdateMapper:
    events = UpdateMapper(relative=lambda path: os.path.relpath(path, REPO) if path.startswith(REPO) else path)
    events.start_turn()
    return events


def play(events: UpdateMapper, updates: list[dict[str, Any]]) -> list[BackendMessage]:
    out = [m for update in updates for m in events.update(update)]
    return out + events.flush()


def shape(messages: list[BackendMessage]) -> list[MessageType]:
    """The messages' types, a run of deltas counted once (how text is cut into deltas is apart)."""
    types = [m.type for m in messages]
    return [t for i, t in enumerate(types) if not (i and t is types[i - 1] and t in DELTAS)]


DELTAS = (MessageType.TEXT_DELTA, MessageType.THINKING_DELTA)


def of(messages: list[BackendMessage], kind: MessageType) -> list[BackendMessage]:
    return [m for m in messages if m.type is kind]


def chunk(text: str, kind: str = "agent_message_chunk", **extra: Any) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}, **extra}


# ------------------------------------------------------------------------- claude-agent-acp
CLAUDE_BASH = "toolu_2a3a3329cec5486db2ec833e"
CLAUDE_FAIL = "toolu_a3e8802cd72ad55d4b21ab51"
CLAUDE_WRITE = "toolu_c09cffa355fbef7352d2b43c"
CLAUDE_EDIT = "toolu_af8fc57fe4111f5323385dc7"
CLAUDE: list[dict[str, Any]] = [
    chunk(""),
    chunk("Running it."),
    {"toolCallId": CLAUDE_BASH, "title": "Terminal", "kind": "execute", "status": "pending", "content": [],
     "rawInput": {}, "_meta": {"claudeCode": {"toolName": "Bash"}}, "sessionUpdate": "tool_call"},
    {"toolCallId": CLAUDE_BASH, "kind": "execute", "title": "echo made > made.txt",
     "content": [{"content": {"text": "make", "type": "text"}, "type": "content"}],
     "rawInput": {"command": "echo made > made.txt", "description": "make"},
     "_meta": {"claudeCode": {"toolName": "Bash"}}, "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_BASH, "_meta": {"claudeCode": {"toolResponse": {
        "stdout": "", "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False},
        "toolName": "Bash"}}, "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_BASH, "status": "completed",
     "content": [{"content": {"text": "```console\n(Bash completed with no output)\n```", "type": "text"},
                  "type": "content"}],
     "rawOutput": "(Bash completed with no output)", "_meta": {"claudeCode": {"toolName": "Bash"}},
     "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_FAIL, "title": "Terminal", "kind": "execute", "status": "pending", "content": [],
     "rawInput": {}, "_meta": {"claudeCode": {"toolName": "Bash"}}, "sessionUpdate": "tool_call"},
    {"toolCallId": CLAUDE_FAIL, "kind": "execute", "title": "exit 3",
     "content": [{"content": {"text": "fail", "type": "text"}, "type": "content"}],
     "rawInput": {"command": "exit 3", "description": "fail"}, "_meta": {"claudeCode": {"toolName": "Bash"}},
     "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_FAIL, "status": "failed",
     "content": [{"content": {"text": "```\nExit code 3\n```", "type": "text"}, "type": "content"}],
     "rawOutput": "Exit code 3", "_meta": {"claudeCode": {"toolName": "Bash"}}, "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_WRITE, "title": "Write", "kind": "edit", "status": "pending", "content": [], "locations": [],
     "rawInput": {}, "_meta": {"claudeCode": {"toolName": "Write"}}, "sessionUpdate": "tool_call"},
    {"toolCallId": CLAUDE_WRITE, "kind": "edit", "title": "Write calc.py",
     "content": [{"path": f"{REPO}/calc.py", "newText": "def add(a, b):\n    return a + b\n", "type": "diff"}],
     "locations": [{"path": f"{REPO}/calc.py"}],
     "rawInput": {"file_path": f"{REPO}/calc.py", "content": "def add(a, b):\n    return a + b\n"},
     "_meta": {"claudeCode": {"toolName": "Write"}}, "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_WRITE, "status": "completed", "rawOutput": f"File created successfully at: {REPO}/calc.py",
     "_meta": {"claudeCode": {"toolName": "Write"}}, "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_EDIT, "title": "Edit", "kind": "edit", "status": "pending", "content": [], "locations": [],
     "rawInput": {}, "_meta": {"claudeCode": {"toolName": "Edit"}}, "sessionUpdate": "tool_call"},
    {"toolCallId": CLAUDE_EDIT, "kind": "edit", "title": "Edit app.py",
     "content": [{"path": f"{REPO}/app.py", "oldText": "    return 'hello'\n",
                  "newText": "    return 'hi'\n    # changed\n", "type": "diff"}],
     "locations": [{"path": f"{REPO}/app.py"}],
     "rawInput": {"replace_all": False, "file_path": f"{REPO}/app.py", "old_string": "    return 'hello'\n",
                  "new_string": "    return 'hi'\n    # changed\n"},
     "_meta": {"claudeCode": {"toolName": "Edit"}}, "sessionUpdate": "tool_call_update"},
    # after the edit: the same change again, with its context
    {"toolCallId": CLAUDE_EDIT, "content": [{"path": f"{REPO}/app.py", "oldText": "def greet():\n    return 'hello'",
                                              "newText": "def greet():\n    return 'hi'\n    # changed",
                                              "type": "diff"}],
     "locations": [{"path": f"{REPO}/app.py", "line": 1}], "_meta": {"claudeCode": {"toolName": "Edit"}},
     "sessionUpdate": "tool_call_update"},
    {"toolCallId": CLAUDE_EDIT, "status": "completed", "rawOutput": f"The file {REPO}/app.py has been updated successfully.",
     "_meta": {"claudeCode": {"toolName": "Edit"}}, "sessionUpdate": "tool_call_update"},
    chunk(""),
    chunk("All done, both files are"),
    chunk(" written."),
    {"used": 24306, "size": 200000, "cost": {"amount": 0.12877215, "currency": "USD"}, "sessionUpdate": "usage_update"},
]


def test_claude_agent_acp_commands_edits_and_text() -> None:
    events = mapper()
    messages = play(events, CLAUDE)
    assert shape(messages) == [
        MessageType.TEXT_DELTA, MessageType.TEXT,
        MessageType.COMMAND_START, MessageType.COMMAND_END,
        MessageType.COMMAND_START, MessageType.COMMAND_END,
        MessageType.TOOL_CALL, MessageType.TOOL_RESULT, MessageType.FILE_EDIT,
        MessageType.TOOL_CALL, MessageType.TOOL_RESULT, MessageType.FILE_EDIT,
        MessageType.TEXT_DELTA, MessageType.TEXT, MessageType.STATUS,
    ]
    ok_start, fail_start = of(messages, MessageType.COMMAND_START)
    ok_end, fail_end = of(messages, MessageType.COMMAND_END)
    # the command is known from the update that filled in rawInput, not the "Terminal" placeholder
    assert (ok_start.content, ok_start.details) == ("echo made > made.txt", {"command": "echo made > made.txt"})
    assert ok_start.tool_name == "Bash" and ok_start.tool_call_id == CLAUDE_BASH
    assert ok_start.tool_input == {"command": "echo made > made.txt", "description": "make"}
    assert ok_start.raw["rawInput"]["command"] == "echo made > made.txt"
    # claude-agent-acp says an exit code only when the command failed
    assert ok_end.details == {"exit_code": None} and not ok_end.is_error
    assert ok_end.raw["status"] == "completed"
    assert fail_start.details == {"command": "exit 3"}
    assert fail_end.details == {"exit_code": 3} and fail_end.is_error
    write, edit = of(messages, MessageType.FILE_EDIT)
    assert write.details == {"path": "calc.py", "lines_added": 2, "lines_removed": 0}
    assert write.tool_name == "Write" and write.tool_call_id == CLAUDE_WRITE
    assert edit.details == {"path": "app.py", "lines_added": 2, "lines_removed": 1}
    assert edit.raw["oldText"] == "def greet():\n    return 'hello'"  # the last diff of the call
    # the deltas are the text, the whole text closes them; the last segment is the final text
    *_, whole, usage = messages
    deltas = of(messages, MessageType.TEXT_DELTA)[-3:]
    # cut only at whitespace, whatever the chunks were
    assert [d.content for d in deltas] == ["All done, both files ", "are ", "written."]
    assert "".join(d.content for d in deltas) == whole.content == "All done, both files are written."
    assert deltas[0].raw == {**CLAUDE[-3], "content": {"type": "text", "text": "All done, both files "}}
    assert whole.raw["content"]["text"] == whole.content and whole.raw["sessionUpdate"] == "agent_message_chunk"
    assert events.final_text() == "All done, both files are written."
    assert events.full_text().startswith("Running it.")
    assert usage.content == "usage: 24306 of 200000 context tokens, cost 0.128772 USD" and usage.raw == CLAUDE[-1]


def test_a_failed_edit_reports_no_file_edit() -> None:
    events = mapper()
    updates = [dict(update) for update in CLAUDE[9:12]]
    updates[-1] = {"toolCallId": CLAUDE_WRITE, "status": "failed", "rawOutput": "User refused permission to run tool",
                   "sessionUpdate": "tool_call_update"}
    messages = play(events, updates)
    assert [m.type for m in messages] == [MessageType.TOOL_CALL, MessageType.TOOL_RESULT]
    assert messages[1].is_error and messages[1].content == "User refused permission to run tool"


# ------------------------------------------------------------------------- codex-acp
def codex_exec(call_id: str, command: str, status: str, code: int) -> list[dict[str, Any]]:
    argv = ["/bin/bash", "-lc", command]
    return [
        {"toolCallId": call_id, "title": command, "kind": "execute", "status": "in_progress",
         "rawInput": {"call_id": call_id, "process_id": "12660", "command": argv, "cwd": REPO,
                      "parsed_cmd": [{"type": "unknown", "cmd": command}], "source": "unified_exec_startup"},
         "sessionUpdate": "tool_call"},
        {"toolCallId": call_id, "status": status,
         "rawOutput": {"call_id": call_id, "command": argv, "cwd": REPO, "stdout": "", "stderr": "",
                       "aggregated_output": "", "exit_code": code, "formatted_output": "", "status": status},
         "sessionUpdate": "tool_call_update"},
    ]


CODEX_PATCH = "call_c7e5fea271f3b6f72b95a608"
CODEX_EDIT: list[dict[str, Any]] = [
    {"toolCallId": CODEX_PATCH, "title": f"Edit {REPO}/app.py", "kind": "edit", "status": "in_progress",
     "content": [{"path": f"{REPO}/app.py", "oldText": "def greet():\n    return 'hello'\n",
                  "newText": "def greet():\n    return 'hi'\n    # changed\n", "type": "diff"}],
     "locations": [{"path": f"{REPO}/app.py"}],
     "rawInput": {"call_id": CODEX_PATCH, "auto_approved": True, "changes": {f"{REPO}/app.py": {
         "type": "update", "unified_diff": "@@ -1,2 +1,3 @@\n def greet():\n-    return 'hello'\n+    return 'hi'\n"
                                           "+    # changed\n", "move_path": None}}},
     "sessionUpdate": "tool_call"},
    {"toolCallId": CODEX_PATCH, "status": "completed", "title": f"Edit {REPO}/app.py",
     "content": [{"path": f"{REPO}/app.py", "oldText": "def greet():\n    return 'hello'\n",
                  "newText": "def greet():\n    return 'hi'\n    # changed\n", "type": "diff"}],
     "locations": [{"path": f"{REPO}/app.py"}],
     "rawOutput": {"stdout": "Success. Updated the following files:\nM app.py\n", "stderr": "", "success": True},
     "sessionUpdate": "tool_call_update"},
]


def test_codex_acp_commands_carry_their_exit_codes() -> None:
    messages = play(mapper(), codex_exec("c1", "echo made > made.txt", "completed", 0)
                    + codex_exec("c2", "exit 3", "failed", 3) + CODEX_EDIT)
    starts, ends = of(messages, MessageType.COMMAND_START), of(messages, MessageType.COMMAND_END)
    # the argv codex runs ([bash, -lc, command]) is shown as the command itself
    assert [m.details for m in starts] == [{"command": "echo made > made.txt"}, {"command": "exit 3"}]
    assert starts[0].tool_input is not None
    assert starts[0].tool_input["command"] == ["/bin/bash", "-lc", "echo made > made.txt"]
    assert [(m.details, m.is_error) for m in ends] == [({"exit_code": 0}, False), ({"exit_code": 3}, True)]
    assert ends[1].raw["rawOutput"]["exit_code"] == 3
    (edit,) = of(messages, MessageType.FILE_EDIT)  # one, though both updates carry the diff
    assert edit.details == {"path": "app.py", "lines_added": 2, "lines_removed": 1}
    result = of(messages, MessageType.TOOL_RESULT)[0]
    assert result.content == f"edited {REPO}/app.py" and not result.is_error


# ------------------------------------------------------------------------- OpenCode
OPENCODE: list[dict[str, Any]] = [
    chunk("Running it.", messageId="msg_1"),
    {"toolCallId": "call_b", "title": "bash", "kind": "execute", "status": "pending",
     "locations": [{"path": REPO}], "rawInput": {"cwd": REPO}, "sessionUpdate": "tool_call"},
    {"toolCallId": "call_b", "kind": "execute", "status": "in_progress", "title": "exit 3",
     "locations": [{"path": REPO}], "rawInput": {"command": "exit 3", "description": "fail", "cwd": REPO},
     "sessionUpdate": "tool_call_update"},
    {"toolCallId": "call_b", "kind": "execute", "status": "in_progress", "title": "exit 3",
     "locations": [{"path": REPO}], "rawInput": {"command": "exit 3", "description": "fail", "cwd": REPO},
     "sessionUpdate": "tool_call_update"},
    {"toolCallId": "call_b", "status": "completed", "title": "exit 3",
     "content": [{"content": {"text": "(no output)", "type": "text"}, "type": "content"}],
     "rawOutput": {"output": "(no output)", "metadata": {"output": "(no output)", "exit": 3, "truncated": False}},
     "sessionUpdate": "tool_call_update"},
    {"toolCallId": "call_e", "title": "edit", "kind": "edit", "status": "pending", "locations": [], "rawInput": {},
     "sessionUpdate": "tool_call"},
    {"toolCallId": "call_e", "kind": "edit", "status": "in_progress", "title": "edit",
     "locations": [{"path": f"{REPO}/app.py"}],
     "rawInput": {"filePath": f"{REPO}/app.py", "oldString": "    return 'hello'\n",
                  "newString": "    return 'hi'\n    # changed\n"}, "sessionUpdate": "tool_call_update"},
    {"toolCallId": "call_e", "status": "completed", "title": "w/repo/app.py",
     "content": [{"content": {"text": "Edit applied successfully.", "type": "text"}, "type": "content"},
                 {"path": f"{REPO}/app.py", "oldText": "    return 'hello'\n",
                  "newText": "    return 'hi'\n    # changed\n", "type": "diff"}],
     "rawOutput": {"output": "Edit applied successfully.", "metadata": {"filediff": {"additions": 2, "deletions": 1}}},
     "sessionUpdate": "tool_call_update"},
    chunk("All done, both files are", messageId="msg_2"),
    chunk(" written.", messageId="msg_2"),
]


def test_opencode_exit_code_from_metadata_and_edit_from_its_diff() -> None:
    events = mapper()
    messages = play(events, OPENCODE)
    assert shape(messages) == [
        MessageType.TEXT_DELTA, MessageType.TEXT, MessageType.COMMAND_START, MessageType.COMMAND_END,
        MessageType.TOOL_CALL, MessageType.TOOL_RESULT, MessageType.FILE_EDIT,
        MessageType.TEXT_DELTA, MessageType.TEXT]
    (start,), (end,) = of(messages, MessageType.COMMAND_START), of(messages, MessageType.COMMAND_END)
    assert start.content == "exit 3" and start.tool_input == {"command": "exit 3", "description": "fail", "cwd": REPO}
    # exit 3 with status "completed": the exit code makes it an error
    assert end.details == {"exit_code": 3} and end.is_error and end.content == "(no output)"
    assert of(messages, MessageType.FILE_EDIT)[0].details == {"path": "app.py", "lines_added": 2, "lines_removed": 1}
    assert events.final_text() == "All done, both files are written."


# ------------------------------------------------------------------------- Gemini CLI
GEMINI_WRITE = "write_file__call_156a94e753bd4765cbbb4491"
GEMINI: list[dict[str, Any]] = [
    {"toolCallId": "run_shell_command__call_1", "title": "exit 3", "kind": "execute", "status": "in_progress",
     "content": [{"content": {"text": f"[current working directory {REPO}]", "type": "text"}, "type": "content"}],
     "locations": [], "sessionUpdate": "tool_call"},
    {"toolCallId": "run_shell_command__call_1", "kind": "execute", "status": "completed", "title": "exit 3",
     "content": [], "locations": [], "sessionUpdate": "tool_call_update"},
    {"toolCallId": GEMINI_WRITE, "title": "Writing to calc.py", "kind": "edit", "status": "in_progress",
     "content": [], "locations": [{"path": f"{REPO}/calc.py"}], "sessionUpdate": "tool_call"},
    # here Gemini CLI calls agenter's fs/write_text_file (below), then reports the same diff
    {"toolCallId": GEMINI_WRITE, "kind": "edit", "status": "completed", "title": "Writing to calc.py",
     "content": [{"path": f"{REPO}/calc.py", "oldText": "", "newText": "def add(a, b):\n    return a + b\n",
                  "_meta": {"kind": "add"}, "type": "diff"}],
     "locations": [{"path": f"{REPO}/calc.py"}], "sessionUpdate": "tool_call_update"},
]


def test_gemini_cli_command_without_input_and_write_through_agenter_reported_once() -> None:
    events = mapper()
    messages = [m for update in GEMINI[:3] for m in events.update(update)]
    raw = {"method": "fs/write_text_file", "params": {"path": f"{REPO}/calc.py", "content": "..."}}
    messages += events.file_written(f"{REPO}/calc.py", (2, 0), raw=raw)
    messages += events.update(GEMINI[3]) + events.flush()
    assert [m.type for m in messages] == [MessageType.COMMAND_START, MessageType.COMMAND_END, MessageType.TOOL_CALL,
                                          MessageType.FILE_EDIT, MessageType.TOOL_RESULT]
    start, end = messages[:2]
    assert start.details == {"command": "exit 3"} and start.tool_input == {"command": "exit 3"}
    assert end.details == {"exit_code": None} and not end.is_error  # Gemini CLI gives no exit code
    edit = messages[3]
    assert edit.details == {"path": "calc.py", "lines_added": 2, "lines_removed": 0}
    assert edit.tool_name == "fs/write_text_file" and edit.raw is raw
    # a later diff of the same file, by another tool call, is reported again
    later = [{**GEMINI[2], "toolCallId": "w2"}, {**GEMINI[3], "toolCallId": "w2"}]
    assert [m.details for m in play(events, later) if m.type is MessageType.FILE_EDIT] == [
        {"path": "calc.py", "lines_added": 2, "lines_removed": 0}]


# ------------------------------------------------------------------------- the rest of the stream
def test_thoughts_plans_and_message_ids() -> None:
    events = mapper()
    plan = {"sessionUpdate": "plan", "entries": [{"content": "read", "priority": "medium", "status": "pending"}]}
    messages = play(events, [chunk("Let me ", "agent_thought_chunk"), chunk("look.", "agent_thought_chunk"),
                             plan, chunk("One.", messageId="a"), chunk("Two.", messageId="b"),
                             {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}])
    assert [(m.type, m.content) for m in messages] == [
        (MessageType.THINKING_DELTA, "Let me "), (MessageType.THINKING_DELTA, "look."),
        (MessageType.THINKING, "Let me look."), (MessageType.PLAN, "[pending] read"),
        (MessageType.TEXT_DELTA, "One."), (MessageType.TEXT, "One."),
        (MessageType.TEXT_DELTA, "Two."), (MessageType.TEXT, "Two."),
        (MessageType.STATUS, "agent switched to mode 'plan'")]
    assert messages[3].raw is plan and messages[-1].raw["currentModeId"] == "plan"
    assert events.final_text() == "Two." and events.full_text() == "One.\nTwo."


def test_a_call_first_seen_in_a_permission_request_is_shown_once() -> None:
    events = mapper()
    request = {"toolCallId": "p1", "title": "`npm test`", "kind": "execute"}
    assert events.announce(request) == [] and events.knows("p1")
    held = events.flush()
    assert [(m.type, m.content) for m in held] == [(MessageType.COMMAND_START, "npm test")]
    assert events.announce(request) == [] and events.flush() == []
    assert events.name_of("p1") == "execute"


@pytest.mark.parametrize(("old", "new", "counts"), [
    (None, "a\nb\n", (2, 0)),
    ("", "a\nb", (2, 0)),
    ("a\nb\n", "", (0, 2)),
    ("a\nb\nc\n", "a\nB\nc\n", (1, 1)),
    ("a\nb\n", "a\nb", (0, 0)),  # a trailing newline is not a line
    ("x\n" * 100, "x\n" * 100 + "y\n", (1, 0)),
])
def test_line_counts(old: str | None, new: str, counts: tuple[int, int]) -> None:
    assert line_counts(old, new) == counts


def test_commands_exit_codes_and_results() -> None:
    assert command_of({"command": ["bash", "-lc", "ls -la"]}) == "ls -la"
    assert command_of({"cmd": ["git", "status", "--short"]}) == "git status --short"
    assert command_of({"command": ["python", "-c", "print(1)"]}) == "python -c 'print(1)'"
    assert command_of({}, "`pytest -q`") == "pytest -q" and command_of(None, None) == ""
    assert exit_code("completed", {"exitCode": 0}) == 0
    assert exit_code("completed", {"exit_code": True}) is None  # not a number
    assert exit_code("failed", "Exit code 127\nsh: nope: not found") == 127
    assert exit_code("completed", "Exit code 2") is None  # only a failure's text says it
    assert exit_code("failed", "", "```\nexit code: 1\n```") == 1
    assert exit_code("failed", "boom") is None
    assert result_text(None, {"formatted_output": "ok\n", "exit_code": 0}) == "ok\n"
    assert result_text(None, {"x": 1}) == '{"x": 1}'
    assert result_text([{"type": "content", "content": {"type": "image", "uri": "file:///a.png"}}], None) == \
        "[image: file:///a.png]"
    assert result_text(None, "y" * 5000).endswith(" [...]")


def test_deltas_are_cut_at_whitespace_so_split_keys_are_redacted_whole() -> None:
    """A key split over chunks goes out in one delta (the session redacts each event alone), and
    never apart from the word it follows ("Bearer <token>")."""
    from agenter.host.redact import Redactor

    key = "sk-ant-api03-" + "x7" * 15
    pieces = ["Use ", "the key ", key[:8], key[8:20], key[20:], " and the header Bearer", " ",
              "abcdefgh", "ijkl1 now."]
    messages = play(mapper(), [chunk(p) for p in pieces])
    deltas = [m.content for m in of(messages, MessageType.TEXT_DELTA)]
    assert "".join(deltas) == "".join(pieces) == messages[-1].content
    redact = Redactor()
    shown = "".join(redact(d) for d in deltas)
    assert key not in shown and "abcdefghijkl1" not in shown
    assert any(key in d for d in deltas) and any("Bearer abcdefghijkl1" in d for d in deltas)
    assert all(key not in repr(redact.data(m.raw)) for m in of(messages, MessageType.TEXT_DELTA))


def test_a_notice_between_a_call_and_its_input_does_not_show_the_call_without_it() -> None:
    write = {"toolCallId": "w1", "title": "Write", "kind": "edit", "status": "pending", "rawInput": {},
             "_meta": {"claudeCode": {"toolName": "Write"}}, "sessionUpdate": "tool_call"}
    given = {"toolCallId": "w1", "title": "Write hello.py", "rawInput": {"file_path": f"{REPO}/hello.py", "content": "x\n"},
             "sessionUpdate": "tool_call_update"}
    notices = [{"sessionUpdate": "available_commands_update", "availableCommands": []},
               {"sessionUpdate": "usage_update", "used": 10, "size": 1000},
               {"sessionUpdate": "current_mode_update", "currentModeId": "default"}]
    messages = play(mapper(), [write, *notices, given])
    [call] = of(messages, MessageType.TOOL_CALL)
    assert call.tool_input == {"file_path": f"{REPO}/hello.py", "content": "x\n"}
    # A plan is the agent's work: the held call is shown before it, as it stands.
    [early] = of(play(mapper(), [write, {"sessionUpdate": "plan", "entries": []}, given]), MessageType.TOOL_CALL)
    assert early.tool_input == {}

