"""google-adk's case (tests/backends/kit.py): Google ADK's own agent loop (the real google-adk and
google-genai, in this process) on the scripted server's Gemini wire; "shell" runs ADK's Execute
tool through agenter's sandboxed shell (sandbox=True). Every tool call is decided by agenter's
gate in ADK's before_tool_callback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenter.backends.agents.google_adk import GoogleADKBackend
from agenter.testing import reply, text, tool_call

from ...kit import TOKEN_ENV, Case, Kit

API_KEY = "AIza-test-SUPERSECRET-0123456789abcdef"


def connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """No retries: a failure is one request. ADK's session database in the kit's folder (shared
    by the kit's backends, so one resumes another's session); the token in the commands'
    environment. (HOME is this process's: the backend runs here.)"""
    return {"api_key": API_KEY, "base_url": server.base_url, "max_retries": 0,
            "adk_session_db": str(kit.root / "adk-sessions.db"), "env": {TOKEN_ENV: kit.token}}


def google_adk(shared: Path) -> Case:
    return Case(
        backend=GoogleADKBackend, wire="gemini", model=None, connect=connect, sandbox=True,
        write=lambda path, content: reply(tool_call("WriteFile", {"path": path, "content": content})),
        shell=lambda command: reply(tool_call("Execute", {"command": command})),
        read=lambda path: reply(tool_call("ReadFile", {"path": path})),
        output=lambda value: reply(tool_call("set_model_response", value)),
        refuse=lambda reason: reply(tool_call("refuse_task", {"reason": reason})),
        done=lambda: reply(text("done")), usage={"input_tokens": 1200, "output_tokens": 40},
        supports=frozenset({"permissions", "ask", "told"}), resume={}, time_budget={}, error_classes=True)


CASES = [pytest.param(google_adk, id="google-adk", marks=pytest.mark.agent)]
