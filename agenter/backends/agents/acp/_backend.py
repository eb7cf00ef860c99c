"""ACPBackend: spawn an Agent Client Protocol agent, drive it over stdio as its client.

agenter plays the ACP *client*: it owns the working directory, serves the agent's
fs/read_text_file and fs/write_text_file requests inside the sandbox and through the permission
gate (`_client`), answers session/request_permission by policy and the gate, and streams
session/update notifications as BackendMessages. What the agent does by itself (its own file
writes, its own shell) is seen through the base's workspace snapshots: see docs/backends/acp.md.
Which permission rule kinds are enforced depends on the agent (AGENT_KINDS).

Approvals that can wait (docs/approvals.md), with the agents in PAUSING_AGENTS: a call the gate
defers ends the turn there (session/cancel, the permission answered `cancelled`: `_client`), and
the turn reports it pending. `hold` keeps the session's record with the ACP session id in the
pause store (`backends/_pauses.py`); a later process loads that session (session/load) and
`continue_paused` tells the model the person's answers, asking it to make an approved call again,
which the gate then lets through with that answer (`RepeatedCalls`). The agent carries a loaded
session's cost on, so the cost it reported when the run paused is where the continued run's
count starts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar

from agenter._errors import BackendError, ConfigurationError
from agenter._version import __version__
from agenter.backends._pauses import (
    answer_paused,
    backend_store,
    defer_as_seen,
    hold_paused,
    no_pause_without_store,
    resume_paused,
    store_for_pauses,
)
from agenter.backends._programs.claude import keep_session, restore_session
from agenter.backends._prompts import text_refusal
from agenter.backends.agents.acp._options import ACPOptions, mcp_server_json
from agenter.backends.agents.acp._usage import SessionUsage
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.host import AgentProcess, Program, PythonPackage, Redactor, find_program
from agenter.host.requirements import Requirement
from agenter.permissions import ToolCall
from agenter.usage import is_known_model

if TYPE_CHECKING:
    from agenter.backends.agents.acp._client import ACPClient

__all__ = ["ACPBackend"]

#: How long a cancelled prompt may take to acknowledge session/cancel before the process goes.
CANCEL_GRACE_SECONDS = 1.0
#: How long an agent gets to exit after its stdin closes, before its process group is signalled.
EXIT_GRACE_SECONDS = 1.0

CONTINUE_PROMPT = (
    "No one is available to answer questions or confirm steps: this run is fully automated. "
    "Proceed now: make the changes the task needs directly in the working directory, then stop. "
    "If you cannot do the task, reply with a line starting with 'REFUSED:' and the reason."
)

#: The permission rule kinds agenter enforces for the ACP agents it knows, by program name and
#: session mode (what the agent brings to agenter, found with the real programs; see
#: docs/permissions.md). Other agents, and these in other modes, are taken to enforce none.
#: claude-agent-acp (Claude Code) asks for every edit, every command it does not itself judge
#: read-only, and web fetches; claude-code-acp also reads and writes files through fs/*; codex-acp
#: (read-only mode) asks for patches only and runs commands in its sandbox without asking.
_CLAUDE = frozenset({"edit", "shell", "network"})
AGENT_KINDS: dict[str, dict[str | None, frozenset[str]]] = {
    "claude-agent-acp": {None: _CLAUDE, "default": _CLAUDE, "acceptEdits": _CLAUDE - {"edit"}},
    "claude-code-acp": {None: _CLAUDE | {"read"}, "default": _CLAUDE | {"read"},
                        "acceptEdits": (_CLAUDE | {"read"}) - {"edit"}},
    "codex-acp": {None: frozenset({"edit"}), "read-only": frozenset({"edit"})},
}

#: The ACP agents that can pause a run (on_ask="pause"), by program name: they load a session to
#: continue it (loadSession) and end a prompt turn on session/cancel without running the call
#: answered `cancelled` (found with the real program: claude-agent-acp 0.23). Others are refused
#: on_ask="pause" when the agent is built, and an on_permission "defer" is a denial there.
PAUSING_AGENTS = frozenset({"claude-agent-acp"})

_CONFIRMATION = re.compile(
    r"\b(shall i|should i|would you like|do you want|want me to|let me know|please confirm|"
    r"can you confirm|could you confirm|confirm (?:that|whether|if)|ready to proceed|"
    r"may i|okay to proceed|ok to proceed|proceed\?|go ahead\?|approve|permission to)\b",
    re.IGNORECASE,
)


def asks_for_confirmation(text: str) -> bool:
    """Does the agent's final text ask a human to confirm or answer instead of acting?"""
    tail = (text or "").strip()[-600:]
    if not tail:
        return False
    return tail.endswith("?") or bool(_CONFIRMATION.search(tail))


class ACPBackend(BaseBackend[ACPOptions]):
    """Any ACP agent over stdio. agenter is the ACP client and owns the sandbox."""

    name: ClassVar[str] = "acp"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, native_tool_loop=True, mcp=True, filesystem_read=True,
        filesystem_edit=True, shell=True, custom_tools=False, structured_output=True, resume=True, sandbox=True,
        pause=True)
    options_model: ClassVar[type[ACPOptions]] = ACPOptions

    def __init__(self, settings: BackendSettings[ACPOptions]):
        super().__init__(settings)
        # Secrets in the agent's extra environment (a key under any name) are hidden too.
        self.redact = Redactor(self.options.env, extra=self.options.secrets())
        self._process: AgentProcess | None = None
        self._last_process: AgentProcess | None = None
        self._conn: Any = None
        self._client: ACPClient | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._env: dict[str, str] = {}
        self._graceful = True  # False once the agent failed: no point waiting for it to exit
        self._prompts = 0
        self._stop_reason: str | None = None
        self._tokens = SessionUsage(self.ledger)
        self._queue: collections.deque[BackendMessage] = collections.deque()
        self._wakeup = asyncio.Event()
        self._notes: list[str] = []
        self._kinds: dict[str, str] = {}  # the ACP kind of each call that waits, by call id

    @property
    def agent_pid(self) -> int | None:
        """Pid of the running ACP agent program (None when none runs)."""
        return self._process.pid if self._process is not None else None

    # ------------------------------------------------------------------ settings
    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        options: ACPOptions = settings.options
        return [
            PythonPackage(module="acp", distribution="agent-client-protocol",
                          install="pip install 'agenter-sdk[acp]'"),
            Program(name=options.acp_command, env_path=options.env.get("PATH"),
                    install="install the ACP agent program (e.g. npm install -g @zed-industries/codex-acp) "
                            "or give its path in acp_command"),
        ]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        options: ACPOptions = settings.options
        no_pause_without_store(settings.on_ask, options.conversation_store)
        if settings.on_ask == "pause" and not cls.can_pause(options):
            raise ConfigurationError(
                f"on_ask='pause' on the acp backend needs an agent known to continue a paused session "
                f"({', '.join(sorted(PAUSING_AGENTS))}); {options.acp_command!r} is not", parameter="on_ask")
        if settings.tools:
            raise ConfigurationError(
                "the acp backend cannot add custom tools to an ACP agent; give the agent an MCP "
                "server with mcp_servers instead", parameter="tools")
        if options.mcp_servers:
            # Only reached once requirements() found the acp package.
            from pydantic import TypeAdapter, ValidationError

            from acp.schema import HttpMcpServer, McpServerStdio, SseMcpServer

            adapter: TypeAdapter[Any] = TypeAdapter(HttpMcpServer | SseMcpServer | McpServerStdio)
            for server in options.mcp_servers:
                try:
                    adapter.validate_python(mcp_server_json(server))
                except ValidationError as exc:
                    raise ConfigurationError(f"invalid MCP server {server.get('name')!r} in "
                                             f"mcp_servers: {exc.errors()[0]['msg']}",
                                             parameter="mcp_servers") from None

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs."""
        options = settings.options
        return store_for_pauses(options.conversation_store, log_dir, Redactor(options.env, extra=options.secrets()))

    @classmethod
    def can_pause(cls, options: ACPOptions) -> bool:
        """Is this agent program one that can pause a run (PAUSING_AGENTS)?"""
        return os.path.basename(options.acp_command.strip()) in PAUSING_AGENTS

    @classmethod
    def enforced_kinds(cls, options: ACPOptions) -> frozenset[str]:
        """The rule kinds enforced with this agent program and session mode (AGENT_KINDS)."""
        program = os.path.basename(options.acp_command.strip())
        return AGENT_KINDS.get(program, {}).get(options.acp_session_mode, frozenset())

    @classmethod
    def permission_kinds_for(cls, settings: BackendSettings[Any]) -> tuple[frozenset[str], str]:
        options = settings.options
        return cls.enforced_kinds(options), (f" with {options.acp_command!r} (session mode "
                                             f"{options.acp_session_mode or 'default'})")

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        import acp
        from agenter.backends.agents.acp._client import ACPClient
        from agenter.sandbox.paths import PathResolver

        options = self.options
        resolver = PathResolver(self.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        settings = self.settings
        policy = options.permission_policy
        if "permission_policy" not in options.model_fields_set and (
                settings.permissions is not None or settings.on_permission is not None):
            policy = "allow"  # a policy or someone to ask was given: the gate decides
        self.leave_confinement_to_the_sandbox()
        self._client = ACPClient(
            resolver=resolver, permission_policy=policy, fs=options.acp_fs,
            emit=self._emit, on_usage=lambda u: self._tokens.update(u.used, u.cost),
            on_denied=self.deny, on_file=self._file, in_thread=self.in_thread, permit=self.permit,
            waiting=self._waiting, cancel=self._cancel_turn)
        # PWD as a shell would set it: some agents (OpenCode) take their directory from it.
        self._env = {**os.environ, **self.trace_env(), "PWD": str(self.cwd), **options.env}
        program = find_program(options.acp_command, search_path=self._env.get("PATH")) or options.acp_command
        try:
            self._process = await AgentProcess.start([program, *options.acp_args], cwd=self.cwd, env=self._env,
                                                     limit=50 * 1024 * 1024)
        except OSError as exc:
            raise BackendError(f"could not start ACP agent {options.acp_command!r}: {exc.strerror or exc}",
                               backend=self.name, kind="missing_program") from None
        process = self._process.process
        self._conn = acp.connect_to_agent(self._client, process.stdin, process.stdout)
        self._watcher = asyncio.create_task(self._watch_exit(self._process, self._conn))
        try:
            await asyncio.wait_for(self._open_session(spec), options.acp_startup_timeout)
        except TimeoutError:
            self._graceful = False
            raise BackendError(f"ACP agent {options.acp_command!r} did not start a session within "
                               f"{options.acp_startup_timeout:g} s", backend=self.name,
                               stderr_tail=self._stderr_tail()) from None
        except BackendError:
            self._graceful = False
            raise
        except Exception as exc:  # noqa: BLE001 - reported with the agent's exit code and stderr
            raise await self._failure("could not start an ACP session", exc) from None

    async def _watch_exit(self, process: AgentProcess, conn: Any) -> None:
        """An agent that dies while a child still holds its stdout never sends EOF: close the
        connection when the process exits, so pending requests fail instead of hanging."""
        with contextlib.suppress(Exception):
            # returncode is set when the agent itself exits, whoever holds its pipes.
            while process.returncode is None:
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.2)  # let the last lines it wrote be read
            if self._conn is conn:
                await asyncio.wait_for(conn.close(), 1)

    async def _open_session(self, spec: SessionSpec) -> None:
        import acp
        from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation
        from agenter.backends.agents.acp._client import MISSING_AS_EMPTY

        assert self._client is not None
        fs = self.options.acp_fs
        init = await self._conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            # Terminals are not offered: agenter could not confine the commands it would run.
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file="read" in fs, write_text_file="write" in fs),
                terminal=False),
            client_info=Implementation(name="agenter", title="agenter", version=__version__),
        )
        agent = init.agent_info.name if init.agent_info is not None else None
        loads = bool(init.agent_capabilities and init.agent_capabilities.load_session)
        # A deferred call ends the turn only where the run can go on later (PAUSING_AGENTS).
        self._client.can_defer = loads and self.can_pause(self.options)
        if self.settings.on_ask == "pause" and not loads:
            raise BackendError("on_ask='pause' needs an ACP agent that can load a session (loadSession), and "
                               "this one cannot", backend=self.name, kind="config")
        # Gemini CLI cannot tell any error answer from a failure (MISSING_AS_EMPTY in _client).
        self._client.missing_as_empty = agent in MISSING_AS_EMPTY
        cwd = str(self.cwd)
        mcp_servers = [mcp_server_json(s) for s in self.options.mcp_servers]
        if spec.resume_session_id:
            capabilities = init.agent_capabilities
            if not (capabilities and capabilities.load_session):
                raise BackendError("this ACP agent cannot load a previous session (no loadSession "
                                   "capability)", backend=self.name, kind="config")
            if self.can_pause(self.options):  # Claude Code underneath: its session file may be in the store
                await restore_session(self, self._env, spec.resume_session_id)
            response = await self._conn.load_session(cwd=cwd, session_id=spec.resume_session_id,
                                                     mcp_servers=mcp_servers)
            self._session_id = spec.resume_session_id
        else:
            try:
                response = await self._conn.new_session(cwd=cwd, mcp_servers=mcp_servers)
            except acp.RequestError as exc:
                if exc.code != -32000 or not await self._authenticate(init):
                    raise
                response = await self._conn.new_session(cwd=cwd, mcp_servers=mcp_servers)
            self._session_id = response.session_id
        self._client.session_id = self._session_id
        await self._configure_session(response)

    async def _authenticate(self, init: Any) -> bool:
        """The agent wants authentication: use an env-var method whose variables are all set."""
        for method in init.auth_methods or []:
            data = method.model_dump(by_alias=True, exclude_none=True)
            variables = [v.get("name") for v in data.get("vars") or []]
            if data.get("type") == "env_var" and variables and all(self._env.get(v) for v in variables):
                await self._conn.authenticate(method_id=data["id"])
                return True
        methods = ", ".join(m.id for m in init.auth_methods or []) or "none offered"
        raise BackendError(f"the ACP agent requires authentication (methods: {methods}); set the "
                           "variables of an env_var method in env, or configure the agent",
                           backend=self.name, kind="auth")

    async def _configure_session(self, response: Any) -> None:
        mode = self.options.acp_session_mode
        if mode:
            modes = getattr(response, "modes", None)
            available = [m.id for m in modes.available_modes] if modes else []
            if available and mode not in available:
                raise BackendError(f"the ACP agent has no session mode {mode!r} "
                                   f"(available: {', '.join(available)})", backend=self.name, kind="config")
            await self._conn.set_session_mode(session_id=self._session_id, mode_id=mode)
        option = next((getattr(o, "root", o) for o in getattr(response, "config_options", None) or []
                       if getattr(getattr(o, "root", o), "category", None) == "model"), None)
        model = self.settings.model
        if option is None:
            if model:
                self._notes.append(
                    f"this ACP agent offers no model option; model {model!r} must be set in its own "
                    "configuration (acp_args / env)")
            return
        if not model:
            current = getattr(option, "current_value", None)
            # Priced as the model the agent says it uses, when that is a model id genai-prices
            # knows (claude-agent-acp says "default").
            if isinstance(current, str) and current and await asyncio.to_thread(is_known_model, current):
                self.ledger.model = current
            return
        values = [getattr(getattr(o, "root", o), "value", None) for o in getattr(option, "options", [])]
        if values and model not in values:
            raise BackendError(f"the ACP agent has no model {model!r} (available: "
                               f"{', '.join(str(v) for v in values if v)})", backend=self.name, kind="config")
        await self._conn.set_config_option(config_id=option.id, session_id=self._session_id, value=model)

    async def _disconnect(self) -> None:
        """Close the connection, give the agent a moment to exit, then end it and all it started."""
        conn, self._conn = self._conn, None
        process, self._process = self._process, None
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
        if process is not None:
            self._last_process = process
        if conn is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(conn.close(), 1)
        if process is None:
            return
        stdin = process.process.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):
                stdin.close()
        if self._graceful and process.returncode is None:
            with contextlib.suppress(asyncio.CancelledError):
                await process.wait_exit(EXIT_GRACE_SECONDS)
        # Agents that ignore a closed stdin (codex-acp does) are signalled here; what Claude Code
        # under claude-agent-acp leaves in the group is found and killed by the same policy.
        await process.terminate(grace=1.5 if self._graceful else 0.5)

    # ------------------------------------------------------------------ turns
    def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        return self._prompt_turn(self._compose(prompt, first=self._prompts == 0))

    async def _prompt_turn(self, text: str) -> AsyncIterator[BackendMessage]:
        client = self._client
        if self._conn is None or client is None:
            raise BackendError("the ACP agent is no longer running (an earlier turn was stopped)",
                               backend=self.name, kind="agent_crash")
        client.start_turn()
        for note in self._notes:
            yield BackendMessage(type=MessageType.STATUS, content=note)
        self._notes = []
        continued = False
        stop: str | None = None
        try:
            while True:
                async with contextlib.aclosing(self._prompt(text)) as stream:
                    async for message in stream:
                        yield message
                stop = self._stop_reason
                if client.paused:  # the turn ended at a call that waits (session/cancel): reported pending
                    yield BackendMessage(type=MessageType.STATUS, content=(
                        f"the turn ended at a call that waits for a person's approval (stop_reason={stop})"))
                    return
                final = client.final_text()
                if (stop == "end_turn" and self.options.acp_autonomous and not continued
                        and not text_refusal(final) and asks_for_confirmation(final)
                        and not await self.changes_so_far()):
                    continued = True
                    yield BackendMessage(type=MessageType.STATUS,
                                         content="the agent asked for confirmation; continuing automatically")
                    client.start_turn()
                    text = CONTINUE_PROMPT
                    continue
                break
            if stop == "cancelled" and client.denied_in_turn:
                # Some agents (codex-acp) abort the turn when a permission is rejected.
                yield BackendMessage(type=MessageType.STATUS,
                                     content="the agent ended its turn after agenter denied a permission "
                                             "request (stop_reason=cancelled)")
                stop = "end_turn"
            self._finish(stop, client)
        finally:
            client.active = False

    def _compose(self, prompt: str, first: bool) -> str:
        """ACP has no system prompt: the instructions open the session's first prompt."""
        if not first:
            return prompt
        instructions = self.instructions(refusal_tool=None, output_channel="text",
                                         contract=self.options.acp_autonomous)
        return f"{instructions}\n\nTask:\n{prompt}"

    async def _prompt(self, text: str) -> AsyncGenerator[BackendMessage, None]:
        """One session/prompt, its session/update stream yielded as it arrives."""
        from acp import text_block

        wakeup = self._wakeup
        self._stop_reason = None
        self._prompts += 1
        self._tokens.start(text)
        task = asyncio.create_task(self._conn.prompt(session_id=self._session_id, prompt=[text_block(text)]))
        task.add_done_callback(lambda _: wakeup.set())
        finished = False
        try:
            while True:
                while self._queue:
                    yield self._queue.popleft()
                if task.done():
                    assert self._client is not None
                    self._client.flush()
                    while self._queue:
                        yield self._queue.popleft()
                    break
                wakeup.clear()
                if self._queue or task.done():
                    continue
                await wakeup.wait()
            finished = True
            try:
                response = task.result()
            except Exception as exc:  # noqa: BLE001 - the agent failed or died: a BackendError
                self._tokens.abandon()
                raise await self._failure("the ACP agent failed during the turn", exc) from None
            self._stop_reason = response.stop_reason
            note = self._tokens.finish(response)
            if note:
                yield BackendMessage(type=MessageType.STATUS, content=note)
        finally:
            if not finished:
                self._tokens.abandon()
                await self._interrupt(task)

    async def _interrupt(self, task: asyncio.Task[Any]) -> None:
        """The consumer stopped the turn (time or token budget, or closing): cancel it at the agent,
        then end the agent; the session is over for it."""
        if not task.done() and self._conn is not None and self._session_id:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._conn.cancel(session_id=self._session_id), 0.5)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), CANCEL_GRACE_SECONDS)
        if not task.done():
            task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, 0.5)
        self._graceful = False
        await self._disconnect()

    def _finish(self, stop: str | None, client: ACPClient) -> None:
        """The turn's outcome from its stop reason and text: refusal, error, structured output."""
        if stop == "refusal":
            self.refuse({"reason": client.final_text().strip() or "the agent refused the request",
                         "category": "agent_refusal"})
            return
        full = client.full_text()
        if self.refuse_from_text(full):
            return
        if stop in ("max_tokens", "max_turn_requests"):
            what = "the model's output token limit" if stop == "max_tokens" else "its own turn-request limit"
            raise BackendError(f"the ACP agent stopped the turn at {what} (stop_reason={stop}); "
                               "the work may be incomplete", backend=self.name)
        if stop == "cancelled":
            raise BackendError("the ACP agent cancelled the turn by itself (stop_reason=cancelled)",
                               backend=self.name)
        self.parse_output(full)

    # ------------------------------------------------------------------ approvals that can wait
    async def _cancel_turn(self) -> None:
        """session/cancel for the prompt in flight (the client then answers `cancelled`)."""
        if self._conn is not None and self._session_id:
            await self._conn.cancel(session_id=self._session_id)

    def _waiting(self, call_id: str, tool: str, tool_input: dict[str, Any], call: ToolCall, asked: bool) -> None:
        """A call the turn stops before (see _client), as the gate sees it."""
        self._kinds[call_id] = call.kind
        defer_as_seen(self, call_id, tool, tool_input, call, asked=asked)

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, the ACP session id, the
        gate's "always" answers, the kinds of the calls that wait and the cost the agent reported.
        StoreError when it fails."""
        store = await backend_store(self)
        handle = await hold_paused(self, record, "acp", {"cost": self._tokens.reported_cost,
                                                         "kinds": dict(self._kinds)}, store=store)
        await keep_session(self, self._env, self._session_id, store)  # claude-agent-acp: Claude Code's session file
        return handle

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued in the loaded ACP session: the model is told the answers (an
        approved call is to be made again, a denied one not) and the turn goes on."""
        client = self._client
        assert self.gate is not None and client is not None
        own, pending = resume_paused(self, held, "acp")
        cost = own.get("cost")
        if isinstance(cost, int | float):
            self._tokens.carry_cost(float(cost))
        kinds = own.get("kinds") or {}
        by_call = {(p.tool, repr(sorted(p.input.items()))): p for p in pending}

        def to_call(tool: str, data: dict[str, Any]) -> ToolCall | None:
            waiting = by_call.get((tool, repr(sorted(data.items()))))
            if waiting is None:
                return None
            from agenter.backends.agents.acp._client import permission_call

            kind = kinds.get(waiting.id)
            acp_kind = {"shell": "execute", "edit": "edit", "read": "read", "network": "fetch"}.get(kind or "")
            update = SimpleNamespace(raw_input=data, title=waiting.command or "")
            return permission_call(update, acp_kind, list(waiting.paths), tool)

        prompt = await answer_paused(self, pending, answers, to_call, client.repeated)
        async for message in self._prompt_turn(prompt):
            yield message

    # ------------------------------------------------------------------ client hooks
    def _emit(self, message: BackendMessage) -> None:
        self._tokens.seen(message)
        self._queue.append(message)
        self._wakeup.set()

    def _file(self, path: str | None, *, read: int = 0, written: int = 0) -> None:
        if path is not None:
            self.track(written=[path])
        self._tokens.file_text(read=read, written=written)

    # ------------------------------------------------------------------ errors
    def _stderr_tail(self) -> str | None:
        process = self._process or self._last_process
        return process.stderr_tail() if process is not None else None

    async def _failure(self, what: str, exc: BaseException) -> BackendError:
        """A BackendError for a failed request: the agent's exit code and stderr tail when it died."""
        self._graceful = False
        detail = str(exc) or type(exc).__name__
        data = getattr(exc, "data", None)
        if data:
            detail = f"{detail}: {data}"
        kind = None
        code = getattr(exc, "code", None)
        # Some agents (Gemini CLI) answer a failed model call with its HTTP status as the code.
        status = code if isinstance(code, int) and 400 <= code < 600 else None
        process = self._process
        if process is not None and await process.wait_exit(1.0):
            detail = f"the agent process exited with code {process.returncode} ({detail})"
            kind = "agent_crash"
            await process.terminate(grace=0)  # the rest of its group; its stderr read to the end
        return BackendError(self.redact(f"{what}: {detail}"), backend=self.name,
                            stderr_tail=self._stderr_tail() or None, status_code=status, kind=kind)
