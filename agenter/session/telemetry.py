"""OpenTelemetry spans for sessions, through opentelemetry-api only.

The user brings the SDK and an exporter. Spans (with the GenAI semantic-convention attributes):

    agenter.session                    one run, or a multi-request session
      agenter.request                  each request of a multi-request session
        agenter.iteration              one iteration: a turn, then validation
          invoke_agent {backend}       the backend's turn (model, tokens, cost, conversation id)
            execute_tool {tool}        each tool call or shell command the agent reported
          agenter.validator {name}     each validator

Nothing is imported, and nothing costs, unless OpenTelemetry is in use: a tracer provider was
given, or a global one was set (`opentelemetry.trace` imported without a provider, as the
anthropic client does, is not in use).
The turn runs with its span current, so `BaseBackend.trace_env()` gives the TRACEPARENT an agent
program continues the trace from.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from agenter._events import CodingEvent, CodingEventType
from agenter._types import CodingResult, CodingStatus, Usage

log = logging.getLogger("agenter.session")

__all__ = ["RunTrace", "SessionTrace", "tracer_for"]

#: Attribute names (GenAI semantic conventions where one exists; ours under agenter.*).
OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
CONVERSATION = "gen_ai.conversation.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
COST = "agenter.cost_usd"

_STARTS = (CodingEventType.TOOL_CALL_STARTED, CodingEventType.COMMAND_STARTED)
_ENDS = (CodingEventType.TOOL_CALL_FINISHED, CodingEventType.COMMAND_FINISHED)
_NOTES = (CodingEventType.PERMISSION_DECISION, CodingEventType.CONTEXT_COMPACTED, CodingEventType.ERROR)


def tracer_for(provider: Any = None) -> Any | None:
    """agenter's tracer from `provider` (default: the global one), or None when OpenTelemetry is
    not in use, so that a program without it pays nothing."""
    if provider is None and "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    if provider is None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        # Imported (the anthropic client imports it) but never set up: every span would be a
        # no-op, and a run would still pay for making them on every event.
        return None
    from agenter._version import __version__

    return trace.get_tracer("agenter", __version__, tracer_provider=provider)


def _usage_attributes(usage: Usage) -> dict[str, Any]:
    return {INPUT_TOKENS: usage.input_tokens, OUTPUT_TOKENS: usage.output_tokens,
            CACHE_READ: usage.cache_read_tokens, CACHE_WRITE: usage.cache_write_tokens,
            COST: round(usage.cost_usd, 6)}


def _in_context(span: Any) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)


def _end_with_result(span: Any, result: CodingResult | None, session_id: str | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    if result is not None:
        span.set_attributes({
            **_usage_attributes(Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                                      cache_read_tokens=result.cache_read_tokens,
                                      cache_write_tokens=result.cache_write_tokens,
                                      cost_usd=result.total_cost_usd)),
            "agenter.status": result.status.value, "agenter.iterations": result.iterations,
            "agenter.files_changed": len(result.files)})
        if result.model:
            span.set_attribute(RESPONSE_MODEL, result.model)
        if result.exceeded_limit:
            span.set_attribute("agenter.exceeded_limit", result.exceeded_limit)
        if result.status is CodingStatus.ERROR:
            span.set_status(Status(StatusCode.ERROR, result.error or "error"))
    if session_id:
        span.set_attribute(CONVERSATION, session_id)
    span.end()


class SessionTrace:
    """The span of a multi-request session; each request's RunTrace is its child."""

    def __init__(self, tracer: Any, *, backend: str, model: str | None, provider: str | None, mode: str):
        self.tracer = tracer
        self.attributes = _common(backend, model, provider)
        self.span = tracer.start_span("agenter.session", attributes={**self.attributes, "agenter.mode": mode})
        self.backend = backend

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The session's span as the current one (while the backend connects)."""
        from opentelemetry import context

        token = context.attach(_in_context(self.span))
        try:
            yield
        finally:
            context.detach(token)

    def end(self, usage: Usage, *, requests: int, session_id: str | None, error: str | None = None) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attributes({**_usage_attributes(usage), "agenter.requests": requests})
        if session_id:
            self.span.set_attribute(CONVERSATION, session_id)
        if error:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end()


def _common(backend: str, model: str | None, provider: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {AGENT_NAME: backend, "agenter.backend": backend}
    if model:
        attributes[REQUEST_MODEL] = model
    if provider:
        attributes[PROVIDER] = provider
    return attributes


class _Tools:
    """Open tool spans of a turn, matched by call id (else by name, oldest first)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str | None, str, Any]] = []

    def add(self, call_id: str | None, name: str, span: Any) -> None:
        self.spans.append((call_id, name, span))

    def take(self, call_id: str | None, name: str) -> Any | None:
        for index, (cid, cname, span) in enumerate(self.spans):
            if (call_id is not None and cid == call_id) or (call_id is None and cid is None and cname == name):
                del self.spans[index]
                return span
        return None

    def close_all(self) -> None:
        for _, _, span in self.spans:
            span.set_attribute("agenter.unfinished", True)
            span.end()
        self.spans.clear()


class RunTrace:
    """The spans of one run, driven by its events (see the module docstring)."""

    def __init__(self, tracer: Any, *, backend: str, model: str | None, provider: str | None, mode: str,
                 usage: Callable[[], Usage], session_id: Callable[[], str | None],
                 parent: SessionTrace | None = None, request_index: int | None = None):
        self.tracer = tracer
        self._usage = usage
        self._session_id = session_id
        self._common = _common(backend, model, provider)
        self._backend = backend
        attributes = {**self._common, "agenter.mode": mode}
        if parent is not None:
            attributes["agenter.request"] = request_index or 0
            self.span = tracer.start_span("agenter.request", context=_in_context(parent.span), attributes=attributes)
        else:
            self.span = tracer.start_span("agenter.session", attributes=attributes)
        self._iteration: Any = None
        self._turn: Any = None
        self._turn_usage = Usage()
        self._tools = _Tools()
        self._ended = False

    # ------------------------------------------------------------------ contexts
    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The run's span as the current one (while the backend connects)."""
        from opentelemetry import context

        token = context.attach(_in_context(self.span))
        try:
            yield
        finally:
            context.detach(token)

    def turn_context(self) -> contextvars.Context | None:
        """A context with the turn's span current, for the task that runs the turn."""
        if self._turn is None:
            return None
        from opentelemetry import context

        ctx = contextvars.copy_context()
        ctx.run(context.attach, _in_context(self._turn))
        return ctx

    # ------------------------------------------------------------------ events
    def on_event(self, event: CodingEvent) -> None:
        try:
            self._on_event(event)
        except Exception:  # tracing must never break a run
            log.debug("tracing failed on %s", event.type.value, exc_info=True)

    def _on_event(self, event: CodingEvent) -> None:
        kind, data = event.kind, event.data
        if kind is CodingEventType.ITERATION_START:
            self._end_iteration()
            self._iteration = self.tracer.start_span(
                "agenter.iteration", context=_in_context(self.span),
                attributes={"agenter.iteration": data.get("iteration", 0)})
            self._turn_usage = self._usage()
            self._turn = self.tracer.start_span(
                f"invoke_agent {self._backend}", context=_in_context(self._iteration),
                attributes={**self._common, OPERATION: "invoke_agent"})
        elif kind in _STARTS:
            self._tool_started(kind, data)
        elif kind in _ENDS:
            self._tool_finished(data)
        elif kind in _NOTES and self._turn is not None:
            self._turn.add_event(kind.value, {k: v for k, v in data.items()
                                              if isinstance(v, str | int | float | bool) and k != "raw"})
        elif kind is CodingEventType.VALIDATION_START:
            self._end_turn()
        elif kind is CodingEventType.VALIDATION_RESULT:
            self._validator(data)
        elif kind is CodingEventType.ITERATION_END:
            if self._iteration is not None:
                self._iteration.set_attributes({"agenter.passed": bool(data.get("passed")),
                                                "agenter.files_changed": len(data.get("files_modified") or [])})
            self._end_iteration()

    def _tool_started(self, kind: CodingEventType, data: dict[str, Any]) -> None:
        if self._turn is None:
            return
        name = str(data.get("tool_name") or ("shell" if kind is CodingEventType.COMMAND_STARTED else "tool"))
        attributes: dict[str, Any] = {OPERATION: "execute_tool", TOOL_NAME: name, TOOL_TYPE: "function"}
        call_id = data.get("tool_call_id")
        if call_id:
            attributes[TOOL_CALL_ID] = str(call_id)
        if kind is CodingEventType.COMMAND_STARTED and isinstance(data.get("command"), str):
            attributes["agenter.command"] = data["command"][:1000]
        span = self.tracer.start_span(f"execute_tool {name}", context=_in_context(self._turn), attributes=attributes)
        self._tools.add(str(call_id) if call_id else None, name, span)

    def _tool_finished(self, data: dict[str, Any]) -> None:
        call_id = data.get("tool_call_id")
        span = self._tools.take(str(call_id) if call_id else None, str(data.get("tool_name") or ""))
        if span is None:
            return
        if isinstance(data.get("exit_code"), int):
            span.set_attribute("agenter.exit_code", data["exit_code"])
        if data.get("is_error"):
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, str(data.get("content") or "")[:200]))
        span.end()

    def _validator(self, data: dict[str, Any]) -> None:
        parent = self._iteration or self.span
        now = time.time_ns()
        duration = data.get("duration")
        started = now - int(float(duration) * 1e9) if isinstance(duration, int | float) else now
        name = str(data.get("validator") or "validator")
        span = self.tracer.start_span(
            f"agenter.validator {name}", context=_in_context(parent), start_time=started,
            attributes={"agenter.validator": name, "agenter.passed": bool(data.get("passed")),
                        "agenter.blocking": bool(data.get("blocking")), "agenter.skipped": bool(data.get("skipped")),
                        "agenter.errors": len(data.get("errors") or [])})
        if not data.get("passed") and data.get("blocking") and not data.get("skipped"):
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, "validation failed"))
        span.end(end_time=now)

    def _end_turn(self) -> None:
        self._tools.close_all()
        if self._turn is None:
            return
        turn, self._turn = self._turn, None
        with contextlib.suppress(Exception):
            turn.set_attributes(_usage_attributes(self._usage().minus(self._turn_usage)))
            session_id = self._session_id()
            if session_id:
                turn.set_attribute(CONVERSATION, session_id)
        turn.end()

    def _end_iteration(self) -> None:
        self._end_turn()
        if self._iteration is not None:
            self._iteration.end()
            self._iteration = None

    def end(self, result: CodingResult | None) -> None:
        """End every span still open, the run's last (idempotent)."""
        if self._ended:
            return
        self._ended = True
        try:
            self._end_iteration()
            _end_with_result(self.span, result, self._session_id())
        except Exception:  # same: never break the run
            log.debug("tracing failed at the end of the run", exc_info=True)
