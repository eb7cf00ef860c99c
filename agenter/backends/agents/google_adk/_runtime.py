"""What imports Google ADK, for the google-adk backend: imported only when the backend connects
(in a thread: the first import of google.adk and google.genai takes seconds).

- `Workspace`: an ADK `BaseEnvironment` whose commands and file I/O are the backend's (agenter's
  shell runner and sandbox, the session's PathResolver), so ADK's own environment tools
  (`EnvironmentToolset`: Execute, ReadFile, EditFile, WriteFile) act on the request's cwd the way
  agenter's tools would; `Environment`: that toolset, offering only the tools the session has;
- `HostTool`: an ADK tool of agenter's (a custom tool, the refusal tool): a declaration from a
  JSON schema and an async handler;
- `SessionStore`: ADK's `SqliteSessionService` scrubbing secrets from what it keeps;
- `build_agent` / `build_runner`: the `LlmAgent` (ADK's `Gemini` model over agenter's
  google-genai client) and its `Runner`;
- for approvals that can wait: ADK's events as JSON data and back (`event_data`, `event_from`),
  the request to confirm deferred calls when ADK wrote none (`confirmation_request`), and the
  user's answers to it (`confirmations`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.environment import BaseEnvironment, ExecutionResult
from google.adk.events import Event
from google.adk.models import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.environment import EnvironmentToolset
from google.genai import types

from agenter.backends.agents.google_adk._events import CONFIRMATION_CALL
from agenter.host.redact import Redactor

__all__ = ["APP_NAME", "CURRENT_CALL", "USER_ID", "Environment", "HostTool", "SessionStore", "Workspace", "build_agent",
           "build_runner", "confirmation_request", "confirmations", "event_data", "event_from",
           "prepare_environment", "run_config", "session_service"]

log = logging.getLogger("agenter.backends.agents.google_adk")

#: ADK's app and user for agenter's sessions (ADK keys a session by the three).
APP_NAME = "agenter"
USER_ID = "agenter"
#: The name of ADK's agent (what its events are authored by).
AGENT_NAME = "agenter"
#: The tool call running in this task: (function call id, tool name). Set by the backend's
#: before-tool callback; the tool runs in the same task, so the environment reads it.
CURRENT_CALL: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "agenter_adk_tool_call", default=None)

Shell = Callable[[str], Awaitable[tuple[str, int | None]]]


#: Modules ADK imports inside its run, on the event loop, the first time a process runs an agent
#: (its flows, its workflow runner, its auth preprocessor with authlib and cryptography, ...):
#: seconds on a busy machine, during which no task runs (the session's time budget neither).
#: `warm` imports them in a thread at connect; ADK's module names, not its API: should a later
#: ADK move one, only that head start is lost.
_RUN_MODULES = (
    "google.adk.flows.llm_flows.auto_flow", "google.adk.flows.llm_flows.single_flow",
    "google.adk.flows.llm_flows.functions", "google.adk.flows.llm_flows.tools._toolset_auth",
    "google.adk.auth.auth_preprocessor", "google.adk.apps.compaction", "google.adk.a2a.agent",
    "google.adk.workflow._node_runner_utils", "google.adk.workflow._llm_agent_wrapper", "google.adk.workflow._workflow",
    "google.adk.telemetry.node_tracing", "google.adk.live._flow_utils", "google.adk.tools.set_model_response_tool",
    "google.adk.tools.google_search_tool", "google.adk.tools.vertex_ai_search_tool",
    # httpx's first connection loads its asyncio backend; the file tools their line counting.
    "anyio._backends._asyncio", "agenter.backends.agents.google_adk._files",
)


#: google-genai's models a run validates, which the SDK defines with their build deferred: the
#: first validation builds each (seconds in all, on the event loop). `warm` builds them.
_GENAI_MODELS = (
    "Candidate", "Content", "File", "FunctionCall", "FunctionDeclaration", "FunctionResponse",
    "GenerateContentResponse", "GenerateContentResponseUsageMetadata", "HttpResponse", "LiveConnectConfig",
    "ModelContent", "Part", "Tool", "UserContent", "_GenerateContentParameters",
)


def warm() -> None:
    """Blocking (run it in a thread): what ADK's first run would otherwise do on the event loop,
    where it held every task (the session's time budget too) for seconds on a busy machine:
    import the modules of its run and build google-genai's models of a request and a response."""
    import importlib

    for name in _RUN_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # moved in another ADK version: the first run imports it instead
            log.debug("ADK module %s not found to import ahead", name)
    for name in _GENAI_MODELS:
        model = getattr(types, name, None)
        if model is not None:
            model.model_rebuild()


def prepare_environment() -> None:
    """ADK's notes are not the host's concern: its experimental-feature warnings (the environment
    tools are experimental in ADK 2.x) are off unless the user asked for them, and its log records
    go to the host's logging configuration, not to stderr through logging's last resort."""
    os.environ.setdefault("ADK_SUPPRESS_EXPERIMENTAL_FEATURE_WARNINGS", "true")
    adk_logger = logging.getLogger("google_adk")
    if not adk_logger.handlers:
        adk_logger.addHandler(logging.NullHandler())


class Workspace(BaseEnvironment):
    """The request's cwd as ADK's environment: `shell(command)` runs a command (the text the
    model reads, the exit code or None); `read(path, text_only)` and `write(path,
    content)` do the file I/O. Never creates or removes its working directory."""

    def __init__(self, cwd: Path, *, shell: Shell, read: Callable[[str, bool], Awaitable[bytes]],
                 write: Callable[[str, str | bytes], Awaitable[None]]):
        self._cwd = cwd
        self._shell = shell
        self._read = read
        self._write = write

    @property
    def working_dir(self) -> Path:
        return self._cwd

    async def initialize(self) -> None:
        self.is_initialized = True

    async def execute(self, command: str, *, timeout: float | None = None) -> ExecutionResult:
        # The backend's own timeout (adk_shell_timeout) bounds the command, not ADK's 30 s; a
        # command that outlived it is said so in its text (ADK's own note would name 30 s).
        text, exit_code = await self._shell(command)
        return ExecutionResult(exit_code=-1 if exit_code is None else exit_code, stdout=text)

    async def read_file(self, path: str | Path) -> bytes:
        running = CURRENT_CALL.get()
        return await self._read(str(path), running is not None and running[1] == "EditFile")

    async def write_file(self, path: str | Path, content: str | bytes) -> None:
        await self._write(str(path), content)


class HostTool(BaseTool):
    """A tool of agenter's given to ADK's agent: its declaration from a JSON schema, its run an
    async handler(arguments, tool_context) -> result dict."""

    def __init__(self, name: str, description: str, schema: dict[str, Any],
                 handler: Callable[[dict[str, Any], Any], Awaitable[dict[str, Any]]]):
        super().__init__(name=name, description=description)
        self._schema = schema
        self._handler = handler

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        return types.FunctionDeclaration(name=self.name, description=self.description,
                                         parameters_json_schema=self._schema)

    async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
        return await self._handler(dict(args or {}), tool_context)


class Environment(EnvironmentToolset):
    """ADK's environment tools over the workspace, only those named (a read-only session gets
    ReadFile and Execute; adk_shell=False drops Execute).

    ADK 2.13's EnvironmentToolset returns all four tools whatever its `tool_filter` says, and
    its instruction to the model names all four: here the filter holds, and a session without
    some of them gets an instruction naming only those it has."""

    def __init__(self, workspace: Workspace, names: Sequence[str]):
        super().__init__(environment=workspace)
        self._names = frozenset(names)
        self._workspace = workspace

    async def get_tools(self, readonly_context: Any = None) -> list[BaseTool]:
        return [tool for tool in await super().get_tools(readonly_context) if tool.name in self._names]

    async def process_llm_request(self, *, tool_context: Any, llm_request: Any) -> None:
        if self._names >= _ENVIRONMENT_TOOLS:
            await super().process_llm_request(tool_context=tool_context, llm_request=llm_request)
            return
        lines = [f"Your environment is at {self._workspace.working_dir}/.",
                 "Read files with the ReadFile tool (not cat, head or tail)."]
        if "Execute" in self._names:
            lines.append("Run programs, tests and searches with Execute; chain dependent commands with `&&` in "
                         "one call.")
        if not self._names & {"EditFile", "WriteFile"}:
            lines.append("This session has no tool that changes files.")
        llm_request.append_instructions(["\n".join(lines)])


#: The four tools of ADK's EnvironmentToolset.
_ENVIRONMENT_TOOLS = frozenset({"Execute", "ReadFile", "EditFile", "WriteFile"})


class SessionStore(SqliteSessionService):
    """ADK's SQLite session service, keeping each event with the backend's secrets scrubbed from
    its texts, call arguments and results (thought signatures untouched). The scrubbed event is
    also the one the running session holds: what the model reads later is what a resumed
    session would read."""

    def __init__(self, db_path: Path, redact: Redactor):
        super().__init__(str(db_path))
        self._redact = redact

    async def append_event(self, session: Any, event: Event) -> Event:
        if not event.partial:
            event = scrubbed(event, self._redact)
        return await super().append_event(session, event)


def scrubbed(event: Event, redact: Redactor) -> Event:
    """The event with secrets out of its parts' text, function call arguments and function
    responses (the same object when there were none)."""
    content = event.content
    if content is None or not content.parts:
        return event
    parts, changed = [], False
    for part in content.parts:
        update: dict[str, Any] = {}
        if part.text:
            text = redact(part.text)
            if text != part.text:
                update["text"] = text
        if part.function_call is not None and part.function_call.args:
            args = redact.data(part.function_call.args)
            if args != part.function_call.args:
                update["function_call"] = part.function_call.model_copy(update={"args": args})
        if part.function_response is not None and part.function_response.response:
            answer = redact.data(part.function_response.response)
            if answer != part.function_response.response:
                update["function_response"] = part.function_response.model_copy(update={"response": answer})
        changed = changed or bool(update)
        parts.append(part.model_copy(update=update) if update else part)
    if not changed:
        return event
    return event.model_copy(update={"content": content.model_copy(update={"parts": parts})})


def session_service(db_path: Path | None, redact: Redactor) -> Any:
    """ADK's session service: SQLite at `db_path` (the folder private to the user, the file
    0600), or in memory."""
    if db_path is None:
        return InMemorySessionService()
    db_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not db_path.exists():
        os.close(os.open(db_path, os.O_CREAT | os.O_WRONLY, 0o600))
    return SessionStore(db_path, redact)


def build_agent(*, model: str, client: Any, instructions: str, tools: list[Any], output_schema: Any,
                max_tokens: int | None, temperature: float | None, callbacks: dict[str, Any]) -> LlmAgent:
    """ADK's LlmAgent: ADK's Gemini model over agenter's client, the instructions as its static
    instruction (sent as they are: ADK fills `{placeholders}` only in `instruction`), the tools,
    the output schema (ADK's set_model_response tool on the Gemini API), and the tool callbacks
    through which the gate sees every call."""
    config = None
    if max_tokens is not None or temperature is not None:
        config = types.GenerateContentConfig(max_output_tokens=max_tokens, temperature=temperature)
    return LlmAgent(name=AGENT_NAME, model=Gemini(model=model, client=client), static_instruction=instructions,
                    tools=tools, output_schema=output_schema, generate_content_config=config, **callbacks)


def build_runner(agent: LlmAgent, sessions: Any) -> Runner:
    return Runner(agent=agent, app_name=APP_NAME, session_service=sessions)


def run_config(max_llm_calls: int) -> RunConfig:
    """Streamed responses (SSE: text arrives as it is written) and ADK's limit on model calls."""
    return RunConfig(streaming_mode=StreamingMode.SSE, max_llm_calls=max_llm_calls)


def user_message(prompt: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=prompt)])


def is_call_limit(exc: BaseException) -> bool:
    """ADK stopped the run at RunConfig.max_llm_calls."""
    from google.adk.agents.invocation_context import LlmCallsLimitExceededError

    return isinstance(exc, LlmCallsLimitExceededError)


def event_data(event: Event) -> dict[str, Any]:
    """An event as JSON data, as ADK's SQLite session service writes it (bytes in base64)."""
    data = json.loads(event.model_dump_json(exclude_none=True))
    assert isinstance(data, dict)
    return data


def event_from(data: Any) -> Event:
    """The event `event_data` gave (read as JSON, so thought signatures come back as bytes)."""
    return Event.model_validate_json(json.dumps(data))


def confirmation_request(events: Sequence[Event]) -> Event | None:
    """The event asking the user to confirm the calls the latest function responses asked a
    confirmation for (`tool_context.request_confirmation`), as ADK's flow writes it after a
    model response's calls: ADK writes none when the calls ran again on a confirmation (a
    continued run), and then goes on unless the call skips summarization. None: nothing asked."""
    calls = {call.id: call for event in events for call in event.get_function_calls() if call.id}
    for event in reversed(events):
        requested = event.actions.requested_tool_confirmations
        if not event.get_function_responses():
            continue
        parts = [types.Part(function_call=types.FunctionCall(
            name=CONFIRMATION_CALL, id=f"adk-{uuid.uuid4()}",
            args={"originalFunctionCall": calls[call_id].model_dump(exclude_none=True, by_alias=True),
                  "toolConfirmation": asked.model_dump(by_alias=True, exclude_none=True)}))
            for call_id, asked in (requested or {}).items() if call_id in calls]
        if not parts:
            return None
        return Event(invocation_id=event.invocation_id, author=AGENT_NAME, branch=event.branch,
                     content=types.Content(role="model", parts=parts),
                     long_running_tool_ids={part.function_call.id for part in parts if part.function_call
                                            and part.function_call.id})
    return None


def confirmations(answers: dict[str, bool]) -> types.Content:
    """The user's answers to ADK's confirmation calls (their id → confirmed): ADK runs each
    confirmed call again, and calls the before-tool callback again for every one."""
    return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=call_id, name=CONFIRMATION_CALL, response={"confirmed": confirmed})) for call_id, confirmed in answers.items()])
