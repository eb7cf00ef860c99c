"""The plan shape and its rules, the budget pool, the report: pure logic."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agenter import Budget, CodingResult, CodingStatus
from agenter.planner import Plan, PlanResult, PlanTask, TaskReport, TaskStatus, TestDesign
from agenter.planner.budget import BudgetPool
from agenter.planner.plan import Decomposition, atomic_tasks, dependencies, execution_order, plan_depth
from agenter.planner.planner import _renamed


def task(task_id: str, *subs: dict, **fields) -> dict:
    data = {"id": task_id, "description": f"do {task_id}", **fields}
    if subs:
        data["is_atomic"] = False
        data["sub_tasks"] = list(subs)
    return data


def test_the_seed_shape_parses_with_strings_as_test_descriptions_and_nulls_as_empty():
    plan = Plan.model_validate({
        "root_task_description": "build it",
        "tasks": [{"id": "1", "description": "a", "is_atomic": True, "sub_tasks": None,
                   "unit_tests": ["a works"], "integration_tests": None},
                  task("2", task("2.1"), task("2.2"))],
        "overall_integration_tests": ["everything works", {"description": "runs", "command": "true"}],
    })
    assert plan.tasks[0].unit_tests[0].description == "a works"
    assert plan.tasks[0].unit_tests[0].command is None
    assert plan.overall_integration_tests[1].executable
    assert [t.id for t in atomic_tasks(plan.tasks)] == ["1", "2.1", "2.2"]
    assert plan_depth(plan.tasks) == 2


@pytest.mark.parametrize(("tasks", "message"), [
    ([task("1"), task("1")], "used more than once"),
    ([task("1", depends_on=["9"])], "unknown task '9'"),
    ([task("1", depends_on=["1"])], "depends on itself"),
    ([task("1", depends_on=["2"]), task("2", depends_on=["1"])], "form a cycle"),
    ([task("1", task("1.1", depends_on=["1"]), task("1.2"))], "its own parent"),
    ([{"id": "1", "description": "x", "is_atomic": True, "sub_tasks": [task("1.1")]}], "atomic but has sub_tasks"),
    ([task("1", unit_tests=[{"description": "t", "path": "../x.py", "code": "x"}])], "must not contain '..'"),
    ([task("1", unit_tests=[{"description": "t", "path": "x.py"}])], "needs both path and code"),
])
def test_a_malformed_plan_is_rejected_with_words_a_planner_can_act_on(tasks, message):
    with pytest.raises(ValidationError) as info:
        Plan.model_validate({"root_task_description": "r", "tasks": tasks})
    assert message in str(info.value)


def test_the_depth_limit_is_part_of_the_output_type():
    deep = {"root_task_description": "r", "tasks": [task("1", task("1.1", task("1.1.1"), task("1.1.2")), task("1.2"))]}
    Plan.model_validate(deep)  # no limit
    with pytest.raises(ValidationError, match="depth 3, deeper than the limit of 2"):
        Plan.limited(2).model_validate(deep)
    limited = Plan.limited(3).model_validate(deep)
    assert type(limited.as_plain()) is Plan
    assert Plan.limited(2).model_json_schema()["title"] == "Plan"
    with pytest.raises(ValidationError, match="deeper than the limit of 1"):
        Decomposition.limited(1).model_validate({"sub_tasks": [task("1", task("a"), task("b")), task("2")]})


def test_execution_order_follows_dependencies_then_plan_order_and_parents_pass_theirs_down():
    tasks = [PlanTask.model_validate(t) for t in [
        task("1", depends_on=["3"]),
        task("2"),
        task("3", task("3.1"), task("3.2", depends_on=["3.1"])),
        task("4", task("4.1"), depends_on=["2"]),
    ]]
    assert dependencies(tasks) == {"1": {"3.1", "3.2"}, "2": set(), "3.1": set(), "3.2": {"3.1"}, "4.1": {"2"}}
    assert execution_order(tasks) == ["2", "3.1", "3.2", "1", "4.1"]


def test_decomposed_ids_are_prefixed_and_dependencies_follow():
    subs = [PlanTask.model_validate(t) for t in [task("1"), task("2", depends_on=["1"])]]
    renamed = _renamed(subs, "3", {"3", "1", "2"})
    assert [t.id for t in renamed] == ["3.1", "3.2"]
    assert renamed[1].depends_on == ["3.1"]


def test_test_design_can_require_executable_code_for_known_tasks():
    design = TestDesign.limited({"1", "2"}, require_code=True)
    with pytest.raises(ValidationError, match="needs path, code and command"):
        design.model_validate({"tasks": [{"task_id": "1", "unit_tests": ["it works"]}]})
    with pytest.raises(ValidationError, match="not an atomic task"):
        design.model_validate({"tasks": [{"task_id": "7", "unit_tests": []}]})
    ok = design.model_validate({"tasks": [{"task_id": "1", "unit_tests": [
        {"description": "adds", "path": "tests/test_a.py", "code": "x", "command": "pytest -q tests/test_a.py"}]}]})
    assert ok.tasks[0].unit_tests[0].path == "tests/test_a.py"


# ------------------------------------------------------------------------------------- budget
def result(tokens: int, cost: float = 0.0) -> CodingResult:
    return CodingResult(status=CodingStatus.COMPLETED, input_tokens=tokens, total_tokens=tokens, total_cost_usd=cost)


def test_parallel_runs_share_what_is_neither_spent_nor_reserved():
    pool = BudgetPool(Budget(max_tokens=1000, max_cost_usd=1.0, max_time_seconds=60, max_iterations=3))
    first = pool.carve("a", share=4)
    second = pool.carve("b", share=3)
    assert first is not None and second is not None
    assert (first.max_tokens, second.max_tokens) == (250, 250)
    assert first.max_cost_usd == pytest.approx(0.25) and second.max_iterations == 3
    assert 59 < (first.max_time_seconds or 0) <= 60
    pool.settle("a", result(100, 0.1))  # unused reservation comes back
    third = pool.carve("c", share=1)
    assert third is not None and third.max_tokens == 1000 - 100 - 250
    pool.settle("b", result(250))
    pool.settle("c", result(650))
    assert pool.exhausted() == "tokens"
    assert pool.carve("d") is None
    assert "1000 of 1000 tokens" in pool.describe("tokens")


def test_unlimited_dimensions_stay_unlimited():
    pool = BudgetPool(Budget(max_tokens=None, max_cost_usd=None, max_time_seconds=None))
    budget = pool.carve("a", share=4)
    assert budget is not None
    assert (budget.max_tokens, budget.max_cost_usd, budget.max_time_seconds) == (None, None, None)


# ------------------------------------------------------------------------------------- report
def test_the_report_rolls_up_and_reads_as_a_tree():
    leaf_ok = TaskReport(id="1.1", description="first part", depth=2, status=TaskStatus.COMPLETED, attempts=1,
                         run_status="completed", files=["a.py"], tokens=10, cost_usd=0.01)
    leaf_bad = TaskReport(id="1.2", description="second part", depth=2, status=TaskStatus.FAILED, attempts=1,
                          run_status="failed", reason="failed: tests fail", tokens=5)
    parent = TaskReport(id="1", description="the feature", is_atomic=False, sub_tasks=[leaf_ok, leaf_bad])
    parent.roll_up()
    assert parent.status is TaskStatus.FAILED and parent.reason == "1 of 2 sub-tasks completed"
    assert parent.tokens == 15 and parent.files == ["a.py"]
    report = PlanResult(status=CodingStatus.FAILED, tasks=[parent], error="1 task(s) not completed: 1.2")
    text = report.summary()
    assert "[!] 1 the feature" in text and "[x] 1.1 first part" in text and "failed: tests fail" in text
    assert report.task("1.2") is leaf_bad
    assert report.to_coding_result().validation_errors == ["task 1.2: failed: tests fail"]
