"""claude-code's case (tests/backends/kit.py): the real `claude` CLI bundled with
claude-agent-sdk, on the scripted server's Anthropic wire, every tool call decided by agenter's
gate through the CLI's PreToolUse hook. Its own words for a refusal are checked in `EXPECT`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agenter.backends.agents.claude_code import ClaudeCodeBackend
from agenter.backends.agents.claude_code._setup import mcp_tool_name
from agenter.testing import reply, tool_call

from ...kit import TOKEN_ENV, Case, Kit, need

API_KEY = "sk-test-SUPERSECRET-claude-0123456789"


def bundled_cli() -> str | None:
    """The `claude` bundled with claude-agent-sdk, if the SDK and its CLI are here."""
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    cli = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return str(cli) if os.access(cli, os.X_OK) else None


def cli_env(kit: Kit, home: Path) -> dict[str, str]:
    """The CLI's own HOME and TMPDIR (outside the workspace), no retries of 5xx, no deferred tool
    loading, IS_SANDBOX=1 (so the CLI bypasses its own prompts also as root: only agenter's gate
    decides) and the kit's token."""
    return {"HOME": str(home), "TMPDIR": str(kit.fresh_dir()), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_MAX_RETRIES": "0", "IS_SANDBOX": "1", TOKEN_ENV: kit.token}


def connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    return {"api_key": API_KEY, "base_url": server.base_url, "env": cli_env(kit, home)}


def tool_results(server: Any) -> list[tuple[bool, str]]:
    """(is_error, text) of the tool_result blocks the model got, in order."""
    seen: dict[str, tuple[bool, str]] = {}
    for request in server.model_requests:
        for message in request.body["messages"]:
            if message["role"] != "user" or not isinstance(message["content"], list):
                continue
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    seen[block["tool_use_id"]] = (bool(block.get("is_error")),
                                                  content if isinstance(content, str) else json.dumps(content))
    return list(seen.values())


def hostile(evidence: Any, server: Any) -> None:
    """The model read the gate's reason as the refused call's error; with sandbox=True the
    workspace confinement refuses the .git write before the gate is asked."""
    results = tool_results(server)
    assert [is_error for is_error, _ in results] == [True, True, True, True, False]
    rules = [d.rule for d in evidence.report.denials]
    sandboxed = rules[0] == "sandbox"
    first = results[0][1]
    assert ("Refused" if sandboxed else "Permission denied") in first and "version-control internals" in first
    for (_, said), why in zip(results[1:4], ["force-pushes", "holds credentials", "downloaded"], strict=True):
        assert "Permission denied" in said and "safety check" in said and why in said, said
    assert rules[0] == ("sandbox" if sandboxed else "safety:git-internals")
    decided = [(d["tool"], d["decision"]) for d in evidence.decisions]
    assert decided == [("Write", "deny")] * (not sandboxed) + [("Bash", "deny"), ("Read", "deny"), ("Bash", "deny"),
                                                               ("Write", "allow")]
    assert all(d["rule"] and d["input"] for d in evidence.decisions)


def asked(evidence: Any, server: Any) -> None:
    assert [q.call.command for q in evidence.questions] == ["touch approved.txt", "touch refused.txt"]
    results = tool_results(server)
    assert [is_error for is_error, _ in results] == [False, True]
    assert "the release is frozen today" in results[1][1]


def unanswered(evidence: Any, server: Any) -> None:
    said = tool_results(server)[0]
    assert said[0] and "no answer to the permission request within 1.5 s" in said[1]


EXPECT = {"hostile_calls_are_refused_and_the_turn_goes_on": hostile, "asks_are_answered_by_the_callback": asked,
          "an_unanswered_ask_is_refused_at_the_deadline": unanswered}


def claude_code(shared: Path) -> Case:
    """sandbox=False: the contract is checked without the OS sandbox, which has tests of its own."""
    need(bundled_cli(), "claude-agent-sdk with its bundled CLI (pip install 'agenter-sdk[claude-code]')")
    return Case(
        backend=ClaudeCodeBackend, wire="anthropic", model=None, connect=connect, sandbox=False,
        write=lambda path, content: reply(tool_call("Write", {"file_path": path, "content": content})),
        shell=lambda command: reply(tool_call("Bash", {"command": command, "description": "Run it"})),
        read=lambda path: reply(tool_call("Read", {"file_path": path})),
        output=lambda value: reply(tool_call("StructuredOutput", value)),
        refuse=lambda reason: reply(tool_call(mcp_tool_name("refuse_task"), {"reason": reason})),
        usage={"input_tokens": 1200, "output_tokens": 40}, hang_seconds=60,
        supports=frozenset({"permissions", "ask", "told"}), expect=EXPECT)


CASES = [pytest.param(claude_code, id="claude-code", marks=pytest.mark.agent)]
