"""GoogleADKBackend: Google ADK's own agent loop (`LlmAgent` + `Runner.run_async`) driven in
process, with ADK's environment tools on the request's cwd, agenter's gate and sandbox.

One ADK agent, runner and session per backend session; each turn is one `run_async` with the
prompt as the new message, streamed (SSE), its events translated as they come (`_events`). The
conversation is ADK's session, kept by ADK's session service: `SqliteSessionService` in
agenter's cache folder (so `resume=` the session id continues it in another process) or
`InMemorySessionService`.

The model is ADK's `Gemini` model class over agenter's google-genai client (`backends/_genai`:
`base_url`, `api_key`, its own httpx client, google-genai's retries), so ADK never builds a client
of its own (which would look for Google Cloud credentials on the metadata server).

Tools: ADK's `EnvironmentToolset` (Execute, ReadFile, EditFile, WriteFile) over `Workspace`,
an ADK environment whose commands run through agenter's shell runner (`agenter.sandbox.commands`:
confined by Landlock, bubblewrap or Seatbelt with sandbox=True) and whose file I/O goes through
the session's PathResolver; the custom tools and the refusal tool as ADK tools; MCP servers
through ADK's `McpToolset` (`_mcp`: a stdio server started only when the gate allows it, every
server's tools listed at connect); structured output through ADK's `output_schema` (its
`set_model_response` tool on the Gemini API). Every call passes the permission gate in ADK's
`before_tool_callback` first: a refused call is answered `{"error": reason}` without running, and
the run goes on.

A turn runs ADK's run in a task of its own and reads what it yields, and what the callbacks say,
from one queue. A cancelled or closed turn cancels that task (ADK cancels its node task with it,
and the running command's process group is killed) and waits for it, bounded.

Approvals that can wait (docs/approvals.md) use ADK's tool confirmation: a call the gate defers
(and every later call of its model response, `CallOrder`) asks for a confirmation
(`tool_context.request_confirmation`) and is answered with a placeholder; ADK then asks its user
to confirm (its `adk_request_confirmation` call) and ends the run there, and the turn reports the
calls pending. `hold` keeps the record and a copy of the session's events (`_kept`: another
process, or another host with the same store, continues it). `continue_paused` answers ADK's
confirmation calls: ADK runs each paused call again, the gate decides it with the person's answer
in the before-tool callback, and the model's next request holds the calls' real results in place
of the placeholders. So, as with agenter's own agent, the paused call itself runs (or is refused)
when the run goes on; the model is not asked to make it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import BackendError, ConfigurationError
from agenter._types import PendingCall, Usage
from agenter.backends._failures import Failure, classify_failure, is_transport_error
from agenter.backends._genai import MISSING_KEY, api_key_of
from agenter.backends._pauses import (
    backend_store,
    hold_paused,
    no_pause_without_store,
    pending_call,
    resume_paused,
    store_for_pauses,
)
from agenter.backends._prompts import REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_NAME, REFUSAL_TOOL_SCHEMA
from agenter.backends.agents.google_adk._events import (
    TurnEvents,
    confirmations_asked,
    refused_beside,
    response_calls,
    tool_answer,
)
from agenter.backends.agents.google_adk._options import DEFAULT_MODEL, GoogleADKOptions
from agenter.backends.agents.google_adk._permissions import (
    ENFORCED_KINDS,
    FILE_READ,
    FILE_WRITES,
    RESERVED_TOOL_NAMES,
    SHELL,
    UNGATED,
    CallOrder,
    MCPToolName,
    tool_call,
)
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.host import Redactor, reap
from agenter.host.requirements import Credentials, PythonPackage, Requirement
from agenter.permissions import PermissionAnswer
from agenter.sandbox.commands import network_allowed
from agenter.sandbox.confine import Confinement, ShellSandboxAvailable

__all__ = ["GoogleADKBackend"]

log = logging.getLogger("agenter.backends.agents.google_adk")

INSTALL = "pip install 'agenter-sdk[google-adk]'"
MISSING_ADK_KEY = MISSING_KEY.replace("gemini_vertex", "adk_vertex")
#: This backend's option prefix: what to do when no shell sandbox is there names adk_shell(_sandbox).
OPTION_PREFIX = "adk"
#: Function names the Gemini API takes: a letter or '_' first, at most 64 characters.
_TOOL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")
#: The answer to a call made in the same response as the refusal (ADK would run it beside it).
REFUSED_BESIDE = "Not run: the task was refused in the same response."
#: What the model reads for a call that waits, should the conversation go on without an answer.
PAUSED_RESULT = "Not run yet: this call waits for a person's approval (the run is paused)."
#: A queue item that ends the turn's reading.
_END = object()


class GoogleADKBackend(BaseBackend[GoogleADKOptions]):
    """Google ADK's agent loop over Gemini; see docs/backends/google-adk.md."""

    name: ClassVar[str] = "google-adk"
    credentials: ClassVar[Credentials | None] = Credentials(env=("GEMINI_API_KEY", "GOOGLE_API_KEY"))
    #: Never chosen by backend="auto": the gemini backend takes the same key more cheaply.
    auto_rank: ClassVar[int | None] = None
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, custom_tools=True,
        mcp=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True, pause=True)
    options_model: ClassVar[type[GoogleADKOptions]] = GoogleADKOptions
    price_provider: ClassVar[str | None] = "google"
    reserved_tool_names: ClassVar[frozenset[str]] = RESERVED_TOOL_NAMES
    tool_name_pattern: ClassVar[re.Pattern[str]] = _TOOL_NAME
    permission_kinds: ClassVar[frozenset[str]] = ENFORCED_KINDS

    def __init__(self, settings: BackendSettings[GoogleADKOptions]):
        super().__init__(settings)
        self.model: str = settings.model or DEFAULT_MODEL
        self.ledger.model = self.model
        self._custom = {tool.name: tool for tool in settings.tools}
        self._resolver: Any = None
        self._confinement: Confinement | None = None
        self._shell_env: dict[str, str] = {}
        self._run_dir: str | None = None
        self._client: Any = None
        self._http: Any = None
        self._runner: Any = None
        self._sessions: Any = None
        self._run_config: Any = None
        self._mcp_toolsets: list[Any] = []
        self._mcp_marks: list[str] = []
        #: The model's name of each MCP tool -> its server and name (filled as the toolsets list them).
        self._mcp_tools: dict[str, MCPToolName] = {}
        #: The names of the tools this backend gave the agent (ADK answers the others "not found").
        self._offered: set[str] = set()
        self._runtime: Any = None
        self._resumed = False
        # The running turn: its queue, its event translation, and what its tool calls did.
        self._queue: asyncio.Queue[Any] | None = None
        self._events: TurnEvents | None = None
        self._denied: set[str] = set()
        self._exit_codes: dict[str, int | None] = {}
        self._edits: dict[str, list[tuple[str, int, int]]] = {}
        # Approvals that can wait: the gate's order over a response's calls, the calls deferred
        # this turn, a continued run's answers (call id -> allow, deny, always), and whether the
        # store keeps a copy of this session (kept at a pause or restored from: updated at the end)
        # and of how many events.
        self._order = CallOrder()
        self._deferred: set[str] = set()
        self._waiting: list[PendingCall] = []
        self._answers: dict[str, str] = {}
        self._copy_kept = False
        self._copy_events = 0

    # ------------------------------------------------------------------ configuration
    @classmethod
    def model_for(cls, settings: BackendSettings[Any]) -> str | None:
        return settings.model or DEFAULT_MODEL

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs: list[Requirement] = [
            PythonPackage(module="google.adk", distribution="google-adk", min_major=2, install=INSTALL),
            PythonPackage(module="google.genai", distribution="google-genai", min_major=2, install=INSTALL)]
        options = settings.options
        if settings.sandbox and getattr(options, "adk_shell", True):
            needs.append(ShellSandboxAvailable(getattr(options, "adk_shell_sandbox", "auto"), OPTION_PREFIX))
        return needs

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        options: GoogleADKOptions = settings.options
        model = settings.model or DEFAULT_MODEL
        if "/" in model and not model.startswith(("projects/", "models/", "tunedModels/")):
            raise ConfigurationError(
                f"the google-adk backend runs Gemini models through ADK's Gemini model class; {model!r} looks like "
                "a LiteLLM provider/model name, which it does not take (use the litellm or openhands backend for "
                "other providers)", parameter="model")
        if api_key_of(options.api_key) is None and not options.adk_vertex:
            raise ConfigurationError(MISSING_ADK_KEY, parameter="api_key")
        from agenter.backends._confinement import check_network_rules

        check_network_rules(settings, backend=cls.name, shell=options.adk_shell, shell_option="adk_shell")
        no_pause_without_store(settings.on_ask, options.conversation_store)

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs and their ADK sessions."""
        options = settings.options if isinstance(settings.options, GoogleADKOptions) else GoogleADKOptions()
        return store_for_pauses(options.conversation_store, log_dir, Redactor(extra=options.secrets()))

    @property
    def read_only_session(self) -> bool:
        """Analysis and patch modes, or a plan-mode policy: no tool that writes is offered."""
        gate = self.gate
        return self.spec.mode in ("analysis", "patch") or (gate is not None and gate.mode == "plan")

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        from agenter.sandbox.paths import PathResolver

        if not self.cwd.is_dir():
            raise BackendError(f"working directory does not exist: {spec.cwd}", backend=self.name, kind="config")
        self._resolver = PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        if not self.settings.sandbox:
            self.leave_confinement_to_the_sandbox()  # sandbox=False (and no policy): the tools may go anywhere
        if self.options.adk_shell:
            await self._prepare_shell()
        # The first import of google.adk (and google.genai, opentelemetry, ...) takes seconds.
        runtime = self._runtime = await asyncio.to_thread(
            importlib.import_module, "agenter.backends.agents.google_adk._runtime")
        runtime.prepare_environment()
        await asyncio.to_thread(runtime.warm)
        await self._open_client()
        toolsets = await self._open_mcp()
        agent = runtime.build_agent(
            model=self.model, client=self._client, instructions=self._instructions(), tools=[
                *self._tools(runtime), *toolsets], output_schema=spec.output_type,
            max_tokens=self.options.max_tokens, temperature=self.options.temperature, callbacks={
                "before_tool_callback": self._before_tool, "after_tool_callback": self._after_tool,
                "on_tool_error_callback": self._on_tool_error})
        self._sessions = runtime.session_service(self.options.session_db(), self.redact)
        self._runner = runtime.build_runner(agent, self._sessions)
        self._run_config = runtime.run_config(self.options.adk_max_llm_calls)
        self._session_id = await self._open_session(spec.resume_session_id)

    async def _open_mcp(self) -> list[Any]:
        """ADK's McpToolset per configured server, listed (stdio servers started) now. A stdio
        server starts only when the gate allows starting it (its bypass-immune `mcp-stdio` check:
        the policy's `allowed_mcp_servers`, or on_permission; a `deny mcp:<name>` rule refuses
        it): a refusal fails the connect before any server has started."""
        from agenter.permissions import ToolCall

        servers = self.options.mcp_servers
        if not servers:
            return []
        for server in servers:
            self.redact.add(*server.secrets())
            if server.transport != "stdio":
                continue
            decision = await self.permit(ToolCall.mcp_server_start(server.name, server.command_line()))
            if not decision.allowed:
                raise ConfigurationError(
                    f"the MCP server {server.name!r} was not started: {decision.reason} A stdio server starts only "
                    f"when the permission policy lists it (permissions={{'mode': ..., 'allowed_mcp_servers': "
                    f"['{server.name}']}}, or the line 'mcp-server {server.name}' in its text form) or "
                    "on_permission allows it", parameter="permissions")
        # ADK's MCP support and the mcp package take seconds to import.
        mcp = await asyncio.to_thread(importlib.import_module, "agenter.backends.agents.google_adk._mcp")
        self._mcp_toolsets, self._mcp_marks = mcp.toolsets(servers, self.cwd, self._mcp_tools,
                                                           read_only_session=self.read_only_session)
        await mcp.open_toolsets(self._mcp_toolsets, self.name)
        return list(self._mcp_toolsets)

    async def _open_client(self) -> None:
        from agenter.backends._genai import make_genai_client

        options = self.options
        # In a thread: the trust store and the client's set-up take a second or more on a busy machine.
        self._client, self._http = await asyncio.to_thread(
            make_genai_client, key=api_key_of(options.api_key), base_url=options.base_url,
            request_timeout=options.request_timeout, keep_secret=self.redact.add, attempts=options.max_retries + 1,
            vertex=options.adk_vertex, project=options.adk_project, location=options.adk_location,
            missing_key=MISSING_ADK_KEY)

    async def _open_session(self, resume: str | None) -> str:
        """The ADK session the turns run in: a new one, or the stored one `resume` names."""
        runtime, sessions = self._runtime, self._sessions
        if resume is None:
            session = await sessions.create_session(app_name=runtime.APP_NAME, user_id=runtime.USER_ID)
            return str(session.id)
        found = await sessions.get_session(app_name=runtime.APP_NAME, user_id=runtime.USER_ID, session_id=resume)
        if found is None:
            found = await self._restore_session(resume)
        if found is None and self.options.session_db() is None:
            raise BackendError("cannot resume with adk_session_db=':memory:': ADK's in-memory sessions live only as "
                               "long as one run (a paused run's session is kept in conversation_store; this one "
                               "is not there)", backend=self.name, kind="config")
        if found is None:
            raise BackendError(f"no ADK session {resume!r} to resume in {self.options.session_db()} (nor in "
                               "conversation_store, where a paused run's session is kept)",
                               backend=self.name, kind="config")
        self._resumed = True
        return str(found.id)

    async def _restore_session(self, session_id: str) -> Any:
        """The session the pause store keeps a copy of under this id, created in this session
        service from it (`_kept`); None when the store keeps none."""
        from agenter.backends.agents.google_adk._kept import kept_session
        from agenter.store import StoreError

        runtime = self._runtime
        try:
            store = await backend_store(self)
            events = None if store is None else await asyncio.to_thread(kept_session, store, session_id)
        except StoreError as exc:
            raise BackendError(f"the ADK session {session_id!r} kept in the conversation store cannot be read: "
                               f"{exc}", backend=self.name, kind="config") from None
        if events is None:
            return None
        session = await self._sessions.create_session(app_name=runtime.APP_NAME, user_id=runtime.USER_ID,
                                                      session_id=session_id)
        try:
            for data in events:
                await self._sessions.append_event(session, runtime.event_from(data))
        except ValueError as exc:  # an event ADK cannot read (another ADK version's)
            raise BackendError(f"the ADK session {session_id!r} kept in the conversation store cannot be read by "
                               f"this ADK: {exc}", backend=self.name, kind="config") from None
        self._copy_kept, self._copy_events = True, len(events)
        return session

    async def _prepare_shell(self) -> None:
        from agenter.backends._confinement import session_confinement
        from agenter.permissions import ToolCall
        from agenter.sandbox.commands import shell_env

        self._shell_env = shell_env({**os.environ, **self.options.env})
        gate = self.gate
        assert gate is not None
        # The gate's first shell command loads its parser (bashlex): in a thread, not in the turn.
        await asyncio.to_thread(gate.evaluate, ToolCall(kind="shell", name=SHELL, command="true"))
        if not self.settings.sandbox:
            return
        self._run_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="agenter-google-adk-")
        tmpdir = f"{self._run_dir}/tmp"
        await asyncio.to_thread(os.mkdir, tmpdir, 0o700)
        try:
            self._confinement = await session_confinement(
                gate, cwd=self.cwd, prefer=self.options.adk_shell_sandbox,
                network=network_allowed(self.settings.permissions), read_only=self.read_only_session, tmpdir=tmpdir,
                keep=[self._run_dir], env=self._shell_env, backend=self.name, prefix=OPTION_PREFIX)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, self._run_dir, True)
            self._run_dir = None
            raise

    async def _disconnect(self) -> None:
        if self._copy_kept and self._sessions is not None:
            try:
                await self._update_copy()
            except Exception as exc:  # noqa: BLE001 - the session's own outcome stands
                log.warning("google-adk: the ADK session kept in the conversation store could not be updated: %s",
                            self.redact(str(exc)))
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(Exception):  # closes the toolsets (MCP sessions) and the environment
                await asyncio.wait_for(runner.close(), 15)
        sessions, self._sessions = self._sessions, None
        if sessions is not None and hasattr(sessions, "close"):
            with contextlib.suppress(Exception):
                await sessions.close()
        for toolset in self._mcp_toolsets:  # closed with the runner, unless the connect failed before it
            with contextlib.suppress(Exception):
                await asyncio.wait_for(toolset.close(), 15)
        self._mcp_toolsets = []
        for mark in self._mcp_marks:
            with contextlib.suppress(Exception):
                await reap(mark)
        client, self._client = self._client, None
        http, self._http = self._http, None
        with contextlib.suppress(Exception):  # closing must never mask the session's outcome
            if client is not None:
                client.close()
            if http is not None:
                await http.aclose()
        run_dir, self._run_dir = self._run_dir, None
        if run_dir is not None:
            await asyncio.to_thread(shutil.rmtree, run_dir, True)

    # ------------------------------------------------------------------ the agent's tools
    def _instructions(self) -> str:
        return self.instructions(refusal_tool=REFUSAL_TOOL_NAME, output_channel="native")

    def _tools(self, runtime: Any) -> list[Any]:
        """ADK's environment tools (those that read in a read-only session; Execute unless
        adk_shell=False), the custom tools and the refusal tool."""
        names = [FILE_READ]
        if not self.read_only_session:
            names += sorted(FILE_WRITES)
        if self.options.adk_shell:
            names.append(SHELL)
        workspace = runtime.Workspace(self.cwd, shell=self._shell, read=self._read, write=self._write)
        tools: list[Any] = [runtime.Environment(workspace, names)]
        for tool in self.settings.tools:
            tools.append(runtime.HostTool(tool.name, tool.description, tool.input_schema, self._custom_handler(tool)))
        tools.append(runtime.HostTool(REFUSAL_TOOL_NAME, REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_SCHEMA, self._refuse))
        self._offered = {*names, *self._custom, REFUSAL_TOOL_NAME}
        return tools

    def _custom_handler(self, tool: Any) -> Any:
        async def handler(arguments: dict[str, Any], tool_context: Any) -> dict[str, Any]:
            reply = await self.run_tool(tool, arguments)
            return {"error": reply.text} if reply.is_error else {"output": reply.text}

        return handler

    async def _refuse(self, arguments: dict[str, Any], tool_context: Any) -> dict[str, Any]:
        reply = self.refuse(arguments)
        tool_context.actions.skip_summarization = True  # the refusal ends the run: no model call after it
        return {"output": reply.text}

    async def _shell(self, command: str) -> tuple[str, int | None]:
        """One Execute command: agenter's shell runner, in the sandbox with sandbox=True. The
        text says how it ended ("[exit code N]", "[timed out after N s ...]")."""
        from agenter.sandbox.commands import run_shell

        result = await run_shell(command, cwd=self.cwd, timeout=self.options.adk_shell_timeout,
                                 sandbox=self._confinement, env=self._shell_env)
        running = self._runtime.CURRENT_CALL.get()
        if running is not None:
            self._exit_codes[running[0]] = result.exit_code
        # What a command prints goes to the model: keys it finds are hidden like everywhere else.
        return self.redact(result.text), result.exit_code

    async def _read(self, path: str, text_only: bool) -> bytes:
        from agenter.backends.agents.google_adk._files import read_file

        # A tracked thread: a turn cancelled meanwhile waits for it before its last snapshot.
        return await self.in_thread_named(FILE_READ, read_file, self._resolver, path, text_only=text_only)

    async def _write(self, path: str, content: str | bytes) -> None:
        from agenter.backends.agents.google_adk._files import write_file

        rel, added, removed = await self.in_thread_named("WriteFile", write_file, self._resolver, path, content)
        self.track(written=[rel])
        running = self._runtime.CURRENT_CALL.get()
        if running is not None:
            self._edits.setdefault(running[0], []).append((rel, added, removed))

    # ------------------------------------------------------------------ the gate (ADK's callbacks)
    async def _before_tool(self, tool: Any, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        """Every call passes the gate before it runs, in the order of its model response
        (`CallOrder`); a refused one is answered with the reason and never runs, a deferred one
        (and every later one of its response) waits (`_wait`). An allowed call is reported
        (TOOL_CALL, or COMMAND_START for Execute) and runs once the turn has handed the report on."""
        call_id = tool_context.function_call_id or ""
        self._order.begin(call_id)
        deferred = False
        try:
            answer = await self._gate(tool, args, tool_context)
            deferred = call_id in self._deferred
            return answer
        finally:
            self._order.end(call_id, deferred)

    async def _gate(self, tool: Any, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        name, call_id = tool.name, tool_context.function_call_id or ""
        self._runtime.CURRENT_CALL.set((call_id, name))
        mcp = self._mcp_tools.get(name)
        if mcp is None and name not in self._offered and name not in UNGATED:
            # Not a tool this session offered (ADK may still know one by that name): never run.
            self._denied.add(call_id)
            return {"error": f"There is no tool named {name!r} in this session."}
        events = tool_context.session.events
        if name != REFUSAL_TOOL_NAME and (self.refusal() is not None or refused_beside(
                events, call_id, REFUSAL_TOOL_NAME)):
            # ADK runs a response's calls side by side: a refusal in the same response stops the rest.
            self._denied.add(call_id)
            return {"error": REFUSED_BESIDE}
        call = tool_call(name, args, self._custom, mcp)
        calls = response_calls(events, call_id)
        if await self._order.after(calls[:calls.index(call_id)] if call_id in calls else []):
            return self._wait(tool_context, name, args, call, asked=False)  # an earlier call waits
        if call is not None:
            decision = await self.permit(call, answer=self._answer(call_id, tool_context.tool_confirmation),
                                         defer=True)
            if decision.deferred:
                return self._wait(tool_context, name, args, call, asked=True)
            if not decision.allowed:
                self._denied.add(call_id)
                return {"error": decision.reason}
        if name == SHELL:
            message = BackendMessage(MessageType.COMMAND_START, tool_name=name, tool_input=dict(args),
                                     tool_call_id=call_id, details={"command": args.get("command")})
        else:
            message = BackendMessage(MessageType.TOOL_CALL, tool_name=name, tool_input=dict(args),
                                     tool_call_id=call_id)
        await self._announce(message)
        return None

    async def _after_tool(self, tool: Any, args: dict[str, Any], tool_context: Any,
                          tool_response: Any) -> dict[str, Any] | None:
        """The call's result (COMMAND_END with the exit code for Execute), then its file edits."""
        name, call_id = tool.name, tool_context.function_call_id or ""
        events = self._events
        if events is not None:
            events.reported.add(call_id)
        if call_id in self._deferred:
            return None  # not run: it waits (reported pending)
        text, is_error = tool_answer(tool_response)
        denied = call_id in self._denied
        if name == SHELL and not denied:
            self._post(BackendMessage(MessageType.COMMAND_END, self.redact(text), tool_name=name,
                                      tool_call_id=call_id, is_error=is_error,
                                      details={"exit_code": self._exit_codes.pop(call_id, None)}))
        else:
            self._post(BackendMessage(MessageType.TOOL_RESULT, self.redact(text), tool_name=name,
                                      tool_call_id=call_id, is_error=is_error or denied))
        for path, added, removed in self._edits.pop(call_id, []):
            self._post(BackendMessage(MessageType.FILE_EDIT, tool_name=name, tool_call_id=call_id,
                                      details={"path": path, "lines_added": added, "lines_removed": removed}))
        return None

    def _wait(self, tool_context: Any, name: str, args: dict[str, Any], call: Any, *, asked: bool) -> dict[str, Any]:
        """A call that waits for a person: reported pending as the gate sees it (`asked`: the gate
        deferred it; else an earlier call of its response waits), and answered with ADK's request
        for a confirmation, with which ADK ends the run after the response's calls; skipping the
        summary also ends a continued run, where ADK asks nobody (`_ask_to_confirm`)."""
        call_id = tool_context.function_call_id or ""
        gate = self.gate
        verdict = gate.evaluate(call) if gate is not None and call is not None else None
        needs_approval = asked or (verdict is not None and verdict.behavior == "ask")
        self._waiting.append(pending_call(call_id, name, args, call, verdict, needs_approval=needs_approval))
        self._deferred.add(call_id)
        tool_context.request_confirmation(hint=verdict.reason if verdict is not None and needs_approval else
                                          "An earlier call of the same response waits for a person's approval.")
        tool_context.actions.skip_summarization = True
        return {"error": PAUSED_RESULT}

    def _answer(self, call_id: str, confirmation: Any) -> PermissionAnswer | None:
        """A person's answer to a paused call ADK runs again on its confirmation (None: none,
        decided as usual). Only a call ADK runs on a confirmation has one (used once)."""
        if confirmation is None:
            return None
        answer = self._answers.pop(call_id, None)
        if answer == "deny" or not confirmation.confirmed:
            return PermissionAnswer(False)
        return PermissionAnswer(True) if answer in ("allow", "always") else None

    async def _on_tool_error(self, tool: Any, args: dict[str, Any], tool_context: Any,
                             error: Exception) -> dict[str, Any]:
        """A tool that raised: the model reads what went wrong (redacted), the run goes on."""
        return {"status": "error", "error": self.redact(f"{tool.name} failed: {error}")}

    async def _announce(self, message: BackendMessage) -> None:
        """Hand a message to the turn and wait until it has gone out (lock-step with the session,
        so a budget that stops the turn stops it before the next tool runs)."""
        queue = self._queue
        if queue is None:
            return
        taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.put_nowait((message, taken))
        await taken

    def _post(self, message: BackendMessage) -> None:
        queue = self._queue
        if queue is not None:
            queue.put_nowait((message, None))

    # ------------------------------------------------------------------ the turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        async for message in self._run_turn_of(self._runtime.user_message(prompt)):
            yield message

    async def _run_turn_of(self, new_message: Any) -> AsyncIterator[BackendMessage]:
        """One turn: ADK's run with `new_message` (the prompt, or the answers to its confirmation
        calls), its events and the callbacks' messages as they come; it ends paused when calls wait."""
        events = self._events = TurnEvents(settle=self._settle, running=self.ledger.running,
                                           refused=self._model_refused)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queue = queue
        self._order.clear()
        self._deferred.clear()
        self._waiting = []
        if self._resumed:
            self._resumed = False
            yield BackendMessage(MessageType.STATUS, f"session resumed: ADK session {self._session_id}")
        run = asyncio.ensure_future(self._run(new_message, queue))
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise self._failure(item)
                if isinstance(item, tuple):
                    message, taken = item
                    yield message
                    if taken is not None and not taken.done():
                        taken.set_result(None)
                    continue
                for message in events.event(item):
                    yield self._redacted(message)
        finally:
            await self._stop(run)
            self._queue = None
            self._denied.clear()
            self._exit_codes.clear()
            self._edits.clear()
        if self._waiting:
            yield await self._pause_here()
            return
        self.parse_output(events.final_text)
        self.refuse_from_text(events.final_text)

    async def _run(self, new_message: Any, queue: asyncio.Queue[Any]) -> None:
        """ADK's run of one turn, in a task of its own: its events, then the end (or the failure)."""
        runtime = self._runtime
        try:
            stream = self._runner.run_async(user_id=runtime.USER_ID, session_id=self._session_id,
                                            new_message=new_message, run_config=self._run_config)
            async with contextlib.aclosing(stream):
                async for event in stream:
                    queue.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the turn, never lost
            if runtime.is_call_limit(exc):
                queue.put_nowait((BackendMessage(
                    MessageType.STATUS, f"the turn stopped after {self.options.adk_max_llm_calls} model calls "
                                        "(adk_max_llm_calls)"), None))
            else:
                queue.put_nowait(exc)
        finally:
            queue.put_nowait(_END)

    async def _stop(self, run: asyncio.Future[None]) -> None:
        """End ADK's run (a cancelled or closed turn) and wait, bounded, for it: its tools and
        their processes end before the turn's last snapshot."""
        if not run.done():
            run.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait({run}, timeout=self.settle_seconds)
            self.ledger.abandon_running()

    # ------------------------------------------------------------------ approvals that can wait
    async def _pause_here(self) -> BackendMessage:
        """End the turn at the calls that wait: they are reported pending, and the session ends
        with ADK's request to confirm them (`_ask_to_confirm`)."""
        await self._ask_to_confirm()
        pending, self._waiting = self._waiting, []
        self.defer_calls(pending)
        asking = [call for call in pending if call.needs_approval]
        return BackendMessage(MessageType.STATUS, content=(
            f"paused: {len(asking)} call(s) wait for a person's approval ({asking[0].tool}: {asking[0].reason})"
            if asking else f"paused: {len(pending)} call(s) wait"), details={"pending": [c.id for c in pending]})

    async def _session(self) -> Any:
        runtime = self._runtime
        return await self._sessions.get_session(app_name=runtime.APP_NAME, user_id=runtime.USER_ID,
                                                session_id=self._session_id)

    async def _ask_to_confirm(self) -> None:
        """ADK asks its user to confirm the calls that requested it after a model response's calls
        ran; after calls it ran again on a confirmation (a continued run) it asks nothing, so the
        request is written here, as ADK writes it, for the next continuation to answer."""
        session = await self._session()
        if session is None or self._deferred <= set(confirmations_asked(session.events)):
            return
        request = self._runtime.confirmation_request(session.events)
        if request is not None:
            await self._sessions.append_event(session, request)

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, the ADK session id, the
        gate's "always" answers, and a copy of the ADK session's events (`_kept`), from which
        another process continues it. StoreError when it fails."""
        store = await backend_store(self)
        if store is not None:
            await self._keep_session(store)
        return await hold_paused(self, record, "google_adk", {}, store=store)

    async def _update_copy(self) -> None:
        """Bring the store's copy of the session up to date (when it ends): events were added."""
        session = await self._session()
        if session is not None and len(session.events) != self._copy_events:
            await self._keep_session()

    async def _keep_session(self, store: Any = None) -> None:
        """Store the ADK session's events as they are now (`_kept`)."""
        from agenter.backends.agents.google_adk._kept import keep_session

        if store is None:
            store = await backend_store(self)
        session = await self._session()
        if store is None or session is None:
            return
        events = [self._runtime.event_data(event) for event in session.events]
        await asyncio.to_thread(keep_session, store, str(session.id), events)
        self._copy_kept, self._copy_events = True, len(events)

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued: ADK's confirmation calls answered (a denied call
        unconfirmed), so ADK runs each paused call again, decided by the gate with the person's
        answer (`_answer`), and the turn goes on from there."""
        gate = self.gate
        assert gate is not None
        _, pending = resume_paused(self, held, "google_adk")
        session = await self._session()
        asked = confirmations_asked(session.events if session is not None else [])
        if not pending or any(call.id not in asked for call in pending):
            raise ConfigurationError(
                f"the ADK session {self.session_id!r} went on after the run paused (it no longer ends at the calls "
                "waiting for approval), so the paused calls cannot be answered", parameter="handle")
        for call in pending:
            made = tool_call(call.tool, dict(call.input), self._custom, self._mcp_tools.get(call.tool))
            if answers.get(call.id) == "always" and made is not None:
                gate.approve_always(made)
        self._answers = dict(answers)
        confirmed = {asked[call.id]: answers.get(call.id) != "deny" for call in pending}
        async for message in self._run_turn_of(self._runtime.confirmations(confirmed)):
            yield message

    def _settle(self, usage: Usage) -> None:
        self.ledger.settle(usage)

    def _model_refused(self, reason: str) -> None:
        if self.refusal() is None:
            self.refuse({"reason": reason, "category": "refusal"})

    def _redacted(self, message: BackendMessage) -> BackendMessage:
        message.content = self.redact(message.content)
        return message

    # ------------------------------------------------------------------ failures
    def _failure(self, exc: BaseException) -> BackendError:
        """An exception of ADK's run as a BackendError of the right kind (`_failures`)."""
        from agenter.backends._genai import genai_failure

        if isinstance(exc, BackendError):
            return exc
        failure: Failure | None = genai_failure(exc)
        if failure is None and is_transport_error(exc):
            failure = Failure(str(exc) or type(exc).__name__, connection=True)
        if failure is None:
            return BackendError(self.redact(f"ADK's run failed: {type(exc).__name__}: {exc}"), backend=self.name,
                                kind="unknown")
        verdict = classify_failure(failure)
        where = f"HTTP {failure.status}" if failure.status else "no answer"
        return BackendError(self.redact(f"the Gemini API call failed ({where}): {failure.message}"),
                            backend=self.name, status_code=failure.status, kind=verdict.kind)
