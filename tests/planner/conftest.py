"""Scripted planners and executors for the planner tests: FunctionBackend turns, no model."""

from __future__ import annotations

import inspect
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent
from agenter.testing import FunctionBackend, TurnContext

_TASK = re.compile(r"Your task \(([^)]+)\):")


def task_id(prompt: str) -> str | None:
    """The id of the task an executor prompt is about (None for a debugging prompt)."""
    match = _TASK.search(prompt)
    return match.group(1) if match else None


def plan_dict(*tasks: dict[str, Any], overall: list[Any] | None = None) -> dict[str, Any]:
    return {"root_task_description": "the whole job", "tasks": list(tasks), "overall_integration_tests": overall or []}


def file_task(tid: str, path: str, content: str, **fields: Any) -> dict[str, Any]:
    """A task whose unit test checks that `path` holds `content`."""
    return {"id": tid, "description": f"write {path} containing {content}",
            "unit_tests": [{"description": f"{path} holds {content}", "command": f"grep -qx '{content}' {path}"}],
            **fields}


def scripted_planner(answer: Callable[[TurnContext], Any] | dict[str, Any], tokens: int = 100) -> AutonomousCodingAgent:
    """A planner whose every turn returns `answer` (a plan dict, or a function of the turn)."""

    def turn(ctx: TurnContext) -> Any:
        ctx.use(input_tokens=tokens)
        value = answer(ctx) if callable(answer) else answer
        if value is None:
            return "no plan"
        return [ctx.output(value), "planned"]

    return AutonomousCodingAgent(backend=FunctionBackend, turn=turn, mode="analysis")


def writing_executor(prompts: list[str] | None = None, tokens: int = 200,
                     override: Callable[[TurnContext], Any] | None = None) -> AutonomousCodingAgent:
    """An executor that writes what the task's description says: 'write PATH containing TEXT'."""

    async def turn(ctx: TurnContext) -> Any:
        if prompts is not None:
            prompts.append(ctx.prompt)
        ctx.use(input_tokens=tokens)
        if override is not None:
            outcome = override(ctx)
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome is not None:
                return outcome
        # A retry's prompt has only the errors: the task is in the session's first prompt.
        match = re.search(r"Your task \([^)]+\):\nwrite (\S+) containing (\S+)", ctx.prompts[0])
        assert match, ctx.prompts[0]
        return [ctx.write(match.group(1), match.group(2) + "\n"), "done"]

    return AutonomousCodingAgent(backend=FunctionBackend, turn=turn)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("project\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return root
