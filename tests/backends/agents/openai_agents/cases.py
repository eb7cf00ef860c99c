"""openai-agents' cases (tests/backends/kit.py): the OpenAI Agents SDK's own loop (the real SDK
and openai client, in this interpreter) on the scripted server's OpenAI base URL, one case per
wire (Responses, Chat Completions). "shell" runs agenter's shell tool confined (sandbox=True,
where this machine has a shell sandbox); every tool call is decided by agenter's gate in this
process. The conversation is kept in a store folder of the kit's, so a new backend resumes it by
its id."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agenter.backends.agents.openai_agents import OpenAIAgentsBackend
from agenter.host import _pids
from agenter.sandbox.confine import choose_mechanism
from agenter.testing import reply, text, tool_call

from ...kit import Case, Kit

API_KEY = "sk-test-OPENAIAGENTS-0123456789abcdef"
MODEL = "gpt-4.1"  # genai-prices knows it: the usage check sees a cost


def connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """No retries: a failure is one request. The conversation store is the kit's (one folder per
    kit, so the resume check's second backend finds the first one's conversation). HOME is this
    process's: the backend runs here."""
    return {"api_key": API_KEY, "base_url": server.openai_base_url, "max_retries": 0,
            "openai_agents_store_dir": str(kit.root / "conversations"), **kit.case.options}


def import_sdk() -> None:
    """The SDK's first import takes seconds on a busy machine: done before any time budget."""
    import agents  # noqa: F401


def no_child_left() -> None:
    """The SDK runs in this process: no process it had started (a shell command, an MCP server)
    may outlive a test."""
    deadline = time.monotonic() + 5
    while True:
        alive = {pid for pid in _pids.descendants(os.getpid()) if _pids.is_alive(pid)}
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not alive, f"processes left running: {sorted(alive)}"


def make(wire: str) -> Any:
    def case(shared: Path) -> Case:
        import_sdk()
        return Case(
            backend=OpenAIAgentsBackend, wire="openai", model=MODEL, connect=connect,
            options={"openai_agents_wire": wire}, sandbox=choose_mechanism() is not None,
            write=lambda path, content: reply(tool_call("write_file", {"path": path, "content": content})),
            shell=lambda command: reply(tool_call("shell", {"command": command})),
            read=lambda path: reply(tool_call("read_file", {"path": path})),
            output=lambda value: reply(text(json.dumps(value))),
            refuse=lambda reason: reply(tool_call("refuse_task", {"reason": reason})),
            done=lambda: reply(text("done")), usage={"input_tokens": 1200, "output_tokens": 40},
            supports=frozenset({"permissions", "ask", "told"}), resume={}, error_classes=True, time_budget={},
            check_after=no_child_left)

    case.__name__ = f"openai_agents_{wire}"
    return case


CASES = [pytest.param(make(wire), id=f"openai-agents-{wire}", marks=pytest.mark.agent) for wire in ("responses", "chat")]
