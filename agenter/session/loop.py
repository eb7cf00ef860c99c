"""CodingSession: the loop that turns backend turns into a verified result.

Per iteration: check budget → run a backend turn (streamed, with the time, token and cost budgets
enforced while it runs) → collect modified files → run validators → completed, or retry with the
errors in the prompt. Knows backends only through the CodingBackend protocol and capabilities.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

from agenter._errors import AgenterError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus, ModifiedFiles, Usage
from agenter.backends.base import BackendMessage, CodingBackend, Denial, MessageType, SessionSpec
from agenter.host.redact import Redactor
from agenter.session.budget import ITERATIONS, TIME, BudgetTracker
from agenter.validators import ValidationResult, ValidatorChain

log = logging.getLogger("agenter.session")

#: How long a cancelled turn may take to wind down before the session stops waiting for it.
CANCEL_GRACE_SECONDS = 5.0
#: Larger files are reported truncated, with a note, so a result never holds a huge blob.
MAX_FILE_BYTES = 2 * 1024 * 1024

_END = object()


def _timeout(seconds: float) -> float | None:
    """asyncio wants None, not infinity, for no time limit."""
    return None if seconds == float("inf") else seconds


def _read_capped(path: Path) -> str | None:
    """A changed file's text for the result: regular files only, at most MAX_FILE_BYTES read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        return data[:MAX_FILE_BYTES].decode("utf-8", "replace") + "\n[... truncated by agenter]"
    return data.decode("utf-8", "replace")


class _TimeUp(Exception):
    """The session's time budget ran out while waiting on a backend turn or a validator."""


class _Failure:
    """An exception raised by the source of a bounded stream, handed over as an item."""

    def __init__(self, error: BaseException):
        self.error = error


async def _within_time(source: AsyncIterator[Any], tracker: BudgetTracker,
                       name: str) -> AsyncGenerator[Any, None]:
    """Items of `source`, consumed in a task of its own so that the time budget can cancel it
    wherever it is waiting (a hung model, a slow test command). Raises _TimeUp when the budget
    runs out; an exception of the source arrives as a _Failure item and ends the stream.

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

    task = asyncio.create_task(pump(), name=f"agenter-{name}")
    try:
        while True:
            remaining = tracker.remaining_time()
            if remaining <= 0:
                raise _TimeUp
            try:
                item = await asyncio.wait_for(queue.get(), _timeout(remaining))
            except TimeoutError:
                raise _TimeUp from None
            if item is _END:
                return
            yield item
            taken.set()
    finally:
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
        self.last_text: str = ""


class _Outcome(Exception):
    """Ends the loop with a status; raised by the steps, caught by `run`."""

    def __init__(self, status: CodingStatus, error: str | None = None, exceeded: str | None = None):
        super().__init__(error or status.value)
        self.status = status
        self.error = error
        self.exceeded = exceeded


class _RunState:
    """What the loop knows so far; the result is built from it."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self.iteration = 0
        self.summary = ""
        self.output: Any = None
        self.refusal: Any = None
        self.validation_errors: list[str] = []
        self.started_turn = False


class CodingSession:
    """One run of one request on one connected backend. Use `run()` to stream events;
    `result` holds the CodingResult once SESSION_END has been emitted."""

    def __init__(self, backend: CodingBackend, request: CodingRequest, *, budget: Budget,
                 validators: ValidatorChain, backend_name: str, model: str | None = None,
                 secrets: list[str] | None = None, mode: str = "autonomous"):
        self.backend = backend
        self.request = request
        self.budget = budget
        self.validators = validators
        self.backend_name = backend_name
        self.model = model
        self.mode = mode
        self.result: CodingResult | None = None
        self._redact = Redactor(extra=secrets)
        self._changed = ModifiedFiles()
        self._denials: list[Denial] = []
        self._tracker = BudgetTracker(budget)

    # ------------------------------------------------------------------ the loop
    async def run(self) -> AsyncGenerator[CodingEvent, None]:
        """SESSION_START, the iterations, the final event, SESSION_END (always last)."""
        self._tracker = BudgetTracker(self.budget)
        state = _RunState(self.request.prompt)
        outcome: _Outcome | None = None
        yield self._event(CodingEventType.SESSION_START, cwd=str(self.request.cwd), model=self.model,
                          backend=self.backend_name, max_iterations=self.budget.max_iterations,
                          budget=self.budget.model_dump())
        try:
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
            outcome = _Outcome(CodingStatus.ERROR, self._describe_error(exc))
        except Exception as exc:  # a bug or an unexpected backend failure: report, never hide
            log.exception("coding session failed")
            outcome = _Outcome(CodingStatus.ERROR, self._describe_error(exc))
        finally:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                # Always disconnect: a backend may have spawned a process before connect() failed.
                await asyncio.wait_for(self.backend.disconnect(), CANCEL_GRACE_SECONDS * 2)
            final = outcome or _Outcome(CodingStatus.ERROR, "session ended unexpectedly")
            files: dict[str, str | None] = {}
            with contextlib.suppress(Exception, asyncio.CancelledError):
                # Reading changed files can take a while: never on the event loop.
                files = await asyncio.to_thread(self._read_files)
            self.result = self._build_result(final, state, files)

        yield self._final_event(self.result)
        end = self._event(CodingEventType.SESSION_END, status=self.result.status.value,
                          iterations=self.result.iterations, tokens=self.result.total_tokens,
                          cost=self.result.total_cost_usd,
                          duration=self.result.duration_seconds,
                          result=self._result_json(self.result))
        end._result = self.result  # raw, for the caller; the data is the redacted copy
        yield end

    async def _iteration(self, state: _RunState) -> AsyncGenerator[CodingEvent, None]:
        """One turn, its changes, its validation; raises _Outcome when the run is decided."""
        state.iteration += 1
        iteration = state.iteration
        yield self._event(CodingEventType.ITERATION_START, iteration=iteration)
        turn = _TurnOutcome()
        state.started_turn = True
        # aclosing: if our consumer stops, the turn's task is cancelled right away.
        async with contextlib.aclosing(self._run_turn(state.prompt, turn, iteration)) as turn_events:
            async for event in turn_events:
                yield event
        if turn.last_text:
            state.summary = turn.last_text
        changes = self._collect_changes()
        self._changed = self._changed | changes
        self._collect_denials()
        ending = self._turn_ending(turn, changes, state)
        if ending is not None:
            yield self._iteration_end(iteration, False, changes)
            raise ending

        results: list[ValidationResult] = []
        try:
            async with contextlib.aclosing(self._validate(iteration, results)) as checks:
                async for event in checks:
                    yield event
        except _TimeUp:
            yield self._iteration_end(iteration, False, changes)
            raise _Outcome(CodingStatus.BUDGET_EXCEEDED,
                           self._tracker.describe(TIME, self.backend.usage()) + " (while validating)",
                           TIME) from None
        problems = self._verdict(results, state)
        passed = not problems
        yield self._iteration_end(iteration, passed, changes)
        if passed:
            state.validation_errors = []
            raise self._completed()
        # Retry with the errors, not the whole transcript; the budget is checked before it is sent.
        state.validation_errors = problems
        state.prompt = self._retry_prompt(problems)

    # ------------------------------------------------------------------ steps
    async def _connect(self) -> None:
        """Connect the backend within the time budget."""
        spec = SessionSpec(cwd=Path(self.request.cwd),
                           allowed_write_paths=self.request.allowed_write_paths,
                           system_prompt=self.request.system_prompt,
                           output_type=self.request.output_type,
                           resume_session_id=self.request.resume, mode=self.mode)
        try:
            await asyncio.wait_for(self.backend.connect(spec), _timeout(max(self._tracker.remaining_time(), 0.01)))
        except TimeoutError:
            raise _Outcome(CodingStatus.BUDGET_EXCEEDED,
                           self._tracker.describe(TIME, self.backend.usage()) + " (while the backend started)",
                           TIME) from None

    def _check_budget_before_iteration(self, state: _RunState) -> None:
        """The check before each iteration, which is also the check before a retry. Only a
        failed validation leads back here, so running out of iterations means validation never
        passed: FAILED, not BUDGET_EXCEEDED."""
        usage = self.backend.usage()
        limit = self._tracker.exceeded(usage, iterations_done=state.iteration)
        if limit == ITERATIONS:
            raise _Outcome(CodingStatus.FAILED, self._not_passed_reason())
        if limit:
            raise _Outcome(CodingStatus.BUDGET_EXCEEDED, self._tracker.describe(limit, usage), limit)

    def _turn_ending(self, turn: _TurnOutcome, changes: ModifiedFiles, state: _RunState) -> _Outcome | None:
        """An outcome decided by the turn itself, before validation: error, writes outside the
        allowed paths, refusal, a budget crossed mid-turn."""
        if turn.error is not None:
            return _Outcome(CodingStatus.ERROR, self._describe_error(turn.error))
        if self.mode == "analysis" and changes:
            return _Outcome(CodingStatus.FAILED, "analysis mode allows no changes, but the agent changed: "
                            + ", ".join(changes.all))
        outside = self._outside_allowed_paths(changes)
        if outside:
            # Backends prevent what they can; whatever got through (a shell command, an agent
            # writing by itself) is a failed run, never a silent success.
            return _Outcome(CodingStatus.FAILED, (
                "the agent changed files outside allowed_write_paths ("
                f"{', '.join(self.request.allowed_write_paths or []) or 'none'}): " + ", ".join(outside)))
        state.refusal = self.backend.refusal()
        if state.refusal is not None:
            return _Outcome(CodingStatus.REFUSED)
        if turn.exceeded:
            return _Outcome(CodingStatus.BUDGET_EXCEEDED,
                            self._tracker.describe(turn.exceeded, self.backend.usage()) + self._unfinished_note(),
                            turn.exceeded)
        return None

    async def _validate(self, iteration: int, results: list[ValidationResult]) -> AsyncGenerator[CodingEvent, None]:
        """Validators on every file changed so far that still exists, within the time budget."""
        cwd = Path(self.request.cwd)
        files = sorted(p for p in self._changed.written if (cwd / p).is_file())
        yield self._event(CodingEventType.VALIDATION_START, iteration=iteration,
                          validators=[v.name for v in self.validators.validators], file_count=len(files))
        async with contextlib.aclosing(_within_time(
                self.validators.run(files, cwd), self._tracker, "validators")) as checks:
            async for vresult in checks:
                if isinstance(vresult, _Failure):
                    raise vresult.error
                results.append(vresult)
                yield self._event(
                    CodingEventType.VALIDATION_RESULT, iteration=iteration,
                    validator=vresult.validator, passed=vresult.passed,
                    errors=[self._redact(e) for e in vresult.errors],
                    blocking=vresult.blocking, skipped=vresult.skipped)

    def _verdict(self, results: list[ValidationResult], state: _RunState) -> list[str]:
        """The problems that fail this iteration (empty: it passed)."""
        problems = [f"[{r.validator}] {e}" for r in results if r.blocks for e in (r.errors or ["failed"])]
        state.output = self.backend.structured_output() if self.request.output_type else None
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
        usage = self.backend.usage()
        late = self._tracker.exceeded(usage)
        if late:
            return _Outcome(CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED, self._tracker.describe(late, usage), late)
        return _Outcome(CodingStatus.COMPLETED)

    def _not_passed_reason(self) -> str:
        n = self.budget.max_iterations
        if not self._changed and self.request.require_changes:
            if self._denials:
                refused = ", ".join(sorted({d.target for d in self._denials})[:10])
                if all(any(w in d.tool.lower() for w in ("write", "edit")) for d in self._denials):
                    return f"the agent changed no file in {n} iteration(s): every write was refused ({refused})"
                return (f"the agent changed no file in {n} iteration(s); these actions were refused: "
                        f"{refused}")
            return f"the agent changed no file in {n} iteration(s)"
        return f"validation did not pass within {n} iterations"

    def _unfinished_note(self) -> str:
        unfinished: list[str] = getattr(self.backend, "unfinished_tools", list)()
        if not unfinished:
            return ""
        return (f"; tool call(s) still running when the run ended, which may change files after it: "
                f"{', '.join(unfinished)}")

    # ------------------------------------------------------------------ turn
    async def _run_turn(self, prompt: str, outcome: _TurnOutcome, iteration: int) -> AsyncGenerator[CodingEvent, None]:
        """Stream one backend turn as events; token and cost budgets are checked per message."""
        try:
            async with contextlib.aclosing(
                    _within_time(self.backend.execute(prompt), self._tracker, f"turn-{iteration}")) as items:
                async for item in items:
                    if isinstance(item, _Failure):
                        outcome.error = item.error
                        continue
                    message: BackendMessage = item
                    if message.type is MessageType.TEXT and message.content.strip():
                        outcome.last_text = message.content
                    yield self._event(CodingEventType.BACKEND_MESSAGE, iteration=iteration,
                                      **message.event_data())
                    limit = self._tracker.exceeded(self.backend.usage())
                    if limit:
                        outcome.exceeded = limit
                        break
        except _TimeUp:
            outcome.exceeded = TIME

    # ------------------------------------------------------------------ decisions
    def _collect_changes(self) -> ModifiedFiles:
        try:
            changes = self.backend.modified_files()
        except Exception as exc:  # noqa: BLE001
            log.warning("backend could not report modified files: %s", exc)
            return ModifiedFiles()
        return ModifiedFiles(written=set(changes.written), deleted=set(changes.deleted))

    def _collect_denials(self) -> None:
        denials = getattr(self.backend, "denials", None)
        if callable(denials):
            with contextlib.suppress(Exception):
                for denial in denials():
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
        lines = ["Your changes did not pass validation. Fix these problems:"]
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
        return self._redact(text)

    # ------------------------------------------------------------------ result & events
    def _read_files(self) -> dict[str, str | None]:
        """New content of every changed file (None when deleted or not a regular file); large
        files are read only up to MAX_FILE_BYTES and marked truncated."""
        cwd = Path(self.request.cwd)
        files: dict[str, str | None] = {}
        for rel in self._changed.all:
            files[rel] = _read_capped(cwd / rel)
        return files

    def _build_result(self, outcome: _Outcome, state: _RunState, files: dict[str, str | None]) -> CodingResult:
        try:
            usage = self.backend.usage()
        except Exception:  # noqa: BLE001
            usage = Usage()
        summary = state.summary or self._default_summary(outcome.status, state)
        refusal = state.refusal
        return CodingResult(
            status=outcome.status, files=files, summary=self._redact(summary),
            iterations=state.iteration, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, total_tokens=usage.total_tokens,
            total_cost_usd=round(usage.cost_usd, 6), duration_seconds=round(self._tracker.elapsed(), 3),
            output=state.output, error=outcome.error, exceeded_limit=outcome.exceeded,
            refusal_reason=self._redact(refusal.reason) if refusal else None,
            validation_errors=[self._redact(e) for e in state.validation_errors],
            permission_denials=[d.as_dict() for d in self._denials],
            diff=getattr(self.backend, "applied_diff", None) or None,
            backend=self.backend_name, model=self.model)

    def _default_summary(self, status: CodingStatus, state: _RunState) -> str:
        if not state.started_turn:
            return f"{status.value}: the agent did not run"
        if not self._changed:
            return f"{status.value}: no file changed"
        return f"{status.value}: {len(self._changed.all)} file(s) changed"

    def _iteration_end(self, iteration: int, passed: bool, changes: ModifiedFiles) -> CodingEvent:
        usage = self.backend.usage()
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
        if result.status is CodingStatus.REFUSED:
            refusal = self.backend.refusal()
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

    def _event(self, kind: CodingEventType, **data: Any) -> CodingEvent:
        """Every event is redacted (file contents in the final result included); the
        CodingResult the caller gets back stays raw."""
        redacted = self._redact.data(data)
        assert isinstance(redacted, dict)
        return CodingEvent(type=kind, data=redacted, timestamp=time.time())
