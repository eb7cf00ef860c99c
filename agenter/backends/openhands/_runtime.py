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
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenter._types import Usage
from agenter.host import _pids
from agenter.backends.base import BackendMessage, MessageType

log = logging.getLogger("agenter.backends.openhands")

#: File editor commands that change the file they name.
EDITOR_WRITE_COMMANDS = frozenset({"create", "str_replace", "insert", "undo_edit"})


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


def end_conversation(conversation: Any) -> None:
    """Interrupt a conversation and close its tools; blocking, call from a worker thread.

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
    # session (setsid): end every member of that session.
    for pid in shell_pids:
        _pids.kill(_pids.session_members(pid))


def _shell_pid(session: Any) -> int | None:
    """The pid of a terminal session's shell, when it runs as a local subprocess."""
    process = getattr(getattr(session, "terminal", None), "process", None)
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


def content_text(content: Any) -> str:
    """Text of a list of OpenHands content blocks (TextContent; images are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(p for p in parts if p)


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def observation_text(observation: Any) -> str:
    """What the model reads of a tool result, without terminal escape sequences."""
    try:
        text = content_text(observation.to_llm_content)
    except Exception:
        text = content_text(getattr(observation, "content", None))
    return _ANSI_ESCAPE.sub("", text).strip("\n")


def relative_path(path: str | None, cwd: Path) -> str | None:
    """`path` relative to cwd (POSIX), or None when it is outside cwd."""
    if not path:
        return None
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = cwd / candidate
    try:
        resolved = Path(os.path.normpath(candidate))
        return resolved.relative_to(cwd).as_posix()
    except ValueError:
        return None


class TurnRecorder:
    """Turns OpenHands events into BackendMessages and remembers what the turn did."""

    def __init__(self, cwd: Path, refusal_tool_name: str):
        self.cwd = cwd
        self.refusal_tool_name = refusal_tool_name
        self.edited: set[str] = set()
        self.outside_cwd: set[str] = set()
        self.texts: list[str] = []
        self.final_text: str | None = None
        self.conversation_error: str | None = None
        self.refused = False
        self._pending_edits: dict[str, tuple[str, str]] = {}

    def translate(self, event: Any) -> list[BackendMessage]:
        from openhands.sdk.event import (
            ActionEvent,
            AgentErrorEvent,
            Condensation,
            InterruptEvent,
            MessageEvent,
            ObservationEvent,
            PauseEvent,
            UserRejectObservation,
        )
        from openhands.sdk.event.conversation_error import ConversationErrorEvent

        if isinstance(event, MessageEvent):
            return self._message(event)
        if isinstance(event, ActionEvent):
            return self._action(event)
        if isinstance(event, ObservationEvent):
            return self._observation(event)
        if isinstance(event, AgentErrorEvent):
            self._pending_edits.pop(event.tool_call_id, None)
            return [BackendMessage(MessageType.TOOL_RESULT, event.error, tool_name=event.tool_name,
                                   tool_call_id=event.tool_call_id, is_error=True)]
        if isinstance(event, UserRejectObservation):
            self._pending_edits.pop(event.tool_call_id, None)
            return [BackendMessage(MessageType.TOOL_RESULT, f"rejected: {event.rejection_reason}",
                                   tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                                   is_error=True)]
        if isinstance(event, ConversationErrorEvent):
            self.conversation_error = f"{event.code}: {event.detail}"
            return [BackendMessage(MessageType.ERROR, self.conversation_error, is_error=True)]
        if isinstance(event, InterruptEvent):
            return [BackendMessage(MessageType.STATUS, "OpenHands run interrupted")]
        if isinstance(event, PauseEvent):
            return [BackendMessage(MessageType.STATUS, "OpenHands run paused")]
        if isinstance(event, Condensation):
            return [BackendMessage(MessageType.STATUS, "OpenHands condensed the conversation history")]
        return []

    def _message(self, event: Any) -> list[BackendMessage]:
        if event.source != "agent":
            return []  # our own prompt, or environment notes fed back to the model
        messages = []
        reasoning = getattr(event, "reasoning_content", None) or getattr(event.llm_message, "reasoning_content", None)
        if reasoning:
            messages.append(BackendMessage(MessageType.THINKING, reasoning))
        text = content_text(event.llm_message.content)
        if text:
            self.texts.append(text)
            self.final_text = text
            messages.append(BackendMessage(MessageType.TEXT, text))
        return messages

    def _action(self, event: Any) -> list[BackendMessage]:
        messages = []
        if event.reasoning_content:
            messages.append(BackendMessage(MessageType.THINKING, event.reasoning_content))
        thought = content_text(event.thought)
        if thought:
            self.texts.append(thought)
            messages.append(BackendMessage(MessageType.TEXT, thought))
        try:
            tool_input = json.loads(event.tool_call.arguments)
        except (ValueError, TypeError, AttributeError):
            tool_input = None
        if not isinstance(tool_input, dict):
            tool_input = {}
        action = event.action
        command = getattr(action, "command", None)
        path = getattr(action, "path", None)
        if event.tool_name == "file_editor" and command in EDITOR_WRITE_COMMANDS and path:
            self._pending_edits[event.tool_call_id] = (command, path)
        messages.append(BackendMessage(MessageType.TOOL_CALL, getattr(event, "summary", None) or "",
                                       tool_name=event.tool_name, tool_input=tool_input,
                                       tool_call_id=event.tool_call_id))
        if event.tool_name == "finish":
            final = getattr(action, "message", None)
            if isinstance(final, str) and final:
                self.texts.append(final)
                self.final_text = final
                messages.append(BackendMessage(MessageType.TEXT, final))
        return messages

    def _observation(self, event: Any) -> list[BackendMessage]:
        observation = event.observation
        is_error = bool(getattr(observation, "is_error", False))
        exit_code = getattr(getattr(observation, "metadata", None), "exit_code", None)
        if isinstance(exit_code, int) and exit_code > 0:
            is_error = True  # a failed shell command is a failed tool call
        edit = self._pending_edits.pop(event.tool_call_id, None)
        if edit is not None and not is_error:
            rel = relative_path(edit[1], self.cwd)
            if rel is None:
                self.outside_cwd.add(edit[1])
            else:
                self.edited.add(rel)
        if event.tool_name == self.refusal_tool_name and not is_error:
            self.refused = True
        if event.tool_name == "finish":
            text = ""  # the finish message was already reported with the call
        else:
            text = observation_text(observation)
        return [BackendMessage(MessageType.TOOL_RESULT, text, tool_name=event.tool_name,
                               tool_call_id=event.tool_call_id, is_error=is_error)]


class UsageMeter:
    """Cumulative usage from OpenHands' metrics, priced per response.

    LiteLLM's cost is used where it has one; otherwise agenter.usage (genai-prices) prices each
    new response. OpenAI-style prompt_tokens include cached tokens; agenter's input_tokens do not.
    """

    def __init__(self, model: str | None):
        self.model = model
        self.usage = Usage()
        self._seen_responses = 0
        self._litellm_cost_seen = 0.0

    def update(self, metrics: Any) -> Usage:
        token_usages = list(getattr(metrics, "token_usages", []) or [])
        new = token_usages[self._seen_responses:]
        litellm_cost = float(getattr(metrics, "accumulated_cost", 0.0) or 0.0)
        litellm_delta = max(litellm_cost - self._litellm_cost_seen, 0.0)
        if not new and not litellm_delta:
            return self.usage
        self._seen_responses = len(token_usages)
        self._litellm_cost_seen = litellm_cost
        delta = Usage()
        estimated = 0.0
        for record in new:
            response = response_usage(record)
            delta = delta + response
            estimated += self._price(response)
        cost = litellm_delta if litellm_delta > 0 else estimated
        self.usage = self.usage + delta.model_copy(update={"cost_usd": cost})
        return self.usage

    def _price(self, usage: Usage) -> float:
        from agenter.usage import estimate_cost

        try:
            return estimate_cost(self.model, usage) or 0.0
        except Exception:  # an unknown model or a pricing data problem must not stop the run
            return 0.0


def response_usage(record: Any) -> Usage:
    """agenter Usage of one OpenHands TokenUsage record."""
    prompt = int(getattr(record, "prompt_tokens", 0) or 0)
    cache_read = int(getattr(record, "cache_read_tokens", 0) or 0)
    cache_write = int(getattr(record, "cache_write_tokens", 0) or 0)
    return Usage(
        input_tokens=max(prompt - cache_read - cache_write, 0),
        output_tokens=int(getattr(record, "completion_tokens", 0) or 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def error_status_code(exc: BaseException | None) -> int | None:
    """The HTTP status of a LiteLLM/OpenAI error somewhere in the cause chain."""
    seen = 0
    while exc is not None and seen < 8:
        code = getattr(exc, "status_code", None)
        if isinstance(code, int):
            return code
        exc = getattr(exc, "original_exception", None) or exc.__cause__
        seen += 1
    return None


def root_cause(exc: BaseException) -> BaseException:
    seen = 0
    while seen < 8:
        inner = getattr(exc, "original_exception", None) or exc.__cause__
        if inner is None or inner is exc:
            return exc
        exc = inner
        seen += 1
    return exc


Emit = Callable[[Any], None]


def _ignore_tokens(_chunk: Any) -> None:
    return None


def build_conversation(*, model: str, options: Any, cwd: Path, system_suffix: str,
                       tools_session: str | None, on_event: Callable[[Any], None]) -> Any:
    """Create the OpenHands LLM, agent (file editor + terminal + agenter tools) and conversation."""
    from openhands.sdk import LLM, Agent, AgentContext, Conversation
    from openhands.sdk.tool import Tool as ToolSpec
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.terminal import TerminalTool

    llm_kwargs: dict[str, Any] = {
        "model": model,
        "usage_id": "agent",
        # OpenHands counts attempts (tenacity's stop_after_attempt), agenter counts retries.
        "num_retries": options.num_retries + 1,
        "retry_multiplier": 2.0,
        "retry_min_wait": options.retry_min_wait,
        "retry_max_wait": options.retry_max_wait,
        "timeout": options.request_timeout,
        "stream": options.stream,
    }
    if options.base_url:
        llm_kwargs["base_url"] = options.base_url
    if options.api_key is not None:
        llm_kwargs["api_key"] = options.api_key
    if options.api_version:
        llm_kwargs["api_version"] = options.api_version
    if options.temperature is not None:
        llm_kwargs["temperature"] = options.temperature
    if options.max_output_tokens is not None:
        llm_kwargs["max_output_tokens"] = options.max_output_tokens
    if options.extra_headers:
        llm_kwargs["extra_headers"] = dict(options.extra_headers)
    llm = LLM(**llm_kwargs)

    tools = [
        ToolSpec(name=FileEditorTool.name),
        ToolSpec(name=TerminalTool.name, params={"terminal_type": options.terminal_type}),
    ]
    if tools_session is not None:
        from agenter.backends.openhands._tools import TOOL_SPEC_NAME, register_agenter_tools

        register_agenter_tools()
        tools.append(ToolSpec(name=TOOL_SPEC_NAME, params={"session": tools_session}))

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
        # OpenHands streams only when someone listens to the tokens; agenter reports whole events.
        token_callbacks=[_ignore_tokens] if options.stream else None,
        visualizer=None,
        max_iteration_per_run=options.max_steps,
        delete_on_close=True,
    )
