"""The LangGraph adapter inside real compiled graphs, with the real anthropic-sdk backend
talking to the scripted model server. Files must really be written."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from langchain_core.runnables import Runnable
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agenter import ConfigurationError
from agenter.adapters.langgraph import (
    STREAM_SOURCE,
    CodingState,
    coding_completed,
    create_coding_node,
)
from agenter.testing import hang, http_error, reply, text, tool_call

API_KEY = "sk-test-x"


def write_script(path: str, content: str, summary: str = "Done.") -> list:
    return [reply(tool_call("write_file", {"path": path, "content": content})), reply(text(summary))]


def coder(server, **options):
    return create_coding_node(backend="anthropic-sdk", base_url=server.base_url, api_key=API_KEY,
                              **options)


class ReviewState(CodingState, total=False):
    review: str


@pytest.mark.agent
async def test_sequential_graph_writes_files_streams_events_and_checkpoints(
        scripted_model_server, tmp_path: Path):
    server = scripted_model_server(write_script("calc.py", "def add(a, b):\n    return a + b\n",
                                                "Added calc.add."))

    def review(state: ReviewState) -> dict:
        result = state["coding_result"]
        return {"review": f"{result['status']}: {', '.join(sorted(result['files']))}"}

    graph = StateGraph(ReviewState)
    graph.add_node("coder", coder(server))
    graph.add_node("review", review)
    graph.add_edge(START, "coder")
    graph.add_edge("coder", "review")
    graph.add_edge("review", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}

    custom: list[dict] = []
    final: dict = {}
    async for mode, chunk in app.astream({"prompt": "Write calc.add", "cwd": str(tmp_path)},
                                         config, stream_mode=["custom", "values"]):
        if mode == "custom":
            custom.append(chunk)
        else:
            final = chunk

    assert (tmp_path / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    result = final["coding_result"]
    assert result["status"] == "completed"
    assert result["files"] == {"calc.py": "def add(a, b):\n    return a + b\n"}
    assert result["summary"] == "Added calc.add."
    assert result["backend"] == "anthropic-sdk"
    assert result["total_tokens"] > 0
    assert final["review"] == "completed: calc.py"
    json.dumps(final)  # the whole state is JSON-safe

    # every agenter event reached LangGraph's custom stream, in order, tagged with the node
    assert {c["source"] for c in custom} == {STREAM_SOURCE}
    assert {c["node"] for c in custom} == {"coder"}
    types = [c["type"] for c in custom]
    assert types[0] == "session_start" and types[-1] == "session_end"
    assert "backend_message" in types and "completed" in types
    tool_calls = [c["data"] for c in custom
                  if c["type"] == "backend_message" and c["data"]["message_type"] == "tool_call"]
    assert tool_calls[0]["tool_name"] == "write_file"
    assert custom[-1]["data"]["result"]["status"] == "completed"
    assert API_KEY not in json.dumps(custom)

    # the checkpointer saved the result
    saved = (await app.aget_state(config)).values
    assert saved["coding_result"]["status"] == "completed"

    # the model really got the task and the backend's file tools
    first = server.model_requests[0].model_request
    assert "write_file" in first.tool_names
    assert "Write calc.add" in json.dumps(first.messages)


@pytest.mark.agent
async def test_conditional_edge_retries_with_another_coder_when_the_first_fails(
        scripted_model_server, tmp_path: Path):
    broken = scripted_model_server([http_error(500, "upstream exploded")] * 3)
    working = scripted_model_server(write_script("fix.py", "FIXED = True\n", "Fixed it."))

    graph = StateGraph(CodingState)
    graph.add_node("primary", coder(broken, max_retries=0))
    graph.add_node("fallback", coder(working, model="claude-haiku-4-5"))
    graph.add_edge(START, "primary")
    graph.add_conditional_edges("primary", lambda s: END if coding_completed(s) else "fallback",
                                ["fallback", END])
    graph.add_edge("fallback", END)
    app = graph.compile()

    visited: list[tuple[str, str]] = []
    results: dict[str, dict] = {}
    async for update in app.astream({"prompt": "Fix it", "cwd": str(tmp_path)}, stream_mode="updates"):
        for node, values in update.items():
            visited.append((node, values["coding_result"]["status"]))
            results[node] = values["coding_result"]

    assert visited == [("primary", "error"), ("fallback", "completed")]
    assert (tmp_path / "fix.py").read_text() == "FIXED = True\n"
    assert len(broken.model_requests) == 1  # max_retries=0: one attempt, then status error
    assert working.model_requests[0].model_request.model == "claude-haiku-4-5"
    assert "500" in results["primary"]["error"] and results["primary"]["files"] == {}


@pytest.mark.agent
async def test_node_cwd_default_and_direct_call_outside_a_graph(scripted_model_server, tmp_path: Path):
    server = scripted_model_server(write_script("a.txt", "hello\n"))
    node = coder(server, cwd=tmp_path, name="my_coder")
    assert node.__name__ == "my_coder"
    # no stream writer outside a graph: it still runs; request fields come from the state
    update = await node({"prompt": "Write a.txt", "system_prompt": "House style: terse.",
                         "allowed_write_paths": ["*.txt"]})
    assert update["coding_result"]["status"] == "completed"
    assert (tmp_path / "a.txt").read_text() == "hello\n"
    assert "House style: terse." in json.dumps(server.model_requests[0].model_request.system)


async def test_missing_prompt_or_cwd_is_a_configuration_error(tmp_path: Path):
    # checked before any model call, so the base URL is never used
    node = create_coding_node(backend="anthropic-sdk", base_url="http://127.0.0.1:9", api_key=API_KEY)
    graph = StateGraph(CodingState)
    graph.add_node("coder", node)
    graph.add_edge(START, "coder")
    app = graph.compile()

    with pytest.raises(ConfigurationError, match="state\\['prompt'\\]") as missing_prompt:
        await app.ainvoke({"cwd": str(tmp_path)})
    assert missing_prompt.value.parameter == "prompt"
    with pytest.raises(ConfigurationError, match="cwd") as missing_cwd:
        await app.ainvoke({"prompt": "do it"})
    assert missing_cwd.value.parameter == "cwd"
    with pytest.raises(ConfigurationError, match="not a directory"):
        await app.ainvoke({"prompt": "do it", "cwd": str(tmp_path / "nope")})


def test_bad_node_configuration_fails_when_the_graph_is_built(tmp_path: Path):
    default = create_coding_node(cwd=tmp_path)  # agenter 0.1.7's documented call: the default backend
    assert default.agent.backend_name == "anthropic-sdk"
    assert isinstance(default, Runnable) and callable(default)  # a Runnable, and the node function
    with pytest.raises(ConfigurationError, match="unknown option 'colour'"):
        create_coding_node(backend="anthropic-sdk", colour="blue")
    with pytest.raises(ConfigurationError, match="Unknown backend"):
        create_coding_node(backend="no-such-agent")
    with pytest.raises(ConfigurationError, match="not a directory"):
        create_coding_node(cwd=tmp_path / "missing", backend="anthropic-sdk")
    with pytest.raises(ConfigurationError, match="request_options"):
        create_coding_node(backend="anthropic-sdk", request_options={"prompt": "x"})


def test_coding_completed_helper():
    assert coding_completed({"coding_result": {"status": "completed"}})
    assert coding_completed({"coding_result": {"status": "completed_with_limit_exceeded"}})
    assert not coding_completed({"coding_result": {"status": "error"}})
    assert not coding_completed({})


@pytest.mark.agent
async def test_cancelling_the_graph_stops_the_coding_run(scripted_model_server, tmp_path: Path):
    server = scripted_model_server([hang()])
    graph = StateGraph(CodingState)
    graph.add_node("coder", coder(server))
    graph.add_edge(START, "coder")
    app = graph.compile()

    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(app.ainvoke({"prompt": "Wait forever", "cwd": str(tmp_path)}), 1.5)
    assert time.monotonic() - started < 10  # the session wound down instead of hanging
    assert len(server.model_requests) == 1
