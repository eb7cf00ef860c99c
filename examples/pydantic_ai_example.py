"""A PydanticAI agent that delegates "edit this repository" to agenter, offline.

The PydanticAI agent ("planner") gets agenter's coding tool. Here the planner's model is
PydanticAI's own FunctionModel playing a model that decides to call the tool; agenter's coding
run uses the real anthropic-sdk backend against agenter's scripted model server. Nothing
leaves 127.0.0.1.

    pip install 'agenter-sdk[pydantic-ai]'
    python examples/pydantic_ai_example.py

With real models: Agent("anthropic:claude-sonnet-5-5", tools=[coding_tool(cwd=repo,
backend="anthropic-sdk")]) and no base_url/api_key (ANTHROPIC_API_KEY is used).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agenter.adapters.pydantic_ai import CodingAgent, coding_tool
from agenter.testing import ScriptedModelServer, reply, text, tool_call


def planner_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Plays the planner's model: delegate the edit once, then summarize the tool's answer."""
    for part in messages[-1].parts:
        if isinstance(part, ToolReturnPart):
            outcome = part.content
            return ModelResponse(parts=[TextPart(
                f"The coding agent finished with status {outcome['status']!r} and changed "
                f"{', '.join(outcome['files_changed']) or 'nothing'}.")])
    return ModelResponse(parts=[ToolCallPart(
        "edit_repository", {"task": "Create VERSION containing 1.2.0 and a version.py that reads it."})])


def coding_model_script() -> list:
    """What agenter's coding model (the scripted server) answers, turn by turn."""
    version_py = ('from pathlib import Path\n\n'
                  'VERSION = (Path(__file__).parent / "VERSION").read_text().strip()\n')
    return [
        reply(text("Creating both files."),
              tool_call("write_file", {"path": "VERSION", "content": "1.2.0\n"}),
              tool_call("write_file", {"path": "version.py", "content": version_py})),
        reply(text("Added VERSION and version.py.")),
        # the direct CodingAgent.run_sync call below
        reply(tool_call("write_file", {"path": "CHANGELOG.md", "content": "# 1.2.0\n"})),
        reply(text("Started the changelog.")),
    ]


def main() -> int:
    repo = Path(tempfile.mkdtemp(prefix="agenter-pydantic-ai-"))
    try:
        with ScriptedModelServer(coding_model_script()) as server:
            options = {"backend": "anthropic-sdk", "base_url": server.base_url, "api_key": "sk-example"}

            # 1. A PydanticAI agent delegates the edit to agenter through a tool.
            planner = Agent(FunctionModel(planner_model), tools=[coding_tool(cwd=repo, **options)])
            run = planner.run_sync("Give my project a version number.")
            print("planner says:", run.output)
            tool_answer = next(part.content for message in run.all_messages() for part in message.parts
                               if isinstance(part, ToolReturnPart))
            print("tool returned:", json.dumps(tool_answer))

            # 2. Or run agenter directly, PydanticAI style.
            coder = CodingAgent(**options)
            result = coder.run_sync("Start a CHANGELOG.md", cwd=repo)
            print(f"direct run: {result.status.value}, files: {sorted(result.files)}")

        print("repository now holds:", sorted(p.name for p in repo.iterdir()))
        return 0 if tool_answer["status"] == "completed" and result.ok else 1
    finally:
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
