"""The PydanticAI adapter: CodingAgent, and a real pydantic_ai.Agent (driven by its own
FunctionModel) delegating to the real anthropic-sdk backend on the scripted model server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agenter import CodingResult, CodingStatus, ConfigurationError
from agenter.adapters.pydantic_ai import CodingAgent, coding_tool, summarize_result
from agenter.testing import http_error, reply, text, tool_call

API_KEY = "sk-test-x"


def write_script(path: str, content: str, summary: str = "Done.") -> list:
    return [reply(tool_call("write_file", {"path": path, "content": content})), reply(text(summary))]


def delegating_model(task: str, seen: dict[str, Any]) -> FunctionModel:
    """A scripted PydanticAI model: call the coding tool once, then report what it returned."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["tools"] = {t.name: t.parameters_json_schema for t in info.function_tools}
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                seen["tool_return"] = part.content
                return ModelResponse(parts=[TextPart(f"coding status: {part.content['status']}")])
        return ModelResponse(parts=[ToolCallPart("edit_repository", {"task": task})])

    return FunctionModel(respond)


@pytest.mark.agent
async def test_coding_agent_run_returns_a_coding_result(scripted_model_server, tmp_path: Path):
    server = scripted_model_server(write_script("app.py", "print('app')\n", "Created app.py."))
    coder = CodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY)
    result = await coder.run("Create app.py", cwd=tmp_path, system_prompt="Be brief.")
    assert isinstance(result, CodingResult)
    assert result.status is CodingStatus.COMPLETED
    assert result.files == {"app.py": "print('app')\n"}
    assert (tmp_path / "app.py").read_text() == "print('app')\n"
    assert "Be brief." in json.dumps(server.model_requests[0].model_request.system)


@pytest.mark.agent
def test_coding_agent_run_sync(scripted_model_server, tmp_path: Path):
    server = scripted_model_server(write_script("sync.txt", "sync\n"))
    coder = CodingAgent(backend="anthropic-sdk", cwd=tmp_path, base_url=server.base_url, api_key=API_KEY)
    result = coder.run_sync("Write sync.txt")
    assert result.ok
    assert (tmp_path / "sync.txt").read_text() == "sync\n"


@pytest.mark.agent
async def test_pydantic_ai_agent_delegates_the_edit_to_agenter(scripted_model_server, tmp_path: Path):
    server = scripted_model_server(write_script("greet.py", "def greet():\n    return 'hi'\n",
                                                "Added greet()."))
    seen: dict[str, Any] = {}
    task = "Add a greet() function in greet.py"
    planner = Agent(delegating_model(task, seen),
                    tools=[coding_tool(cwd=tmp_path, backend="anthropic-sdk",
                                       base_url=server.base_url, api_key=API_KEY)])

    run = await planner.run("Please add a greeting helper to my project")

    assert run.output == "coding status: completed"
    assert (tmp_path / "greet.py").read_text() == "def greet():\n    return 'hi'\n"
    assert seen["tool_return"] == {"status": "completed", "files_changed": ["greet.py"],
                                   "files_deleted": [], "summary": "Added greet().", "error": None}
    schema = seen["tools"]["edit_repository"]
    assert list(schema["properties"]) == ["task"] and schema["required"] == ["task"]
    assert "cwd" not in schema["properties"]  # the model never picks the directory
    # agenter's model got the planner's task, word for word
    assert task in json.dumps(server.model_requests[0].model_request.messages)
    json.dumps(seen["tool_return"])


@pytest.mark.agent
async def test_failed_coding_run_is_reported_to_the_pydantic_ai_model(scripted_model_server, tmp_path: Path):
    server = scripted_model_server([http_error(500, "upstream exploded")])
    seen: dict[str, Any] = {}
    coder = CodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY, max_retries=0)
    planner = Agent(delegating_model("Do something", seen), tools=[coder.as_tool(tmp_path)])

    run = await planner.run("go")

    assert run.output == "coding status: error"
    outcome = seen["tool_return"]
    assert outcome["status"] == "error" and outcome["files_changed"] == []
    assert "500" in outcome["error"]
    assert API_KEY not in json.dumps(outcome)


@dataclass
class Deps:
    repo: Path


@pytest.mark.agent
async def test_tool_cwd_can_come_from_run_deps(scripted_model_server, tmp_path: Path):
    server = scripted_model_server(write_script("deps.txt", "from deps\n"))
    repo = tmp_path / "repo"
    repo.mkdir()
    seen: dict[str, Any] = {}
    coder = CodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY)
    planner = Agent(delegating_model("Write deps.txt", seen), deps_type=Deps,
                    tools=[coder.as_tool(lambda ctx: ctx.deps.repo, name="edit_repository")])
    await planner.run("go", deps=Deps(repo=repo))
    assert (repo / "deps.txt").read_text() == "from deps\n"
    assert seen["tool_return"]["status"] == "completed"


def test_configuration_errors(tmp_path: Path):
    assert CodingAgent().backend == "anthropic-sdk"  # the facade's default, as in agenter 0.1.7
    with pytest.raises(ConfigurationError, match="is a directory, not a backend") as positional_cwd:
        CodingAgent(str(tmp_path))  # 0.1.7's first argument was cwd
    assert f"cwd={str(tmp_path)!r}" in str(positional_cwd.value)
    with pytest.raises(ConfigurationError, match="unknown option 'colour'"):
        CodingAgent(backend="anthropic-sdk", colour="blue")
    coder = CodingAgent(backend="anthropic-sdk", api_key=API_KEY)
    with pytest.raises(ConfigurationError, match="cwd"):
        coder.as_tool()
    with pytest.raises(ConfigurationError, match="not a directory"):
        coder.as_tool(tmp_path / "missing")
    with pytest.raises(ConfigurationError, match="cwd"):
        coder.run_sync("no directory given")
    with pytest.raises(ConfigurationError, match="not a directory"):
        coding_tool(cwd=tmp_path / "missing", backend="anthropic-sdk")


def test_summarize_result_is_compact_and_json_safe():
    result = CodingResult(status=CodingStatus.FAILED, files={"a.py": "x", "old.py": None},
                          summary="s" * 10_000, error="validation failed",
                          validation_errors=[f"e{i}" for i in range(100)])
    outcome = summarize_result(result)
    assert outcome["files_changed"] == ["a.py"] and outcome["files_deleted"] == ["old.py"]
    assert len(outcome["summary"]) < 4100
    assert len(outcome["validation_errors"]) == 20
    json.dumps(outcome)
