"""The OpenHands side of the backend: one LocalConversation on a private event loop thread.

Imported only when the backend connects (it imports openhands-sdk, which takes seconds).

Why a private loop thread: OpenHands' `Conversation.arun()` runs the agent with async model
calls and runs tools in worker threads, and `interrupt()` cancels it mid-call from any thread —
exactly what a time budget needs. Running it on its own loop keeps the SDK's blocking work (state
locks, tool set-up) off the caller's loop, and keeping ONE loop for the whole session keeps
LiteLLM's per-loop HTTP clients valid across iterations.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenter.host import _pids
from agenter.host.process import leftovers

log = logging.getLogger("agenter.backends.agents.openhands")


def prepare_environment() -> None:
    """Before openhands/litellm are imported: no network at run time beyond the model.

    - LiteLLM downloads its model price map at import unless told to use the bundled copy.
    - OpenHands prints a banner and installs handlers on the ROOT logger at import (not what a
      library should do to its host); both are off unless the user asked for them.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
    os.environ.setdefault("LOG_AUTO_CONFIG", "false")
    openhands_logger = logging.getLogger("openhands")
    if not openhands_logger.handlers:
        # Its warnings go to the host's logging config, not to stderr via logging's last resort.
        openhands_logger.addHandler(logging.NullHandler())


class LoopThread:
    """A daemon thread running its own asyncio loop, with its own pool for OpenHands' tool calls."""

    _count = 0

    def __init__(self, name: str = "agenter-openhands"):
        LoopThread._count += 1
        self.name = f"{name}-{LoopThread._count}"
        self.loop = asyncio.new_event_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix=f"{self.name}-tool")
        self.loop.set_default_executor(self._executor)
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.wait(pending, timeout=2))
            # Not loop.shutdown_default_executor(): it waits without a limit for tool calls.
            self._executor.shutdown(wait=False, cancel_futures=True)
            self.loop.close()

    def submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def threads(self) -> list[threading.Thread]:
        """The loop thread and its tool threads that are still alive."""
        return [t for t in threading.enumerate()
                if t.is_alive() and (t is self._thread or t.name.startswith(f"{self.name}-tool"))]

    def stop(self, timeout: float = 6.0) -> bool:
        """Stop the loop and wait for its threads; False if one did not end in time."""
        deadline = time.monotonic() + timeout
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.loop.stop)
        for thread in self.threads():
            thread.join(max(deadline - time.monotonic(), 0.01))
        alive = self.threads()
        if alive:
            log.warning("OpenHands threads still running after stop: %s", [t.name for t in alive])
        return not alive


def terminal_sessions(conversation: Any) -> list[Any]:
    """OpenHands terminal sessions of a conversation's tools (internals: best effort)."""
    sessions: list[Any] = []
    with contextlib.suppress(Exception):
        for tool in conversation.agent.tools_map.values():
            executor = getattr(tool, "executor", None)
            single = getattr(executor, "_session", None)
            if single is not None:
                sessions.append(single)
            sessions.extend(dict(getattr(executor, "_sessions", None) or {}).values())
    return sessions


def end_conversation(conversation: Any, mark: str) -> None:
    """Interrupt a conversation, close its tools and end what its terminal started; blocking,
    call from a worker thread.

    `close()` ends the terminal's shell (its process group), but a tool thread still polling
    that terminal would only notice after OpenHands' no-output timeout (30 s): setting that
    timeout to 0 lets the poll return at once.
    """
    sessions = terminal_sessions(conversation)
    shell_pids = [pid for pid in (_shell_pid(s) for s in sessions) if pid]
    with contextlib.suppress(Exception):
        conversation.interrupt()
    with contextlib.suppress(Exception):
        conversation.close()
    for session in sessions:
        with contextlib.suppress(Exception):
            session.no_change_timeout_seconds = 0
    # OpenHands signals only the shell's process group; an interactive shell runs each job in a
    # group of its own, so a running command can outlive close(). The shell leads its own
    # session (setsid), and everything the terminal started carries the session's mark.
    session_ids: list[int | None] = [*shell_pids] or [None]
    for session_id in session_ids:
        _pids.kill(leftovers(mark, session=session_id))


def _shell_pid(session: Any) -> int | None:
    """The pid of a terminal session's shell, when it runs as a local subprocess."""
    process = getattr(getattr(session, "terminal", None), "process", None)
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


def stored_conversation(persistence_dir: Path, conversation_id: uuid.UUID) -> bool:
    """True when OpenHands keeps the conversation under `persistence_dir` (its base state, the
    file OpenHands resumes from, is at `<dir>/<id hex>/base_state.json`)."""
    return (persistence_dir / conversation_id.hex / "base_state.json").is_file()


def laminar_span_context(trace_id: int, span_id: int) -> str:
    """An OpenTelemetry span's ids in the form OpenHands' tracing (Laminar) takes as the parent
    of its conversation span: UUIDs whose integer values are the ids."""
    return json.dumps({"trace_id": str(uuid.UUID(int=trace_id)), "span_id": str(uuid.UUID(int=span_id)),
                       "is_remote": True})


def current_span_context() -> str | None:
    """The current OpenTelemetry span (agenter's session span while connecting) as a parent for
    OpenHands' spans; None without OpenTelemetry or a recording span. OpenHands traces only
    when its own environment asks for it (LMNR_PROJECT_API_KEY, OTEL_EXPORTER_OTLP_*): its spans
    then go under agenter's instead of starting a trace of their own."""
    if "opentelemetry.trace" not in sys.modules:  # nobody configured tracing: cost nothing
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return laminar_span_context(context.trace_id, context.span_id)


def _ignore_tokens(_chunk: Any) -> None:
    return None


def build_conversation(*, model: str, options: Any, cwd: Path, system_suffix: str, tools_session: str,
                       on_event: Callable[[Any], None], on_token: Callable[[Any], None] | None = None,
                       persistence_dir: Path | None = None,
                       conversation_id: uuid.UUID | None = None, parent_span_context: str | None = None) -> Any:
    """Create the OpenHands LLM, agent (file editor + terminal + agenter tools) and conversation.

    The session's tools and terminal environment are in `_tools`' table under `tools_session`.
    With `persistence_dir` OpenHands keeps the conversation on disk (`<dir>/<id hex>/`); with
    `conversation_id` too, it continues the one stored there.
    """
    from agenter.backends.agents.openhands import _tools
    from openhands.sdk import LLM, Agent, AgentContext, Conversation
    from openhands.sdk.tool import Tool as ToolSpec
    from openhands.tools.file_editor import FileEditorTool

    llm_kwargs: dict[str, Any] = {
        "model": model,
        "usage_id": "agent",
        # OpenHands counts attempts (tenacity's stop_after_attempt), agenter counts retries.
        "num_retries": options.max_retries + 1,
        "retry_multiplier": 2.0,
        "retry_min_wait": options.openhands_retry_min_wait,
        # OpenHands takes whole seconds.
        "retry_max_wait": math.ceil(options.max_retry_wait),
        "timeout": math.ceil(options.request_timeout),
        "stream": options.openhands_stream,
    }
    if options.base_url:
        llm_kwargs["base_url"] = options.base_url
    if options.api_key is not None:
        llm_kwargs["api_key"] = options.api_key
    if options.openhands_api_version:
        llm_kwargs["api_version"] = options.openhands_api_version
    if options.temperature is not None:
        llm_kwargs["temperature"] = options.temperature
    if options.max_tokens is not None:
        llm_kwargs["max_output_tokens"] = options.max_tokens
    if options.openhands_extra_headers:
        llm_kwargs["extra_headers"] = dict(options.openhands_extra_headers)
    llm = LLM(**llm_kwargs)

    _tools.register_agenter_tools()
    # The terminal and agenter's tools resolve from the session's table (its environment
    # included), not from the specs' params, which a persisted conversation saves.
    tools = [
        ToolSpec(name=FileEditorTool.name),
        ToolSpec(name=_tools.TERMINAL_SPEC_NAME,
                 params={"terminal_type": options.openhands_terminal_type, "session": tools_session}),
        ToolSpec(name=_tools.TOOL_SPEC_NAME, params={"session": tools_session}),
    ]

    context = AgentContext(
        system_message_suffix=system_suffix or None,
        load_user_skills=False,  # nothing from ~/.openhands: the run depends on the request only
        load_public_skills=False,  # would clone a skills repository from the network
    )
    agent = Agent(llm=llm, tools=tools, agent_context=context)
    return Conversation(
        agent=agent,
        workspace=str(cwd),
        callbacks=[on_event],
        # OpenHands streams only when someone listens to the tokens.
        token_callbacks=[on_token or _ignore_tokens] if options.openhands_stream else None,
        visualizer=None,
        max_iteration_per_run=options.openhands_max_steps,
        persistence_dir=str(persistence_dir) if persistence_dir is not None else None,
        conversation_id=conversation_id,
        observability_parent_span_context=parent_span_context,
        # Closing ends the tools only; a persisted conversation stays on disk for resume.
        delete_on_close=persistence_dir is None,
    )
