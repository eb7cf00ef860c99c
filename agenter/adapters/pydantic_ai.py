"""PydanticAI adapter: run agenter from PydanticAI code, or give a PydanticAI agent a coding tool.

    from pydantic_ai import Agent
    from agenter.adapters.pydantic_ai import CodingAgent, coding_tool

    coder = CodingAgent(backend="anthropic-sdk")
    result = await coder.run("Add a README", cwd="/path/to/repo")     # a CodingResult

    planner = Agent("anthropic:claude-sonnet-5-5",
                    tools=[coding_tool(cwd="/path/to/repo", backend="anthropic-sdk")])
    await planner.run("Add a CLI to this project")   # the planner delegates the edit to agenter

The adapter adds no model calls of its own: the tool runs one agenter coding session and hands
the PydanticAI model a compact JSON summary (status, files changed, summary, error).
Needs the optional extra: ``pip install 'agenter-sdk[pydantic-ai]'``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

try:
    from pydantic_ai import RunContext, Tool
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "agenter.adapters.pydantic_ai needs PydanticAI, which is not installed: "
        "pip install 'agenter-sdk[pydantic-ai]'"
    ) from exc

from agenter._errors import ConfigurationError
from agenter._events import CodingEvent
from agenter._types import CodingRequest, CodingResult
from agenter.facade.agent import AutonomousCodingAgent

__all__ = ["DEFAULT_TOOL_NAME", "CodingAgent", "coding_tool", "summarize_result"]

DEFAULT_TOOL_NAME = "edit_repository"
DEFAULT_TOOL_DESCRIPTION = (
    "Hand a coding task to an autonomous coding agent that edits the repository directly "
    "(creates, changes and deletes files, then validates them). Describe the whole task in "
    "plain words. Returns the outcome: status ('completed' on success), files_changed, "
    "files_deleted, summary and error."
)
#: Caps that keep the tool's answer compact in the calling model's context.
MAX_SUMMARY_CHARS = 4000
MAX_LISTED_ERRORS = 20

CwdSource = str | Path | Callable[[RunContext[Any]], str | Path]


class CodingAgent:
    """AutonomousCodingAgent with a PydanticAI-style surface: ``run``, ``run_sync``, ``as_tool``.

    ``backend`` names the coding agent (None: the facade's default, ``anthropic-sdk``);
    ``agent_options`` are AutonomousCodingAgent's arguments (model, validators, max_iterations,
    budget, sandbox, and the backend's own options). Or pass a ready ``agent``. ``cwd`` is an
    optional default repository for every run. agenter 0.1.7's ``CodingAgent(cwd="./repo",
    backend="codex")`` works as it did; unlike 0.1.7's, this class is not a ``pydantic_ai.Agent``
    subclass: ``as_tool()`` / ``coding_tool()`` put it inside one.
    """

    def __init__(self, backend: str | None = None, *, agent: AutonomousCodingAgent | None = None,
                 cwd: str | Path | None = None, **agent_options: Any):
        if agent is not None:
            if backend is not None or agent_options:
                raise ConfigurationError(
                    "pass either agent= or backend= with its options, not both", parameter="agent")
            if not isinstance(agent, AutonomousCodingAgent):
                raise ConfigurationError("agent must be an AutonomousCodingAgent", parameter="agent")
            self.agent = agent
        else:
            if isinstance(backend, str | Path) and backend not in _backend_names() and Path(backend).is_dir():
                raise ConfigurationError(
                    f"{str(backend)!r} is a directory, not a backend: CodingAgent's first argument is the "
                    f"backend (agenter 0.1.7's was cwd); pass cwd={str(backend)!r}", parameter="backend")
            self.agent = AutonomousCodingAgent(backend=backend, **agent_options)
        self.cwd = _check_cwd(cwd) if cwd is not None else None

    @property
    def backend(self) -> str:
        return self.agent.backend_name

    async def run(self, prompt: str | CodingRequest, cwd: str | Path | None = None,
                  **request_fields: Any) -> CodingResult:
        """Run one coding session to the end (request_fields: CodingRequest fields)."""
        return await self.agent.execute(prompt, **self._fields(prompt, cwd, request_fields))

    def run_sync(self, prompt: str | CodingRequest, cwd: str | Path | None = None,
                 **request_fields: Any) -> CodingResult:
        """`run` for code without an event loop."""
        return self.agent.execute_sync(prompt, **self._fields(prompt, cwd, request_fields))

    async def run_stream(self, prompt: str | CodingRequest, cwd: str | Path | None = None,
                         **request_fields: Any) -> AsyncIterator[CodingEvent]:
        """Yield agenter events; the last (SESSION_END) has data["result"]."""
        async for event in self.agent.stream_execute(prompt, **self._fields(prompt, cwd, request_fields)):
            yield event

    def as_tool(self, cwd: CwdSource | None = None, *, name: str = DEFAULT_TOOL_NAME,
                description: str | None = None, **request_fields: Any) -> Tool[Any]:
        """A PydanticAI Tool that runs this agent on ``cwd`` with the model's task.

        ``cwd`` may be a callable taking the RunContext (e.g. ``lambda ctx: ctx.deps.repo``) to
        pick the repository per run; the model never chooses the directory.
        """
        cwd_source = cwd if cwd is not None else self.cwd
        if cwd_source is None:
            raise ConfigurationError("as_tool needs cwd= (the repository the tool edits)",
                                     parameter="cwd")
        if not callable(cwd_source):
            cwd_source = _check_cwd(cwd_source)
        for reserved in ("prompt", "cwd"):
            if reserved in request_fields:
                raise ConfigurationError(f"{reserved!r} cannot be fixed for a tool", parameter=reserved)
        agent = self.agent

        async def run_coding_task(ctx: RunContext[Any], task: str) -> dict[str, Any]:
            """Run the coding agent on the repository.

            Args:
                task: The complete coding task: what to change and why, in plain words.
            """
            target = cwd_source(ctx) if callable(cwd_source) else cwd_source
            result = await agent.execute(task, cwd=_check_cwd(target), **request_fields)
            return summarize_result(result)

        return Tool(run_coding_task, takes_ctx=True, name=name,
                    description=description or DEFAULT_TOOL_DESCRIPTION, **_sequential_kwarg())

    def _fields(self, prompt: Any, cwd: str | Path | None, fields: dict[str, Any]) -> dict[str, Any]:
        fields = dict(fields)
        chosen = cwd if cwd is not None else (None if isinstance(prompt, CodingRequest) else self.cwd)
        if chosen is not None:
            fields["cwd"] = _check_cwd(chosen)
        elif not isinstance(prompt, CodingRequest):
            raise ConfigurationError("no working directory: pass cwd= to run() or to CodingAgent()",
                                     parameter="cwd")
        return fields

    def __repr__(self) -> str:
        return f"CodingAgent(backend={self.backend!r}, cwd={self.cwd!r})"


def coding_tool(cwd: CwdSource, *, backend: str | None = None, agent: AutonomousCodingAgent | None = None,
                name: str = DEFAULT_TOOL_NAME, description: str | None = None,
                request_options: Mapping[str, Any] | None = None, **agent_options: Any) -> Tool[Any]:
    """A PydanticAI Tool that delegates "edit this repository" to an agenter coding agent.

    ``agent_options`` go to AutonomousCodingAgent (checked now); ``request_options`` are
    CodingRequest fields for every run (budget, allowed_write_paths, system_prompt, ...).
    """
    coder = CodingAgent(backend, agent=agent, **agent_options)
    return coder.as_tool(cwd, name=name, description=description, **dict(request_options or {}))


def summarize_result(result: CodingResult) -> dict[str, Any]:
    """The compact, JSON-safe view of a CodingResult a calling model needs."""
    changed = sorted(path for path, content in result.files.items() if content is not None)
    deleted = sorted(path for path, content in result.files.items() if content is None)
    summary = result.summary or ""
    if len(summary) > MAX_SUMMARY_CHARS:
        summary = summary[:MAX_SUMMARY_CHARS] + " [...]"
    outcome: dict[str, Any] = {
        "status": result.status.value,
        "files_changed": changed,
        "files_deleted": deleted,
        "summary": summary,
        "error": result.error,
    }
    if result.validation_errors:
        outcome["validation_errors"] = result.validation_errors[:MAX_LISTED_ERRORS]
    if result.refusal_reason:
        outcome["refusal_reason"] = result.refusal_reason
    return outcome


def _backend_names() -> list[str]:
    from agenter.backends import backend_names

    return backend_names()


def _check_cwd(cwd: Any) -> str:
    if not isinstance(cwd, str | Path):
        raise ConfigurationError(f"cwd must be a path, got {type(cwd).__name__}", parameter="cwd")
    path = Path(cwd).expanduser()
    if not path.is_dir():
        raise ConfigurationError(f"cwd {str(path)!r} is not a directory", parameter="cwd")
    return str(path.resolve())


def _sequential_kwarg() -> dict[str, Any]:
    """Two coding runs on one repository must not overlap; older PydanticAI lacks the flag."""
    if "sequential" in inspect.signature(Tool.__init__).parameters:
        return {"sequential": True}
    return {}
