"""AgentSession: one agent conversation, connected once, for its requests.

    async with agent.session(cwd=repo) as session:
        first = await session.execute("Add a parser")
        async for event in session.stream_execute("Now test it"):
            ...
        session.usage, session.files, session.results    # running totals

The backend connects once when the session opens and stays connected until it closes, so a
backend that keeps its conversation (capabilities.resume) answers each request knowing the
earlier ones. Each request is a full run (turns, validation, retries, its own budget and result);
calls are serialized; `budget` bounds the whole session; `cancel()` and `close()` end every
process the backend started.

A one-shot `agent.execute()` is a session of one request (`one_request` below): the same
backend, transcript, trace and run are made here, once. What differs is only where the session
starts and ends: its one run connects the backend after SESSION_START and disconnects it before
the result is read, so a backend that cannot start is an ERROR (or BUDGET_EXCEEDED) result with
its events, as every other failure of a run, and nothing the backend started outlives
SESSION_END. Its span is its run's, and its transcript ends with its run's figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenter._errors import BudgetExceededError, ConfigurationError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, Usage
from agenter.backends.base import SessionSpec
from agenter.sandbox.folder_lock import claim_folder
from agenter.session.budget import TIME, BudgetTracker, Limits
from agenter.session.loop import CANCEL_GRACE_SECONDS, CodingRun
from agenter.session.modes import output_type_for
from agenter.session.pause import Continuation
from agenter.session.telemetry import RunTrace, SessionTrace, tracer_for
from agenter.session.transcript import TranscriptWriter

if TYPE_CHECKING:
    from agenter.facade._config import AgentConfig

__all__ = ["AgentSession", "approve_paused", "one_request"]

log = logging.getLogger("agenter.session")

#: agenter 0.1.7's PersistentCodingSession names and what replaces them.
_SESSION_017 = {
    "modified_files": "session.files (path -> content, None when deleted) for the finished requests",
    "request_count": "len(session.results)",
    "closed": "not session.is_open",
}

#: Request fields fixed when the session opens (the backend was connected with them).
_FIXED = ("cwd", "system_prompt", "allowed_write_paths", "output_type")


@dataclass(frozen=True)
class Steer:
    """What became of session.steer(text): taken (true), or not, and why."""

    taken: bool
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.taken


def _transcript_dir(resumed_from: dict[str, Any] | None) -> Path | None:
    """The folder of the transcript a resume named (None: it named a session id)."""
    transcript = (resumed_from or {}).get("transcript")
    return Path(transcript).parent if transcript else None


class AgentSession:
    """One connected backend serving requests one at a time (see the module docstring).

    Made by `AutonomousCodingAgent.session(...)` from the agent's configuration (`config`) and
    the checked fields it fixes (`template`: cwd, instructions, allowed paths, output type, the
    resolved resume); use it with `async with`, or call `open()` and `close()` yourself.
    """

    def __init__(self, config: AgentConfig, template: CodingRequest, *, budget: Budget | None = None,
                 resumed_from: dict[str, Any] | None = None, log_dir: str | Path | None = None):
        self._config = config
        self._template = template
        self.budget = budget
        self._resumed_from = resumed_from
        self._log_dir = log_dir
        self._single = False  # a session of one request (one_request): its run connects
        self._continuation: Continuation | None = None  # one_request of a paused run continued
        self._state = "new"
        self._cancelled = False
        self._backend: Any = None
        self._spec: SessionSpec | None = None
        self._lock = asyncio.Lock()
        self._current: CodingRun | None = None
        self._runner: asyncio.Task[Any] | None = None
        self._tracker: BudgetTracker | None = None
        self._transcript: TranscriptWriter | None = None
        self._tracer: Any = None
        self._trace: SessionTrace | None = None
        self._redact = config.redactor()
        self._iterations = 0
        self._files: dict[str, str | None] = {}
        self.results: list[CodingResult] = []
        self._budget = config.budget  # the budget of the request running (or last run)
        self._budgets: dict[int, Budget] = {}  # id(result) -> the budget it was held to
        self._folder = claim_folder(template.cwd, config.mode)  # held from open to close

    # ------------------------------------------------------------------ state
    @property
    def cwd(self) -> Path:
        return Path(self._template.cwd)

    @property
    def keeps_conversation(self) -> bool:
        """True when each request continues the same agent conversation (the backend's resume
        capability); otherwise every request starts afresh on the same connected backend."""
        return self._config.capabilities.resume

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    @property
    def session_id(self) -> str | None:
        """The agent's own session id (what `CodingRequest(resume=...)` continues later)."""
        if self._backend is None:
            return None
        with contextlib.suppress(Exception):
            return self._backend.session_id
        return None

    @property
    def usage(self) -> Usage:
        """Tokens and cost of every request so far, the one running included."""
        if self._backend is None:
            return Usage()
        return self._backend.usage()

    @property
    def total_cost_usd(self) -> float:
        return round(self.usage.cost_usd, 6)

    @property
    def files(self) -> dict[str, str | None]:
        """Every file the finished requests changed: path → latest content (None: deleted)."""
        return dict(self._files)

    @property
    def transcript_path(self) -> Path | None:
        return self._transcript.path if self._transcript is not None else None

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> AgentSession:
        await self.open()
        return self

    def __await__(self) -> Generator[Any, None, AgentSession]:
        """`session = await agent.open_session(cwd)` (agenter 0.1.7's form): the session, opened;
        end it with `await session.close()`."""
        return self.__aenter__().__await__()

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            if name in _SESSION_017:
                raise AttributeError(f"AgentSession.{name} is agenter 0.1.7's: use {_SESSION_017[name]}",
                                     name=name, obj=self)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self)

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect the backend (within the session's time budget, else the agent's)."""
        if self._state != "new":
            raise ConfigurationError("a session is opened once; make a new one with agent.session(...)",
                                     parameter="session")
        self._folder.acquire()  # FolderBusyError while another run works in cwd
        self._state = "opening"
        config = self._config
        if self.budget is not None:
            self._tracker = BudgetTracker(self.budget)
        backend = self._backend = config.new_backend()
        model = config.model or backend.default_model
        self._tracer = tracer_for(config.tracer_provider)
        if self._tracer is not None and not self._single:  # a one-request session's span is its run's
            self._trace = SessionTrace(self._tracer, backend=config.backend_name, model=model,
                                       provider=backend.price_provider, mode=config.mode)
        if self._log_dir is not None:
            self._transcript = TranscriptWriter.create(
                self._log_dir, backend=config.backend_name, model=model, mode=config.mode, cwd=self.cwd,
                redact=self._redact, versions=config.versions(), resumed_from=self._resumed_from)
        template = self._template
        self._spec = SessionSpec(cwd=self.cwd, allowed_write_paths=template.allowed_write_paths,
                                 system_prompt=template.system_prompt,
                                 output_type=output_type_for(config.mode, template.output_type),
                                 resume_session_id=str(template.resume) if template.resume else None,
                                 mode=config.mode, log_dir=Path(self._log_dir) if self._log_dir is not None else None,
                                 resume_log_dir=_transcript_dir(self._resumed_from))
        if self._single:
            self._state = "open"  # its run connects the backend (see the module docstring)
            return
        limit = (self.budget or config.budget).max_time_seconds
        current = self._trace.current() if self._trace is not None else contextlib.nullcontext()
        try:
            with current:
                await asyncio.wait_for(self._connect(), limit)
        except BaseException as exc:
            await self._shutdown(error=f"the backend did not start: {type(exc).__name__}: {exc}")
            if isinstance(exc, TimeoutError):
                raise BudgetExceededError(
                    f"time budget exceeded: the {config.backend_name} backend did not start within {limit:g} s",
                    limit=TIME) from None
            raise
        self._state = "open"
        if self._transcript is not None:
            self._transcript.agent_session(self.session_id)

    def steer(self, text: str) -> Steer:
        """Send the running request's agent a message: it reaches the model at the next safe point
        (agenter's own agent: after the tool calls in flight, before its next model request) and
        the request's events show a `steered` event where it landed. Returns whether it was taken;
        when it cannot be (no request running, a backend without the `steering` capability, a
        turn that ends before a safe point), the reason says so. See docs/sessions.md."""
        current, backend = self._current, self._backend
        if self._state != "open" or current is None or backend is None:
            return Steer(False, "no request is running in this session: send it as the next request")
        reason = backend.steer(text)
        return Steer(reason is None, reason)

    async def cancel(self, reason: str = "session cancelled by the caller") -> None:
        """Stop the request in flight (it ends with ERROR and `reason`) and close the session
        (agenter 0.1.7's cancel() kept the session open: open another one to go on)."""
        self._cancelled = True
        await self.close(reason=reason)

    async def close(self, *, reason: str = "session closed") -> None:
        """End the session: a request in flight is stopped, the backend disconnected (nothing it
        started outlives this), the transcript ended. Idempotent."""
        if self._state == "closed":
            return
        opened = self._state == "open"
        self._state = "closed"
        current = self._current
        if current is not None:
            current.stop(reason)
            runner = self._runner
            if runner is not None and runner is not asyncio.current_task():
                # Let the stopped request emit its last events, boundedly.
                with contextlib.suppress(TimeoutError, Exception):
                    await asyncio.wait_for(self._wait_idle(), CANCEL_GRACE_SECONDS * 2)
        if opened or self._backend is not None:
            await self._shutdown()

    async def _connect(self) -> None:
        """Connect the backend with what the session fixes (the caller bounds the time)."""
        assert self._backend is not None and self._spec is not None
        await self._backend.connect(self._spec)

    async def _disconnect(self) -> None:
        if self._backend is not None:
            await self._backend.disconnect()

    async def _wait_idle(self) -> None:
        async with self._lock:
            pass

    async def _shutdown(self, error: str | None = None) -> None:
        backend = self._backend
        if backend is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(backend.disconnect(), CANCEL_GRACE_SECONDS * 2)
        self._folder.release()
        self._state = "closed"
        usage = self.usage
        if self._single and self.results:
            usage = _usage_of(self.results[0])  # its run's figures, rounded as the result's are
        if self._transcript is not None:
            with contextlib.suppress(Exception):
                self._transcript.end(requests=len(self.results), usage=usage, session_id=self.session_id)
        if self._trace is not None:
            with contextlib.suppress(Exception):
                self._trace.end(usage, requests=len(self.results), session_id=self.session_id, error=error)
            self._trace = None

    # ------------------------------------------------------------------ requests
    async def execute(self, request: CodingRequest | str, **request_fields: Any) -> CodingResult:
        """Run one request to the end (after any request still running) and return its result."""
        finished: list[CodingResult] = []
        async with contextlib.aclosing(self._stream(request, request_fields, finished)) as events:
            async for _ in events:
                pass
        result = finished[0]
        self._raise_if_budget_exceeded(result)
        return result

    async def stream_execute(self, request: CodingRequest | str,
                             **request_fields: Any) -> AsyncGenerator[CodingEvent, None]:
        """Yield the request's events (SESSION_START ... SESSION_END, as a one-shot run does).
        Close the generator (`contextlib.aclosing`) when stopping early: the session serves the
        next request only after it."""
        finished: list[CodingResult] = []
        async with contextlib.aclosing(self._stream(request, request_fields, finished)) as events:
            async for event in events:
                yield event
                if event.type is CodingEventType.SESSION_END and finished:
                    self._raise_if_budget_exceeded(finished[0])
                    return

    async def approve(self, handle: str, decisions: Any = None) -> CodingResult:
        """Continue a request of this session that paused (its `result.resume_handle`) with a
        person's answers, in this session: the connected agent goes on from the calls it paused
        at, and the session's totals count the run once. `decisions` as for
        `AutonomousCodingAgent.approve`. A handle from another session is refused (approve it with
        the agent); a request sent in this session after the pause moves the conversation on, and
        the continued run then ends with ERROR saying so. See docs/approvals.md."""
        finished: list[CodingResult] = []
        async with contextlib.aclosing(self._approve(handle, decisions, finished)) as events:
            async for _ in events:
                pass
        result = finished[0]
        self._raise_if_budget_exceeded(result)
        return result

    async def stream_approve(self, handle: str, decisions: Any = None) -> AsyncGenerator[CodingEvent, None]:
        """`approve`, yielding the continued request's events (SESSION_END last, with the result)."""
        finished: list[CodingResult] = []
        async with contextlib.aclosing(self._approve(handle, decisions, finished)) as events:
            async for event in events:
                yield event
                if event.type is CodingEventType.SESSION_END and finished:
                    self._raise_if_budget_exceeded(finished[0])
                    return

    async def _approve(self, handle: str, decisions: Any,
                       finished: list[CodingResult]) -> AsyncGenerator[CodingEvent, None]:
        self._require_open()
        request, _, continuation, store = await claim_paused(self._config, handle, decisions,
                                                             session_id=self.session_id or "")
        async with contextlib.aclosing(_given_back_unless_begun(self._serve(request, finished, continuation),
                                                                store, continuation)) as events:
            async for event in events:
                yield event

    async def _stream(self, request: CodingRequest | str, fields: dict[str, Any],
                      finished: list[CodingResult]) -> AsyncGenerator[CodingEvent, None]:
        checked = self._check(request, fields)
        async with contextlib.aclosing(self._serve(checked, finished)) as events:
            async for event in events:
                yield event

    async def _serve(self, checked: CodingRequest, finished: list[CodingResult],
                     continuation: Continuation | None = None) -> AsyncGenerator[CodingEvent, None]:
        """Run a checked request when the session is free (a paused request continued, with
        `continuation`); its result goes to `finished`."""
        async with self._lock:
            self._require_open()
            run = self._run(checked, continuation)
            self._budget = checked.budget or self._config.budget
            self._current, self._runner = run, asyncio.current_task()
            try:
                async with contextlib.aclosing(run.run()) as events:
                    async for event in events:
                        if event.type is CodingEventType.SESSION_END and run.result is not None:
                            self._finished(run.result)
                            finished.append(run.result)
                        yield event
            finally:
                if run.result is not None and not finished:
                    self._finished(run.result)
                    finished.append(run.result)
                self._current = self._runner = None

    def _raise_if_budget_exceeded(self, result: CodingResult) -> None:
        """The agent's raise_on_budget_exceeded, with the budget the result was held to: the
        session's (and its running totals) when the session's limit stopped it."""
        request_budget = self._budgets.get(id(result))
        if self.budget is not None and (result.error or "").startswith("session "):
            usage = self.usage
            totals = CodingResult(status=result.status, total_tokens=usage.total_tokens,
                                  total_cost_usd=usage.cost_usd, iterations=self._iterations,
                                  duration_seconds=self._tracker.elapsed() if self._tracker else 0.0)
            self._config.raise_if_budget_exceeded(result, self.budget, totals)
        self._config.raise_if_budget_exceeded(result, request_budget)

    def _require_open(self) -> None:
        if self._state == "new":
            raise ConfigurationError("the session is not open: use `async with agent.session(...)` or "
                                     "`await session.open()`", parameter="session")
        if self._state != "open":
            if self._cancelled:
                raise ConfigurationError(
                    "the session is closed: cancel() closed it (agenter 0.1.7's cancel() kept the session "
                    "open); open another with agent.session(...)", parameter="session")
            raise ConfigurationError("the session is closed", parameter="session")

    def _check(self, request: CodingRequest | str, fields: dict[str, Any]) -> CodingRequest:
        """The request with the session's fixed fields; one that asks for others is refused."""
        template = self._template
        if isinstance(request, CodingRequest):
            given = {name: getattr(request, name) for name in request.model_fields_set}
        else:
            given = {}
        given.update(fields)
        for name in _FIXED:
            if given.get(name) is not None and not self._same(name, given[name]):
                raise ConfigurationError(
                    f"{name} is fixed when the session opens ({getattr(template, name)!r}); open another "
                    f"session for another {name}", parameter=name)
        if given.get("resume") is not None:
            raise ConfigurationError("resume is given when the session opens (agent.session(resume=...)), "
                                     "not per request", parameter="resume")
        fixed = {name: getattr(template, name) for name in _FIXED}
        return self._config.check_request(request, {**fields, **fixed, "resume": None})[0]

    def _same(self, name: str, value: Any) -> bool:
        expected = getattr(self._template, name)
        if name == "cwd":
            return Path(value).expanduser().resolve() == Path(expected)
        return bool(value == expected)

    def _run(self, request: CodingRequest, continuation: Continuation | None = None) -> CodingRun:
        config = self._config
        backend = self._backend
        assert backend is not None
        index = len(self.results) + 1
        budget = request.budget or config.budget
        session_iterations = None
        if self.budget is not None and "max_iterations" in self.budget.model_fields_set:
            session_iterations = self._iterations
        continuation, self._continuation = continuation or self._continuation, None
        limits = Limits(budget, base=backend.usage(), session=self._tracker, session_iterations=session_iterations,
                        carried=continuation.usage if continuation else None,
                        carried_seconds=continuation.elapsed if continuation else 0.0)
        model = config.model or backend.default_model
        trace = None
        if self._tracer is not None:
            trace = RunTrace(self._tracer, backend=config.backend_name, model=model,
                             provider=backend.price_provider, mode=config.mode,
                             usage=backend.usage, session_id=lambda: self.session_id, parent=self._trace,
                             request_index=index)
        if self._transcript is not None:
            self._transcript.request(index, request)
        return CodingRun(backend, request, budget=budget, validators=config.validators,
                         backend_name=config.backend_name, mode=config.mode, model=model,
                         limits=limits, transcript=self._transcript, trace=trace, redactor=self._redact,
                         # A one-request session: no request number (as ever), and its run
                         # connects and disconnects the backend (see the module docstring).
                         request_index=None if self._single else index,
                         connect=self._connect if self._single else None,
                         disconnect=self._disconnect if self._single else None,
                         write_policy=config.write_policy, on_permission=config.settings.on_permission,
                         permission_timeout=config.settings.permission_timeout, continuation=continuation,
                         agent=config.description)

    def _finished(self, result: CodingResult) -> None:
        self._budgets[id(result)] = self._budget
        self.results.append(result)
        self._files.update(result.files)
        self._iterations += result.iterations

    def __repr__(self) -> str:
        return (f"AgentSession(backend={self._config.backend_name!r}, cwd={str(self.cwd)!r}, "
                f"state={self._state!r}, requests={len(self.results)})")


async def one_request(config: AgentConfig, request: CodingRequest, *, resumed_from: dict[str, Any] | None,
                      continuation: Continuation | None = None) -> AsyncGenerator[CodingEvent, None]:
    """The events of `request` run as a session of its own: opened, run, closed (what
    `execute()` and `stream_execute()` do). `request` is checked (`AgentConfig.check_request`);
    its budget bounds the start of the backend too. SESSION_END is last and carries the result;
    a BUDGET_EXCEEDED result raises there when the agent was built to raise. `continuation`: the
    request is a paused run's, continued (`approve_paused`)."""
    session = AgentSession(config, request, resumed_from=resumed_from, log_dir=config.log_dir)
    session._single = True
    session._continuation = continuation
    finished: list[CodingResult] = []
    async with session:
        async with contextlib.aclosing(session._serve(request, finished)) as events:
            async for event in events:
                yield event
                if event.type is CodingEventType.SESSION_END and finished:
                    break
    if finished:
        config.raise_if_budget_exceeded(finished[0], request.budget or config.budget)


async def claim_paused(config: AgentConfig, handle: str, decisions: Any, *,
                       session_id: str | None = None) -> tuple[CodingRequest, dict[str, Any] | None, Continuation, Any]:
    """A paused run's record found in the agent's store and checked (the handle, the backend,
    `session_id` when given: the agent session it paused in, the answers), then claimed (a
    handle is used once): the request, where it came from, the continuation and the store.
    Every check fails before the claim, leaving the run paused."""
    from agenter.session.pause import answers_for, request_of
    from agenter.store import StoreError, claim_pause, load_pause
    from agenter.store._pauses import already_used, unreachable

    store = config.backend_class.pause_store(config.settings, config.log_dir)
    try:
        held = await asyncio.to_thread(load_pause, store, handle)
    except StoreError as exc:
        raise unreachable(store, exc) from None
    if held.used:
        raise already_used(held)
    record = held.record
    if record.get("backend") != config.backend_name:
        raise ConfigurationError(f"resume handle {handle!r} is a paused {record.get('backend')} run: approve it with "
                                 f"an agent of that backend, not {config.backend_name}", parameter="handle")
    if session_id is not None and record.get("session_id") != session_id:
        raise ConfigurationError(f"resume handle {handle!r} paused in another session than this one: approve it with "
                                 "agent.approve(handle), which continues it in a session of its own", parameter="handle")
    answers = answers_for(record, decisions)
    request, origin = config.check_request(request_of(record), {})
    try:
        record = await asyncio.to_thread(claim_pause, store, held)
    except StoreError as exc:
        raise unreachable(store, exc) from None
    return request, origin, Continuation(handle=handle, record=record, answers=answers), store


async def approve_paused(config: AgentConfig, handle: str, decisions: Any) -> AsyncGenerator[CodingEvent, None]:
    """A paused run continued with a person's answers (AutonomousCodingAgent.approve): claimed
    (`claim_paused`), then run as a request of its own whose first turn continues the paused one.
    A run that could not begin its turn gives the record back (it stays paused)."""
    request, origin, continuation, store = await claim_paused(config, handle, decisions)
    async with contextlib.aclosing(_given_back_unless_begun(
            one_request(config, request, resumed_from={**(origin or {}), "pause": handle}, continuation=continuation),
            store, continuation)) as events:
        async for event in events:
            yield event


async def _given_back_unless_begun(events: AsyncGenerator[CodingEvent, None], store: Any,
                                   continuation: Continuation) -> AsyncGenerator[CodingEvent, None]:
    """The continued run's events; when its turn never began (the folder busy, the backend not
    starting) the claimed record is given back, so the run stays paused."""
    from agenter.store._pauses import release_pause

    began = False
    try:
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                began = began or event.type is CodingEventType.ITERATION_START
                yield event
    finally:
        if not began:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(release_pause, store, continuation.handle, continuation.record)


def _usage_of(result: CodingResult) -> Usage:
    return Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                 cache_read_tokens=result.cache_read_tokens, cache_write_tokens=result.cache_write_tokens,
                 cost_usd=result.total_cost_usd, estimated_input_tokens=result.estimated_input_tokens,
                 estimated_output_tokens=result.estimated_output_tokens)
