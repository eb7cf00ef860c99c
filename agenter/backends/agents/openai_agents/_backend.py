"""OpenAIAgentsBackend: the OpenAI Agents SDK's own agent loop (`Agent` + `Runner.run_streamed`)
driven in process, with agenter's tools, gate and sandbox.

One SDK `Agent` per session; each turn is one `Runner.run_streamed(agent, prompt, session=...)`
whose stream is translated as it comes (`_events`). The conversation is the SDK's `Session`
memory, kept in agenter's conversation store (`_session`) or in the SDK session object the user
passes, so every turn of a session (and the retry prompt with validation errors) continues it,
also from another process (`resume=` the session id).

Every tool the agent can call passes the permission gate before it runs: agenter's function
tools (`shell`, the file tools, custom tools) ask it in their handler, MCP tools in the server
wrapper (`_mcp`). A refused call is a tool result the model reads; the run goes on. With
sandbox=True the file tools stay inside the workspace and the shell runs in agenter's OS sandbox
(Landlock, bubblewrap or Seatbelt). A cancelled turn cancels the SDK's run and waits (bounded)
for it, so its tools and their processes end with the turn.

The gate decides a call of agenter's function tools before the SDK runs it, in the tool's
`needs_approval` check, so approvals that can wait (docs/approvals.md) are the SDK's own pause
(`_approvals`): a call the gate defers ends the run with it as an interruption and the turn
reports it pending; `hold` keeps the SDK's RunState (JSON) with the session's record in the pause
store (`conversation_store`), and a copy of the conversation (`_kept`), and a later process
continues that state with the person's answers (`continue_paused`): an approved call runs then,
once, with its real result. A process whose `openai_agents_store_dir` lacks the conversation
(another host) writes it there from the copy first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter.backends._confinement import session_confinement
from agenter.backends._failures import Failure, classify_failure, error_message, error_type, is_transport_error
from agenter.backends._pauses import (
    backend_store,
    hold_paused,
    no_pause_without_store,
    pending_call,
    resume_paused,
    store_for_pauses,
)
from agenter.backends._prompts import REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_NAME, REFUSAL_TOOL_SCHEMA
from agenter.backends.agents.openai_agents._approvals import Approvals, call_of
from agenter.backends.agents.openai_agents._events import SHELL_TOOL_NAME, ToolOutcome, ToolOutcomes, TurnEvents
from agenter.backends.agents.openai_agents._files import FILE_TOOLS, READ_FILE, FileTools
from agenter.backends.agents.openai_agents._options import OpenAIAgentsOptions
from agenter.backends.agents.openai_agents._tools import (
    BUILTIN_TOOL_NAMES,
    ENFORCED_KINDS,
    SHELL_SCHEMA,
    shell_description,
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
from agenter.host import reap
from agenter.host.redact import Redactor
from agenter.host.requirements import Credentials, PythonPackage, Requirement
from agenter.permissions import PermissionAnswer, PermissionDecision, ToolCall
from agenter.sandbox.commands import network_allowed, run_shell, shell_env, timeout_of
from agenter.sandbox.confine import (
    Confinement,
    ShellSandboxAvailable,
)

__all__ = ["OpenAIAgentsBackend"]

log = logging.getLogger("agenter.backends.agents.openai_agents")

MISSING_KEY = ("no OpenAI API key: set OPENAI_API_KEY or pass api_key=... (a server given by base_url needs none)")
#: Sent as the key to a server given by base_url when none is configured (the client needs one).
NO_KEY = "no-key"
#: Characters of a tool's answer the model reads; the middle of a longer one is cut.
MAX_RESULT_CHARS = 100_000
#: The prefix of this backend's shell options, for what to do when the shell's sandbox cannot run.
OPTION_PREFIX = "openai_agents"
INSTALL = "pip install 'agenter-sdk[openai-agents]'"


class OpenAIAgentsBackend(BaseBackend[OpenAIAgentsOptions]):
    """The OpenAI Agents SDK's agent loop; see docs/backends/openai-agents.md."""

    name: ClassVar[str] = "openai-agents"
    credentials: ClassVar[Credentials | None] = Credentials(env=("OPENAI_API_KEY",))
    # After the openai backend, which runs every mode on the same key and is installed wherever
    # this one is: `backend="auto"` prefers agenter's own, lighter agent; this one is chosen by name.
    auto_rank: ClassVar[int | None] = 95
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, custom_tools=True,
        mcp=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True, pause=True)
    options_model: ClassVar[type[OpenAIAgentsOptions]] = OpenAIAgentsOptions
    price_provider: ClassVar[str | None] = "openai"
    reserved_tool_names: ClassVar[frozenset[str]] = BUILTIN_TOOL_NAMES
    permission_kinds: ClassVar[frozenset[str]] = ENFORCED_KINDS

    def __init__(self, settings: BackendSettings[OpenAIAgentsOptions]):
        super().__init__(settings)
        self._custom = {tool.name: tool for tool in settings.tools}
        self._files: FileTools | None = None
        self._confinement: Confinement | None = None
        self._shell_env: dict[str, str] = {}
        self._run_dir: Path | None = None
        self._client: Any = None
        self._agent: Any = None
        self._run_config: Any = None
        self._session: Any = None
        self._mcp: Any = None  # the SDK's MCPServerManager
        self._mcp_marks: list[str] = []
        self._outcomes = ToolOutcomes()
        #: Tool calls running, each in a task of its own: the SDK cancels its tool tasks with a
        #: cancelled run without waiting for them, the turn waits for these.
        self._running: set[asyncio.Task[str]] = set()
        self._approvals = Approvals()
        #: The paused run's own part of its record (the SDK's RunState, the conversation's length).
        self._paused: dict[str, Any] = {}
        #: Items in the pause store's copy of the conversation, when this session kept or restored
        #: one (`_kept`): brought up to date when the session ends.
        self._copy: int | None = None

    # ------------------------------------------------------------------ configuration
    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs: list[Requirement] = [
            PythonPackage(module="agents", distribution="openai-agents", install=INSTALL),
            PythonPackage(module="openai", distribution="openai", install=INSTALL)]
        options = settings.options
        if settings.sandbox and getattr(options, "openai_agents_shell", True):
            needs.append(ShellSandboxAvailable(getattr(options, "openai_agents_shell_sandbox", "auto"), OPTION_PREFIX))
        return needs

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        options: OpenAIAgentsOptions = settings.options
        if _api_key(options) is None and not _base_url(options):
            raise ConfigurationError(MISSING_KEY, parameter="api_key")
        from agenter.backends._confinement import check_network_rules

        check_network_rules(settings, backend=cls.name, shell=options.openai_agents_shell,
                            shell_option="openai_agents_shell")
        no_pause_without_store(settings.on_ask, options.conversation_store)

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs."""
        options = settings.options if isinstance(settings.options, OpenAIAgentsOptions) else OpenAIAgentsOptions()
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
        self._files = FileTools(PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox))
        if not self.settings.sandbox:
            self.leave_confinement_to_the_sandbox()  # sandbox=False (and no policy): the tools may go anywhere
        if self.options.openai_agents_shell:
            await self._prepare_shell()
        # The SDK's first import takes seconds (openai, mcp, griffe): off the event loop.
        await asyncio.to_thread(importlib.import_module, "agents")
        from agenter.backends.agents.openai_agents import _setup

        key = _api_key(self.options)
        if key is None:
            if not _base_url(self.options):
                raise ConfigurationError(MISSING_KEY, parameter="api_key")
            key = NO_KEY
        else:
            self.redact.add(key)
        model_name = self.settings.model or _setup.default_model()
        self.ledger.model = model_name
        self._client = _setup.client(self.options, key)
        await asyncio.to_thread(_setup.warm, self._client, self.options.openai_agents_wire)
        servers = await self._start_mcp_servers()
        self._agent = _setup.agent(
            instructions=self.instructions(refusal_tool=REFUSAL_TOOL_NAME, output_channel="native"),
            tools=self._function_tools(_setup.function_tool), mcp_servers=servers,
            model=_setup.model(self.options, model_name, self._client),
            settings=_setup.model_settings(self.options, model_name), output_type=spec.output_type)
        self._run_config = _setup.run_config()
        self._session = await self._open_session(spec.resume_session_id, model_name)
        self._session_id = self._session.session_id

    async def _disconnect(self) -> None:
        await self._update_copy()
        manager, self._mcp = self._mcp, None
        if manager is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(manager.cleanup_all(), 15)
        for mark in self._mcp_marks:
            with contextlib.suppress(Exception):
                await reap(mark)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        run_dir, self._run_dir = self._run_dir, None
        if run_dir is not None:
            await asyncio.to_thread(shutil.rmtree, run_dir, True)

    async def _prepare_shell(self) -> None:
        self._shell_env = shell_env()
        gate = self.gate
        assert gate is not None
        # The gate's first shell command loads its parser (bashlex): in a thread, not in the turn.
        await asyncio.to_thread(gate.evaluate, ToolCall(kind="shell", name=SHELL_TOOL_NAME, command="true"))
        if not self.settings.sandbox:
            return
        self._run_dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="agenter-openai-agents-"))
        tmpdir = self._run_dir / "tmp"
        await asyncio.to_thread(tmpdir.mkdir, 0o700)
        self._confinement = await session_confinement(
            gate, cwd=self.cwd, prefer=self.options.openai_agents_shell_sandbox,
            network=network_allowed(self.settings.permissions), read_only=self.read_only_session, tmpdir=str(tmpdir),
            keep=[str(self._run_dir)], env=self._shell_env, backend=self.name, prefix=OPTION_PREFIX)

    async def _start_mcp_servers(self) -> list[Any]:
        if not self.options.mcp_servers:
            return []
        from agents.mcp import MCPServerManager

        from agenter.backends.agents.openai_agents._mcp import build_servers

        servers, self._mcp_marks = build_servers(self.options.mcp_servers, self.permit, str(self.cwd))
        self._mcp = MCPServerManager(servers, strict=True, connect_in_parallel=True)
        try:
            await self._mcp.connect_all()
        except Exception as exc:  # noqa: BLE001 - any failure to start is the user's configuration
            raise BackendError(self.redact(f"an MCP server could not start: {type(exc).__name__}: {exc}"),
                               backend=self.name, kind="config") from None
        return servers

    async def _open_session(self, resume: str | None, model_name: str) -> Any:
        """The SDK session the turns run in: the user's, or one of agenter's conversation store."""
        given = self.options.openai_agents_session
        if given is not None:
            if resume and resume != given.session_id:
                raise ConfigurationError(
                    f"resume={resume!r} names another conversation than openai_agents_session "
                    f"({given.session_id!r}); pass one of them", parameter="resume")
            return given
        from agenter.backends.agents.openai_agents._session import StoredSession
        from agenter.store import FileConversationStore, check_session_id

        store = FileConversationStore(self.options.openai_agents_store_dir, redact=self.redact)
        metadata = {"backend": self.name, "model": model_name, "wire": self.options.openai_agents_wire}
        if resume is None:
            return StoredSession(store, uuid.uuid4().hex, metadata)
        session = StoredSession(store, check_session_id(resume, self.redact), metadata)
        if not await session.exists() and not await self._restore_conversation(session):
            raise BackendError(f"no conversation {resume!r} to resume in {store.root} (nor in conversation_store, "
                               "where a paused run keeps it)", backend=self.name, kind="config")
        return session

    # ------------------------------------------------------------------ the turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        self._approvals.begin()
        async for message in self._run(prompt, self._events()):
            yield message

    def _events(self) -> TurnEvents:
        return TurnEvents(self._outcomes, settle=self._settle, refused=self._model_refused)

    async def _run(self, run_input: Any, events: TurnEvents) -> AsyncIterator[BackendMessage]:
        """The SDK's run from `run_input` (the prompt, or a RunState going on from a pause), its
        stream translated; it ends answered, or paused at calls that wait (`_pause_here`)."""
        from agents import Runner
        from agents.exceptions import MaxTurnsExceeded, ModelRefusalError

        while True:
            result = Runner.run_streamed(self._agent, run_input, max_turns=self.options.openai_agents_max_turns,
                                         run_config=self._run_config, session=self._session)
            try:
                async for event in result.stream_events():
                    for message in events.event(event):
                        yield message
            except MaxTurnsExceeded:
                limit = self.options.openai_agents_max_turns
                yield BackendMessage(MessageType.STATUS,
                                     f"the turn stopped after {limit} model responses (openai_agents_max_turns)")
                break
            except ModelRefusalError as exc:  # the model refused instead of answering: a refusal, not a failure
                self._model_refused(str(exc) or "The model refused.")
                break
            except Exception as exc:  # noqa: BLE001 - every failure of the run becomes a BackendError
                raise self._failure(exc) from None
            finally:
                await self._stop(result)
            strays = self._approvals.strays(result.interruptions)
            if not strays:
                break
            run_input = result.to_state()  # the SDK stopped at calls it could not read: let them run
            for item in strays:
                run_input.approve(item)
        for message in events.flush():
            yield message
        if result.interruptions:
            yield await self._pause_here(result)
            return
        self._conclude(result.final_output, events.final_text)

    async def _stop(self, result: Any) -> None:
        """End the SDK's run (a cancelled or closed turn) and wait, bounded, for its tasks: the
        tools it runs (and their processes) end before the turn's last snapshot."""
        if not result.is_complete:
            result.cancel()
        waiting = {task for task in (result.run_loop_task, *self._running) if task is not None and not task.done()}
        if waiting:
            with contextlib.suppress(BaseException):
                await asyncio.wait(waiting, timeout=self.settle_seconds)
            for _ in range(3):  # the SDK's wrappers of the tool tasks finish on the next iterations
                await asyncio.sleep(0)
        self._outcomes.clear()

    def _conclude(self, final: Any, text: str) -> None:
        output_type = self.spec.output_type
        if output_type is not None and isinstance(final, BaseModel):
            self.accept_output(final.model_dump())
        self.refuse_from_text(text)

    # ------------------------------------------------------------------ approvals that can wait
    async def _needs_approval(self, name: str, context: Any, arguments: dict[str, Any], call_id: str) -> bool:
        """The SDK's check before it runs a call: the gate decides it now (the handler takes the
        decision); True for a call the gate defers and for the calls after it in the response."""
        call = tool_call(name, arguments, self._custom)
        if self._approvals.stopped:
            self._waits(call_id, name, arguments, call, asked=False)
            return True
        if call is None:
            return False
        decision = await self.permit(call, defer=True)
        if decision.behavior == "defer":
            self._waits(call_id, name, arguments, call, asked=True)
            return True
        self._approvals.decided(call_id, decision)
        return False

    def _waits(self, call_id: str, name: str, arguments: Any, call: ToolCall | None, *, asked: bool) -> None:
        """A call that waits for a person: the one the gate deferred (`asked`), or one after it in
        the same response (it needs approval when the gate would ask about it too)."""
        gate = self.gate
        verdict = gate.evaluate(call) if gate is not None and call is not None else None
        self._approvals.wait(pending_call(call_id, name, arguments, call, verdict,
                                          needs_approval=asked or (verdict is not None and verdict.behavior == "ask")))

    async def _pause_here(self, result: Any) -> BackendMessage:
        """End the turn at the calls the SDK's run stopped before: the turn reports them (the
        session pauses the run) and the SDK's state is kept for `hold`."""
        pending = self._approvals.pending(result.interruptions)
        try:
            state = result.to_state().to_json()
        except Exception as exc:  # noqa: BLE001 - a state the SDK cannot write is a failure of the run
            raise self._failure(exc) from None
        self._paused = {"run_state": state, "items": len(await self._session.get_items())}
        self.defer_calls(pending)
        asking = [call for call in pending if call.needs_approval]
        return BackendMessage(MessageType.STATUS, content=(
            f"paused: {len(asking)} call(s) wait for a person's approval ({asking[0].tool}: {asking[0].reason})"
            if asking else f"paused: {len(pending)} call(s) wait"), details={"pending": [c.id for c in pending]})

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, the SDK's RunState, the
        conversation's length when it paused, the gate's "always" answers and a copy of the
        conversation (`_kept`), from which a process with another openai_agents_store_dir
        continues it. StoreError when it fails."""
        store = await backend_store(self)
        if store is not None:
            await self._keep_conversation(store)
        return await hold_paused(self, record, "openai_agents", self._paused, store=store)

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused run, continued from the SDK's state: each waiting call decided with the
        person's answer (without one, as usual), the calls that are to run approved in the state,
        then the SDK goes on: they run, and the model's next request has their results."""
        from agents import RunState

        gate = self.gate
        assert gate is not None
        own, _ = resume_paused(self, held, "openai_agents")
        count = own.get("items")
        if isinstance(count, int) and len(await self._session.get_items()) < count:
            await self._catch_up(count)
        have = len(await self._session.get_items())
        if count != have:
            how = ("is behind the paused run (it went on elsewhere, and conversation_store keeps no copy of it to "
                   "catch up from)" if isinstance(count, int) and have < count else "went on after the run paused")
            raise ConfigurationError(f"the conversation {self.session_id!r} {how}, so the paused calls cannot be "
                                     "answered", parameter="handle")
        kept = own.get("run_state")
        try:
            if not isinstance(kept, dict):
                raise ValueError("the record holds no RunState")
            state = await RunState.from_json(self._agent, kept)
        except Exception as exc:  # noqa: BLE001 - a state this agent cannot read back
            raise ConfigurationError(self.redact(f"the paused run's state cannot be continued by this agent: "
                                                 f"{type(exc).__name__}: {exc}"), parameter="handle") from None
        self._approvals.begin()
        events = self._events()
        for item in state.get_interruptions():
            if await self._answer(item, answers):
                state.approve(item)
                for message in events.resumed(item.raw_item):
                    yield message
        async for message in self._run(state, events):
            yield message

    # ------------------------------------------------------------------ the conversation's copy
    def _stored_session(self) -> Any:
        """The session when it is one of agenter's store (None: the user's own SDK session, which
        the backend neither copies nor restores)."""
        from agenter.backends.agents.openai_agents._session import StoredSession

        return self._session if isinstance(self._session, StoredSession) else None

    async def _keep_conversation(self, store: Any) -> None:
        """Keep the conversation as it is now in the pause store (`_kept`)."""
        from agenter.backends.agents.openai_agents._kept import keep_conversation

        session = self._stored_session()
        if session is None:
            return
        items = await session.get_items()
        if await asyncio.to_thread(keep_conversation, store, session.session_id, items):
            self._copy = len(items)
        else:
            log.warning("%s: session id %r is too long to keep its conversation in the store; only a process with "
                        "this openai_agents_store_dir can approve the paused run", self.name, session.session_id)

    async def _restore_conversation(self, session: Any) -> bool:
        """Write the conversation the pause store keeps for this session into the backend's own
        store, which has none (another host paused the run); False when the pause store keeps none."""
        from agenter.backends.agents.openai_agents._kept import restore_conversation
        from agenter.store import ConversationConflictError, StoreError

        try:
            pauses = await backend_store(self)
            count = None if pauses is None else await asyncio.to_thread(
                restore_conversation, pauses, session.store, session.session_id, session.metadata)
        except ConversationConflictError:
            return True  # another process wrote it meanwhile: that one is used
        except StoreError as exc:
            raise self._unreadable_copy(session.session_id, exc) from None
        if count is None:
            return False
        self._copy = count
        return True

    async def _catch_up(self, count: int) -> None:
        """The conversation is behind the paused run (it went on and paused on another host): bring
        it up to `count` items from the pause store's copy, when it is that copy's beginning."""
        from agenter.backends.agents.openai_agents._kept import catch_up
        from agenter.store import ConversationConflictError, StoreError

        session = self._stored_session()
        if session is None:
            return
        try:
            pauses = await backend_store(self)
            if pauses is not None and await asyncio.to_thread(catch_up, pauses, session.store, session.session_id,
                                                              count):
                self._copy = count
        except ConversationConflictError:
            pass  # written meanwhile by another writer: the length check decides
        except StoreError as exc:
            raise self._unreadable_copy(session.session_id, exc) from None

    def _unreadable_copy(self, session_id: str, exc: Exception) -> BackendError:
        """The pause store's copy of the conversation could not be read (`_restore_conversation`,
        `_catch_up`)."""
        return BackendError(self.redact(f"the conversation {session_id!r} kept in conversation_store cannot be read: "
                                        f"{exc}"), backend=self.name, kind="config")

    async def _update_copy(self) -> None:
        """Bring the pause store's copy up to date when the session ends (items were added since
        it kept or restored it), so a later resume elsewhere gets the whole conversation. A
        failure is logged: the conversation itself is safe in this host's store."""
        from agenter.backends.agents.openai_agents._kept import keep_conversation
        from agenter.store import StoreError

        session = self._stored_session() if self._copy is not None else None
        if session is None:
            return
        try:
            items = await session.get_items()
            store = await backend_store(self) if len(items) != self._copy else None
            if store is not None:
                await asyncio.to_thread(keep_conversation, store, session.session_id, items)
                self._copy = len(items)
        except (StoreError, OSError) as exc:
            log.warning("%s: the copy of the conversation in conversation_store could not be brought up to date: %s",
                        self.name, self.redact(str(exc)))

    async def _answer(self, item: Any, answers: dict[str, str]) -> bool:
        """Decide one waiting call of a continued run (see `_continue_paused`); False when it waits
        again (no answer, and the gate defers it again; or a call before it does)."""
        call_id, name, arguments = call_of(item)
        call = tool_call(name, arguments, self._custom) if isinstance(arguments, dict) else None
        if self._approvals.stopped:
            self._waits(call_id, name, arguments, call, asked=False)
            return False
        if call is None:
            return True  # the refusal tool, or arguments that are not an object: its handler answers
        answer = answers.get(call_id)
        decision: PermissionDecision
        if answer in ("allow", "always"):
            if answer == "always" and self.gate is not None:
                self.gate.approve_always(call)
            decision = await self.permit(call, answer=PermissionAnswer(True))
        elif answer == "deny":
            decision = await self.permit(call, answer=PermissionAnswer(False))
        else:
            decision = await self.permit(call, defer=True)
            if decision.behavior == "defer":
                self._waits(call_id, name, arguments, call, asked=True)
                return False
        self._approvals.decided(call_id, decision)
        return True

    def _settle(self, usage: Usage, model: str | None) -> None:
        self.ledger.settle(usage)

    def _model_refused(self, reason: str) -> None:
        if self.refusal() is None:
            self.refuse({"reason": reason})

    # ------------------------------------------------------------------ tools
    def _function_tools(self, make: Any) -> list[Any]:
        """The SDK function tools: the shell, the file tools (read only in a read-only session),
        the custom tools and the refusal tool."""
        read_only = self.read_only_session
        tools = []
        if self.options.openai_agents_shell:
            description = shell_description(sandbox=self.settings.sandbox, network=network_allowed(
                self.settings.permissions), read_only=read_only, timeout=self.options.openai_agents_shell_timeout)
            tools.append((SHELL_TOOL_NAME, description, SHELL_SCHEMA))
        tools += [(name, *FILE_TOOLS[name]) for name in FILE_TOOLS if name == READ_FILE or not read_only]
        tools += [(tool.name, tool.description, tool.input_schema) for tool in self.settings.tools]
        tools.append((REFUSAL_TOOL_NAME, REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_SCHEMA))
        return [make(name, description, schema, functools.partial(self._call, name),
                     functools.partial(self._needs_approval, name)) for name, description, schema in tools]

    async def _call(self, name: str, call_id: str, arguments: Any) -> str:
        """One tool call of the agent, in a task the turn can wait for (cancelling the SDK's task
        that awaits it cancels it too)."""
        task = asyncio.ensure_future(self._run_call(name, call_id, arguments))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await task

    async def _run_call(self, name: str, call_id: str, arguments: Any) -> str:
        """The gate first, then the tool; never raises for the tool's own failure (the model
        reads it)."""
        if not isinstance(arguments, dict):
            self._outcomes.record(call_id, ToolOutcome(is_error=True))
            return f"Could not run {name}: its arguments must be a JSON object. Call it again with one."
        if name == REFUSAL_TOOL_NAME:
            return self.refuse(arguments).text
        call = tool_call(name, arguments, self._custom)
        if call is not None:
            # Decided before the SDK ran it (`_needs_approval`, or the answer of a continued run).
            decision = self._approvals.take(call_id)
            if decision is None:
                decision = await self.permit(call)
            if not decision.allowed:
                self._outcomes.record(call_id, ToolOutcome(is_error=True))
                return decision.reason
        if name == SHELL_TOOL_NAME:
            text, outcome = await self._shell(arguments)
        elif name in FILE_TOOLS:
            text, outcome = await self._file(name, arguments)
        else:
            reply = await self.run_tool(self._custom[name], arguments)
            text, outcome = reply.text, ToolOutcome(is_error=reply.is_error)
        self._outcomes.record(call_id, outcome)
        return _capped(text or f"({name} completed with no output)")

    async def _shell(self, arguments: dict[str, Any]) -> tuple[str, ToolOutcome]:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return "'command' must be a non-empty string", ToolOutcome(is_error=True)
        timeout = timeout_of(arguments, self.options.openai_agents_shell_timeout)
        result = await run_shell(command, cwd=self.cwd, timeout=timeout, sandbox=self._confinement,
                                 env=self._shell_env)
        # What a command prints goes to the model: keys it finds are hidden like everywhere else.
        return self.redact(result.text), ToolOutcome(is_error=result.is_error, exit_code=result.exit_code)

    async def _file(self, name: str, arguments: dict[str, Any]) -> tuple[str, ToolOutcome]:
        files = self._files
        assert files is not None
        # A tracked thread: a turn cancelled meanwhile waits for it before its last snapshot.
        outcome = await self.in_thread_named(name, files.run, name, arguments)
        self.track(written=sorted(outcome.written), deleted=sorted(outcome.deleted))
        edits = [(path, added, removed) for path, (added, removed) in outcome.edits.items()]
        return self.redact(outcome.text), ToolOutcome(is_error=outcome.is_error, edits=edits)

    # ------------------------------------------------------------------ failures
    def _failure(self, exc: BaseException) -> BackendError:
        """An exception of the SDK's run as a BackendError of the right kind (`_failures`)."""
        if isinstance(exc, BackendError):
            return exc
        status = getattr(exc, "status_code", None)
        if isinstance(status, int):
            response = getattr(exc, "response", None)
            failure = Failure(error_message(exc), status=status, headers=getattr(response, "headers", None),
                              error_type=error_type(getattr(exc, "body", None)))
        elif type(exc).__name__ in ("APIConnectionError", "APITimeoutError") or is_transport_error(exc):
            failure = Failure(str(exc) or type(exc).__name__, connection=True)
        elif type(exc).__name__ == "UserError":
            return BackendError(self.redact(f"the OpenAI Agents SDK refused the agent: {exc}"), backend=self.name,
                                kind="config")
        else:
            return BackendError(self.redact(f"the OpenAI Agents SDK's run failed: {type(exc).__name__}: {exc}"),
                                backend=self.name, kind="unknown")
        verdict = classify_failure(failure)
        where = f"HTTP {status}" if isinstance(status, int) else "no answer"
        return BackendError(self.redact(f"the model call failed ({where}): {failure.message}"), backend=self.name,
                            status_code=status if isinstance(status, int) else None, kind=verdict.kind)


def _api_key(options: OpenAIAgentsOptions) -> str | None:
    if options.api_key is not None:
        return options.api_key.get_secret_value()
    return os.environ.get("OPENAI_API_KEY") or None


def _base_url(options: OpenAIAgentsOptions) -> str | None:
    return options.base_url or os.environ.get("OPENAI_BASE_URL") or None


def _capped(text: str) -> str:
    """At most MAX_RESULT_CHARS: the start and the end of a longer text, the middle cut."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    half = MAX_RESULT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut ...]\n{text[-half:]}"
