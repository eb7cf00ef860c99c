"""LangGraph adapter: an agenter coding run as a node of a StateGraph.

    from langgraph.graph import StateGraph, START, END
    from agenter.adapters.langgraph import CodingState, create_coding_node

    graph = StateGraph(CodingState)
    graph.add_node("coder", create_coding_node(backend="anthropic-sdk"))
    graph.add_edge(START, "coder")
    graph.add_edge("coder", END)
    state = await graph.compile().ainvoke({"prompt": "Add a README", "cwd": "/path/to/repo"})
    state["coding_result"]["status"]   # "completed"

The node adds no model calls of its own: it runs AutonomousCodingAgent.stream_execute, writes
every agenter event to LangGraph's custom stream (``graph.astream(..., stream_mode="custom")``)
and stores the result as a JSON-safe dict, so graphs can branch on it and checkpointers can
save it. Needs the optional extra: ``pip install 'agenter-sdk[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict

try:
    from langchain_core.runnables import RunnableLambda
    from langgraph.config import get_config, get_stream_writer
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "agenter.adapters.langgraph needs LangGraph, which is not installed: "
        "pip install 'agenter-sdk[langgraph]'"
    ) from exc

from agenter._errors import ConfigurationError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import CodingStatus
from agenter.facade.agent import AutonomousCodingAgent

__all__ = ["STREAM_SOURCE", "CodingNode", "CodingState", "PlanningState", "coding_completed",
           "create_coding_node", "create_planning_node"]

#: Value of the ``source`` key in every chunk this adapter writes to the custom stream, so a
#: graph that streams its own custom data can tell agenter's events apart.
STREAM_SOURCE = "agenter"

#: CodingRequest fields a node reads from the state when present (besides prompt and cwd).
_STATE_REQUEST_FIELDS = ("system_prompt", "allowed_write_paths", "require_changes")


class CodingState(TypedDict, total=False):
    """Graph state for a coding node. Use it as is or copy its keys into your own state.

    ``prompt`` (required at run time) is the task; ``cwd`` the repository to edit (falls back
    to the node's ``cwd``); ``coding_result`` is written by the node: the CodingResult fields
    as a JSON-safe dict (``status`` is a string such as ``"completed"``).
    """

    prompt: str
    cwd: str
    system_prompt: str
    allowed_write_paths: list[str]
    require_changes: bool
    coding_result: dict[str, Any]


NodeFunction = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]


class CodingNode(RunnableLambda[Mapping[str, Any], dict[str, Any]]):
    """What create_coding_node returns: a LangChain Runnable (as agenter 0.1.7's RunnableLambda:
    `ainvoke`, `invoke`, `astream`, `abatch`, `|`, `with_config`, LangSmith tracing) that is also
    the node function itself (`await node(state)`). `agent` is the AutonomousCodingAgent it runs.
    `invoke` (sync) runs the node with asyncio.run, in a thread of its own when an event loop is
    already running in this one."""

    def __init__(self, function: NodeFunction, agent: AutonomousCodingAgent, name: str):
        def run_sync(state: Mapping[str, Any]) -> dict[str, Any]:
            return _run_to_end(function(state))

        super().__init__(run_sync, afunc=function, name=name)
        self.node_function = function
        self.agent = agent
        self.__name__ = name

    def __call__(self, state: Mapping[str, Any]) -> Awaitable[dict[str, Any]]:
        """The node function: `await node(state)`."""
        return self.node_function(state)


def _run_to_end(coroutine: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    async def wait() -> dict[str, Any]:
        return await coroutine

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def create_coding_node(
    cwd: str | Path | None = None,
    backend: str | None = None,
    *,
    agent: AutonomousCodingAgent | None = None,
    name: str | None = None,
    prompt_key: str = "prompt",
    cwd_key: str = "cwd",
    result_key: str = "coding_result",
    request_options: Mapping[str, Any] | None = None,
    **agent_options: Any,
) -> CodingNode:
    """Build a LangGraph node that runs one agenter coding session (a CodingNode: a Runnable
    and an async function of the state).

    ``backend`` names the coding agent (see ``agenter.backends.backend_names()``; None: the
    facade's default, ``anthropic-sdk``) and
    ``agent_options`` are AutonomousCodingAgent's arguments (model, validators, max_iterations,
    budget, sandbox, and the backend's own options such as ``base_url``). Or pass a ready
    ``agent``. Options are checked here, when the graph is built, not when it runs.
    ``request_options`` are extra CodingRequest fields for every run (e.g. ``budget``,
    ``output_type``); the state's ``system_prompt``, ``allowed_write_paths`` and
    ``require_changes`` override them. Returns ``{result_key: <CodingResult as dict>}``.
    """
    if agent is not None:
        if backend is not None or agent_options:
            raise ConfigurationError(
                "pass either agent= or backend= with its options, not both", parameter="agent")
        if not isinstance(agent, AutonomousCodingAgent):
            raise ConfigurationError("agent must be an AutonomousCodingAgent", parameter="agent")
        coding_agent = agent
    else:
        coding_agent = AutonomousCodingAgent(backend=backend, **agent_options)

    default_cwd = _check_cwd(cwd) if cwd is not None else None
    fixed_fields = dict(request_options or {})
    for reserved in ("prompt", "cwd"):
        if reserved in fixed_fields:
            raise ConfigurationError(
                f"request_options must not set {reserved!r}: it comes from the state "
                f"(or the node's cwd)", parameter="request_options")

    async def coding_node(state: Mapping[str, Any]) -> dict[str, Any]:
        prompt = state.get(prompt_key)
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigurationError(
                f"the graph state has no task for the coding node: set state[{prompt_key!r}] "
                "to a non-empty string", parameter=prompt_key)
        run_cwd = state.get(cwd_key) or default_cwd
        if run_cwd is None:
            raise ConfigurationError(
                f"no working directory for the coding node: set state[{cwd_key!r}] or pass "
                "cwd= to create_coding_node()", parameter=cwd_key)
        fields = dict(fixed_fields)
        for key in _STATE_REQUEST_FIELDS:
            if state.get(key) is not None:
                fields[key] = state[key]

        write = _stream_writer()
        node_name = _current_node_name() or coding_node.__name__
        result: dict[str, Any] | None = None
        events = coding_agent.stream_execute(prompt, cwd=_check_cwd(run_cwd), **fields)
        async with contextlib.aclosing(events):  # the session disconnects even on cancellation
            async for event in events:
                if write is not None:
                    write(_stream_chunk(event, node_name))
                if event.type is CodingEventType.SESSION_END:
                    raw = event.result  # the raw result; event.data holds the redacted copy
                    result = _result_json(raw) if raw is not None else dict(event.data["result"])
        if result is None:  # the facade always ends with SESSION_END; never report success without it
            result = {"status": CodingStatus.ERROR.value, "error": "the coding session ended without a result"}
        return {result_key: result}

    coding_node.__name__ = name or "coding_node"
    coding_node.__qualname__ = coding_node.__name__
    return CodingNode(coding_node, coding_agent, coding_node.__name__)


def coding_completed(state: Mapping[str, Any], result_key: str = "coding_result") -> bool:
    """True when the last coding run in the state completed (for conditional edges)."""
    result = state.get(result_key) or {}
    return result.get("status") in (CodingStatus.COMPLETED.value,
                                    CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED.value)


# ---------------------------------------------------------------------------------- internals
def _result_json(result: Any) -> dict[str, Any]:
    try:
        data: dict[str, Any] = result.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - an output that is not JSON-safe is kept as text
        data = result.model_dump(mode="json", exclude={"output"})
        data["output"] = repr(result.output)
    return data


def _check_cwd(cwd: str | Path) -> str:
    if not isinstance(cwd, str | Path):
        raise ConfigurationError(f"cwd must be a path, got {type(cwd).__name__}", parameter="cwd")
    path = Path(cwd).expanduser()
    if not path.is_dir():
        raise ConfigurationError(f"cwd {str(path)!r} is not a directory", parameter="cwd")
    return str(path.resolve())


def _stream_writer() -> Callable[[Any], None] | None:
    """LangGraph's custom-stream writer, or None when the node is called outside a graph."""
    try:
        return get_stream_writer()
    except (RuntimeError, KeyError, LookupError):
        return None


def _current_node_name() -> str | None:
    try:
        return get_config().get("metadata", {}).get("langgraph_node")
    except (RuntimeError, KeyError, LookupError):
        return None


def _stream_chunk(event: CodingEvent, node: str) -> dict[str, Any]:
    payload = event.model_dump(mode="json")
    return {"source": STREAM_SOURCE, "node": node, "type": payload["type"],
            "data": payload["data"], "timestamp": payload["timestamp"]}

class PlanningState(TypedDict, total=False):
    """Graph state for a planning node: ``prompt`` and ``cwd`` in; ``plan_result`` out (the
    PlanResult as a JSON-safe dict: ``status``, the task tree, files, usage)."""

    prompt: str
    cwd: str
    plan_result: dict[str, Any]


def create_planning_node(
    cwd: str | Path | None = None,
    *,
    runner: Any = None,
    name: str | None = None,
    prompt_key: str = "prompt",
    cwd_key: str = "cwd",
    result_key: str = "plan_result",
    plan_only: bool = False,
    **runner_options: Any,
) -> NodeFunction:
    """Build an async LangGraph node that plans a task and executes it (agenter.planner).

    Pass a ready ``runner`` (a PlanAndExecute) or its arguments (``executor=``, ``planner=``,
    ``decomposition=``, ``parallel=``, ``budget=``, ...). Every PlanEvent goes to LangGraph's
    custom stream; the node returns ``{result_key: <PlanResult as dict>}``. With ``plan_only``
    the node returns the plan and runs nothing.
    """
    from agenter.planner import PlanAndExecute, PlanEventType

    if runner is not None:
        if runner_options:
            raise ConfigurationError("pass either runner= or its options, not both", parameter="runner")
        if not isinstance(runner, PlanAndExecute):
            raise ConfigurationError("runner must be a PlanAndExecute", parameter="runner")
        plan_runner = runner
    else:
        plan_runner = PlanAndExecute(**runner_options)
    default_cwd = _check_cwd(cwd) if cwd is not None else None

    async def planning_node(state: Mapping[str, Any]) -> dict[str, Any]:
        prompt = state.get(prompt_key)
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigurationError(
                f"the graph state has no task for the planning node: set state[{prompt_key!r}] "
                "to a non-empty string", parameter=prompt_key)
        run_cwd = state.get(cwd_key) or default_cwd
        if run_cwd is None:
            raise ConfigurationError(
                f"no working directory for the planning node: set state[{cwd_key!r}] or pass "
                "cwd= to create_planning_node()", parameter=cwd_key)
        write = _stream_writer()
        node_name = _current_node_name() or planning_node.__name__
        result: dict[str, Any] | None = None
        events = plan_runner.stream_execute(prompt, _check_cwd(run_cwd), plan_only=plan_only)
        async with contextlib.aclosing(events):  # every run stops and worktrees go, even on cancellation
            async for event in events:
                if write is not None:
                    payload = event.model_dump(mode="json")
                    write({"source": STREAM_SOURCE, "node": node_name, "type": payload["type"],
                           "phase": payload["phase"], "task_id": payload["task_id"],
                           "data": payload["data"], "event": payload["event"],
                           "timestamp": payload["timestamp"]})
                if event.type is PlanEventType.RUN_END:
                    result = dict(event.data["result"])  # the redacted JSON form
        if result is None:
            result = {"status": CodingStatus.ERROR.value, "error": "the planning run ended without a result"}
        return {result_key: result}

    planning_node.__name__ = name or "planning_node"
    planning_node.__qualname__ = planning_node.__name__
    planning_node.runner = plan_runner  # type: ignore[attr-defined]
    return planning_node
