"""CodingSession: the loop that turns backend turns into a verified result.

Per iteration: check budget → run a backend turn (streamed, with the time, token and cost budgets
enforced while it runs) → collect modified files → run validators → completed, or retry with the
errors in the prompt. Knows backends only through the CodingBackend protocol and capabilities.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agenter._errors import AgenterError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus, Usage
from agenter.backends._process import Redactor
from agenter.backends._protocol import BackendMessage, CodingBackend, MessageType, ModifiedFiles, SessionSpec
from agenter.session.budget import ITERATIONS, TIME, BudgetTracker
from agenter.validators import ValidationResult, ValidatorChain

log = logging.getLogger("agenter.session")

#: How long a cancelled turn may take to wind down before the session stops waiting for it.
CANCEL_GRACE_SECONDS = 5.0
#: Larger files are reported truncated, with a note, so a result never holds a huge blob.
MAX_FILE_BYTES = 2 * 1024 * 1024

_END = object()


class _TimeUp(Exception):
    """The session's time budget ran out while waiting on a backend turn or a validator."""


class _Failure:
    """An exception raised by the source of a bounded stream, handed over as an item."""

    def __init__(self, error: BaseException):
        self.error = error


async def _within_time(source: AsyncIterator[Any], tracker: BudgetTracker,
                       name: str) -> AsyncIterator[Any]:
    """Items of `source`, consumed in a task of its own so that the time budget can cancel it
    wherever it is waiting (a hung model, a slow test command). Raises _TimeUp when the budget
    runs out; an exception of the source arrives as a _Failure item and ends the stream."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(item)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the session, never lost
            queue.put_nowait(_Failure(exc))
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(pump(), name=f"agenter-{name}")
    try:
        while True:
            remaining = tracker.remaining_time()
            if remaining <= 0:
                raise _TimeUp
            try:
                item = await asyncio.wait_for(queue.get(), remaining)
            except asyncio.TimeoutError:
                raise _TimeUp from None
            if item is _END:
                return
            yield item
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


class CodingSession:
    """One run of one request on one connected backend. Use `run()` to stream events;
    `result` holds the CodingResult once SESSION_END has been emitted."""

    def __init__(self, backend: CodingBackend, request: CodingRequest, *, budget: Budget,
                 validators: ValidatorChain, backend_name: str, model: str | None = None,
                 secrets: list[str] | None = None):
        self.backend = backend
        self.request = request
        self.budget = budget
        self.validators = validators
        self.backend_name = backend_name
        self.model = model
        self.result: CodingResult | None = None
        self._redact = Redactor(extra=secrets)
        self._changed = ModifiedFiles()

    # ------------------------------------------------------------------ public
    async def run(self) -> AsyncIterator[CodingEvent]:
        tracker = BudgetTracker(self.budget)
        cwd = Path(self.request.cwd)
        status: CodingStatus | None = None
        error: str | None = None
        exceeded: str | None = None
        refusal = None
        summary = ""
        output: Any = None
        iteration = 0
        validation_errors: list[str] = []

        yield self._event(CodingEventType.SESSION_START, cwd=str(cwd), model=self.model,
                          backend=self.backend_name, max_iterations=self.budget.max_iterations,
                          budget=self.budget.model_dump())
        try:
            prompt = self.request.prompt
            if not await self._connect_within(tracker):
                status, exceeded = CodingStatus.BUDGET_EXCEEDED, TIME
                error = tracker.describe(TIME, self.backend.usage()) + " (while the backend started)"
            while status is None:
                # 1. budget before each iteration, which is also the check before a retry
                #    (only a failed validation leads back here, so running out of iterations
                #    means validation never passed: FAILED, not BUDGET_EXCEEDED)
                limit = tracker.exceeded(self.backend.usage(), iterations_done=iteration)
                if limit == ITERATIONS:
                    status, error = CodingStatus.FAILED, (
                        f"validation did not pass within {self.budget.max_iterations} iterations")
                    break
                if limit:
                    status, exceeded = CodingStatus.BUDGET_EXCEEDED, limit
                    error = tracker.describe(limit, self.backend.usage())
                    break

                iteration += 1
                yield self._event(CodingEventType.ITERATION_START, iteration=iteration)

                # 2. the backend turn, budgets enforced while it streams
                outcome = _TurnOutcome()
                # aclosing: if our consumer stops, the turn's task is cancelled right away.
                async with contextlib.aclosing(
                        self._run_turn(prompt, tracker, outcome, iteration)) as turn_events:
                    async for event in turn_events:
                        yield event
                if outcome.last_text:
                    summary = outcome.last_text

                # 3. what changed
                turn_changes = self._collect_changes()
                self._changed = self._changed | turn_changes

                if outcome.error is not None:
                    status, error = CodingStatus.ERROR, self._describe_error(outcome.error)
                    yield self._iteration_end(iteration, False, turn_changes)
                    break
                outside = self._outside_allowed_paths(turn_changes)
                if outside:
                    # Backends prevent what they can; whatever got through (a shell command,
                    # an agent writing by itself) is a failed run, never a silent success.
                    status = CodingStatus.FAILED
                    error = ("the agent changed files outside allowed_write_paths ("
                             f"{', '.join(self.request.allowed_write_paths or []) or 'none'}): "
                             + ", ".join(outside))
                    yield self._iteration_end(iteration, False, turn_changes)
                    break
                refusal = self.backend.refusal()
                if refusal is not None:
                    status = CodingStatus.REFUSED
                    yield self._iteration_end(iteration, False, turn_changes)
                    break
                if outcome.exceeded:
                    status, exceeded = CodingStatus.BUDGET_EXCEEDED, outcome.exceeded
                    error = tracker.describe(outcome.exceeded, self.backend.usage())
                    yield self._iteration_end(iteration, False, turn_changes)
                    break

                # 4. validators on every file changed so far that still exists
                files = sorted(p for p in self._changed.written if (cwd / p).is_file())
                results: list[ValidationResult] = []
                yield self._event(CodingEventType.VALIDATION_START, iteration=iteration,
                                  validators=[v.name for v in self.validators.validators],
                                  file_count=len(files))
                try:
                    async with contextlib.aclosing(_within_time(
                            self.validators.run(files, cwd), tracker, "validators")) as checks:
                        async for vresult in checks:
                            if isinstance(vresult, _Failure):
                                raise vresult.error
                            results.append(vresult)
                            yield self._event(
                                CodingEventType.VALIDATION_RESULT, iteration=iteration,
                                validator=vresult.validator, passed=vresult.passed,
                                errors=[self._redact(e) for e in vresult.errors],
                                blocking=vresult.blocking, skipped=vresult.skipped)
                except _TimeUp:
                    status, exceeded = CodingStatus.BUDGET_EXCEEDED, TIME
                    error = tracker.describe(TIME, self.backend.usage()) + " (while validating)"
                    yield self._iteration_end(iteration, False, turn_changes)
                    break

                problems = self._problems(results)
                output = self.backend.structured_output() if self.request.output_type else None
                if self.request.output_type is not None and output is None:
                    problems.append(
                        f"No structured output matching {self.request.output_type.__name__} was "
                        "returned; return it as instructed.")
                unverified = self._unverified(results, output)
                if unverified:
                    problems.append(unverified)
                passed = not problems
                yield self._iteration_end(iteration, passed, turn_changes)

                # 5. passed → completed (with a note if a limit was crossed at the very end)
                if passed:
                    validation_errors = []
                    late = tracker.exceeded(self.backend.usage())
                    if late:
                        status, exceeded = CodingStatus.COMPLETED_WITH_LIMIT_EXCEEDED, late
                        error = tracker.describe(late, self.backend.usage())
                    else:
                        status = CodingStatus.COMPLETED
                    break

                # 6. retry with the errors, not the whole transcript (the budget is checked at
                #    the top of the loop before the retry is sent)
                validation_errors = problems
                prompt = self._retry_prompt(problems)
        except (asyncio.CancelledError, GeneratorExit):
            status, error = CodingStatus.ERROR, "session cancelled by the caller"
            raise
        except AgenterError as exc:
            status, error = CodingStatus.ERROR, self._describe_error(exc)
        except Exception as exc:  # a bug or an unexpected backend failure: report, never hide
            log.exception("coding session failed")
            status, error = CodingStatus.ERROR, self._describe_error(exc)
        finally:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                # Always disconnect: a backend may have spawned a process before connect() failed.
                await asyncio.wait_for(self.backend.disconnect(), CANCEL_GRACE_SECONDS * 2)
            self.result = self._build_result(
                status or CodingStatus.ERROR, iteration, summary, output, error, exceeded,
                refusal, validation_errors, tracker)

        yield self._final_event(self.result)
        yield self._event(CodingEventType.SESSION_END, status=self.result.status.value,
                          iterations=self.result.iterations, tokens=self.result.total_tokens,
                          cost=self.result.total_cost_usd,
                          duration=self.result.duration_seconds,
                          result=self._result_json(self.result))

    # ------------------------------------------------------------------ turn
    async def _connect_within(self, tracker: BudgetTracker) -> bool:
        """Connect the backend; False when the time budget ran out first."""
        spec = SessionSpec(cwd=Path(self.request.cwd),
                           allowed_write_paths=self.request.allowed_write_paths,
                           system_prompt=self.request.system_prompt,
                           output_type=self.request.output_type)
        try:
            await asyncio.wait_for(self.backend.connect(spec), max(tracker.remaining_time(), 0.01))
        except asyncio.TimeoutError:
            return False
        return True

    async def _run_turn(self, prompt: str, tracker: BudgetTracker, outcome: _TurnOutcome,
                        iteration: int) -> AsyncIterator[CodingEvent]:
        """Stream one backend turn as events; token and cost budgets are checked per message."""
        try:
            async with contextlib.aclosing(
                    _within_time(self.backend.execute(prompt), tracker, f"turn-{iteration}")) as items:
                async for item in items:
                    if isinstance(item, _Failure):
                        outcome.error = item.error
                        continue
                    message: BackendMessage = item
                    if message.type is MessageType.TEXT and message.content.strip():
                        outcome.last_text = message.content
                    yield self._event(CodingEventType.BACKEND_MESSAGE, iteration=iteration,
                                      **self._redact_data(message.event_data()))
                    limit = tracker.exceeded(self.backend.usage())
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

    def _outside_allowed_paths(self, changes: ModifiedFiles) -> list[str]:
        if self.request.allowed_write_paths is None or not changes:
            return []
        from agenter.sandbox.paths import PathResolver

        resolver = PathResolver(Path(self.request.cwd), self.request.allowed_write_paths)
        return [path for path in changes.all if not resolver.is_allowed_write(path)]

    @staticmethod
    def _problems(results: list[ValidationResult]) -> list[str]:
        problems: list[str] = []
        for result in results:
            if result.passed or not result.blocking:
                continue
            problems.extend(f"[{result.validator}] {e}" for e in result.errors)
            if not result.errors:
                problems.append(f"[{result.validator}] failed")
        return problems

    def _unverified(self, results: list[ValidationResult], output: Any) -> str | None:
        """A turn that changed nothing, and that no validator really checked, proves nothing."""
        if not self.request.require_changes or output is not None or self._changed:
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
        cwd = Path(self.request.cwd)
        files: dict[str, str | None] = {}
        for rel in self._changed.all:
            path = Path(rel) if Path(rel).is_absolute() else cwd / rel
            try:
                if not path.is_file():
                    files[rel] = None
                    continue
                data = path.read_bytes()
            except OSError:
                files[rel] = None
                continue
            if len(data) > MAX_FILE_BYTES:
                files[rel] = data[:MAX_FILE_BYTES].decode("utf-8", "replace") + "\n[... truncated by agenter]"
            else:
                files[rel] = data.decode("utf-8", "replace")
        return files

    def _build_result(self, status: CodingStatus, iterations: int, summary: str, output: Any,
                      error: str | None, exceeded: str | None, refusal: Any,
                      validation_errors: list[str], tracker: BudgetTracker) -> CodingResult:
        try:
            usage = self.backend.usage()
        except Exception:  # noqa: BLE001
            usage = Usage()
        if not summary:
            summary = self._default_summary(status)
        return CodingResult(
            status=status, files=self._read_files(), summary=self._redact(summary),
            iterations=iterations, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, total_tokens=usage.total_tokens,
            total_cost_usd=round(usage.cost_usd, 6), duration_seconds=round(tracker.elapsed(), 3),
            output=output, error=error, exceeded_limit=exceeded,
            refusal_reason=self._redact(refusal.reason) if refusal else None,
            validation_errors=[self._redact(e) for e in validation_errors],
            backend=self.backend_name, model=self.model)

    def _default_summary(self, status: CodingStatus) -> str:
        if not self._changed:
            return "The agent finished without changing any file."
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

    def _redact_data(self, data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, str):
                out[key] = self._redact(value)
            elif isinstance(value, dict):
                out[key] = self._redact_data(value)
            else:
                out[key] = value
        return out

    @staticmethod
    def _event(kind: CodingEventType, **data: Any) -> CodingEvent:
        return CodingEvent(type=kind, data=data, timestamp=time.time())
