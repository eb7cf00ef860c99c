"""OpenHandsBackend: the OpenHands software-agent SDK (file editor + terminal) behind agenter.

One OpenHands conversation per session, so a retry prompt reaches the same agent. Each turn
sends the prompt and runs `Conversation.arun()` on the backend's private loop thread; OpenHands'
event callbacks are bridged to the turn's async generator through an asyncio queue.

Permissions: OpenHands announces every action (an `ActionEvent`) through the event callback
before it runs it. The callback decides the action through the session's gate (`permit`, on the
caller's loop) and blocks a denied one in the conversation state, the way OpenHands' PreToolUse
hooks do: OpenHands then answers the model "Action rejected: <reason>" instead of running it,
and the run goes on.

Streaming (`openhands_stream`): OpenHands hands each chunk of a streamed Chat Completions
response to its token callback, on the private loop while the model writes; the chunks' text and
reasoning go to the turn as TEXT_DELTA / THINKING_DELTA through the same queue, and the event
OpenHands makes of the whole response closes them (see `TokenStream`).

Resume: OpenHands keeps the conversation in `openhands_persistence_dir` (one folder per
conversation id); the session id is that id, and `resume_session_id` makes the next backend load
it, in this process or another.

Approvals that can wait (docs/approvals.md) use OpenHands' confirmation mode: an action the gate
defers switches the conversation's confirmation policy to AlwaysConfirm while its model response
is being announced, so OpenHands stops with the response's actions unexecuted
(WAITING_FOR_CONFIRMATION, the actions "unmatched" in its event log) and the policy goes back to
NeverConfirm. `hold` keeps the record, the gate's "always" answers and which waiting actions the
gate already allowed, and a copy of the conversation's files (`_kept`): a process whose
`openhands_persistence_dir` lacks the conversation (another host with the same store) writes it
back before OpenHands resumes it, and the copy is brought up to date when a session that kept or
restored it ends; a process that has the folder uses its own.
`continue_paused` decides each waiting action with the person's answer (a refused one is blocked
in the state, as a denial is) and runs OpenHands again without a message: it executes the
waiting actions first (its implicit confirmation), so the paused action itself runs once with its
real result, and the run goes on. Limit: OpenHands confirms a response's actions together, so
the actions of that response that the gate allowed before the deferred one wait too (listed with
needs_approval=False) and run when the run goes on.
A new prompt instead of an approval (`resume=` with another request) would make OpenHands run the
waiting actions unasked, so `_turn` rejects them first (`_reject_waiting_actions`); that session
then brings the stored copy up to date, and an approval on a host whose own folder is behind the
stored copy is refused (`_went_on_elsewhere`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import AgenterError, BackendError, ConfigurationError
from agenter._types import PendingCall, Usage
from agenter.backends._pauses import (
    backend_store,
    hold_paused,
    no_pause_without_store,
    pending_call,
    resume_paused,
    store_for_pauses,
)
from agenter.backends._prompts import REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_NAME, REFUSAL_TOOL_SCHEMA
from agenter.backends.agents.openhands._events import (
    MetricsCursor,
    TokenStream,
    TurnRecorder,
    failure_message,
    response_says,
)
from agenter.backends.agents.openhands._options import OpenHandsOptions
from agenter.backends.agents.openhands._permissions import (
    ENFORCED_KINDS,
    action_fields,
    tool_call,
    use_home,
)
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
    ToolReply,
)
from agenter.host import marked_env, reap
from agenter.host.redact import Redactor
from agenter.host.requirements import PythonPackage, PythonVersion, Requirement, check_requirements
from agenter.permissions import PermissionAnswer, ToolCall
from agenter.tools import Tool

INSTALL_HINT = "pip install 'agenter-sdk[openhands]' (on Python >= 3.12)"
#: How long a cancelled turn may take to stop (the session waits 5 s for the whole task).
STOP_GRACE_SECONDS = 3.5

_END = object()
#: What the model reads for a paused run's waiting action when a new prompt continues the
#: conversation instead of an approval (OpenHands adds "Action rejected: ").
PAUSED_WITHOUT_APPROVAL = "the run paused for approval and went on without it; this call did not run."
#: The same for an action a run made and never ran (its process ended before it ran).
ENDED_BEFORE_IT_RAN = "the run that made this call ended before it ran; this call did not run."

log = logging.getLogger("agenter.backends.agents.openhands")


@dataclass
class _Spent:
    """Model responses OpenHands finished since the last look (sent from the loop thread)."""

    responses: list[Usage]
    cost: float | None  # LiteLLM's price of them; None: priced by the ledger


class OpenHandsBackend(BaseBackend[OpenHandsOptions]):
    """The OpenHands agent (its own system prompt, file editor and terminal) with any LiteLLM model."""

    name: ClassVar[str] = "openhands"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, native_tool_loop=True, filesystem_read=True,
        filesystem_edit=True, shell=True, custom_tools=True, structured_output=True, resume=True, sandbox=False,
        pause=True,
    )
    options_model: ClassVar[type[OpenHandsOptions]] = OpenHandsOptions
    #: OpenHands' own tools.
    reserved_tool_names: ClassVar[frozenset[str]] = frozenset({"file_editor", "terminal", "finish", "think"})
    #: Every action (file editor, terminal, custom tools) passes the gate before it runs.
    permission_kinds: ClassVar[frozenset[str]] = ENFORCED_KINDS

    def __init__(self, settings: BackendSettings[OpenHandsOptions]):
        super().__init__(settings)
        # The terminal's extra environment may hold keys too.
        self.redact = Redactor(self.options.env, extra=self.options.secrets())
        self._conversation: Any = None
        self._loop_thread: Any = None
        self._caller_loop: asyncio.AbstractEventLoop | None = None
        self._tools_session: str | None = None
        self._mark: str | None = None
        self._cursor = MetricsCursor()
        self._recorder: TurnRecorder | None = None
        #: The turn's streamed tokens; None when the model's tokens are not passed on.
        self._tokens: TokenStream | None = None
        #: Tokens stream as deltas: openhands_stream on the Chat Completions wire (on the
        #: Responses wire OpenHands hands reasoning summaries over as text).
        self._streams_deltas = False
        self._emit: Callable[[Any], None] | None = None
        self._lifecycle = threading.Lock()
        self._closed = False
        #: The conversation was resumed and no turn has said so yet.
        self._resumed = False
        self._custom_tools = {tool.name: tool for tool in settings.tools}
        #: The conversation's state, where denied actions are blocked (kept after disconnect, so
        #: an action announced while the run is torn down is still blocked).
        self._actions_state: Any = None
        #: Permission decisions the private loop waits for (withdrawn when the run stops).
        self._deciding: set[concurrent.futures.Future[Any]] = set()
        self._deciding_lock = threading.Lock()
        # Approvals that can wait: the actions of this turn the gate allowed (tool call ids), the
        # ones that wait (deferred, or after a deferred one), whether the run is pausing, and the
        # waiting actions a paused run had already allowed (kept by `hold`).
        self._allowed_now: set[str] = set()
        self._waiting: dict[str, PendingCall] = {}
        self._pausing = False
        self._allowed_waiting: set[str] = set()
        #: This session kept the conversation's files in the pause store, or restored them from
        #: it: the stored copy is brought up to date when the session ends.
        self._copy_kept = False
        #: openhands_persistence_dir as connect made it (None: memory only, or not connected).
        self._persistence: Path | None = None

    # ------------------------------------------------------------------ settings
    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        return [
            PythonVersion((3, 12), why="openhands-sdk supports Python 3.12 and newer only: run agenter "
                          "on Python 3.12+, or choose another backend"),
            PythonPackage(module="openhands.sdk", distribution="openhands-sdk", install=INSTALL_HINT),
            PythonPackage(module="openhands.tools", distribution="openhands-tools", install=INSTALL_HINT),
        ]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        if settings.sandbox:
            raise ConfigurationError(
                "The openhands backend has no sandbox: its terminal and file editor can reach the "
                "whole machine. Pass sandbox=False (CLI: --no-sandbox) to run it (preferably inside "
                "a container or VM).",
                parameter="sandbox",
            )
        if not settings.model:
            raise ConfigurationError(
                "The openhands backend needs a model in LiteLLM's provider/model form, "
                "e.g. model='openai/gpt-4o' or model='anthropic/claude-sonnet-4-5'.",
                parameter="model",
            )
        options: OpenHandsOptions = settings.options
        no_pause_without_store(settings.on_ask, options.conversation_store)
        if settings.on_ask == "pause" and options.openhands_persistence_dir is None:
            raise ConfigurationError("on_ask='pause' continues the OpenHands conversation later, and "
                                     "openhands_persistence_dir=None keeps it in memory only: give a folder "
                                     "(or leave the default)", parameter="on_ask")

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs' records."""
        options = settings.options if isinstance(settings.options, OpenHandsOptions) else OpenHandsOptions()
        return store_for_pauses(options.conversation_store, log_dir, Redactor(extra=options.secrets()))

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        # Also here: a backend driven without the facade must not fail with an ImportError.
        check_requirements(self.requirements(self.settings), backend=self.name)
        if not self.cwd.is_dir():
            raise BackendError(f"cwd is not a directory: {self.cwd}", backend=self.name, kind="config")
        self._caller_loop = asyncio.get_running_loop()
        gate = self.gate
        assert gate is not None  # made by connect() before _connect
        self.leave_confinement_to_the_sandbox()  # this backend has no sandbox: tools go anywhere
        if self.options.env.get("HOME"):
            use_home(gate, self.options.env["HOME"])  # `~` in a command is the terminal's HOME
        # The terminal's commands continue the session's trace (TRACEPARENT, when tracing is on).
        terminal_env, self._mark = marked_env({**self.options.env, **self.trace_env()})
        instructions = self.instructions(refusal_tool=REFUSAL_TOOL_NAME, output_channel="text")
        persistence_dir = self._persistence = self._persistence_dir()
        if spec.resume_session_id and persistence_dir is not None:
            await self._restore_conversation(spec.resume_session_id, persistence_dir)
        resume = self._resume_target(spec.resume_session_id, persistence_dir)
        # If connect is cancelled (time budget) the thread still finishes; _start then sees that
        # disconnect() ran and tears down what it built. The thread runs in this context, so the
        # current span is the session's (OpenHands' own spans, when it traces, go under it).
        await asyncio.to_thread(self._start, instructions, terminal_env, persistence_dir, resume)

    def _persistence_dir(self) -> Path | None:
        """Where OpenHands keeps the conversations (created private to the user), or None."""
        configured = self.options.openhands_persistence_dir
        if configured is None:
            return None
        path = Path(os.path.expanduser(configured))
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create openhands_persistence_dir {str(path)!r}: {exc.strerror}",
                               backend=self.name, kind="config") from None
        return path

    def _resume_target(self, session_id: str | None, persistence_dir: Path | None) -> uuid.UUID | None:
        """The conversation to continue, checked before anything starts."""
        if not session_id:
            return None
        if persistence_dir is None:
            raise BackendError("cannot resume an OpenHands conversation with openhands_persistence_dir=None: "
                               "conversations are kept in memory only", backend=self.name, kind="config")
        try:
            conversation_id = uuid.UUID(session_id)
        except ValueError:
            raise BackendError(f"cannot resume: {session_id!r} is not an OpenHands conversation id",
                               backend=self.name, kind="config") from None
        from agenter.backends.agents.openhands._runtime import stored_conversation

        if not stored_conversation(persistence_dir, conversation_id):
            raise BackendError(f"cannot resume: no OpenHands conversation {session_id} in {str(persistence_dir)!r} "
                               "(openhands_persistence_dir)", backend=self.name, kind="config")
        return conversation_id

    async def _restore_conversation(self, session_id: str, persistence_dir: Path) -> None:
        """Write back the conversation's files the pause store keeps (`_kept`), when the
        persistence dir lacks the conversation (it paused on another host); one that is here is
        used as it is. BackendError when the stored copy cannot be written back."""
        from agenter.backends.agents.openhands._kept import restore_conversation
        from agenter.backends.agents.openhands._runtime import stored_conversation
        from agenter.store import StoreError

        try:
            conversation_id = uuid.UUID(session_id)
        except ValueError:
            return  # not an OpenHands conversation id: _resume_target says so
        if await asyncio.to_thread(stored_conversation, persistence_dir, conversation_id):
            return
        try:
            store = await backend_store(self)
            if store is not None:
                self._copy_kept = await asyncio.to_thread(restore_conversation, store, persistence_dir,
                                                          conversation_id)
        except (StoreError, OSError) as exc:
            raise BackendError(self.redact(f"the OpenHands conversation {session_id} kept in the conversation store "
                                           f"cannot be restored into {str(persistence_dir)!r}: {exc}"),
                               backend=self.name, kind="config") from None

    def _start(self, instructions: str, terminal_env: dict[str, str], persistence_dir: Path | None,
               resume: uuid.UUID | None) -> None:
        """Import OpenHands and create (or resume) the conversation (blocking: seconds on first use)."""
        from agenter.backends.agents.openhands import _runtime
        from agenter.usage import is_known_model

        _runtime.prepare_environment()
        # The ledger prices responses on the caller's loop while OpenHands runs. Load the price
        # table now: its first import pulls in httpx2, and the openai client on the loop thread
        # would meanwhile find that module half-initialised in sys.modules and fail its request.
        is_known_model(self.settings.model, self.price_provider)
        try:
            from agenter.backends.agents.openhands import _tools
        except ImportError as exc:  # a broken install: say what to do, not a traceback
            raise BackendError(f"Could not import the OpenHands SDK ({exc}). {INSTALL_HINT}.",
                               backend=self.name, kind="config") from exc

        tools_session = f"agenter-{uuid.uuid4().hex}"
        _tools.add_session_tools(tools_session, self._session_tools(_tools), terminal_env)
        loop_thread = _runtime.LoopThread()
        try:
            conversation = _runtime.build_conversation(
                model=self.settings.model or "", options=self.options, cwd=self.cwd,
                system_suffix=instructions, tools_session=tools_session, on_event=self._on_event,
                on_token=self._on_token,
                persistence_dir=persistence_dir, conversation_id=resume,
                parent_span_context=_runtime.current_span_context())
            # A resumed conversation's metrics hold the earlier runs' responses: count from here.
            self._cursor.start(conversation.conversation_stats.get_combined_metrics())
            self._streams_deltas = self.options.openhands_stream and not conversation.agent.llm.uses_responses_api()
        except Exception as exc:  # noqa: BLE001 - OpenHands' own validation errors: say what failed
            loop_thread.stop()
            _tools.remove_session_tools(tools_session)
            raise BackendError(f"Could not start the OpenHands agent: {self.redact(str(exc))}",
                               backend=self.name, kind="config") from None
        with self._lifecycle:
            closed = self._closed
            if not closed:
                self._conversation, self._loop_thread = conversation, loop_thread
                self._actions_state = conversation.state
                self._tools_session = tools_session
                self._session_id = str(conversation.id)
                self._resumed = resume is not None
        if closed:  # disconnect() ran while we were starting
            _runtime.end_conversation(conversation, self._mark or "")
            loop_thread.stop()
            _tools.remove_session_tools(tools_session)

    def _session_tools(self, tools_module: Any) -> list[Any]:
        session_tools = [tools_module.SessionTool(
            name=REFUSAL_TOOL_NAME, description=REFUSAL_TOOL_DESCRIPTION, input_schema=REFUSAL_TOOL_SCHEMA,
            handler=self.refuse, read_only=True)]
        for tool in self.settings.tools:
            session_tools.append(tools_module.SessionTool(
                name=tool.name, description=tool.description, input_schema=tool.input_schema,
                handler=self._tool_handler(tool)))
        return session_tools

    async def _disconnect(self) -> None:
        with self._lifecycle:
            self._closed = True
            conversation, self._conversation = self._conversation, None
            loop_thread, self._loop_thread = self._loop_thread, None
            tools_session, self._tools_session = self._tools_session, None
        self._withdraw_decisions()  # an open question must not hold the run being ended
        mark = self._mark
        if conversation is None and loop_thread is None and tools_session is None:
            return

        def close() -> None:
            from agenter.backends.agents.openhands import _runtime, _tools

            if conversation is not None and mark is not None:
                _runtime.end_conversation(conversation, mark)  # ends the terminal and its commands
            if loop_thread is not None:
                loop_thread.stop()
            if tools_session is not None:
                _tools.remove_session_tools(tools_session)

        await asyncio.to_thread(close)
        if mark is not None:
            await reap(mark)  # anything the terminal started while its tool threads were stopping
        if self._copy_kept:  # the stored copy goes on from where this session left it
            await self._keep_conversation()

    # ------------------------------------------------------------------ a turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self._conversation is not None:
            await asyncio.to_thread(self._reject_waiting_actions)
        async for message in self._drive(prompt):
            yield message

    def _reject_waiting_actions(self) -> None:
        """A new prompt on a conversation whose actions still wait (a paused run resumed with
        `resume=` instead of `approve`): reject them first. OpenHands runs a conversation's
        unmatched actions at the start of its next run, with no event the gate could decide, so
        they would otherwise run unanswered. The model reads "Action rejected: <reason>" before
        the prompt, and the pause can no longer be approved ("went on after the run paused").
        Limit: an action the gate had denied is rejected with this reason too (its denial was
        recorded when the run paused)."""
        from openhands.sdk.conversation.state import ConversationExecutionStatus, ConversationState

        state = self._conversation.state
        with state:
            unmatched = ConversationState.get_unmatched_actions(state.active_branch())
            if not unmatched:
                return
            reason = (PAUSED_WITHOUT_APPROVAL
                      if state.execution_status == ConversationExecutionStatus.WAITING_FOR_CONFIRMATION
                      else ENDED_BEFORE_IT_RAN)
            for action in unmatched:  # an action blocked at the pause is answered here, not later
                state.pop_blocked_action(action.id)
            log.info("openhands: %d action(s) of conversation %s had not run and are rejected before the new prompt",
                     len(unmatched), self._session_id)
            self._conversation.reject_pending_actions(reason)
        if reason == PAUSED_WITHOUT_APPROVAL:
            # The stored copy goes on with this session too, so a host that restores it later
            # sees that the run went on (its approval then fails instead of running the calls).
            self._copy_kept = True

    async def _drive(self, prompt: str | None, replay: Sequence[Any] = ()) -> AsyncIterator[BackendMessage]:
        """One run of OpenHands: with the prompt as a new message, or (None) on from where it
        stopped (a paused run continued; `replay`: its waiting actions, reported as they run)."""
        loop_thread = self._loop_thread
        if self._conversation is None or loop_thread is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        recorder = TurnRecorder(REFUSAL_TOOL_NAME)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def emit(item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, item)

        if self._resumed:
            self._resumed = False
            yield BackendMessage(MessageType.STATUS, f"session resumed: OpenHands conversation {self._session_id}")
        self._tokens = TokenStream() if self._streams_deltas else None
        self._allowed_now, self._waiting, self._pausing = set(), {}, False
        for action in replay:  # their calls, and their edits counted when they run
            for message in recorder.translate(action):
                if message.type in (MessageType.TOOL_CALL, MessageType.COMMAND_START):
                    yield self._redacted(message)
        recorder.texts.clear()
        self._recorder, self._emit = recorder, emit
        run = loop_thread.submit(self._run(prompt, emit))
        finished = False
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise self._failure(item)
                if isinstance(item, _Spent):
                    self._settle(item)
                    continue
                self.track(written=recorder.edited)
                yield self._redacted(item)
            finished = True
        finally:
            if not finished:
                await self._stop_run(run)
            self._recorder = self._emit = None
            self._tokens = None
            await asyncio.sleep(0)  # what the loop thread sent before it stopped is queued now
            while not queue.empty():
                item = queue.get_nowait()
                if isinstance(item, _Spent):
                    self._settle(item)
            self.track(written=recorder.edited)
        paused = self._pause_here() if self._pausing and finished else None
        if paused is not None:
            yield paused
            return
        self.refuse_from_text(recorder.final_text)  # the plain-text form of the refusal tool
        self.parse_output(recorder.final_text, *reversed(recorder.texts))

    async def _run(self, prompt: str | None, emit: Callable[[Any], None]) -> None:
        """Runs on the private loop: send the prompt (if any), run the agent, then signal the end."""
        try:
            if prompt is not None:
                self._conversation.send_message(prompt)
            await self._conversation.arun()
        except BaseException as exc:  # noqa: BLE001 - handed to the turn, never lost
            emit(exc)
        finally:
            if self._pausing:  # the confirmation policy served this pause only
                with contextlib.suppress(Exception):
                    self._never_confirm()
            spent = self._spent()
            if spent is not None:
                emit(spent)
            emit(_END)

    async def _stop_run(self, run: concurrent.futures.Future[Any]) -> None:
        """Interrupt the OpenHands run (mid model call or mid command) and wait for it to end."""
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        wrapped = asyncio.wrap_future(run)
        while not run.done() and time.monotonic() < deadline:
            conversation = self._conversation
            if conversation is not None:
                with contextlib.suppress(Exception):
                    conversation.interrupt()
            # After the interrupt, so the run stops at its next await: a question still open
            # (its loop waits for the answer) must not hold the run.
            self._withdraw_decisions()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait({wrapped}, timeout=0.2)
        if not run.done():
            run.cancel()

    def _on_event(self, event: Any) -> None:
        """OpenHands callback (private loop thread, state lock held)."""
        self._relay(event)
        self._check_action(event)

    def _on_token(self, chunk: Any) -> None:
        """OpenHands token callback (private loop thread, while the model's response streams)."""
        tokens, emit = self._tokens, self._emit
        if tokens is None or emit is None:
            return
        try:
            deltas = tokens.feed(chunk)
        except Exception:  # noqa: BLE001 - deltas are a courtesy; the whole response still comes
            return
        for delta in deltas:
            emit(delta)

    def _relay(self, event: Any) -> None:
        recorder, emit, tokens = self._recorder, self._emit, self._tokens
        if recorder is None or emit is None:
            return
        try:
            messages = recorder.translate(event)
            said = response_says(event) if tokens is not None else None
            if tokens is not None and said is not None:
                # The response's streamed deltas end before what its event says.
                messages = [*tokens.close(has_text=said[0], has_thinking=said[1]), *messages]
        except Exception as exc:  # noqa: BLE001 - a surprise event shape must not kill the run
            messages = [BackendMessage(MessageType.STATUS, f"unreadable OpenHands event: {type(exc).__name__}")]
        if recorder.refused and self.refusal() is not None:
            self._end_run_after_refusal()
        # Read here, between the agent's steps: a response's cost and tokens are then both in.
        spent = self._spent()
        if spent is not None:
            emit(spent)
        for message in messages:
            emit(message)

    # ------------------------------------------------------------------ permissions
    def _check_action(self, event: Any) -> None:
        """Decide an action OpenHands is about to run (private loop thread, state lock held;
        OpenHands runs the step's actions only after this returns). A denied action is blocked
        in the conversation state, as OpenHands' PreToolUse hooks block one: the model reads
        "Action rejected: <reason>" as the tool's result, and the run goes on."""
        from openhands.sdk.event import ActionEvent

        if not isinstance(event, ActionEvent) or event.action is None:
            return  # a call OpenHands could not parse is answered with an error, not run
        fields = action_fields(event.action)
        call = tool_call(event.tool_name, fields, self._custom_tools)
        if call is None:
            return
        gate = self.gate
        if self._pausing:  # an earlier action of this response waits: this one waits, undecided
            verdict = gate.evaluate(call) if gate is not None else None
            self._waiting[event.tool_call_id] = pending_call(
                event.tool_call_id, event.tool_name, fields, call, verdict,
                needs_approval=verdict is not None and verdict.behavior == "ask")
            return
        decision = self._decide(call)
        state = self._actions_state
        if isinstance(decision, str) or not (decision.allowed or decision.deferred):
            if state is not None:
                state.block_action(event.id, decision if isinstance(decision, str) else self.redact(decision.reason))
        elif decision.deferred:
            verdict = gate.evaluate(call) if gate is not None else None
            self._waiting[event.tool_call_id] = pending_call(event.tool_call_id, event.tool_name, fields, call,
                                                             verdict, needs_approval=True)
            self._pause_after_this_response()
        else:
            self._allowed_now.add(event.tool_call_id)

    def _pause_after_this_response(self) -> None:
        """OpenHands asks for a confirmation of the response's actions (before it runs any of
        them) when its policy says so: AlwaysConfirm until the run has stopped (state lock held)."""
        from openhands.sdk.security.confirmation_policy import AlwaysConfirm

        self._pausing = True
        state = self._actions_state
        if state is not None:
            state.confirmation_policy = AlwaysConfirm()

    def _never_confirm(self) -> None:
        from openhands.sdk.security.confirmation_policy import NeverConfirm

        conversation = self._conversation
        if conversation is not None:
            conversation.set_confirmation_policy(NeverConfirm())

    def _decide(self, call: ToolCall) -> Any:
        """The gate's decision on the caller's loop, waited for here (a PermissionDecision; it
        may defer the call when the conversation is kept for a later process), or, when no
        decision came, what the model is told. The gate records its own denials; an action
        blocked because no decision came (the session ended, the run was stopped, the check
        failed) is recorded here, so the result names it too."""
        loop = self._caller_loop
        if loop is None or loop.is_closed():
            return self._undecided(call, "Permission denied: the session has ended.", "stopped")
        decision = self.permit(call, defer=self.options.openhands_persistence_dir is not None)
        try:
            future = asyncio.run_coroutine_threadsafe(decision, loop)
        except RuntimeError:  # the loop closed meanwhile
            decision.close()
            return self._undecided(call, "Permission denied: the session has ended.", "stopped")
        with self._deciding_lock:
            self._deciding.add(future)
        if self._closed:  # disconnect() withdrew the open questions before this one was listed
            future.cancel()
        try:
            verdict = future.result()
        except concurrent.futures.CancelledError:
            return self._undecided(call, "Permission denied: the run was stopped before this call was decided.",
                                   "stopped")
        except Exception as exc:  # noqa: BLE001 - fail closed: an error never lets a call through
            return self._undecided(call, f"Permission denied: the permission check failed ({type(exc).__name__}).",
                                   "error")
        finally:
            with self._deciding_lock:
                self._deciding.discard(future)
        return verdict

    def _undecided(self, call: ToolCall, reason: str, rule: str) -> str:
        """Record an action blocked without a decision of the gate; the reason, for the model."""
        self.deny(call.name, call.summary(160) or call.name, reason, rule)
        return reason

    def _withdraw_decisions(self) -> None:
        """Cancel the decisions the private loop waits for: each waiting action is then blocked."""
        with self._deciding_lock:
            pending = list(self._deciding)
        for future in pending:
            future.cancel()

    def _redacted(self, message: BackendMessage) -> BackendMessage:
        """The message with the backend's secrets (its key, the terminal's `env` values) out of
        every field that leaves it."""
        message.content = self.redact(message.content)
        if message.tool_input is not None:
            message.tool_input = {key: self.redact.data(value) for key, value in message.tool_input.items()}
        if message.details:
            message.details = {key: self.redact.data(value) for key, value in message.details.items()}
        if message.raw is not None:
            message.raw = self.redact.data(message.raw)
        return message

    def _end_run_after_refusal(self) -> None:
        """The refusal tool ends the turn the way OpenHands' finish tool does."""
        from openhands.sdk.conversation.state import ConversationExecutionStatus

        with contextlib.suppress(Exception):
            self._conversation.state.execution_status = ConversationExecutionStatus.FINISHED

    def _spent(self) -> _Spent | None:
        """New model responses in OpenHands' metrics (private loop thread)."""
        conversation = self._conversation
        if conversation is None:
            return None
        try:
            responses, cost = self._cursor.take(conversation.conversation_stats.get_combined_metrics())
        except Exception:  # noqa: BLE001 - usage is best effort; the run goes on
            return None
        return _Spent(responses, cost) if responses else None

    def _settle(self, spent: _Spent) -> None:
        if spent.cost is not None:  # LiteLLM priced these responses
            self.ledger.settle(sum(spent.responses, Usage()), cost=spent.cost)
        else:
            for usage in spent.responses:
                self.ledger.settle(usage)

    def _failure(self, exc: BaseException) -> BackendError:
        if isinstance(exc, BackendError):
            return exc
        message, status = failure_message(exc)
        return BackendError(self.redact(message), backend=self.name, status_code=status)

    # ------------------------------------------------------------------ custom tools
    def _tool_handler(self, tool: Tool) -> Callable[[dict[str, Any]], ToolReply]:
        """Runs in an OpenHands tool thread: the tool runs on the caller's loop, where async
        tools expect to run (and where a cancelled turn waits for it)."""

        def handler(arguments: dict[str, Any]) -> ToolReply:
            loop = self._caller_loop
            if loop is None or loop.is_closed():
                return ToolReply("The session has ended.", is_error=True)
            future = asyncio.run_coroutine_threadsafe(self.run_tool(tool, arguments), loop)
            try:
                return future.result()
            except concurrent.futures.CancelledError:
                return ToolReply("Tool call cancelled.", is_error=True)
            except Exception as exc:  # noqa: BLE001 - reported to the model, never lost
                return ToolReply(self.redact(f"{tool.name} failed: {type(exc).__name__}: {exc}"), is_error=True)

        return handler

    # ------------------------------------------------------------------ approvals that can wait
    def _waiting_actions(self) -> list[Any]:
        """The actions OpenHands has not run (its unmatched actions), in order, without the
        blocked ones (they are answered with their reason when it runs on)."""
        from openhands.sdk.conversation.state import ConversationState

        state = self._conversation.state
        blocked = dict(state.blocked_actions)
        return [action for action in ConversationState.get_unmatched_actions(state.active_branch())
                if action.id not in blocked]

    def _pause_here(self) -> BackendMessage | None:
        """End the turn at the actions that wait: the deferred ones, the ones after them, and the
        ones of their response the gate allowed before them (OpenHands holds them all). None when
        nothing waits after all (the turn then ends as usual)."""
        pending: list[PendingCall] = []
        self._allowed_waiting = set()
        for action in self._waiting_actions():
            waiting = self._waiting.get(action.tool_call_id)
            if waiting is None:
                fields = action_fields(action.action) if action.action is not None else {}
                waiting = pending_call(action.tool_call_id, action.tool_name, fields,
                                       tool_call(action.tool_name, fields, self._custom_tools),
                                       None, needs_approval=False)
            if action.tool_call_id in self._allowed_now:
                self._allowed_waiting.add(action.tool_call_id)
            pending.append(waiting)
        self._waiting, self._pausing = {}, False
        if not pending:
            return None
        self.defer_calls(pending)
        asking = [call for call in pending if call.needs_approval]
        return BackendMessage(MessageType.STATUS, content=(
            f"paused: {len(asking)} call(s) wait for a person's approval ({asking[0].tool}: {asking[0].reason})"
            if asking else f"paused: {len(pending)} call(s) wait"), details={"pending": [c.id for c in pending]})

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, the OpenHands
        conversation id, the gate's "always" answers and the waiting actions it already allowed.
        A copy of the conversation's files goes to the same store, for a process whose
        persistence dir lacks it (a failure to copy is logged: this host can still approve).
        StoreError when the record cannot be kept."""
        store = await backend_store(self)
        handle = await hold_paused(self, record, "openhands", {"allowed": sorted(self._allowed_waiting)}, store=store)
        await self._keep_conversation(store)
        return handle

    async def _keep_conversation(self, store: Any = None) -> None:
        """Store the conversation's files as they are now (`_kept`) in `store` (by default the
        one the conversation_store option names); a failure is logged."""
        from agenter.backends.agents.openhands._kept import keep_conversation

        persistence_dir, session = self._persistence, self._session_id
        if persistence_dir is None or session is None:
            return
        try:
            if store is None:
                store = await backend_store(self)
            if store is not None:
                if await asyncio.to_thread(keep_conversation, store, persistence_dir, uuid.UUID(session)):
                    self._copy_kept = True
                else:
                    log.warning("openhands: the conversation %s is not in openhands_persistence_dir %s, so no copy "
                                "of it was kept in the conversation store", session, str(persistence_dir))
        except (AgenterError, OSError, ValueError) as exc:  # StoreError among them
            log.warning("openhands: the conversation %s could not be kept in the conversation store (only a process "
                        "with openhands_persistence_dir %s can continue it): %s", session, str(persistence_dir),
                        self.redact(str(exc)))

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued: each waiting action decided with the person's answer (a
        refused one blocked, as a denial is), then OpenHands runs on without a message and runs
        the waiting actions first. An unanswered action the gate defers again pauses the run
        again before any model request."""
        from openhands.sdk.conversation.state import ConversationExecutionStatus

        gate = self.gate
        if gate is None or self._conversation is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        own, pending = resume_paused(self, held, "openhands")
        allowed_before = set(own.get("allowed") or [])
        state = self._conversation.state
        actions = {action.tool_call_id: action for action in self._waiting_actions()}
        if (not pending or state.execution_status != ConversationExecutionStatus.WAITING_FOR_CONFIRMATION
                or any(call.id not in actions for call in pending)):
            raise ConfigurationError(
                f"the OpenHands conversation {self.session_id!r} went on after the run paused (it no longer waits "
                "for a confirmation of the paused calls), so they cannot be answered", parameter="handle")
        if await self._went_on_elsewhere():
            raise ConfigurationError(
                f"the OpenHands conversation {self.session_id!r} went on after the run paused, in another process "
                "(the copy in conversation_store holds events this openhands_persistence_dir lacks), so the paused "
                "calls cannot be answered", parameter="handle")
        self._allowed_waiting = set()
        again: list[PendingCall] = []
        for waiting in pending:
            action = actions[waiting.id]
            call = tool_call(waiting.tool, dict(waiting.input), self._custom_tools)
            answer = answers.get(waiting.id)
            if call is None or (answer is None and waiting.id in allowed_before):
                self._allowed_waiting.add(waiting.id)
                continue
            if answer == "always":
                gate.approve_always(call)
            if answer is None:
                decision = await self.permit(call, defer=True)
            else:
                decision = await self.permit(call, answer=PermissionAnswer(answer != "deny"))
            if decision.deferred:
                verdict = gate.evaluate(call)
                again.append(pending_call(waiting.id, waiting.tool, waiting.input, call, verdict, needs_approval=True))
            elif decision.allowed:
                self._allowed_waiting.add(waiting.id)
            else:
                await asyncio.to_thread(self._block, action.id, self.redact(decision.reason))
        if again:  # still waiting: pause again, listing every action that waits
            waiting_now = {call.id: call for call in again}
            self.defer_calls([waiting_now.get(call.id, call.model_copy(update={"needs_approval": False}))
                              for call in pending if call.id in waiting_now or call.id in self._allowed_waiting])
            yield BackendMessage(MessageType.STATUS, content=f"paused again: {len(again)} call(s) wait for a "
                                 f"person's approval ({again[0].tool}: {again[0].reason})",
                                 details={"pending": [c.id for c in again]})
            return
        async for message in self._drive(None, replay=[actions[call.id] for call in pending]):
            yield message

    async def _went_on_elsewhere(self) -> bool:
        """The stored copy of the conversation holds events this host's folder lacks (a request
        on another host went on from the pause); a store that cannot be read says nothing."""
        from agenter.backends.agents.openhands._kept import went_on_elsewhere

        persistence_dir, session = self._persistence, self._session_id
        if persistence_dir is None or session is None:
            return False
        try:
            store = await backend_store(self)
            return store is not None and await asyncio.to_thread(
                went_on_elsewhere, store, persistence_dir, uuid.UUID(session))
        except (AgenterError, OSError, ValueError) as exc:  # StoreError among them
            log.warning("openhands: the stored copy of conversation %s could not be read: %s", session,
                        self.redact(str(exc)))
            return False

    def _block(self, action_id: str, reason: str) -> None:
        """Refuse a waiting action: OpenHands answers it with the reason when it runs on."""
        state = self._conversation.state
        with state:
            state.block_action(action_id, reason)
