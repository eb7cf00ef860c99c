"""CodexBackend: OpenAI's Codex agent driven through `codex app-server` (JSON-RPC over stdio).

One backend instance = one `codex app-server` process = one Codex thread; every turn is a turn
on that thread, so retries continue the same conversation. What Codex refuses without asking
agenter (a patch outside the project under its own approval policy, a command its rules
forbid) reaches no notification: it is read from the thread's rollout file when a turn ends.

Approvals that can wait (docs/approvals.md): a call the gate defers is answered "cancel", and
Codex ends the turn there (`_permissions`); the turn reports it pending. `hold` keeps the session's
record with the thread id in the pause store (shared with the other pausing backends in
`backends/_pauses.py`), and with a private CODEX_HOME the thread itself (`_threads`); a later
process resumes the thread, and `continue_paused` tells the model the person's answers and asks it
to make an approved call again, which the gate then lets through with that answer. Codex reports
the thread's cumulative usage, the paused run's included, so the continued run counts from the
total it had when it paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter._version import __version__
from agenter.backends._failures import classify
from agenter.backends._pauses import (
    answer_paused,
    backend_store,
    defer_as_seen,
    hold_paused,
    no_pause_without_store,
    resume_paused,
    store_for_pauses,
)
from agenter.backends._programs import codex as _codex_program
from agenter.backends._programs.codex import CREDENTIALS as CODEX_CREDENTIALS
from agenter.backends._programs.codex import Refusals, RolloutTail, response_item
from agenter.backends._prompts import REFUSAL_TOOL_NAME, output_schema, strict_schema
from agenter.backends._steer import EMPTY, IDLE, undelivered
from agenter.backends.agents.codex import _events, _setup, _threads
from agenter.backends.agents.codex._options import CodexOptions
from agenter.backends.agents.codex._permissions import (
    ENFORCED_KINDS,
    Answering,
    Approvals,
    Decision,
    Pausing,
    gate_call,
    gated_tool,
)
from agenter.backends.agents.codex._rpc import AppServerConnection, Closed, Notification
from agenter.backends.agents.codex._steering import Steering
from agenter.backends.agents.codex._tools_server import SERVER_NAME, TOKEN_ENV_VAR, ToolsServer
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.host import AgentProcess, Redactor, Requirement
from agenter.host.requirements import Credentials
from agenter.permissions import ToolCall
from agenter.usage import RunningTotal

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["CodexBackend"]

log = logging.getLogger("agenter.backends.agents.codex")

#: Seconds for one JSON-RPC request (initialize, thread/start, turn/start) to be answered.
REQUEST_TIMEOUT = 60.0
#: Synthetic notification the approvals queue to report their decisions in turn order.
DECISION_EVENT = "agenter/decision"
#: Synthetic notification session.steer queues to wake the turn: a message is waiting.
STEER_EVENT = "agenter/steer"
#: The refusal tool as the model finds it: through tool_search, in the MCP server's namespace.
REFUSAL_TOOL = f"mcp__{SERVER_NAME}.{REFUSAL_TOOL_NAME}"


class CodexBackend(BaseBackend[CodexOptions]):
    """Codex through `codex app-server`: one process and one Codex thread per session."""

    name: ClassVar[str] = "codex"
    credentials: ClassVar[Credentials | None] = CODEX_CREDENTIALS
    auto_rank: ClassVar[int | None] = 20
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, native_tool_loop=True, mcp=True, filesystem_read=True,
        filesystem_edit=True, shell=True, apply_patch=True, custom_tools=True, structured_output=True,
        resume=True, sandbox=True, steering=True, pause=True)
    options_model: ClassVar[type[BackendOptions]] = CodexOptions
    price_provider: ClassVar[str | None] = "openai"
    permission_kinds: ClassVar[frozenset[str]] = ENFORCED_KINDS

    def __init__(self, settings: BackendSettings[CodexOptions]):
        super().__init__(settings)
        # Known before connect when the model is chosen here or in config; else at thread/start.
        self.ledger.model = settings.model or _setup.configured_model(self.options)
        self._session_dir: Path | None = None
        self._process: AgentProcess | None = None
        self._conn: AppServerConnection | None = None
        self._tools_server: ToolsServer | None = None
        self._thread_usage = RunningTotal()
        self._stream = _events.ItemStream(self.redact)
        self._rollout: RolloutTail | None = None
        self._refusals = Refusals()
        #: session.steer's messages (see _steering), and whether a turn runs to take them.
        self._steering = Steering()
        self._in_turn = False
        self._turn_id: str | None = None
        #: Where a call the gate defers stops the turn (see _permissions), set at connect.
        self._pausing: Pausing | None = None
        #: The private CODEX_HOME (None with the user's codex_home), and whether the pause store
        #: keeps this thread (`_threads`: the copy is brought up to date when the session ends).
        self._private_home: Path | None = None
        self._thread_kept = False
        #: The thread's cumulative usage as Codex last reported it (kept with a paused run).
        self._thread_total: Usage | None = None

    # ------------------------------------------------------------------ settings
    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        return _setup.requirements(settings)

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        options: CodexOptions = settings.options
        if options.codex_home is not None and not Path(options.codex_home).expanduser().is_dir():
            raise ConfigurationError(f"codex_home {str(options.codex_home)!r} is not a directory",
                                     parameter="codex_home")
        if options.codex_model_provider and (options.base_url or options.api_key):
            raise ConfigurationError("codex_model_provider uses a provider from codex_home's config.toml; "
                                     "do not combine it with base_url or api_key",
                                     parameter="codex_model_provider")
        if options.codex_model_provider and options.codex_home is None:
            raise ConfigurationError("codex_model_provider names a provider in your own config.toml, so "
                                     "it needs codex_home", parameter="codex_model_provider")
        if _setup.uses_own_provider(options) and not _setup.api_key(options, {**os.environ, **options.env}):
            raise ConfigurationError(_setup.MISSING_KEY, parameter="api_key")
        no_pause_without_store(settings.on_ask, options.conversation_store)

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs (and their threads)."""
        options = settings.options if isinstance(settings.options, CodexOptions) else CodexOptions()
        return store_for_pauses(options.conversation_store, log_dir, Redactor(options.env, extra=options.secrets()))

    @property
    def app_server_pid(self) -> int | None:
        """Pid of the running `codex app-server` process (None when none runs)."""
        return self._process.pid if self._process is not None else None

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        options = self.options
        env = {**os.environ, **self.trace_env()}  # TRACEPARENT: the session's span
        env.update(options.env)
        api_key = _setup.api_key(options, env)
        if _setup.uses_own_provider(options) and not api_key:
            # The environment changed since the facade checked it: fail before Codex starts.
            raise BackendError(_setup.MISSING_KEY, backend=self.name, kind="auth")
        self._session_dir = Path(tempfile.mkdtemp(prefix="agenter-codex-"))
        private_tmp = self._session_dir / "tmp"
        private_tmp.mkdir()
        bin_dir = self._session_dir / "bin"
        codex_home = (Path(options.codex_home).expanduser().resolve() if options.codex_home
                      else self._session_dir / "home")
        codex_home.mkdir(parents=True, exist_ok=True)
        env["CODEX_HOME"] = str(codex_home)
        # Sandboxed commands may write here and in cwd only: /tmp itself stays read-only.
        env["TMPDIR"] = str(private_tmp)
        if api_key:
            env[_codex_program.API_KEY_ENV_VAR] = api_key
            self.redact.add(api_key)
        codex = _setup.find_codex(options.program_path, self.cwd, env, backend=self.name)
        codex = _codex_program.direct_program(codex, env)

        probe: asyncio.Future[None] | None = None
        if self.settings.sandbox:
            if _codex_program.sandbox_bin(codex, bin_dir, env, backend=self.name) is not None:
                env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
            # The sandbox check runs while the app server starts (a process of its own, with an
            # empty private CODEX_HOME: the app server's config.toml is being written meanwhile);
            # the session is ready only once both are done.
            probe_env = dict(env)
            if options.codex_home is None:
                probe_env["CODEX_HOME"] = str(self._session_dir / "probe-home")
                os.mkdir(probe_env["CODEX_HOME"])
            probe = asyncio.ensure_future(_codex_program.check_sandbox(codex, probe_env, self._session_dir,
                                                               backend=self.name))
        try:
            await self._start(spec, codex, env, codex_home, private_tmp)
        except BaseException:
            if probe is not None:  # let it end its process; its verdict no longer matters
                with contextlib.suppress(BaseException):
                    await asyncio.shield(probe)
            raise
        if probe is not None:
            await probe

    async def _start(self, spec: SessionSpec, codex: str, env: dict[str, str], codex_home: Path,
                     private_tmp: Path) -> None:
        """Start `codex app-server` and its thread (a new one, or the one resumed)."""
        options = self.options
        if options.codex_home is None:
            self._private_home = codex_home
            await _setup.seed_home(codex, codex_home, env)
            if spec.resume_session_id:
                await self._restore_thread(spec.resume_session_id, codex_home)
        # Under the gated approval policy Codex asks before every command, but its request does
        # not say whether the model asked to leave the sandbox, and an approved escalation runs
        # unsandboxed. So with sandbox=True and no policy given, keep Codex's own policy: it asks
        # only to escalate, and agenter always declines, so the sandbox stays closed. An explicit
        # policy (or sandbox=False, where nothing is sandboxed anyway) puts every command before
        # the gate (docs/backends/codex.md: the caveat for allowed commands).
        gated = self.settings.permissions is not None or not self.settings.sandbox
        pausing = self._pausing = Pausing(self.permit, self._waiting)
        approvals = Approvals(policy=options.codex_approval_policy, sandbox=self.settings.sandbox,
                              cwd=self.cwd, writable_roots=[self.cwd, private_tmp], report=self._report_decision,
                              permit=self.permit if gated else None, explain=self._explain, pausing=pausing)
        self.leave_confinement_to_the_sandbox()
        if self.settings.tools:
            run = gated_tool(self.run_tool, self.permit, pausing=pausing, stop=self._interrupt)
            self._tools_server = await ToolsServer.start(self.settings.tools, run, self.refuse)
            env[TOKEN_ENV_VAR] = self._tools_server.token

        config = _setup.codex_config(options, model=self.settings.model, sandbox=self.settings.sandbox,
                                     tools_url=self._tools_server.url if self._tools_server else None)
        command = [codex, "app-server"]
        if options.codex_home is None:
            (codex_home / "config.toml").write_text(_setup.render_toml(config))
        else:
            command += _setup.config_overrides(config)
        self._process = await AgentProcess.start(command, cwd=self.cwd, env=env, stdin_pipe=True)

        def observe(notification: Notification) -> None:
            approvals.observe(notification)
            pausing.observe(notification)

        self._conn = Answering(self._process, approvals.answer, observe, backend=self.name, redact=self.redact)

        await self._conn.request("initialize", {
            "clientInfo": {"name": "agenter", "title": "agenter", "version": __version__},
        }, REQUEST_TIMEOUT)
        self._conn.notify("initialized")
        thread_params: dict[str, Any] = {
            "cwd": str(self.cwd),
            "approvalPolicy": approvals.thread_policy,
            "sandbox": "workspace-write" if self.settings.sandbox else "danger-full-access",
            "developerInstructions": self.instructions(
                refusal_tool=REFUSAL_TOOL if self._tools_server else None, output_channel="native"),
        }
        if self.settings.model:
            thread_params["model"] = self.settings.model
        if spec.resume_session_id:
            # excludeTurns: the thread's turns are not needed (Codex 0.169 warns that hydrating them is deprecated).
            result = await self._conn.request(
                "thread/resume", {"threadId": spec.resume_session_id, "excludeTurns": True, **thread_params},
                REQUEST_TIMEOUT)
        else:
            result = await self._conn.request("thread/start", thread_params, REQUEST_TIMEOUT)
        self._session_id = result["thread"]["id"]
        self.ledger.model = result.get("model") or self.ledger.model
        rollout = result["thread"].get("path")
        # From its end: a resumed thread's earlier records are earlier runs'.
        self._rollout = RolloutTail(Path(rollout)) if isinstance(rollout, str) and rollout else None

    async def _disconnect(self) -> None:
        conn, process, server = self._conn, self._process, self._tools_server
        self._conn = self._process = self._tools_server = None
        if process is not None:
            stdin = process.process.stdin
            if stdin is not None:
                with contextlib.suppress(Exception):
                    stdin.close()
            await process.terminate(grace=2.0)
        if conn is not None:
            await conn.aclose()
        if server is not None:
            await server.stop()
        if self._thread_kept:  # the stored copy goes on from where this session left it
            try:
                await self._keep_thread()
            except Exception as exc:  # noqa: BLE001 - the session's own outcome stands
                log.warning("codex: the thread kept in the conversation store could not be updated: %s",
                            self.redact(str(exc)))
        if self._session_dir is not None:  # private CODEX_HOME, TMPDIR and bin dir
            shutil.rmtree(self._session_dir, ignore_errors=True)
        self._session_dir = None

    # ------------------------------------------------------------------ one turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        conn = self._conn
        if conn is None or self._session_id is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        params: dict[str, Any] = {"threadId": self._session_id,
                                  "input": [{"type": "text", "text": prompt, "text_elements": []}]}
        if self.spec.output_type is not None:
            params["outputSchema"] = strict_schema(output_schema(self.spec.output_type))
        if self.options.codex_reasoning_effort:
            params["effort"] = self.options.codex_reasoning_effort
        final_text = ""
        turn_id: str | None = None
        finished = interrupted = False
        failure: _events.TurnFailure | None = None
        self._stream.start_turn()
        self._steering.start_turn()
        pausing = self._pausing
        if pausing is not None:
            pausing.begin_turn()
        self._in_turn = True
        try:
            result = await conn.request("turn/start", params, REQUEST_TIMEOUT)
            turn_id = self._turn_id = (result.get("turn") or {}).get("id")
            for message in await self._send_steers(conn, turn_id):  # taken while turn/start was answered
                yield message
            while not finished:
                event = await conn.events.get()
                if isinstance(event, Closed):
                    raise BackendError(f"Codex stopped mid-turn: {event.reason}", backend=self.name,
                                       stderr_tail=self._stderr_tail(), kind="agent_crash")
                method, data = event.method, event.params
                if method == "thread/tokenUsage/updated":
                    # Codex reports usage apart from any item: say so, so budgets see it now.
                    if data.get("threadId") in (None, self._session_id):
                        self._stream.observe_usage(data)
                        for message in self._steering.model_moved():  # a model call after the steers
                            yield message
                    note = self._record_usage(data)
                    if note:
                        yield BackendMessage(MessageType.STATUS, note)
                    continue
                if method == DECISION_EVENT:
                    yield BackendMessage(MessageType.STATUS, data["text"], is_error=data["declined"])
                    continue
                if method == STEER_EVENT:
                    for message in await self._send_steers(conn, turn_id):
                        yield message
                    continue
                if data.get("threadId") not in (None, self._session_id):
                    continue
                event_turn = data.get("turnId") or (data.get("turn") or {}).get("id")
                if turn_id and event_turn and event_turn != turn_id:
                    continue  # a late notification of an earlier turn
                if method == "turn/completed":
                    finished = True
                    for message in self._stream.flush():
                        yield message
                    turn = data.get("turn") or {}
                    final_text = _events.final_text(turn) or final_text
                    ended_here = (interrupted and self.refusal()) or self._paused()  # agenter ended it
                    if turn.get("status") != "completed" and not ended_here:
                        failure = _events.turn_failure(turn, _setup.model_server(self.options))
                    continue
                item = data.get("item") or {}
                if method == "item/started" and item.get("type") != "userMessage":
                    for message in self._steering.model_moved():  # the model answers after the steers
                        yield message
                if method == "item/completed":
                    self._steering.completed(item)
                if method == "item/completed" and item.get("type") == "agentMessage":
                    final_text = item.get("text") or final_text
                if method == "item/completed" and item.get("type") == "fileChange":
                    written, deleted = _events.changed_paths(item)
                    self.track(written=written, deleted=deleted)
                for message in self._stream.messages(method, data):
                    if message.type is MessageType.FILE_EDIT and message.details:
                        # Codex names files absolutely: the event names them in the workspace.
                        path = message.details["path"]
                        message.details["path"] = self.relative(path) or path
                    yield message
                if not interrupted and self.refusal() is not None and turn_id:
                    # The refusal tool was called: the task ends here, no further model call.
                    interrupted = True
                    conn.send_nowait("turn/interrupt", {"threadId": self._session_id, "turnId": turn_id})
            self._in_turn = False
            for message in self._steering.unrecorded():
                yield message
        finally:
            self._in_turn = False
            self._turn_id = None
            if pausing is not None:
                pausing.end_turn()
            if not finished and not interrupted and turn_id and conn.closed is None:
                conn.send_nowait("turn/interrupt", {"threadId": self._session_id, "turnId": turn_id})
            self._name_refusals()
        if not self._paused():  # a paused turn has no answer yet: it goes on when approved
            self._finish_turn(final_text, failure)

    def steer(self, text: str) -> str | None:
        """Take a user message for the running turn. The turn sends it to Codex as `turn/steer`,
        Codex's own way to add input to a turn in flight; Codex gives it to the model with its
        next request (after the tool calls running now, with their results), in the same turn and
        context. A STEERED message reports it where Codex recorded it; a STATUS names one Codex
        refused or never recorded (the turn was ending). Between turns there is no turn to steer."""
        if not isinstance(text, str) or not text.strip():
            return EMPTY
        conn = self._conn
        if not self._in_turn or conn is None or conn.closed is not None:
            return IDLE
        self._steering.waiting.append(text)
        conn.events.put_nowait(Notification(STEER_EVENT, {}))  # wakes the turn's loop
        return None

    async def _send_steers(self, conn: AppServerConnection, turn_id: str | None) -> list[BackendMessage]:
        """Send the waiting steers as `turn/steer` for the running turn; STATUS for those refused."""
        out: list[BackendMessage] = []
        for text in self._steering.take():
            if turn_id is None or self._session_id is None:
                out.append(undelivered(text, "Codex named no running turn"))
                continue
            params = self._steering.request(self._session_id, turn_id, text)
            try:
                await conn.request("turn/steer", params, REQUEST_TIMEOUT)
            except BackendError as exc:  # the turn ended meanwhile, or the process did
                self._steering.refused(params)
                out.append(undelivered(text, self.redact(str(exc))))
        return out

    def _name_refusals(self) -> None:
        """The calls Codex refused by itself so far (its rollout's records; what agenter declined
        when asked is recorded already) as denials."""
        for line in self._rollout.lines() if self._rollout is not None else []:
            payload = response_item(line)
            if payload is not None:
                self._refusals.feed(payload)
        for refused in self._refusals.take():
            targets = refused.targets if refused.tool == "shell" else [self.relative(t) or t for t in refused.targets]
            self.deny(refused.tool, ", ".join(targets), refused.reason, refused.rule)

    def _finish_turn(self, final_text: str, failure: _events.TurnFailure | None) -> None:
        if failure is not None and failure.refusal:
            if self.refusal() is None:
                self.refuse({"reason": failure.message, "category": "policy"})
            return
        if failure is not None:
            kind = failure.kind or classify(failure.message, failure.status_code)[0]
            raise BackendError(self.redact(failure.message), backend=self.name, stderr_tail=self._stderr_tail(),
                               status_code=failure.status_code, kind=kind)
        self.refuse_from_text(final_text)
        if final_text:
            self.parse_output(final_text)

    def _record_usage(self, data: dict[str, Any]) -> str | None:
        """Codex reports the thread's cumulative totals: settle (and price) each increase once.
        Returns a note for the increase, if any."""
        if data.get("threadId") not in (None, self._session_id):
            return None
        total = _events.thread_total(data)
        if total is None:
            return None
        self._thread_total = total
        increase = self._thread_usage.usage(total)
        if not increase.total_tokens:
            return None
        self.ledger.settle(increase)
        return _events.usage_note(increase)

    def _report_decision(self, decision: Decision) -> None:
        """Runs in the reader: a declined action is a denial; every decision is streamed, in
        order with the notifications around it."""
        if not decision.approved and not decision.recorded:
            self.deny(decision.tool, decision.what, decision.why,
                      rule=decision.rule or f"codex_approval_policy={self.options.codex_approval_policy}")
        if self._conn is not None:
            self._conn.events.put_nowait(Notification(DECISION_EVENT, {"text": self.redact(decision.text),
                                                                       "declined": not decision.approved}))

    async def _explain(self, thread_id: str, turn_id: str, text: str) -> None:
        """Tell the model why a call was declined (Codex's decline says only "rejected by user"):
        input for the running turn, queued before the decline is sent, so the model reads it with
        the tool's result."""
        conn = self._conn
        if conn is None:
            return
        params = {"threadId": thread_id, "expectedTurnId": turn_id,
                  "input": [{"type": "text", "text": text, "text_elements": []}]}
        try:
            await conn.request("turn/steer", params, REQUEST_TIMEOUT)
        except BackendError as exc:  # the turn ended meanwhile: the decline still stands
            log.debug("codex: could not explain a decline: %s", exc)

    # ------------------------------------------------------------------ approvals that can wait
    def _paused(self) -> bool:
        """Whether the running (or latest) turn stops at calls that wait for a person."""
        return self._pausing is not None and self._pausing.paused

    def _interrupt(self) -> None:
        """End the running turn (a custom tool call the gate deferred: see _permissions)."""
        conn, turn_id = self._conn, self._turn_id
        if conn is not None and turn_id and self._session_id:
            conn.send_nowait("turn/interrupt", {"threadId": self._session_id, "turnId": turn_id})

    def _waiting(self, call_id: str, tool: str, data: dict[str, Any], call: ToolCall, asked: bool) -> None:
        """A call the turn stops before (see _permissions), as the gate sees it."""
        defer_as_seen(self, call_id, tool, data, call, asked=asked)

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, the thread id, the gate's
        "always" answers and the thread's usage so far; with a private CODEX_HOME the thread itself
        too (`_threads`). StoreError when it fails."""
        total = self._thread_total.model_dump() if self._thread_total is not None else None
        store = await backend_store(self)
        handle = await hold_paused(self, record, "codex", {"thread_total": total}, store=store)
        # After the record, so that `keep` says why when there is no store.
        if self._private_home is not None and not await self._keep_thread(store):
            raise BackendError("Codex named no rollout file for the thread, so the paused thread could not be kept "
                               "(its private CODEX_HOME is deleted with the session)", backend=self.name)
        return handle

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued on the resumed thread: the model is told the answers (an
        approved call is to be made again, a denied one not) and the turn goes on."""
        pausing = self._pausing
        assert self.gate is not None and pausing is not None
        own, pending = resume_paused(self, held, "codex")
        total = own.get("thread_total")
        if isinstance(total, dict):
            # Codex reports the thread's totals, the paused run's included: only what follows is new.
            self._thread_total = Usage.model_validate(total)
            self._thread_usage.start_from(usage=self._thread_total)
        tools = {tool.name: tool for tool in self.settings.tools}
        prompt = await answer_paused(self, pending, answers, lambda name, data: gate_call(name, data, tools),
                                     pausing.repeated)
        async for message in self._turn(prompt):
            yield message

    async def _keep_thread(self, store: ConversationStore | None = None) -> bool:
        """Store the thread's rollout (a private CODEX_HOME is deleted when the session ends) in
        `store` (by default the option's); False when there is none to store, or no store."""
        home, rollout, thread = self._private_home, self._rollout, self._session_id
        if home is None or rollout is None or rollout.path is None or thread is None:
            return False
        if store is None:
            store = await backend_store(self)
        if store is not None:
            self._thread_kept = await asyncio.to_thread(_threads.keep_thread, store, thread, home, rollout.path)
        return self._thread_kept

    async def _restore_thread(self, thread: str, home: Path) -> None:
        """Put a thread the pause store keeps back into the new private CODEX_HOME, so that
        thread/resume finds it (nothing when the store keeps none under this id)."""
        from agenter.store import StoreError

        try:
            store = await backend_store(self)
            if store is not None:
                self._thread_kept = await asyncio.to_thread(_threads.restore_thread, store, thread, home)
        except (StoreError, OSError) as exc:
            raise BackendError(f"the Codex thread {thread!r} kept in the conversation store cannot be restored: "
                               f"{exc}", backend=self.name) from None

    def _stderr_tail(self) -> str | None:
        return (self._process.stderr_tail() or None) if self._process is not None else None
