"""The LangGraph planning node: a compiled graph plans, executes, and streams the plan events."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph

from agenter.adapters.langgraph import PlanningState, create_planning_node
from tests.planner.conftest import file_task, plan_dict, scripted_planner, writing_executor


async def test_planning_node_in_a_compiled_graph(tmp_path):
    plan = plan_dict(file_task("1", "a.txt", "alpha"), file_task("2", "b.txt", "beta"))
    graph = StateGraph(PlanningState)
    graph.add_node("plan", create_planning_node(executor=writing_executor(), planner=scripted_planner(plan)))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", END)
    chunks = [c async for c in graph.compile().astream({"prompt": "two files", "cwd": str(tmp_path)},
                                                       stream_mode=["custom", "values"])]
    final = [chunk for mode, chunk in chunks if mode == "values"][-1]
    assert final["plan_result"]["status"] == "completed"
    assert [t["status"] for t in final["plan_result"]["tasks"]] == ["completed", "completed"]
    kinds = {chunk["type"] for mode, chunk in chunks if mode == "custom"}
    assert {"plan_created", "task_start", "task_end", "run_end"} <= kinds
    assert (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").exists()
