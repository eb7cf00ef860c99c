"""codex's case (tests/backends/kit.py): the real Codex CLI (`codex app-server`, npm @openai/codex
pinned in package.json) on the scripted server's OpenAI Responses wire. Threads run under the
approval policy "untrusted" when a policy is given, so Codex asks agenter before every command
and patch; its words for a declined call are checked in `EXPECT`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agenter.backends.agents.codex import CodexBackend
from agenter.testing import reply, text, tool_call

from ...kit import REPO, TOKEN_ENV, Case, Kit, need

API_KEY = "sk-test-SUPERSECRET-0123456789abcdef"
MODEL = "gpt-5.5"  # in Codex's model catalog: it offers apply_patch as a free-form tool


def codex_program() -> str | None:
    local = REPO / "node_modules" / ".bin" / "codex"
    return str(local) if local.exists() else shutil.which("codex")


def shell(command: str, **arguments: Any) -> Any:
    # exec_command returns early (no output, no exit code) when a command outlives its yield
    # window, which a loaded CI machine can stretch; wait for the command unless told otherwise.
    arguments.setdefault("yield_time_ms", 30_000)
    return tool_call("exec_command", {"cmd": command, **arguments})


def patch(body: str) -> Any:
    return tool_call("apply_patch", f"*** Begin Patch\n{body}*** End Patch\n")


def add_file(path: str, content: str) -> Any:
    return reply(patch(f"*** Add File: {path}\n" + "".join(f"+{line}\n" for line in content.splitlines())))


def told_after(server: Any, index: int) -> str:
    """What the model read after its call in reply `index`: the input items of the next request
    that follow that call (the tool's output and agenter's explanation)."""
    items = server.model_requests[index + 1].body["input"]
    call_ids = [item.get("call_id") for item in items if item.get("type") in ("function_call", "custom_tool_call")]
    last_call = call_ids[-1]
    start = max(i for i, item in enumerate(items) if item.get("call_id") == last_call
                and item.get("type") in ("function_call", "custom_tool_call"))
    return json.dumps(items[start + 1:])


def hostile(evidence: Any, server: Any) -> None:
    """Codex's decline, then agenter's reason; every decision names Codex's tool."""
    for index, why in enumerate(["version-control internals", "force-pushes", "holds credentials", "downloaded"]):
        said = told_after(server, index)
        assert "rejected" in said and "rejected by agenter" in said and why in said, said
    assert "rejected" not in told_after(server, 4)
    rules = [d.rule.split(":")[1].split(",") for d in evidence.report.denials]
    assert [checks[-1] for checks in rules] == ["git-internals", "destructive-git", "credentials", "download-exec"]
    assert [(d["tool"], d["decision"]) for d in evidence.decisions] == [
        ("apply_patch", "deny"), ("shell", "deny"), ("shell", "deny"), ("shell", "deny"), ("apply_patch", "allow")]
    assert all(d["rule"] and d["input"] for d in evidence.decisions)
    assert server.model_requests[0].headers.get("x-codex-turn-metadata") is not None


def asked(evidence: Any, server: Any) -> None:
    assert "rejected" not in told_after(server, 0)
    assert "the release is frozen today" in told_after(server, 1)


def unanswered(evidence: Any, server: Any) -> None:
    assert "no answer to the permission request within 1.5 s" in told_after(server, 0)


EXPECT = {"hostile_calls_are_refused_and_the_turn_goes_on": hostile, "asks_are_answered_by_the_callback": asked,
          "an_unanswered_ask_is_refused_at_the_deadline": unanswered}


def connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """No retries, so failures are quick and countable; the commands' HOME is the kit's (empty,
    so a login shell reads no start-up files: a slow ~/.bashrc must not decide a test)."""
    assert kit.case.program is not None
    return {"program_path": kit.case.program, "base_url": server.openai_base_url, "api_key": API_KEY,
            "max_retries": 0, "env": {"HOME": str(home), TOKEN_ENV: kit.token}}


def codex(shared: Path) -> Case:
    program = need(codex_program(), "the Codex CLI (run `npm install` in the repository: package.json pins it)")
    return Case(
        backend=CodexBackend, wire="openai", model=MODEL, program=program, connect=connect, sandbox=True,
        write=add_file, shell=lambda command: reply(shell(command)),
        read=lambda path: reply(shell(f"cat {path}")),
        output=lambda value: reply(text(json.dumps(value))),  # no custom tools here: refusal is a text line
        supports=frozenset({"permissions", "ask", "told"}), expect=EXPECT)


CASES = [pytest.param(codex, id="codex", marks=pytest.mark.agent)]
