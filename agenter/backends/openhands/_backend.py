"""OpenHandsBackend: the OpenHands software-agent SDK (file editor + terminal) behind agenter.

One OpenHands conversation per session, so a retry prompt reaches the same agent. Each
execute() sends the prompt and runs `Conversation.arun()` on the backend's private loop thread;
OpenHands' event callbacks are bridged to this async generator through an asyncio queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import BackendError, ConfigurationError
from agenter.backends._prompts import (
    AUTONOMOUS_CONTRACT,
    REFUSAL_TOOL_DESCRIPTION,
    REFUSAL_TOOL_NAME,
    REFUSAL_TOOL_SCHEMA,
    output_instructions,
    parse_structured_output,
    text_refusal,
)
from agenter.host import Redactor
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    ModifiedFiles,
    Refusal,
    SessionSpec,
)
from agenter.backends.openhands._options import OpenHandsOptions
from agenter.sandbox.workspace import WorkspaceSnapshot

BACKEND_NAME = "openhands"
#: Tool names OpenHands itself uses; agenter tools may not take them.
RESERVED_TOOL_NAMES = frozenset({"file_editor", "terminal", "finish", "think", REFUSAL_TOOL_NAME})
#: How long a cancelled turn may take to stop (the session waits 5 s for the whole task).
STOP_GRACE_SECONDS = 3.5

_END = object()

INSTALL_HINT = "pip install 'agenter-sdk[openhands]' (on Python >= 3.12)"


def runtime_problem() -> str | None:
    """Why the OpenHands SDK cannot run in this interpreter, or None. Cheap: imports nothing."""
    if sys.version_info < (3, 12):
        return (
            "The openhands backend needs Python >= 3.12 (openhands-sdk does not support "
            f"Python {sys.version_info.major}.{sys.version_info.minor}). Run agenter on Python "
            f"3.12+ and {INSTALL_HINT}, or choose another backend."
        )
    for module in ("openhands.sdk", "openhands.tools"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"The openhands backend needs the OpenHands SDK ({module} is not installed): {INSTALL_HINT}."
    return None


class OpenHandsBackend(BaseBackend):
    name: ClassVar[str] = BACKEND_NAME
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        custom_tools=True, structured_output=True, resume=True, sandbox=False
    )
    options_model: ClassVar[type[OpenHandsOptions]] = OpenHandsOptions

    def __init__(self, settings: BackendSettings):
        super().__init__(settings)
        self.options: OpenHandsOptions = settings.options  # type: ignore[assignment]
        self._spec: SessionSpec | None = None
        self._conversation: Any = None
        self._loop_thread: Any = None
        self._caller_loop: asyncio.AbstractEventLoop | None = None
        self._meter: Any = None
        self._recorder: Any = None
        self._emit: Any = None
        self._tools_session: str | None = None
        self._tool_futures: set[Any] = set()
        self._lifecycle = threading.Lock()
        self._closed = False
        self._redact = Redactor(extra=[self.options.api_key.get_secret_value()]
                                if self.options.api_key else None)

    # ------------------------------------------------------------------ settings
    @classmethod
    def check_settings(cls, settings: BackendSettings) -> None:
        if settings.sandbox:
            raise ConfigurationError(
                "The openhands backend has no sandbox: its terminal and file editor can reach the "
                "whole machine. Pass sandbox=False to run it (preferably inside a container or VM).",
                parameter="sandbox",
            )
        if not settings.model:
            raise ConfigurationError(
                "The openhands backend needs a model in LiteLLM's provider/model form, "
                "e.g. model='openai/gpt-4o' or model='anthropic/claude-sonnet-4-5'.",
                parameter="model",
            )
        names = [t.name for t in settings.tools]
        clashes = sorted(set(names) & RESERVED_TOOL_NAMES)
        if clashes:
            raise ConfigurationError(
                f"Tool name(s) {', '.join(clashes)} are taken by OpenHands' own tools; rename them.",
                parameter="tools",
            )
        if len(set(names)) != len(names):
            raise ConfigurationError("Two custom tools have the same name.", parameter="tools")
        problem = runtime_problem()
        if problem:
            raise ConfigurationError(problem, parameter="backend")

    # ------------------------------------------------------------------ lifecycle
    async def connect(self, spec: SessionSpec) -> None:
        self.check_settings(self.settings)
        self._spec = spec
        self._caller_loop = asyncio.get_running_loop()
        cwd = Path(spec.cwd).resolve()
        if not cwd.is_dir():
            raise BackendError(f"cwd is not a directory: {cwd}", backend=BACKEND_NAME)
        try:
            # If connect is cancelled (time budget) the thread still finishes; _start then sees
            # that disconnect() ran and tears down what it built.
            await asyncio.to_thread(self._start, cwd)
        except BaseException:
            await self.disconnect()
            raise

    def _start(self, cwd: Path) -> None:
        """Import OpenHands and create the conversation (blocking: seconds on first use)."""
        from agenter.backends.openhands import _runtime

        _runtime.prepare_environment()
        try:
            from agenter.backends.openhands import _tools
        except ImportError as exc:  # a broken install: say what to do, not a traceback
            raise BackendError(f"Could not import the OpenHands SDK ({exc}). {INSTALL_HINT}.",
                               backend=BACKEND_NAME) from exc

        assert self._spec is not None
        self._meter = _runtime.UsageMeter(self.settings.model)
        self._recorder = _runtime.TurnRecorder(cwd, REFUSAL_TOOL_NAME)
        tools_session = f"agenter-{uuid.uuid4().hex}"
        _tools.add_session_tools(tools_session, self._session_tools(_tools))
        loop_thread = _runtime.LoopThread()
        try:
            conversation = _runtime.build_conversation(
                model=self.settings.model or "",
                options=self.options,
                cwd=cwd,
                system_suffix=self._system_suffix(),
                tools_session=tools_session,
                on_event=self._on_event,
            )
        except Exception as exc:
            loop_thread.stop()
            _tools.remove_session_tools(tools_session)
            raise BackendError(f"Could not start the OpenHands agent: {self._redact(str(exc))}",
                               backend=BACKEND_NAME) from None
        with self._lifecycle:
            closed = self._closed
            if not closed:
                self._conversation, self._loop_thread = conversation, loop_thread
                self._tools_session = tools_session
                self._session_id = str(conversation.id)
        if closed:  # disconnect() ran while we were starting
            _runtime.end_conversation(conversation)
            loop_thread.stop()
            _tools.remove_session_tools(tools_session)

    def _system_suffix(self) -> str:
        assert self._spec is not None
        parts = [AUTONOMOUS_CONTRACT]
        if self._spec.system_prompt:
            parts.append(self._spec.system_prompt)
        if self._spec.output_type is not None:
            parts.append(output_instructions(self._spec.output_type))
        return "\n\n".join(parts)

    def _session_tools(self, tools_module: Any) -> list[Any]:
        session_tools = [
            tools_module.SessionTool(
                name=REFUSAL_TOOL_NAME, description=REFUSAL_TOOL_DESCRIPTION,
                input_schema=REFUSAL_TOOL_SCHEMA, handler=self._refuse, read_only=True,
            )
        ]
        for tool in self.settings.tools:
            session_tools.append(tools_module.SessionTool(
                name=tool.name, description=tool.description, input_schema=tool.input_schema,
                handler=self._tool_handler(tool),
            ))
        return session_tools

    async def disconnect(self) -> None:
        with self._lifecycle:
            self._closed = True
            conversation, self._conversation = self._conversation, None
            loop_thread, self._loop_thread = self._loop_thread, None
            tools_session, self._tools_session = self._tools_session, None
        for future in list(self._tool_futures):
            future.cancel()
        if conversation is None and loop_thread is None and tools_session is None:
            return

        def close() -> None:
            from agenter.backends.openhands import _runtime, _tools

            if conversation is not None:
                _runtime.end_conversation(conversation)  # ends the terminal's process group
            if loop_thread is not None:
                loop_thread.stop()
            if tools_session is not None:
                _tools.remove_session_tools(tools_session)

        await asyncio.to_thread(close)

    # ------------------------------------------------------------------ a turn
    async def execute(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self._conversation is None or self._spec is None:
            raise BackendError("execute() before connect()", backend=BACKEND_NAME)
        self._start_turn()
        from agenter.backends.openhands import _runtime

        cwd = Path(self._spec.cwd).resolve()
        recorder = _runtime.TurnRecorder(cwd, REFUSAL_TOOL_NAME)
        self._recorder = recorder
        before = await asyncio.to_thread(WorkspaceSnapshot.take, cwd)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def emit(item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, item)

        self._emit = emit
        run = self._loop_thread.submit(self._run_turn(prompt, emit))
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise self._backend_error(item)
                yield item
            finished = True
        finally:
            self._emit = None
            if not finished:
                await self._stop_run(run)
            after = await asyncio.to_thread(WorkspaceSnapshot.take, cwd)
            self._modified = ModifiedFiles(written=set(recorder.edited)) | before.diff(after)
            self._finish_turn(recorder)

    async def _run_turn(self, prompt: str, emit: Any) -> None:
        """Runs on the private loop: send the prompt, run the agent, then signal the end."""
        try:
            self._conversation.send_message(prompt)
            await self._conversation.arun()
        except BaseException as exc:  # noqa: BLE001 - handed to execute(), never lost
            emit(exc)
        finally:
            self._refresh_usage()
            emit(_END)

    async def _stop_run(self, run: Any) -> None:
        """Interrupt the OpenHands run (mid model call or mid command) and wait for it to end."""
        for future in list(self._tool_futures):
            future.cancel()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        wrapped = asyncio.wrap_future(run)
        while not run.done() and time.monotonic() < deadline:
            conversation = self._conversation
            if conversation is not None:
                with contextlib.suppress(Exception):
                    conversation.interrupt()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait({wrapped}, timeout=0.2)
        if not run.done():
            run.cancel()

    def _on_event(self, event: Any) -> None:
        """OpenHands callback (private loop thread, state lock held)."""
        recorder = self._recorder
        if recorder is None:
            return
        try:
            messages = recorder.translate(event)
        except Exception as exc:  # a surprise event shape must not kill the run
            messages = [BackendMessage(MessageType.STATUS, f"unreadable OpenHands event: {exc}")]
        if recorder.refused and self._refusal is not None:
            self._end_run_after_refusal()
        self._refresh_usage()
        emit = self._emit
        if emit is not None:
            for message in messages:
                message.content = self._redact(message.content)
                emit(message)

    def _end_run_after_refusal(self) -> None:
        """The refusal tool ends the turn the way OpenHands' finish tool does."""
        from openhands.sdk.conversation.state import ConversationExecutionStatus

        with contextlib.suppress(Exception):
            self._conversation.state.execution_status = ConversationExecutionStatus.FINISHED

    def _refresh_usage(self) -> None:
        conversation = self._conversation
        if conversation is None or self._meter is None:
            return
        try:
            metrics = conversation.conversation_stats.get_combined_metrics()
        except Exception:
            return
        self._usage = self._meter.update(metrics)

    def _finish_turn(self, recorder: Any) -> None:
        assert self._spec is not None
        if self._refusal is None and recorder.final_text:
            reason = text_refusal(recorder.final_text)  # the plain-text form of the refusal tool
            if reason:
                self._refusal = Refusal(reason=reason)
        if self._spec.output_type is not None:
            candidates = [recorder.final_text] if recorder.final_text else []
            candidates += list(reversed(recorder.texts))
            for text in candidates:
                parsed = parse_structured_output(text, self._spec.output_type)
                if parsed is not None:
                    self._structured = parsed
                    break

    def _backend_error(self, exc: BaseException) -> BackendError:
        from agenter.backends.openhands._runtime import error_status_code, root_cause

        if isinstance(exc, BackendError):
            return exc
        cause = root_cause(exc)
        status = error_status_code(exc)
        detail = str(cause) or type(cause).__name__
        message = f"OpenHands run failed: {type(cause).__name__}: {detail}"
        if status is not None and f"{status}" not in message:
            message += f" (HTTP {status})"
        return BackendError(self._redact(message), backend=BACKEND_NAME, status_code=status)

    # ------------------------------------------------------------------ tools
    def _refuse(self, arguments: dict[str, Any]) -> tuple[str, bool]:
        reason = str(arguments.get("reason") or "").strip()
        if not reason:
            return "Give the reason for declining in 'reason'.", True
        category = arguments.get("category")
        self._refusal = Refusal(reason=reason, category=str(category) if category else None)
        return "Refusal recorded. The task ends here.", False

    def _tool_handler(self, tool: Any) -> Any:
        """Run an agenter Tool on the caller's loop (where async tools expect to run)."""

        def handler(arguments: dict[str, Any]) -> tuple[str, bool]:
            loop = self._caller_loop
            if loop is None or loop.is_closed():
                return "The session has ended.", True
            future = asyncio.run_coroutine_threadsafe(tool.run(arguments), loop)
            self._tool_futures.add(future)
            try:
                return self._redact(future.result()), False
            except Exception as exc:
                if future.cancelled():
                    return "Tool call cancelled.", True
                return self._redact(f"{type(exc).__name__}: {exc}"), True
            finally:
                self._tool_futures.discard(future)

        return handler
