"""anthropic-sdk's case (tests/backends/kit.py): agenter's own tool loop over the real anthropic
SDK, on the scripted server's Anthropic wire; "shell" runs the bash tool under bubblewrap
(sandbox=True). Every tool call is decided by agenter's gate in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenter.backends.model_api.anthropic_sdk import AnthropicSDKBackend
from agenter.testing import reply, text, tool_call

from ...kit import Case, Kit

API_KEY = "sk-test-SUPERSECRET-0123456789abcdef"


def connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """No retries: a failure is one request. (HOME is this process's: the backend runs here.)"""
    return {"api_key": API_KEY, "base_url": server.base_url, "max_retries": 0}


def anthropic_sdk(shared: Path) -> Case:
    return Case(
        backend=AnthropicSDKBackend, wire="anthropic", model=None, connect=connect, sandbox=True,
        write=lambda path, content: reply(tool_call("write_file", {"path": path, "content": content})),
        shell=lambda command: reply(tool_call("bash", {"command": command})),
        read=lambda path: reply(tool_call("read_file", {"path": path})),
        output=lambda value: reply(tool_call("final_result", value)),
        refuse=lambda reason: reply(tool_call("refuse_task", {"reason": reason})),
        done=lambda: reply(text("done")), usage={"input_tokens": 1200, "output_tokens": 40},
        supports=frozenset({"permissions", "ask", "told"}))


CASES = [pytest.param(anthropic_sdk, id="anthropic-sdk", marks=pytest.mark.agent)]
