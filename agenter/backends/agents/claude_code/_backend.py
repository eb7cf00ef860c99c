"""ClaudeCodeBackend: Claude Code (the `claude` CLI) through claude-agent-sdk's ClaudeSDKClient.

One connected client per session, so every iteration (and the retry prompt with validation
errors) lands in the same Claude Code conversation. What the CLI does is reported as it streams
(`_events`); what changed on disk is the file tools' results united with the base's workspace
snapshots, so edits made by Bash count too. With sandbox=True, Bash runs in Claude Code's OS
sandbox (bubblewrap + socat on Linux, failIfUnavailable) and a PreToolUse hook confines the file
tools to cwd and allowed_write_paths (`_permissions`). How the CLI is started is `_setup`.

Approvals that can wait (docs/approvals.md): a call the gate defers ends the turn there (the hook
denies it and stops Claude Code, `_permissions`), and the turn reports it pending. `hold` keeps
the session's record with Claude Code's session id in the pause store (agenter.store, shared with
agenter's own agent in `backends/_pauses.py`); a later process connects resuming that Claude
Code session, and `continue_paused` tells the model the person's answers and asks it to make an
approved call again, which the gate then lets through with that answer (`RepeatedCalls`).
Claude Code carries a resumed session's cost on, so the cost it reported when the run paused is
where the continued run's count starts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import logging
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import BackendError
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
from agenter.backends._programs.claude import CREDENTIALS as CLAUDE_CREDENTIALS
from agenter.backends._programs.claude import SHELL_TOOL, denied_calls, keep_session, restore_session, usage_from
from agenter.backends._prompts import REFUSAL_TOOL_NAME, output_schema
from agenter.backends._steer import EMPTY, IDLE
from agenter.backends.agents.claude_code import _setup
from agenter.backends.agents.claude_code._events import TurnTranslator, describe_result_error, describe_sdk_error
from agenter.backends.agents.claude_code._options import ClaudeCodeOptions
from agenter.backends.agents.claude_code._permissions import ENFORCED_KINDS, Permissions, tool_call
from agenter.backends.agents.claude_code._steering import FOLLOW_UP_TIMEOUT, Steering
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.host import Redactor, _pids, marked_env, reap, strip_ansi
from agenter.host.requirements import Credentials, Requirement
from agenter.permissions import ToolCall
from agenter.tools import Tool
from agenter.usage import RunningTotal

__all__ = ["ClaudeCodeBackend"]

log = logging.getLogger("agenter.backends.agents.claude_code")

#: Folders Claude Code may create in cwd for itself; removed again at disconnect when empty.
INTERNAL_DIRS = (".claude/.cc-writes", ".claude")
#: How long the CLI may take to exit after its stdin closes before it is terminated.
GRACEFUL_EXIT_SECONDS = 5.0
STDERR_TAIL_LINES = 60


class _Connection:
    """One running CLI: the SDK client, its process mark and pid, and its running cost total."""

    def __init__(self, client: Any, mark: str):
        self.client = client
        self.mark = mark
        self.pid: int | None = None
        self.cost = RunningTotal()  # the CLI reports cost cumulatively per process


async def _exited(pids: set[int], timeout: float) -> None:
    """Wait (bounded) until SIGKILLed processes are gone: one busy exiting still counts as running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while any(_pids.is_alive(p) for p in pids) and loop.time() < deadline:
        await asyncio.sleep(0.05)


class ClaudeCodeBackend(BaseBackend[ClaudeCodeOptions]):
    """Runs Claude Code headless; see docs/backends/claude-code.md."""

    name: ClassVar[str] = "claude-code"
    credentials: ClassVar[Credentials | None] = CLAUDE_CREDENTIALS
    auto_rank: ClassVar[int | None] = 10
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, native_tool_loop=True, mcp=True, filesystem_read=True,
        filesystem_edit=True, shell=True, custom_tools=True, structured_output=True, resume=True, sandbox=True,
        steering=True, pause=True)
    options_model: ClassVar[type[ClaudeCodeOptions]] = ClaudeCodeOptions
    price_provider: ClassVar[str | None] = "anthropic"
    internal_paths: ClassVar[tuple[str, ...]] = (".claude/.cc-writes/",)
    permission_kinds: ClassVar[frozenset[str]] = ENFORCED_KINDS

    def __init__(self, settings: BackendSettings[ClaudeCodeOptions]):
        super().__init__(settings)
        # Secrets in the CLI's extra environment (a key under another name) are hidden too.
        self.redact = Redactor(self.options.env, extra=self.options.secrets())
        self._env: dict[str, str] = {}
        self._instructions = ""
        self._permissions: Permissions | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._connection: _Connection | None = None
        self._shutdowns: list[asyncio.Task[None]] = []
        self._made_dirs: list[Path] = []
        self._steering = Steering()  # session.steer: Claude Code's streaming input (see _steering)
        #: The cumulative cost the CLI last reported for the session (kept with a paused run).
        self._cli_cost: float | None = None

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        return _setup.requirements(settings)

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        no_pause_without_store(settings.on_ask, cls._options_of(settings).conversation_store)

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs."""
        options = cls._options_of(settings)
        return store_for_pauses(options.conversation_store, log_dir, Redactor(options.env, extra=options.secrets()))

    @classmethod
    def _options_of(cls, settings: BackendSettings[Any]) -> ClaudeCodeOptions:
        options = settings.options
        return options if isinstance(options, ClaudeCodeOptions) else ClaudeCodeOptions()

    @property
    def cli_pid(self) -> int | None:
        """Pid of the running `claude` process (None when none runs)."""
        return self._connection.pid if self._connection else None

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        if not self.cwd.is_dir():
            raise BackendError(f"working directory does not exist: {spec.cwd}", backend=self.name)
        self._env = {**self.trace_env(), **_setup.cli_env(self.options)}  # TRACEPARENT: the session's span
        resolver = None
        if self.settings.sandbox or spec.allowed_write_paths is not None:
            from agenter.sandbox.paths import PathResolver

            resolver = PathResolver(self.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        self._permissions = Permissions(
            resolver=resolver, mode=_setup.permission_mode(self.settings.sandbox, self._env),
            sandbox=self.settings.sandbox,
            allowed=[*self.options.claude_allowed_tools, *_setup.our_tool_names(self.settings.tools)],
            permit=self.permit, tools=self.settings.tools, ask_timeout=self.settings.permission_timeout,
            refused=self.deny, waiting=self._waiting)
        self.leave_confinement_to_the_sandbox()
        self._instructions = self.instructions(refusal_tool=_setup.mcp_tool_name(REFUSAL_TOOL_NAME),
                                               output_channel="native")
        self._made_dirs = [self.cwd / d for d in INTERNAL_DIRS if not (self.cwd / d).exists()]
        # The SDK's first import takes seconds (its package imports mcp and jsonschema): in a thread,
        # so other sessions on this event loop keep running meanwhile.
        await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
        if spec.resume_session_id:
            await restore_session(self, self._env, spec.resume_session_id)
        await self._open(resume=spec.resume_session_id)

    async def _open(self, resume: str | None) -> None:
        from claude_agent_sdk import ClaudeSDKClient, ClaudeSDKError

        assert self._permissions is not None
        env, mark = marked_env(self._env)
        output_type = self.spec.output_type
        options = _setup.agent_options(
            self.settings, cwd=str(self.spec.cwd), env=env, instructions=self._instructions,
            output_schema=output_schema(output_type) if output_type is not None else None,
            server=_setup.mcp_server(self.settings.tools, self._tool_handler, self._refuse_task),
            permissions=self._permissions, stderr=self._stderr.append, resume=resume)
        connection = self._connection = _Connection(ClaudeSDKClient(options), mark)
        if resume is not None and resume == self._session_id and self._cli_cost is not None:
            connection.cost.start_from(self._cli_cost)  # the CLI goes on from the session's cost
        try:
            await connection.client.connect()
        except BaseException as exc:
            # A half-started CLI is ended like any other (also when connect was cancelled).
            await asyncio.shield(self._stop_connection(graceful=False))
            if isinstance(exc, ClaudeSDKError):
                raise self._sdk_error(exc, "Claude Code could not start") from None
            if isinstance(exc, OSError):
                raise self._error(f"Claude Code could not start: {exc}", kind="missing_program") from None
            raise
        connection.pid = await asyncio.to_thread(_setup.find_cli_pid, mark)

    async def _disconnect(self) -> None:
        if self._connection is not None:
            self._stop_connection(graceful=True)
        if self._shutdowns:
            await asyncio.gather(*(asyncio.shield(t) for t in self._shutdowns), return_exceptions=True)
            self._shutdowns = [t for t in self._shutdowns if not t.done()]
        # Leave the repository as we found it: drop the CLI's own folders if it created them empty.
        for folder in self._made_dirs:
            with contextlib.suppress(OSError):  # not empty or not there: leave it
                folder.rmdir()

    def _stop_connection(self, *, graceful: bool) -> asyncio.Task[None]:
        """Detach the running CLI and end it in a task that a second cancellation cannot stop."""
        connection, self._connection = self._connection, None
        assert connection is not None
        task = asyncio.ensure_future(self._end_cli(connection, graceful=graceful))
        self._shutdowns.append(task)
        return task

    async def _end_cli(self, connection: _Connection, *, graceful: bool) -> None:
        """Close the client, SIGTERM the CLI if it lingers, then SIGKILL whatever is left of it:
        the CLI, its descendants and anything carrying its mark (one /proc scan, in a thread).

        Bounded to about GRACEFUL_EXIT_SECONDS + 4 s so the session's own wait never cuts it off.
        """
        pid = connection.pid
        if not graceful and pid:
            _pids.kill({pid}, signal.SIGTERM)
        closing = asyncio.ensure_future(connection.client.disconnect())
        await asyncio.wait({closing}, timeout=GRACEFUL_EXIT_SECONDS if graceful else 2.0)
        if not closing.done() and pid:
            _pids.kill({pid}, signal.SIGTERM)
            await asyncio.wait({closing}, timeout=2.0)
        killed = await reap(connection.mark, pid=pid)
        await _exited(killed, timeout=1.0)
        if not closing.done():
            await asyncio.wait({closing}, timeout=2.0)  # lets the SDK reap the killed CLI
            if not closing.done():
                closing.cancel()
        if closing.done() and not closing.cancelled() and closing.exception() is not None:
            log.debug("claude-code disconnect: %s", closing.exception())

    # ------------------------------------------------------------------ tools
    def _tool_handler(self, tool: Tool) -> _setup.McpHandler:
        async def handler(arguments: dict[str, Any]) -> dict[str, Any]:
            return _setup.mcp_reply(await self.run_tool(tool, arguments))

        return handler

    async def _refuse_task(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return _setup.mcp_reply(self.refuse(arguments))

    # ------------------------------------------------------------------ one turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        from claude_agent_sdk import ClaudeSDKError, ResultMessage

        if self._connection is None:
            # A cancelled turn ended the previous CLI; continue the same Claude Code session.
            await self._open(resume=self._session_id)
        connection = self._connection
        assert connection is not None
        events = TurnTranslator(self.redact)
        steering = self._steering
        finished = False
        if self._permissions is not None:
            self._permissions.begin_turn()
        try:
            steering.start(connection.client)
            await connection.client.query(prompt)
            result: Any = None
            async with contextlib.aclosing(connection.client.receive_messages()) as stream:
                owed = False  # a result came, and the CLI owes a steer a turn of its own
                while (message := await self._next(stream, owed=owed)) is not None:
                    for item in [*steering.landed(message), *self._translated(message, events)]:
                        yield item
                    owed = False
                    if isinstance(message, ResultMessage):
                        result = message
                        if not await steering.after_result():
                            break
                        # That turn is this request's: read on, with what this one used settled.
                        self._settle(message, events, connection)
                        events, owed = TurnTranslator(self.redact), True
            if result is None:
                raise self._error("Claude Code ended the turn without a result (the CLI exited or "
                                  "closed its output)", kind="agent_crash")
            why = (f"Claude Code did not take it up within {FOLLOW_UP_TIMEOUT:g} s of its turn's end"
                   if steering.abandoned else "Claude Code's output ended first")
            for item in steering.close(why):
                yield item
            self._finish(result, events, connection)
            finished = True
        except ClaudeSDKError as exc:
            raise self._sdk_error(exc, "Claude Code failed") from None
        finally:
            steering.close("the turn ended first")
            if not finished:
                # Cancelled (time budget), abandoned, or failed: count what the turn used so far,
                # and stop the CLI now.
                self.ledger.abandon_running()
            if self._connection is connection and (not finished or steering.abandoned):
                await asyncio.shield(self._stop_connection(graceful=False))

    async def _next(self, stream: AsyncIterator[Any], *, owed: bool) -> Any:
        """The CLI's next message; None when its output ends, or when the turn the CLI owes a
        steer does not start in time (the CLI is then stopped: a turn left running would answer
        the next request one message behind)."""
        try:
            if owed:
                return await asyncio.wait_for(anext(stream), FOLLOW_UP_TIMEOUT)
            return await anext(stream)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            self._steering.abandoned = True
            return None

    def _translated(self, message: Any, events: TurnTranslator) -> list[BackendMessage]:
        out = events.translate(message)
        self._absorb(events)
        for item in out:
            if item.type is MessageType.FILE_EDIT and item.details:
                # The path as the model gave it (often absolute): relative to the workspace.
                path = item.details["path"]
                item.details["path"] = self.relative(path) or path
        return out

    def steer(self, text: str) -> str | None:
        """Send a user message to the running turn through Claude Code's streaming input: the CLI
        takes it in with the next tool results, or, when the model was answering without tool
        calls, in a turn of its own right after, which this request reads to its end (see
        _steering). Between turns there is no turn to steer: a message written then would start
        a turn no request reads."""
        if not isinstance(text, str) or not text.strip():
            return EMPTY
        if not self._steering.open or self._connection is None:
            return IDLE
        self._steering.send(text)
        return None

    def _absorb(self, events: TurnTranslator) -> None:
        """What the latest message told us: session, model, written files, usage so far."""
        if events.session_id:
            self._session_id = events.session_id
        if events.model:
            self.ledger.model = events.model
        elif events.init_model and not self.ledger.model:
            self.ledger.model = events.init_model
        written = events.take_written()
        if written:
            self.track(written=written)
        usage = events.usage()
        if usage.total_tokens:
            self.ledger.running(usage)

    def _settle(self, result: Any, events: TurnTranslator, connection: _Connection) -> None:
        """What one turn of the CLI used (its result message), and what it refused by itself."""
        if isinstance(result.session_id, str) and result.session_id:
            self._session_id = result.session_id
        turn = usage_from(result.usage)
        if not turn.total_tokens:
            turn = events.usage()
        reported = result.total_cost_usd
        cost = None
        if isinstance(reported, int | float):
            cost, self._cli_cost = connection.cost.cost(float(reported)), float(reported)
        self.ledger.settle(turn, cost=cost)
        self._own_refusals(result.permission_denials)

    def _finish(self, result: Any, events: TurnTranslator, connection: _Connection) -> None:
        """Usage, cost, refusal and structured output from the request's last result message."""
        self._settle(result, events, connection)
        if self.refusal() is None and events.api_refusal is not None:
            reason, category = events.api_refusal
            self.refuse({"reason": reason, "category": category})
        if self.refusal() is None and result.stop_reason == "refusal":
            self.refuse({"reason": events.last_text or "the model refused the request", "category": "refusal"})
        if self.refusal() is None and not result.is_error:
            self.refuse_from_text(result.result)
        if self.refusal() is not None:
            return  # a refusal is an outcome, not a failure (even when the CLI flags it as an error)
        if result.is_error and result.subtype == "error_max_structured_output_retries":
            # The agent did not return the structured output: not a crash. The session sees no
            # output and retries with that problem in the prompt.
            log.info("claude-code: the turn ended without structured output")
            return
        if result.is_error:
            message, status = describe_result_error(result)
            raise self._error(message, status_code=status)
        if self.spec.output_type is not None:
            structured = result.structured_output
            self.parse_output(structured if isinstance(structured, dict) else None, result.result)

    # ------------------------------------------------------------------ approvals that can wait
    def _waiting(self, call_id: str, tool: str, tool_input: dict[str, Any], call: ToolCall, asked: bool) -> None:
        """A call the turn stops before (the hook denied it; see _permissions), as the gate sees it."""
        defer_as_seen(self, call_id, tool, tool_input, call, asked=asked)

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, Claude Code's session id,
        the gate's "always" answers and the cost the CLI reported. StoreError when it fails."""
        store = await backend_store(self)
        handle = await hold_paused(self, record, "claude_code", {"cli_cost": self._cli_cost}, store=store)
        await keep_session(self, self._env, self._session_id, store)
        return handle

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued in the resumed Claude Code session: the model is told the
        answers (an approved call is to be made again, a denied one not) and the turn goes on."""
        permissions = self._permissions
        assert self.gate is not None and permissions is not None
        own, pending = resume_paused(self, held, "claude_code")
        cost = own.get("cli_cost")
        if isinstance(cost, int | float):
            self._cli_cost = float(cost)
            if self._connection is not None:
                self._connection.cost.start_from(float(cost))
        prompt = await answer_paused(self, pending, answers, lambda name, data: tool_call(name, data, permissions.tools),
                                     permissions.repeated)
        async for message in self._turn(prompt):
            yield message

    def _own_refusals(self, denials: Any) -> None:
        """The calls Claude Code's own permission system refused after agenter's hook let them
        through (a deny rule in the settings it loads, `claude_setting_sources`): denials of the
        run, so the result names them. agenter's own refusals are recorded already."""
        ours = self._permissions.refused_ids if self._permissions is not None else set()
        for call_id, name, target in denied_calls(denials):
            if call_id not in ours:
                self.deny(name, target if name == SHELL_TOOL else self.relative(target) or target,
                          "Claude Code's own permission rules refused it (a deny rule of the settings it loads, "
                          "claude_setting_sources)", rule="claude:permissions")

    # ------------------------------------------------------------------ errors
    def _error(self, message: str, *, status_code: int | None = None, kind: str | None = None) -> BackendError:
        tail = self.redact(strip_ansi("\n".join(self._stderr))).strip() or None
        kind = kind or classify(message, status_code)[0]  # "Credit balance is too low": quota
        return BackendError(self.redact(message), backend=self.name, stderr_tail=tail,
                            status_code=status_code, kind=kind)

    def _sdk_error(self, exc: BaseException, what: str) -> BackendError:
        message, status, kind = describe_sdk_error(exc, what)
        return self._error(message, status_code=status, kind=kind)
