"""The planner is any backend with structured output: here the real anthropic-sdk backend (the
real anthropic client, real HTTP) plans against the scripted model server through its
final_result tool; a malformed plan is answered with the errors and corrected by the model."""

from __future__ import annotations

import json

from agenter import AutonomousCodingAgent, CodingStatus
from agenter.planner import PlanAndExecute, TaskStatus
from agenter.testing import reply, text, tool_call

from .conftest import file_task, plan_dict, writing_executor

API_KEY = "sk-test-planner-0123456789abcdef"


async def test_the_anthropic_sdk_backend_plans_through_final_result_and_fixes_a_malformed_plan(
        scripted_model_server, tmp_path):
    good = plan_dict(file_task("1", "a.txt", "alpha"), file_task("2", "b.txt", "beta", depends_on=["1"]))
    bad = plan_dict(file_task("1", "a.txt", "alpha"), file_task("2", "b.txt", "beta", depends_on=["7"]))
    server = scripted_model_server([
        reply(text("Reading the task."), tool_call("final_result", bad)),
        reply(tool_call("final_result", good)),  # accepted: the turn ends there
    ])
    planner = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY,
                                    model="claude-haiku-4-5", mode="analysis")
    runner = PlanAndExecute(planner=planner, executor=writing_executor())
    result = await runner.execute("write two files, b after a", tmp_path)

    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert [t.status for t in result.tasks] == [TaskStatus.COMPLETED, TaskStatus.COMPLETED]
    assert (tmp_path / "a.txt").read_text() == "alpha\n" and (tmp_path / "b.txt").read_text() == "beta\n"
    assert result.plan is not None and result.plan.tasks[1].depends_on == ["1"]
    # The planner saw the plan's schema as the final_result tool, and the error came back to it.
    first = server.model_requests[0]
    final = [t for t in first.body["tools"] if t["name"] == "final_result"][0]
    assert "tasks" in final["input_schema"]["properties"]
    assert "Plan this coding task" in first.model_request.last_user_text
    error = server.model_requests[1].model_request.tool_results[-1]
    assert error["is_error"] and "depends on unknown task '7'" in json.dumps(error["output"])
    assert len(server.model_requests) == 2
    assert result.phases["planning"].tokens > 0 and result.phases["planning"].runs == 1
    assert API_KEY not in result.model_dump_json()
