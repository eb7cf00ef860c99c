"""Patch mode is the session's: on every backend that returns structured output the turn runs
read-only and is asked for a proposal, which agenter applies through the gate and validates.
anthropic-sdk (its own tool loop, against the scripted model) and FunctionBackend here; the
completion backends in tests/test_patch_mode.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter.backends._prompts import STRUCTURED_OUTPUT_TOOL_NAME
from agenter.testing import FunctionBackend, reply, tool_call

API_KEY = "sk-ant-test-patch-everywhere-0000"


def change(path: str, content: str, operation: str = "modify") -> dict[str, Any]:
    return {"path": path, "operation": operation, "new_path": None, "diff": None, "search_replace": None,
            "content": content}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


async def test_anthropic_sdk_proposes_and_agenter_applies(scripted_model_server, repo):
    proposal = {"summary": "Greet loudly.", "files": [change("app.py", "def greet():\n    return 'HELLO'\n")]}
    server = scripted_model_server([
        reply(tool_call("read_file", {"path": "app.py"})),
        reply(tool_call(STRUCTURED_OUTPUT_TOOL_NAME, proposal)),
    ])
    agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY, mode="patch",
                                  anthropic_shell=False)
    result = await agent.execute("Make greet() shout.", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "app.py").read_text() == "def greet():\n    return 'HELLO'\n"
    assert result.files == {"app.py": "def greet():\n    return 'HELLO'\n"}
    assert result.diff is not None and "+    return 'HELLO'" in result.diff
    assert result.summary.startswith("Greet loudly.\n\nApplied. written: app.py")
    first = server.model_requests[0].body
    offered = {tool["name"] for tool in first["tools"]}
    # The agent only reads: no tool that writes is offered in patch mode.
    assert "read_file" in offered and STRUCTURED_OUTPUT_TOOL_NAME in offered
    assert not offered & {"write_file", "edit_file", "str_replace_based_edit_tool", "bash"}
    assert "Propose the change as one JSON object" in json.dumps(first["messages"])


async def test_a_refused_file_goes_back_to_the_agent_and_is_named(scripted_model_server, repo):
    first = {"summary": "s", "files": [change("secret/key.py", "k = 1\n", "create")]}
    second = {"summary": "s", "files": [change("app.py", "def greet():\n    return 'hi'\n")]}
    server = scripted_model_server([reply(tool_call(STRUCTURED_OUTPUT_TOOL_NAME, first)),
                                    reply(tool_call(STRUCTURED_OUTPUT_TOOL_NAME, second))])
    agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY, mode="patch",
                                  anthropic_shell=False,
                                  permissions={"rules": ["deny edit:secret/**"], "mode": "accept_edits"})
    result = await agent.execute("Do it", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert not (repo / "secret" / "key.py").exists()
    assert [(d["tool"], d["rule"]) for d in result.permission_denials] == [("apply_patch", "deny edit:secret/**")]
    assert "These changes were refused" in json.dumps(server.model_requests[1].body)


def _proposing(ctx: Any) -> Any:
    if "Propose the change" not in ctx.prompts[0]:
        raise AssertionError("patch mode's guidance is missing")
    ctx.output({"summary": "Add b.", "files": [change("b.py", "B = 1\n", "create")]})
    return "proposed"


async def test_any_backend_with_structured_output_runs_patch_mode(tmp_path):
    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=_proposing, mode="patch")
    result = await agent.execute("Add b.py", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (tmp_path / "b.py").read_text() == "B = 1\n" and result.files == {"b.py": "B = 1\n"}


async def test_an_agent_that_writes_by_itself_in_patch_mode_fails_the_run(tmp_path):
    def writes(ctx: Any) -> Any:
        return ctx.write("sneaky.py", "x = 1\n")

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=writes, mode="patch")
    result = await agent.execute("Do it", cwd=tmp_path)
    assert result.status is CodingStatus.FAILED
    assert "patch mode allows the agent no changes of its own" in (result.error or "")


def test_patch_mode_with_output_type_is_refused_clearly(tmp_path):
    import asyncio

    from pydantic import BaseModel

    class Out(BaseModel):
        x: int

    from agenter import ConfigurationError

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=_proposing, mode="patch")
    with pytest.raises(ConfigurationError, match="patch mode returns the applied change"):
        asyncio.run(agent.execute("Do it", cwd=tmp_path, output_type=Out))
