"""A plan run in a process of its own, for tests/planner/test_resume.py: three tasks writing
a.txt, b.txt, c.txt (c after a and b); every executor turn appends its task id to runs.log; the
process kills itself (SIGKILL, nothing cleaned up) where the test says.

    python resume_child.py CWD STATE_DIR PARALLEL KILL [resume]

KILL: "none", "task:<id>" (inside that task's turn, after it wrote its file), or
"after-finish:<id>" (inside task <id>'s turn once task b's finished work waits to be merged:
parallel only).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from agenter import AutonomousCodingAgent
from agenter.planner import PlanAndExecute
from agenter.testing import FunctionBackend, TurnContext

PLAN = {"root_task_description": "three files", "overall_integration_tests": [
    {"description": "all three", "command": "cat a.txt b.txt c.txt"}], "tasks": [
    {"id": "a", "description": "write a.txt containing alpha",
     "unit_tests": [{"description": "a", "command": "grep -qx alpha a.txt"}]},
    {"id": "b", "description": "write b.txt containing beta",
     "unit_tests": [{"description": "b", "command": "grep -qx beta b.txt"}]},
    {"id": "c", "description": "write c.txt containing gamma", "depends_on": ["a", "b"],
     "unit_tests": [{"description": "c", "command": "grep -qx gamma c.txt"}]}]}


def main() -> None:
    cwd, state, parallel, kill = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    resume = len(sys.argv) > 5
    log = Path(state).parent / "runs.log"

    async def turn(ctx: TurnContext):
        task = ctx.prompt.split("Your task (")[1].split(")")[0]
        with log.open("a") as out:
            out.write(task + "\n")
        content = {"a": "alpha", "b": "beta", "c": "gamma"}[task]
        written = ctx.write(f"{task}.txt", content + "\n")
        ctx.use(input_tokens=100, output_tokens=10)
        if kill == f"task:{task}":
            os.kill(os.getpid(), signal.SIGKILL)
        if kill == f"after-finish:{task}":
            # Wait until b has finished in its worktree (recorded in the state), waiting for a
            # (first in order) to merge; then die.
            for _ in range(600):
                if '"b":"finished"' in (Path(state) / "state.json").read_text():
                    break
                await asyncio.sleep(0.1)
            os.kill(os.getpid(), signal.SIGKILL)
        return [written, "done"]

    executor = AutonomousCodingAgent(backend=FunctionBackend, turn=turn)
    runner = PlanAndExecute(executor=executor, parallel=parallel, decomposition="none")
    if resume:
        result = runner.execute_sync(resume=state)
    else:
        from agenter.planner import Plan

        result = runner.execute_sync("three files", cwd, plan=Plan.model_validate(PLAN), state_dir=state)
    print(result.model_dump_json())


if __name__ == "__main__":
    main()
