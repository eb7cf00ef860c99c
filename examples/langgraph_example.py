"""A LangGraph workflow with agenter coding nodes, offline.

The graph: coder (primary) -> if the run did not complete -> coder (fallback) -> report.
The primary coder's model endpoint is down (it answers HTTP 500), so the conditional edge routes
to the fallback coder, which writes the file. Every agenter event is streamed through
LangGraph's custom stream mode. Both coders run the real anthropic-sdk backend against
agenter's scripted model server; nothing leaves 127.0.0.1.

    pip install 'agenter-sdk[langgraph]'
    python examples/langgraph_example.py

With a real model, drop base_url/api_key (ANTHROPIC_API_KEY is used) and, for the fallback,
pick any other backend, e.g. create_coding_node(backend="claude-code").
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from langgraph.graph import END, START, StateGraph

from agenter.adapters.langgraph import CodingState, coding_completed, create_coding_node
from agenter.testing import ScriptedModelServer, http_error, reply, text, tool_call

SLUGIFY = '''import re


def slugify(title: str) -> str:
    """'Hello, World!' -> 'hello-world'"""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
'''


class State(CodingState, total=False):
    report: str


def report(state: State) -> dict:
    result = state["coding_result"]
    files = ", ".join(sorted(result["files"])) or "no files"
    return {"report": f"{result['status']} by {result['backend']} ({result['model']}): {files}"}


def describe(data: dict) -> str:
    """One short line for an agenter event's data."""
    if "message_type" in data:
        return f"{data['message_type']}: {data.get('tool_name') or data['content'][:60]}"
    if data.get("error"):
        return f"{data['status']}: {data['error'][:80]}"
    if "files" in data and "status" in data:
        return f"{data['status']}: {', '.join(data['files'])}"
    return ""


def build_graph(primary_url: str, fallback_url: str):
    graph = StateGraph(State)
    # max_retries=0: fail fast on the first HTTP error instead of retrying the request.
    graph.add_node("primary", create_coding_node(backend="anthropic-sdk", model="claude-sonnet-5-5",
                                                 base_url=primary_url, api_key="sk-example",
                                                 max_retries=0))
    graph.add_node("fallback", create_coding_node(backend="anthropic-sdk", model="claude-haiku-4-5",
                                                  base_url=fallback_url, api_key="sk-example"))
    graph.add_node("report", report)
    graph.add_edge(START, "primary")
    graph.add_conditional_edges("primary", lambda s: "report" if coding_completed(s) else "fallback",
                                ["report", "fallback"])
    graph.add_edge("fallback", "report")
    graph.add_edge("report", END)
    return graph.compile()


async def main() -> int:
    repo = Path(tempfile.mkdtemp(prefix="agenter-langgraph-"))
    try:
        primary = ScriptedModelServer([http_error(500, "the primary model is down")])
        fallback = ScriptedModelServer([
            reply(text("Writing the helper."),
                  tool_call("write_file", {"path": "slug.py", "content": SLUGIFY})),
            reply(text("Added slug.slugify().")),
        ])
        with primary, fallback:
            app = build_graph(primary.base_url, fallback.base_url)
            final: dict = {}
            async for mode, chunk in app.astream(
                    {"prompt": "Add a slugify(title) helper in slug.py", "cwd": str(repo)},
                    stream_mode=["custom", "updates", "values"]):
                if mode == "custom":  # agenter events, written by the coding nodes
                    print(f"  [{chunk['node']}] {chunk['type']} {describe(chunk['data'])}")
                elif mode == "updates":
                    print(f"node finished: {', '.join(chunk)}")
                else:
                    final = chunk
        print("\nreport:", final["report"])
        print("slug.py written:", (repo / "slug.py").is_file())
        return 0 if final["coding_result"]["status"] == "completed" else 1
    finally:
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
