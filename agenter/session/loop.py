"""CodingRun: the loop that turns backend turns into a verified result.

Per iteration: check budget → run a backend turn (streamed, with the time, token and cost budgets
enforced while it runs) → collect modified files → run validators → completed, or retry with the
errors in the prompt. Knows backends only through the CodingBackend protocol and capabilities.

A CodingRun is one request on a backend its session (agenter.facade.session) owns: it counts
usage, files, denials and the applied diff from where the request started and leaves the backend
connected. A session of one request (`execute()`) hands the run its connect and disconnect, so
that they happen inside the run's events and time budget. `CodingSession` (at the end) is the
earlier name, kept working: a run that connects its backend itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import time
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from agenter._errors import AgenterError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus, ModifiedFiles, Usage
from agenter.backends.base import (
    UNASKED_RULE,
    BackendMessage,
    CodingBackend,
    Denial,
    MessageType,
    SessionSpec,
    TurnReport,
)
from agenter.host.redact import Redactor, strip_ansi
from agenter.sandbox.paths import read_text_capped
from agenter.session.budget import ITERATIONS, TIME, BudgetTracker, Limits
from agenter.session.modes import PatchMode, output_type_for
from agenter.session.pause import Continuation, pause_record
from agenter.session.telemetry import RunTrace
from agenter.session.transcript import TranscriptWriter, resolve_resume
from agenter.validators import ValidationResult, ValidatorChain

log = logging.getLogger("agenter.session")

#: How long a cancelled turn may take to wind down before the session stops waiting for it.
CANCEL_GRACE_SECONDS = 5.0
#: Larger files are reported truncated, with a note, so a result never holds a huge blob.
MAX_FILE_BYTES = 2 * 1024 * 1024

_END = object()
_STOP = object()
_TIME_UP = object()

#: The event vocabulary: what each kind of backend message is (CodingEvent.kind).
_KINDS = {
    MessageType.TEXT: CodingEventType.TEXT,
    MessageType.TEXT_DELTA: CodingEventType.TEXT_DELTA,
    MessageType.THINKING: CodingEventType.THINKING,
    MessageType.THINKING_DELTA: CodingEventType.THINKING_DELTA,
    MessageType.TOOL_CALL: CodingEventType.TOOL_CALL_STARTED,
    MessageType.TOOL_RESULT: CodingEventType.TOOL_CALL_FINISHED,
    MessageType.COMMAND_START: CodingEventType.COMMAND_STARTED,
    MessageType.COMMAND_END: CodingEventType.COMMAND_FINISHED,
    MessageType.FILE_EDIT: CodingEventType.FILE_EDITED,
    MessageType.PERMISSION: CodingEventType.PERMISSION_DECISION,
    MessageType.USAGE: CodingEventType.USAGE_UPDATED,
    MessageType.COMPACTED: CodingEventType.CONTEXT_COMPACTED,
    MessageType.ERROR: CodingEventType.ERROR,
    MessageType.STATUS: CodingEventType.STATUS,
    MessageType.PLAN: CodingEventType.PLAN,
    MessageType.STEERED: CodingEventType.STEERED,
}
#: The whole text or thinking that closes what was streamed in deltas.
_CLOSES = {MessageType.TEXT: MessageType.TEXT_DELTA, MessageType.THINKING: MessageType.THINKING_DELTA}


def _error_kind(exc: BaseException) -> str:
    """The failure class of an error (BackendError.kind; configuration errors are "config")."""
    from agenter._errors import ConfigurationError

    kind = getattr(exc, "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    return "config" if isinstance(exc, ConfigurationError) else "unknown"


def _clip(text: str, limit: int = 200) -> str:
    """A model's text quoted in a one-line reason: whitespace runs as one space, cut at `limit`."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")


def _timeout(seconds: float) -> float | None:
    """asyncio wants None, not infinity, for no time limit."""
    return None if seconds == float("inf") else seconds




class _TimeUp(Exception):
    """The session's time budget ran out while waiting on a backend turn or a validator."""


class _Stopped(Exception):
    """The caller stopped the request (AgentSession.cancel) while it waited on a turn or a validator."""


class _Failure:
    """An exception raised by the source of a bounded stream, handed over as an item."""

    def __init__(self, error: BaseException):
        self.error = error


async def _within_time(source: AsyncIterator[Any], tracker: BudgetTracker | Limits,
                       name: str, *, stops: list[asyncio.Queue[Any]] | None = None,
                       context: contextvars.Context | None = None) -> AsyncGenerator[Any, None]:
    """Items of `source`, consumed in a task of its own so that the time budget can cancel it
    wherever it is waiting (a hung model, a slow test command). Raises _TimeUp when the budget
    runs out; an exception of the source arrives as a _Failure item and ends the stream.
    While it runs its queue is in `stops`, where a stop puts _STOP (raised here as _Stopped).
    `context` is the task's context (the turn's tracing span).

    Lock-step: the source is resumed only after the session has taken its previous item, so a
    turn never runs ahead of the session's budget checks (a tool the session stopped the turn
    before does not run, and every tool that ran has had its event taken).
    """
    queue: asyncio.Queue[Any] = asyncio.Queue()
    taken = asyncio.Event()

    async def pump() -> None:
        try:
            async for item in source:
                taken.clear()
                queue.put_nowait(item)
                await taken.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the session, never lost
            queue.put_nowait(_Failure(exc))
        finally:
            # Cancelled between items: close the source here, so its own cleanup (the backend's
            # last snapshot, ending its process) runs now rather than when it is collected.
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(BaseException):
                    await aclose()
            queue.put_nowait(_END)

    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def arm() -> None:
        # One timer for the whole stream (the deadline is fixed), not one per item: when it
        # fires it queues _TIME_UP, which wakes the wait below.
        nonlocal timer
        remaining = tracker.remaining_time()
        if remaining != float("inf"):
            timer = loop.call_later(max(remaining, 0.0), queue.put_nowait, _TIME_UP)

    task = asyncio.create_task(pump(), name=f"agenter-{name}", context=context)
    if stops is not None:
        stops.append(queue)
    try:
        arm()
        while True:
            if tracker.remaining_time() <= 0:
                raise _TimeUp
            item = await queue.get()  # an item already queued is taken without waiting
            if item is _TIME_UP:
                arm()  # early by the clocks' difference: wait out the rest (the check above)
                continue
            if item is _END:
                return
            if item is _STOP:
                raise _Stopped
            yield item
            taken.set()
    finally:
        if timer is not None:
            timer.cancel()
        if stops is not None and queue in stops:
            stops.remove(queue)
        if not task.done():
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
            if not done:
                log.warning("%s did not stop within %.0f s of cancellation", name, CANCEL_GRACE_SECONDS)


class _TurnOutcome:
    """What one backend turn produced, as seen by the session."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.exceeded: str | None = None
        self.by_session = False  # the limit crossed is the multi-request session's
        self.last_text: str = ""
        self.streamed: dict[MessageType, list[str]] = {}
        #: Tool calls the backend reported, and the last one's error (why a run changed nothing).
        self.tool_calls = 0
        self.tool_error = ""


class _Outcome(Exception):
    """Ends the loop with a status; raised by the steps, caught by `run`."""

    def __init__(self, status: CodingStatus, error: str | None = None, exceeded: str | None = None,
                 kind: str | None = None):
        super().__init__(error or status.value)
        self.status = status
        self.error = error
        self.exceeded = exceeded
        self.kind = kind


class _RunState:
    """What the loop knows so far; the result is built from it."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self.iteration = 0
        self.summary = ""
        self.output: Any = None
        self.refusal: Any = None
        self.validation_errors: list[str] = []
        #: The latest validation's verdicts, advisory ones included (result.validation).
        self.validation: list[ValidationResult] = []
        self.started_turn = False
        #: This iteration's files written outside allowed_write_paths, removed: told to the model.
        self.outside = ""
        #: What the turns did, for the reason of a run that changed no file: tool calls reported,
        #: the last tool error, the last turn's final text ("" when its reply was empty).
        self.tool_calls = 0
        self.tool_error = ""
        self.last_reply = ""
        #: PAUSED: the calls that wait for a person, and the handle that continues the run.
        self.pending: list[Any] = []
        self.handle: str | None = None
        #: PAUSED: the run's time until the pause (seconds, as kept in the pause record).
        self.paused_at: float | None = None


class CodingRun:
    """One run of one request on a connected backend. Use `run()` to stream events; `result`
    holds the CodingResult once SESSION_END has been emitted.

    `limits` adds the session's budget to the request's; `transcript` and `trace` record the run.
    `connect` and `disconnect` are the session's own when the session lasts this one run: the
    backend is connected after SESSION_START, within the run's time and span (a backend that
    cannot start ends the run with ERROR, or BUDGET_EXCEEDED, and its events), and disconnected
    before the result is read, so nothing it started outlives SESSION_END.

    A turn that ends at calls waiting for a person (TurnReport.pending) pauses the run: the
    backend keeps it (`hold`, session/pause.py) and the result is PAUSED with the calls and the
    handle. `continuation` is such a run continued: the first turn is the backend's
    `continue_paused`, and the counts, files and refusals go on from the recorded ones. `agent`
    describes the agent for the record (what `agenter approve` builds the agent from).
    """

    def __init__(self, backend: CodingBackend, request: CodingRequest, *, budget: Budget,
                 validators: ValidatorChain, backend_name: str, model: str | None = None,
                 secrets: list[str] | None = None, mode: str = "autonomous",
                 limits: Limits | None = None, transcript: TranscriptWriter | None = None,
                 trace: RunTrace | None = None, request_index: int | None = None,
                 redactor: Redactor | None = None, write_policy: Any = None,
                 on_permission: Any = None, permission_timeout: float | None = 60.0,
                 connect: Callable[[], Awaitable[None]] | None = None,
                 disconnect: Callable[[], Awaitable[None]] | None = None,
                 continuation: Continuation | None = None, agent: dict[str, Any] | None = None):
        self.backend = backend
        self.request = request
        self.budget = budget
        self.validators = validators
        self.backend_name = backend_name
        self.model = model
        self.mode = mode
        self.result: CodingResult | None = None
        self.request_index = request_index
        self._connect_backend = connect
        self._disconnect_backend = disconnect
        self._redact = redactor or Redactor(extra=secrets)
        self._changed = ModifiedFiles()
        self._denials: list[Denial] = []
        self._given_limits = limits
        self._limits = limits or Limits(budget)
        self._transcript = transcript
        self._trace = trace
        self._stops: list[asyncio.Queue[Any]] = []
        self._stopped: str | None = None
        #: What the latest turn did, as the backend reported it (backend.last_turn()).
        self._report = TurnReport()
        #: Every member a wrapper backend tried, as of its latest report.
        self._attempts_seen: tuple[Any, ...] = ()
        #: Patch mode: agenter applies the model's proposals (None in the other modes).
        self._patch: PatchMode | None = None
        self._patch_problem = ""
        #: Patch mode: what judges agenter's own writes of a proposal. The agent runs read-only
        #: (the policy's plan mode); the user's policy (None: every safety check, nothing else)
        #: decides the files agenter writes for it, asking on_permission as the agent's gate would.
        self._write_policy = write_policy
        self._on_permission = on_permission
        self._permission_timeout = permission_timeout
        self._continuation = continuation
        self._agent = agent or {}

    # ------------------------------------------------------------------ control
    def stop(self, reason: str = "cancelled by the caller") -> None:
        """End the run at its next step: a turn or validator in flight is cancelled, and the run
        ends with ERROR and `reason` (events and result as usual)."""
        if self._stopped is None:
            self._stopped = reason
        for queue in list(self._stops):
            queue.put_nowait(_STOP)

    def _usage(self) -> Usage:
        """The request's own usage (the backend's figure is cumulative for its session)."""
        return self._limits.usage(self.backend.usage())

    # ------------------------------------------------------------------ the loop
    async def run(self) -> AsyncGenerator[CodingEvent, None]:
        """SESSION_START, the iterations, the final event, SESSION_END (always last); each event
        recorded in the transcript and the trace as it passes."""
        ended = False
        try:
            async with contextlib.aclosing(self._run()) as events:
                async for event in events:
                    self._record(event)
                    ended = event.type is CodingEventType.SESSION_END
                    yield event
        finally:
            if not ended and self.result is not None and self._transcript is not None:
                # Abandoned (the caller stopped reading): the transcript still says how it ended.
                with contextlib.suppress(Exception):
                    for event in self._closing_events(self.result):
                        self._transcript.event(self.request_index, event)
            if self._trace is not None:
                self._trace.end(self.result)

    def _record(self, event: CodingEvent) -> None:
        transcript = self._transcript
        if transcript is not None:
            session_id = None
            with contextlib.suppress(Exception):
                session_id = self.backend.session_id
            transcript.agent_session(session_id)
            transcript.event(self.request_index, event)
        if self._trace is not None:
            self._trace.on_event(event)

    async def _run(self) -> AsyncGenerator[CodingEvent, None]:
        continuation = self._continuation
        if self._given_limits is None:
            self._limits = Limits(self.budget, base=self.backend.usage(),
                                  carried=continuation.usage if continuation else None,
                                  carried_seconds=continuation.elapsed if continuation else 0.0)
        state = _RunState(self.request.prompt)
        if continuation is not None:
            # The iteration that paused goes on as the same one; what it and the ones before it
            # changed and refused is the run's, once.
            state.iteration = continuation.iterations - 1
            state.summary = continuation.summary
            state.prompt = continuation.prompt or state.prompt
            self._changed = continuation.files
            self._denials = continuation.denials
        if self.mode == "patch":
            # Proposals are confined to the workspace whatever the sandbox setting: their paths
            # are the repository's.
            from agenter.permissions import PermissionGate, PermissionPolicy

            gate = PermissionGate(self._write_policy or PermissionPolicy(mode="bypass"), self.request.cwd,
                                  on_permission=self._on_permission, ask_timeout=self._permission_timeout)
            self._patch = PatchMode(cwd=self.request.cwd, allowed_write_paths=self.request.allowed_write_paths,
                                    sandbox=True, permit=gate.decide,
                                    shows_files=not self.backend.capabilities.filesystem_read,
                                    files=self.backend.capabilities.patch_files)
            state.prompt = self._patch.task(self.request.prompt)
        outcome: _Outcome | None = None
        start: dict[str, Any] = dict(cwd=str(self.request.cwd), model=self.model, backend=self.backend_name,
                                     max_iterations=self.budget.max_iterations, budget=self.budget.model_dump())
        if self.request_index is not None:
            start["request"] = self.request_index
        yield self._event(CodingEventType.SESSION_START, **start)
        try:
            if self._connect_backend is not None:
                await self._connect()
            while True:
                self._check_budget_before_iteration(state)
                async with contextlib.aclosing(self._iteration(state)) as events:
                    async for event in events:
                        yield event
        except _Outcome as decided:
            outcome = decided
        except (asyncio.CancelledError, GeneratorExit):
            outcome = _Outcome(CodingStatus.ERROR, "session cancelled by the caller")
            raise
        except AgenterError as exc:
            outcome = _Outcome(CodingStatus.ERROR, self._describe_error(exc), kind=_error_kind(exc))
        except Exception as exc:  # a bug or an unexpected backend failure: report, never hide
            log.exception("coding session failed")
            outcome = _Outcome(CodingStatus.ERROR, self._describe_error(exc), kind="unknown")
        finally:
            if self._disconnect_backend is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    # Always disconnect: a backend may have spawned a process before connect() failed.
                    await asyncio.wait_for(self._disconnect_backend(), CANCEL_GRACE_SECONDS * 2)
            final = outcome or _Outcome(CodingStatus.ERROR, "session ended unexpectedly")
            files: dict[str, str | None] = {}
            with contextlib.suppress(Exception, asyncio.CancelledError):
                # Reading changed files can take a while: never on the event loop, and paced so
                # that the thread holding the GIL lets the loop run every few milliseconds.
                from agenter.sandbox.changes import in_paced_thread

                files = await in_paced_thread(self._read_files)
            self.result = self._build_result(final, state, files)

        for event in self._closing_events(self.result):
            yield event

    def _closing_events(self, result: CodingResult) -> list[CodingEvent]:
        """The outcome event and SESSION_END."""
        end = self._event(CodingEventType.SESSION_END, status=result.status.value,
                          iterations=result.iterations, tokens=result.total_tokens,
                          cost=result.total_cost_usd, duration=result.duration_seconds,
                          result=self._result_json(result))
        end._result = result  # raw, for the caller; the data is the redacted copy
        return [self._final_event(result), end]

    async def _iteration(self, state: _RunState) -> AsyncGenerator[CodingEvent, None]:
        """One turn, its changes, its validation; raises _Outcome when the run is decided."""
        state.iteration += 1
        iteration = state.iteration
        continuation, self._continuation = self._continuation, None
        if continuation is not None:
            yield self._event(CodingEventType.ITERATION_START, iteration=iteration, continues=continuation.handle)
        else:
            yield self._event(CodingEventType.ITERATION_START, iteration=iteration)
        turn = _TurnOutcome()
        state.started_turn = True
        # aclosing: if our consumer stops, the turn's task is cancelled right away.
        async with contextlib.aclosing(self._run_turn(state.prompt, turn, iteration, continuation)) as turn_events:
            async for event in turn_events:
                yield event
        if turn.last_text:
            state.summary = turn.last_text
        state.last_reply = turn.last_text
        state.tool_calls += turn.tool_calls
        state.tool_error = turn.tool_error or state.tool_error
        self._report = self._read_report()
        changes = await self._undo_outside(self._collect_changes(), state)
        self._changed = self._changed | changes
        self._collect_denials()
        ending = self._turn_ending(turn, changes, state)
        if ending is not None:
            if ending.status is CodingStatus.PAUSED:
                ending = await self._hold(state)
            yield self._iteration_end(iteration, False, changes)
            raise ending
        if self._patch is not None:
            applied = ModifiedFiles()
            async with contextlib.aclosing(self._apply_proposal(state, turn, iteration, applied)) as steps:
                async for event in steps:
                    yield event
            changes = changes | applied
            if state.validation_errors and not applied:
                # Not applied: back to the model with what to correct (an iteration, as a failed
                # validation is), without running the validators on an unchanged workspace.
                yield self._iteration_end(iteration, False, changes)
                return

        results: list[ValidationResult] = []
        state.validation = results  # filled as the validators answer: a stopped run keeps what ran
        try:
            async with contextlib.aclosing(self._validate(iteration, results)) as checks:
                async for event in checks:
                    yield event
        except _TimeUp:
            yield self._iteration_end(iteration, False, changes)
            raise _Outcome(CodingStatus.BUDGET_EXCEEDED,
                           self._limits.describe_time(self.backend.usage()) + " (while validating)",
                           TIME) from None
        except _Stopped:
            yield self._iteration_end(iteration, False, changes)
            raise self._stopped_outcome() from None
        problems = self._verdict(results, state)
        passed = not problems
        yield self._iteration_end(iteration, passed, changes)
        if passed:
            state.validation_errors = []
            raise self._completed()
        # Retry with the errors, not the whole transcript; the budget is checked before it is sent.
        state.validation_errors = problems
        if self._patch is not None:
            state.prompt = self._patch.retry(problems, applied=True, task=self._task_again())
        else:
            state.prompt = self._retry_prompt(problems)

    async def _apply_proposal(self, state: _RunState, turn: _TurnOutcome, iteration: int,
                              applied: ModifiedFiles) -> AsyncGenerator[CodingEvent, None]:
        """Patch mode: apply the turn's proposal (its events as the backend's would be); on a
        problem, the next prompt asks for a corrected proposal."""
        assert self._patch is not None
        step = await self._patch.apply(self._report.output)
        self._collect_denials(step.denials)
        for message in step.messages:
            event = self._message_event(message, turn, iteration)
            if event is not None:
                yield event
        applied.written.update(step.written)
        applied.deleted.update(step.deleted)
        self._changed = self._changed | applied
        summary = step.summary.strip()
        if step.problem is None:
            # What this proposal did, with its diff (result.diff holds every applied proposal's).
            applied_text = step.messages[-1].content if step.messages else ""
            state.summary = (summary + "\n\n" if summary else "") + applied_text + f"\n\n```diff\n{step.diff}```"
            state.validation_errors = []
            return
        self._patch_problem = step.problem
        state.summary = (summary + "\n\n" if summary else "") + f"The proposal was not applied: {step.problem}"
        state.validation_errors = [f"[patch] {step.problem}"]
        state.prompt = self._patch.retry([step.problem], applied=False, task=self._task_again())

    def _task_again(self) -> str | None:
        """The task, for a backend that starts each turn afresh (None when it remembers)."""
        return None if self.backend.capabilities.resume else self.request.prompt

    # ------------------------------------------------------------------ steps
    async def _connect(self) -> None:
        """The session's connect within the time budget (the run's span current, for the agent
        program's TRACEPARENT)."""
        assert self._connect_backend is not None
        current = self._trace.current() if self._trace is not None else contextlib.nullcontext()
        try:
            with current:
                await asyncio.wait_for(self._connect_backend(),
                                       _timeout(max(self._limits.remaining_time(), 0.01)))
        except TimeoutError:
            self._collect_connect_denials()
            raise _Outcome(CodingStatus.BUDGET_EXCEEDED,
                           self._limits.describe_time(self.backend.usage()) + " (while the backend started)",
                           TIME) from None
        except BaseException:
            self._collect_connect_denials()
            raise

    def _collect_connect_denials(self) -> None:
        """What the gate refused while the backend started (an MCP server not allowed to start)
        is in the result, though no turn ran to report it."""
        with contextlib.suppress(Exception):
            self._collect_denials(self.backend.denials())

    def _check_budget_before_iteration(self, state: _RunState) -> None:
        """The check before each iteration, which is also the check before a retry. Only a
        failed validation leads back here, so running out of iterations means validation never
        passed: FAILED, not BUDGET_EXCEEDED (unless it is the session's iterations that ran out)."""
        if self._stopped is not None:
            raise self._stopped_outcome()
        crossed = self._limits.crossed(self.backend.usage(), iterations_done=state.iteration)
        if crossed is None:
            return
        if crossed.limit == ITERATIONS and not crossed.session:
            raise _Outcome(CodingStatus.FAILED, self._not_passed_reason(state))
        raise _Outcome(CodingStatus.BUDGET_EXCEEDED, crossed.description, crossed.limit)

    def _stopped_outcome(self) -> _Outcome:
        return _Outcome(CodingStatus.ERROR, self._stopped or "cancelled by the caller")

    def _turn_ending(self, turn: _TurnOutcome, changes: ModifiedFiles, state: _RunState) -> _Outcome | None:
        """An outcome decided by the turn itself, before validation: error, writes outside the
        allowed paths, refusal, a budget crossed mid-turn, a stop."""
        if turn.error is not None:
            return _Outcome(CodingStatus.ERROR, self._describe_error(turn.error), kind=_error_kind(turn.error))
        if self.mode in ("analysis", "patch") and changes:
            return _Outcome(CodingStatus.FAILED, f"{self.mode} mode allows the agent no changes of its own, but "
                            "it changed: " + ", ".join(changes.all))
        outside = self._outside_allowed_paths(changes)
        if outside:
            # Backends prevent what they can; a new file that got through was removed above, a
            # change to a file that existed cannot be undone: a failed run, never a silent success.
            return _Outcome(CodingStatus.FAILED, (
                "the agent changed files outside allowed_write_paths ("
                f"{', '.join(self.request.allowed_write_paths or []) or 'none'}): " + ", ".join(outside)
                + " (agenter keeps no copy of a file's earlier content, so it could not undo the change)"))
        state.refusal = self._report.refusal
        if state.refusal is not None:
            return _Outcome(CodingStatus.REFUSED)
        if self._stopped is not None:
            return self._stopped_outcome()
        if turn.exceeded:
            return _Outcome(CodingStatus.BUDGET_EXCEEDED,
                            self._limits.describe(turn.exceeded, self.backend.usage(), session=turn.by_session)
                            + self._unfinished_note(), turn.exceeded)
        if self._report.pending:
            return _Outcome(CodingStatus.PAUSED)
        return None

    async def _hold(self, state: _RunState) -> _Outcome:
        """Have the backend keep the paused run (session/pause.py): PAUSED with the handle, or
        ERROR naming why it could not be kept (the calls did not run either way)."""
        pending = list(self._report.pending)
        # The paused result reports this time too, so a continuation (which carries it) never
        # reports less than the paused run did (keeping the record takes time of its own).
        state.paused_at = round(self._limits.elapsed(), 3)
        record = pause_record(
            backend=self.backend_name, model=self.model, mode=self.mode, agent=self._agent, request=self.request,
            budget=self.budget, iterations=state.iteration, elapsed=state.paused_at, usage=self._usage(),
            files=self._changed, denials=self._denials, summary=state.summary, prompt=state.prompt, pending=pending)
        try:
            state.handle = await self.backend.hold(record)
        except Exception as exc:  # noqa: BLE001 - a store that fails ends the run truthfully
            return _Outcome(CodingStatus.ERROR, f"the run paused at {len(pending)} call(s) waiting for approval, "
                            f"but it could not be kept to continue later: {self._describe_error(exc)}",
                            kind=_error_kind(exc))
        state.pending = pending
        return _Outcome(CodingStatus.PAUSED)

    async def _validate(self, iteration: int, results: list[ValidationResult]) -> AsyncGenerator[CodingEvent, None]:
        """Validators on every file changed so far that still exists, within the time budget."""
        cwd = Path(self.request.cwd)
        written = list(self._changed.written)
        if not self.validators.validators:
            # Nothing to check: no stat of every changed file, no task.
            yield self._event(CodingEventType.VALIDATION_START, iteration=iteration, validators=[], file_count=0)
            return
        files = await asyncio.to_thread(lambda: sorted(p for p in written if (cwd / p).is_file()))
        yield self._event(CodingEventType.VALIDATION_START, iteration=iteration,
                          validators=[v.name for v in self.validators.validators], file_count=len(files))
        async with contextlib.aclosing(_within_time(
                self.validators.run(files, cwd), self._limits, "validators", stops=self._stops)) as checks:
            async for vresult in checks:
                if isinstance(vresult, _Failure):
                    raise vresult.error
                results.append(vresult)
                extra = {} if vresult.duration_seconds is None else {"duration": round(vresult.duration_seconds, 6)}
                yield self._event(
                    CodingEventType.VALIDATION_RESULT, iteration=iteration,
                    validator=vresult.validator, passed=vresult.passed,
                    errors=[self._redact(e) for e in vresult.errors],
                    blocking=vresult.blocking, skipped=vresult.skipped, **extra)

    def _verdict(self, results: list[ValidationResult], state: _RunState) -> list[str]:
        """The problems that fail this iteration (empty: it passed)."""
        problems = [f"[{r.validator}] {e}" for r in results if r.blocks for e in (r.errors or ["failed"])]
        if state.outside:
            problems.append(state.outside)
        state.output = self._report.output if self.request.output_type else None
        if self.request.output_type is not None and state.output is None:
            problems.append(
                f"No structured output matching {self.request.output_type.__name__} was "
                "returned; return it as instructed.")
        unverified = self._unverified(results, state.output)
        if unverified:
            problems.append(unverified)
        return problems

    def _completed(self) -> _Outcome:
        """Validation passed: COMPLETED, with a note if a limit was crossed at the very end."""
        late = self._limits.crossed(self.backend.usage())
        if late:
            return _Outcome(CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED, late.description, late.limit)
        return _Outcome(CodingStatus.COMPLETED)

    def _not_passed_reason(self, state: _RunState) -> str:
        n = self.budget.max_iterations
        if self._patch is not None and not self._changed:
            last = self._patch_problem
            return f"no proposal could be applied in {n} iteration(s)" + (f"; the last problem: {last}" if last else "")
        if not self._changed and self.request.require_changes:
            denials = [d for d in self._denials if d.rule != UNASKED_RULE]
            # Taken without asking (could not be refused) and writing where agenter would not allow.
            unasked = "" if len(denials) == len(self._denials) else (
                "; without asking, the agent ran commands that write where agenter does not allow: "
                + ", ".join(sorted({d.target for d in self._denials if d.rule == UNASKED_RULE})[:10]))
            if denials:
                refused = ", ".join(sorted({d.target for d in denials})[:10])
                if all(any(w in d.tool.lower() for w in ("write", "edit")) for d in denials):
                    return (f"the agent changed no file in {n} iteration(s): every write was refused "
                            f"({refused}){unasked}")
                return (f"the agent changed no file in {n} iteration(s); these actions were refused: "
                        f"{refused}{unasked}")
            return f"the agent changed no file in {n} iteration(s): " + self._why_nothing_changed(state) + unasked
        return f"validation did not pass within {n} iterations"

    def _why_nothing_changed(self, state: _RunState) -> str:
        """What the agent did instead of changing a file: its tool calls (for an agent whose model
        calls tools: none at all is the cause to name), the last one's error, its last reply."""
        if state.tool_calls:
            parts = [f"{state.tool_calls} tool call(s), none changed a file"]
            if state.tool_error:
                parts.append(f"the last error: {_clip(state.tool_error)}")
        else:
            parts = ["the model made no tool call" if self.backend.capabilities.native_tool_loop
                     else "no tool call was reported"]
            if self._report.advice:
                parts.append(self._report.advice)
        reply = state.last_reply.strip()
        parts.append(f"its last reply: {_clip(reply)}" if reply else "its last reply was empty")
        return "; ".join(parts)

    def _unfinished_note(self) -> str:
        unfinished = self._report.unfinished_tools
        if not unfinished:
            return ""
        return (f"; tool call(s) still running when the run ended, which may change files after it: "
                f"{', '.join(unfinished)}")

    # ------------------------------------------------------------------ turn
    async def _run_turn(self, prompt: str, outcome: _TurnOutcome, iteration: int,
                        continuation: Continuation | None = None) -> AsyncGenerator[CodingEvent, None]:
        """Stream one backend turn as events (a paused turn continued, with `continuation`); token
        and cost budgets are checked per message."""
        context = self._trace.turn_context() if self._trace is not None else None
        checked: tuple[int, float] | None = None
        turn = (self.backend.execute(prompt) if continuation is None
                else self.backend.continue_paused(continuation.record, continuation.answers))
        try:
            async with contextlib.aclosing(
                    _within_time(turn, self._limits, f"turn-{iteration}",
                                 stops=self._stops, context=context)) as items:
                async for item in items:
                    if isinstance(item, _Failure):
                        outcome.error = item.error
                        continue
                    event = self._message_event(item, outcome, iteration)
                    if event is not None:
                        yield event
                    usage = self.backend.usage()
                    figure = (usage.total_tokens, usage.cost_usd)
                    if figure == checked:
                        continue  # no token or cost since the last message (time: _within_time)
                    checked = figure
                    crossed = self._limits.crossed(usage)
                    if crossed:
                        outcome.exceeded, outcome.by_session = crossed.limit, crossed.session
                        break
        except _TimeUp:
            outcome.exceeded, outcome.by_session = TIME, self._limits.time_by_session()
        except _Stopped:
            pass  # _turn_ending reports it

    def _message_event(self, message: BackendMessage, outcome: _TurnOutcome, iteration: int) -> CodingEvent | None:
        """The event for one backend message, in the vocabulary (None: a whole text already
        streamed in deltas, which is not sent twice)."""
        kind = message.type
        if kind in (MessageType.TEXT_DELTA, MessageType.THINKING_DELTA):
            outcome.streamed.setdefault(kind, []).append(message.content)
            if kind is MessageType.TEXT_DELTA:
                outcome.last_text = "".join(outcome.streamed[kind])
        elif kind in _CLOSES:
            pieces = outcome.streamed.pop(_CLOSES[kind], None)
            if kind is MessageType.TEXT and message.content.strip():
                outcome.last_text = message.content
            if pieces is not None:
                return None
        elif kind in (MessageType.TOOL_CALL, MessageType.COMMAND_START):  # a command is a tool call
            outcome.tool_calls += 1
        elif kind in (MessageType.TOOL_RESULT, MessageType.COMMAND_END) and message.is_error:
            outcome.tool_error = message.content
        data = message.event_data()
        if kind is MessageType.STATUS and message.tool_name == "fallback":
            # A fallback chain moved to its next backend: an event of its own.
            return self._event(CodingEventType.FALLBACK, iteration=iteration, message=message.content,
                               **(message.details or {}))
        data["kind"] = _KINDS.get(kind, CodingEventType.STATUS).value
        if kind is MessageType.USAGE:
            if "usage" in data:  # what the backend settled: kept beside the running totals
                data["settled"] = data.pop("usage")
            usage = self._usage()
            data["usage"] = {**usage.model_dump(), "total_tokens": usage.total_tokens}
        return self._event(CodingEventType.BACKEND_MESSAGE, iteration=iteration, **data)

    # ------------------------------------------------------------------ decisions
    def _read_report(self) -> TurnReport:
        """The turn's outcome, read once from the backend (after the turn, also a cancelled one)."""
        try:
            report = self.backend.last_turn()
        except Exception as exc:  # noqa: BLE001 - a backend bug must not hide the run's outcome
            log.warning("backend could not report its turn: %s", exc)
            return TurnReport()
        if report.attempts:
            self._attempts_seen = report.attempts
        return report

    def _collect_changes(self) -> ModifiedFiles:
        changes = self._report.files
        ours = self._own_files()
        folders = tuple(folder + "/" for folder in self._own_folders())

        def theirs(paths: set[str]) -> set[str]:
            return {p for p in paths if p not in ours and not p.startswith(folders)}

        return ModifiedFiles(written=theirs(set(changes.written)), deleted=theirs(set(changes.deleted)),
                             created=theirs(set(changes.created)))

    async def _undo_outside(self, changes: ModifiedFiles, state: _RunState) -> ModifiedFiles:
        """New files the turn wrote outside allowed_write_paths are removed and told to the model
        (agenter.session.outside); the changes without them."""
        state.outside = ""
        allowed = self.request.allowed_write_paths
        if self.mode != "autonomous" or allowed is None or not changes.created:
            return changes
        from agenter.session.outside import undo_outside

        found = await asyncio.to_thread(undo_outside, Path(self.request.cwd), allowed, changes)
        if not found.removed:
            return changes
        self._collect_denials(found.denials())
        state.outside = found.problem()
        removed = set(found.removed)
        self._changed = ModifiedFiles(written=self._changed.written - removed, deleted=self._changed.deleted,
                                      created=self._changed.created - removed)
        return ModifiedFiles(written=changes.written - removed, deleted=changes.deleted,
                             created=changes.created - removed)

    def _own_files(self) -> set[str]:
        """Files agenter itself writes in the workspace (a transcript in a log_dir inside it)."""
        if self._transcript is None:
            return set()
        inside = self._in_workspace(self._transcript.path)
        return {inside} if inside else set()

    def _own_folders(self) -> list[str]:
        """Folders of the workspace only agenter writes: the conversation stores of agenter's own
        agent (agenter.store.default_root: beside the transcript, else in the user's cache)."""
        from agenter.store import default_root

        roots = [default_root(self._transcript.path.parent)] if self._transcript is not None else []
        roots.append(default_root())
        return [inside for inside in (self._in_workspace(root) for root in roots) if inside]

    def _in_workspace(self, path: str | os.PathLike[str]) -> str | None:
        """`path` relative to the workspace (posix), or None when it lies outside."""
        cwd = os.path.realpath(self.request.cwd)
        real = os.path.realpath(path)
        if not real.startswith(cwd.rstrip(os.sep) + os.sep):
            return None
        return Path(os.path.relpath(real, cwd)).as_posix()

    def _collect_denials(self, denials: Any = None) -> None:
        for denial in self._report.denials if denials is None else denials:
            if denial not in self._denials:
                self._denials.append(denial)

    def _outside_allowed_paths(self, changes: ModifiedFiles) -> list[str]:
        if self.request.allowed_write_paths is None or not changes:
            return []
        from agenter.sandbox.paths import PathResolver

        resolver = PathResolver(Path(self.request.cwd), self.request.allowed_write_paths)
        return [path for path in changes.all if not resolver.is_allowed_write(path)]

    def _unverified(self, results: list[ValidationResult], output: Any) -> str | None:
        """A turn that changed nothing, and that no validator really checked, proves nothing."""
        if (not self.request.require_changes or self.mode == "analysis" or output is not None
                or self._changed):
            return None
        if any(not r.skipped for r in results):
            return None
        return ("You ended your turn without changing any file. The task needs changes in the "
                "working directory: make them now with your tools (or decline with the refusal "
                "tool if it cannot be done).")

    def _retry_prompt(self, problems: list[str]) -> str:
        # A turn that changed nothing is told so: "your changes" would say the opposite.
        lines = ["Your changes did not pass validation. Fix these problems:" if self._changed else
                 "No file has changed yet, and the workspace did not pass validation. Fix these problems:"]
        lines += [f"- {p}" for p in problems[:50]]
        if len(problems) > 50:
            lines.append(f"- ... and {len(problems) - 50} more")
        if self._changed:
            lines.append("")
            lines.append("Files changed so far: " + ", ".join(self._changed.all[:100]))
        if self._denials:
            lines.append("")
            lines.append("These actions were refused; do not retry them as they are:")
            lines += [f"- {d.tool} {d.target}: {d.reason}" for d in self._denials[-20:]]
        if not self.backend.capabilities.resume:
            # A backend that starts fresh each turn needs the task again.
            lines = ["Task:", self.request.prompt, ""] + lines
        return "\n".join(lines)

    def _describe_error(self, exc: BaseException) -> str:
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, AgenterError):
            text = f"{type(exc).__name__}: {text}"
        return self._redact(strip_ansi(text))  # agent programs colour their stderr

    # ------------------------------------------------------------------ result & events
    def _read_files(self) -> dict[str, str | None]:
        """New content of every changed file (None when deleted or not a regular file); large
        files are read only up to MAX_FILE_BYTES and marked truncated."""
        from agenter.sandbox.changes import pace

        cwd = os.fspath(self.request.cwd)
        files: dict[str, str | None] = {}
        for rel in self._changed.all:
            pace()
            files[rel] = read_text_capped(os.path.join(cwd, rel), MAX_FILE_BYTES)
        return files

    def _build_result(self, outcome: _Outcome, state: _RunState, files: dict[str, str | None]) -> CodingResult:
        try:
            usage = self._usage()
        except Exception:  # noqa: BLE001
            usage = Usage()
        session_id = None
        with contextlib.suppress(Exception):
            session_id = self.backend.session_id
        diff = (self._patch.diff or None) if self._patch is not None else None
        summary = state.summary or self._default_summary(outcome.status, state)
        refusal = state.refusal
        return CodingResult(
            status=outcome.status, files=files, summary=self._redact(summary),
            iterations=state.iteration, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, total_tokens=usage.total_tokens,
            estimated_input_tokens=usage.estimated_input_tokens, estimated_output_tokens=usage.estimated_output_tokens,
            total_cost_usd=round(usage.cost_usd, 6),
            duration_seconds=state.paused_at if outcome.status is CodingStatus.PAUSED and state.paused_at is not None
            else round(self._limits.elapsed(), 3),
            output=state.output, error=outcome.error, exceeded_limit=outcome.exceeded, error_kind=outcome.kind,
            refusal_reason=self._redact(refusal.reason) if refusal else None,
            validation_errors=[self._redact(e) for e in state.validation_errors],
            validation=[r.model_copy(update={"errors": [self._redact(e) for e in r.errors],
                                             "details": self._redact(r.details) if r.details else r.details})
                        for r in state.validation],
            permission_denials=[d.as_dict() for d in self._denials],
            attempts=self._attempts(),
            diff=diff, backend=self.backend_name, model=self.model, session_id=session_id,
            pending=state.pending if outcome.status is CodingStatus.PAUSED else [],
            resume_handle=state.handle if outcome.status is CodingStatus.PAUSED else None)

    def _attempts(self) -> list[dict[str, Any]]:
        """Every backend a fallback chain tried (empty for a single backend)."""
        try:
            return [a.as_dict() if hasattr(a, "as_dict") else dict(a) for a in self._attempts_seen]
        except Exception:  # noqa: BLE001 - bookkeeping must never fail a result
            return []

    def _default_summary(self, status: CodingStatus, state: _RunState) -> str:
        if status is CodingStatus.PAUSED:
            return f"paused: {len(state.pending)} call(s) wait for a person's approval"
        if not state.started_turn:
            return f"{status.value}: the agent did not run"
        if not self._changed:
            return f"{status.value}: no file changed"
        return f"{status.value}: {len(self._changed.all)} file(s) changed"

    def _iteration_end(self, iteration: int, passed: bool, changes: ModifiedFiles) -> CodingEvent:
        usage = self._usage()
        return self._event(CodingEventType.ITERATION_END, iteration=iteration, passed=passed,
                           files_modified=changes.all, tokens=usage.total_tokens,
                           cost=round(usage.cost_usd, 6))

    def _final_event(self, result: CodingResult) -> CodingEvent:
        common = dict(files=sorted(result.files), summary=result.summary,
                      iterations=result.iterations, tokens=result.total_tokens,
                      cost=result.total_cost_usd)
        if result.status in (CodingStatus.COMPLETED, CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED):
            return self._event(CodingEventType.COMPLETED, status=result.status.value,
                               exceeded_limit=result.exceeded_limit, **common)
        if result.status is CodingStatus.PAUSED:
            return self._event(CodingEventType.PAUSED, status=result.status.value,
                               pending=[call.model_dump(mode="json") for call in result.pending],
                               resume_handle=result.resume_handle, **common)
        if result.status is CodingStatus.REFUSED:
            refusal = self._report.refusal
            return self._event(CodingEventType.REFUSED, reason=result.refusal_reason,
                               category=refusal.category if refusal else None, **common)
        return self._event(CodingEventType.FAILED, status=result.status.value, error=result.error,
                           exceeded_limit=result.exceeded_limit, **common)

    @staticmethod
    def _result_json(result: CodingResult) -> dict[str, Any]:
        try:
            return result.model_dump(mode="json")
        except Exception:  # noqa: BLE001 - an output that is not JSON-safe is sent as text
            data = result.model_dump(mode="json", exclude={"output"})
            data["output"] = repr(result.output)
            return data

    def _event(self, event_type: CodingEventType, /, **data: Any) -> CodingEvent:
        """Every event is redacted (file contents in the final result included); the
        CodingResult the caller gets back stays raw."""
        redacted = self._redact.data(data)
        assert isinstance(redacted, dict)
        return CodingEvent(type=event_type, data=redacted, timestamp=time.time())


class CodingSession(CodingRun):
    """CodingRun's earlier name, kept working with a DeprecationWarning: a run that connects
    `backend` with the request's fields itself and disconnects it at the end, as it did. New
    code uses `agent.execute()`, `agent.session()`, or a CodingRun on a connected backend."""

    def __init__(self, backend: CodingBackend, request: CodingRequest, **options: Any):
        warnings.warn("agenter.CodingSession is now CodingRun, which runs on a backend its session "
                      "connected; use agent.execute(), agent.session() or CodingRun",
                      DeprecationWarning, stacklevel=2)

        async def connect() -> None:
            resume, origin = resolve_resume(request.resume, options["backend_name"])
            transcript = (origin or {}).get("transcript")
            await backend.connect(SessionSpec(
                cwd=Path(request.cwd), allowed_write_paths=request.allowed_write_paths,
                system_prompt=request.system_prompt,
                output_type=output_type_for(options.get("mode", "autonomous"), request.output_type),
                resume_session_id=resume, mode=options.get("mode", "autonomous"),
                resume_log_dir=Path(transcript).parent if transcript else None))

        if not options.pop("connected", False):  # connected=True: the caller connected it
            options.setdefault("connect", connect)
            options.setdefault("disconnect", backend.disconnect)
        super().__init__(backend, request, **options)
