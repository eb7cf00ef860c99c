"""Plan, then execute, offline: a planner and an executor, each the real anthropic-sdk backend
(the real `anthropic` client over real HTTP) against its own scripted model server.

The planner model splits "a small text utilities package" into three deliverables with unit
tests (two independent modules, then the package that exports both) and an overall integration
test. Each deliverable is one verified run of the executor; the two independent ones run at the
same time in git worktrees and are merged back. Run it: `python examples/planning_example.py`.
Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agenter import AutonomousCodingAgent, Budget
from agenter.planner import PlanAndExecute, PlanEventType
from agenter.testing import ModelRequest, ScriptedModelServer, reply, text, tool_call

PY = sys.executable

PLAN = {
    "root_task_description": "A package textutils with slugify() and word_count(), both importable from it.",
    "tasks": [
        {"id": "1", "description": "Create textutils/slug.py with slugify(text): lowercase words joined by '-'.",
         "unit_tests": [{"description": "slugify('Hello World') == 'hello-world'",
                         "command": f"{PY} -c \"from textutils.slug import slugify; "
                                    "assert slugify('Hello World') == 'hello-world'\""}]},
        {"id": "2", "description": "Create textutils/count.py with word_count(text): the number of words.",
         "unit_tests": [{"description": "word_count('a b c') == 3",
                         "command": f"{PY} -c \"from textutils.count import word_count; "
                                    "assert word_count('a b c') == 3\""}]},
        {"id": "3", "description": "Create textutils/__init__.py exporting slugify and word_count.",
         "depends_on": ["1", "2"]},
    ],
    "overall_integration_tests": [{
        "description": "both functions are importable from the package",
        "command": f"{PY} -c \"import textutils; assert textutils.word_count(textutils.slugify('A b')) == 1\""}],
}

CODE = {
    "1": ("textutils/slug.py", "def slugify(text):\n    return '-'.join(text.lower().split())\n"),
    "2": ("textutils/count.py", "def word_count(text):\n    return len(text.split())\n"),
    "3": ("textutils/__init__.py",
          "from textutils.count import word_count\nfrom textutils.slug import slugify\n\n"
          "__all__ = ['slugify', 'word_count']\n"),
}


def planner_model(request: ModelRequest):
    """The planner's model: it answers with the plan through the final_result tool."""
    return reply(text("The work splits into two independent modules and the package."),
                 tool_call("final_result", PLAN))


def executor_model(request: ModelRequest):
    """The executor's model: writes the file its task asks for, then says it is done."""
    if request.tool_results:
        return reply(text("Done."))
    task = re.search(r"Your task \((\d+)\)", request.last_user_text or "")
    path, content = CODE[task.group(1) if task else "3"]
    return reply(text(f"Writing {path}."), tool_call("write_file", {"path": path, "content": content}))


def make_repo(root: Path) -> Path:
    repo = root / "textutils-repo"
    repo.mkdir()
    (repo / "README.md").write_text("# textutils\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=demo", "-c", "user.email=demo@example.com", "commit", "-qm", "start"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


async def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="agenter-planning-"))
    try:
        repo = make_repo(workdir)
        with ScriptedModelServer(handler=planner_model) as planning, \
                ScriptedModelServer(handler=executor_model) as coding:
            runner = PlanAndExecute(
                planner=AutonomousCodingAgent(backend="anthropic-sdk", model="claude-opus-4-5", mode="analysis",
                                              base_url=planning.base_url, api_key="sk-demo-not-a-real-key"),
                executor=AutonomousCodingAgent(backend="anthropic-sdk", model="claude-haiku-4-5",
                                               base_url=coding.base_url, api_key="sk-demo-not-a-real-key"),
                parallel=2, budget=Budget(max_cost_usd=2.0, max_time_seconds=300))
            result = None
            async for event in runner.stream_execute("Write a small text utilities package", repo):
                if event.type is PlanEventType.PLAN_CREATED:
                    print(f"plan: {event.data['atomic_tasks']} tasks, order {event.data['order']}")
                elif event.type is PlanEventType.TASK_START:
                    print(f"  task {event.task_id} started")
                elif event.type is PlanEventType.TASK_END:
                    print(f"  task {event.task_id} {event.data['status']}: {', '.join(event.data['files'])}")
                elif event.type is PlanEventType.RUN_END:
                    result = event.result
        assert result is not None
        print()
        print(result.summary())
        print("\ntextutils/__init__.py:\n" + (repo / "textutils" / "__init__.py").read_text())
        return 0 if result.ok else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
