"""Tool dispatch: how the harness answers the tool calls of one model response.

`ToolRunner` owns a session's tools: the file tools (or Anthropic's text editor) in the
workspace, the bash tool in its sandbox, the user's custom tools, the tools of the MCP servers
(mcptools.py), and agenter's refusal and structured-output tools. Calls of the session's tools go through the executor
(agenter.tools.executor via builtin.TurnExecutor): the permission gate decides each one (through
the backend's `permit`, so denials are recorded and every decision is an event), reads run side by
side, everything else alone, and oversize results go to the run's private folder. Every tool_use
gets exactly one tool_result, also when the turn is cancelled mid-batch.

A call the gate defers (on_ask="pause", or on_permission's "defer": nobody can answer its question
now) stops the response's calls there: the calls before it ran, it and every call after it are
`pending` (answered with a placeholder result, PAUSED_RESULT, so the conversation stays whole),
and the loop pauses the run. When the run is continued, the pending calls come back through
`run_tools` with the person's answers (call id → "allow", "deny" or "always"), which the gate
takes instead of asking.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agenter._types import PendingCall
from agenter.backends._confinement import session_confinement
from agenter.backends._pauses import pending_call
from agenter.backends._prompts import REFUSAL_TOOL_NAME, STRUCTURED_OUTPUT_TOOL_NAME
from agenter.backends.base import BackendMessage, MessageType, SessionSpec, ToolReply
from agenter.backends.model_api._harness.builtin import (
    DECIDING,
    READ_TOOLS,
    PermitGate,
    Relay,
    ReplyTool,
    TurnExecutor,
    custom_tool_spec,
    file_tool_spec,
    shell_spec,
    text_editor_spec,
)
from agenter.backends.model_api._harness.conversation import SKIPPED_RESULT, tool_result
from agenter.backends.model_api._harness.files import (
    FILE_TOOL_NAMES,
    MAX_OUTPUT_CHARS,
    TEXT_EDITOR_TOOL_NAME,
    FileToolbox,
    ToolOutcome,
)
from agenter.backends.model_api._harness.shell import (
    BASH_TOOL_NAME,
    RESULT_CHARS,
    ShellSandbox,
    run_shell,
    shell_env,
    timeout_of,
)
from agenter.permissions import PermissionAnswer, ToolCall
from agenter.tools.executor import ToolResult, ToolUse

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from agenter.backends.model_api._harness.loop import HarnessBackend
    from agenter.backends.model_api._harness.mcptools import MCPToolset
    from agenter.permissions import PermissionDecision, PermissionGate
    from agenter.tools.spec import ToolSpec

#: Characters of a tool's result an event carries (the model gets the whole result).
EVENT_TEXT_LIMIT = 4000
#: The result a pending call has in the conversation while the run is paused (replaced by the
#: call's real result when the run is continued).
PAUSED_RESULT = "Not run yet: this call waits for a person's approval (the run is paused)."


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


class ToolRunner:
    """The tools of one connected harness backend, and the calls of its responses."""

    def __init__(self, backend: HarnessBackend[Any]):
        self.backend = backend
        self._toolbox: FileToolbox | None = None
        self._results_box: FileToolbox | None = None
        self.run_dir: Path | None = None
        self.results_dir: Path | None = None
        self._executor: TurnExecutor | None = None
        self._relay: Relay | None = None
        # What the running tool call reported for its events: the bash tool's exit code, the
        # file tools' edits (path, lines added, lines removed). Calls that change things run one
        # at a time, so one slot each is enough; _report_result takes them.
        self._exit_code: int | None = None
        self._edits: list[tuple[str, int, int]] = []
        self._shell_sandbox: ShellSandbox | None = None
        self._shell_env: dict[str, str] = {}
        self._custom_tools = {tool.name: tool for tool in backend.settings.tools}
        self.mcp: MCPToolset | None = None
        #: The calls the latest response stopped before (see the module docstring), the input
        #: errors among them, and the answers given for calls of a continued run (id → answer).
        self.pending: list[PendingCall] = []
        self.pending_errors: dict[str, str] = {}
        self._answers: dict[str, str] = {}
        self._deferred: list[ToolResult] = []

    # ------------------------------------------------------------------ lifecycle
    async def open(self, spec: SessionSpec) -> None:
        """The toolboxes, the run's private folder, the executor and the bash tool's sandbox."""
        from agenter.sandbox.paths import PathResolver

        backend = self.backend
        self._toolbox = FileToolbox(PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=backend.settings.sandbox))
        # The run's folder (private, 0700): oversize tool results are saved there; the gate and
        # the tools may read it, nothing writes it but the executor.
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"agenter-{backend.name}-"))
        self.results_dir = self.run_dir / "tool-results"
        self.results_dir.mkdir()
        self._results_box = FileToolbox(PathResolver(self.results_dir, [], sandbox=True))
        gate = backend.gate
        assert gate is not None
        gate.add_read_root(self.results_dir)
        if not backend.settings.sandbox:
            # sandbox=False (and no policy): the tools may go anywhere, as before the gate.
            backend.leave_confinement_to_the_sandbox()
        if backend.config.mcp_servers:
            from agenter.backends.model_api._harness.mcptools import MCPToolset

            self.mcp = MCPToolset(backend, backend.config.mcp_servers, self.run_dir)
            await self.mcp.open(taken={*backend.reserved_tool_names, *self._custom_tools, REFUSAL_TOOL_NAME,
                                        STRUCTURED_OUTPUT_TOOL_NAME})
        self._executor = self._make_executor()
        if backend.has_shell:
            await self._prepare_shell()

    async def close(self) -> None:
        mcp, self.mcp = self.mcp, None
        if mcp is not None:
            await mcp.close()
        run_dir, self.run_dir = self.run_dir, None
        if run_dir is not None:
            await asyncio.to_thread(shutil.rmtree, run_dir, True)

    async def _prepare_shell(self) -> None:
        backend = self.backend
        self._shell_env = shell_env()
        if not backend.settings.sandbox:
            return
        # The shell sandbox (agenter.sandbox.confine): Landlock, bubblewrap or Seatbelt.
        gate = backend.gate
        assert gate is not None and self.results_dir is not None
        self._shell_sandbox = await session_confinement(
            gate, cwd=backend.cwd, prefer=backend.config.shell_sandbox, network=backend.shell_network,
            read_only=backend.read_only_session, tmpdir=await self._shell_tmpdir(), keep=[str(self.results_dir)],
            env=self._shell_env, backend=backend.name)

    async def _shell_tmpdir(self) -> str:
        """The commands' TMPDIR, private to the session (0700, in the run's folder, removed with it)."""
        assert self.run_dir is not None
        tmpdir = self.run_dir / "tmp"
        await asyncio.to_thread(tmpdir.mkdir, 0o700, False, True)
        return str(tmpdir)

    def read_text(self, path: str) -> str | None:
        """A workspace file's text as the read tools see it (inside the sandbox); None when it is
        absent, binary, too large or refused."""
        from agenter.backends._workspace import read_text

        return None if self._toolbox is None else read_text(self._toolbox.resolver, path)

    def offered_file_tools(self) -> list[str]:
        """File tools the model gets: the text editor or agenter's tools; in a read-only session
        only the tools that read."""
        if self.backend.read_only_session:
            return [name for name in FILE_TOOL_NAMES if name in READ_TOOLS]
        if self.backend.config.text_editor:
            return [TEXT_EDITOR_TOOL_NAME]
        return list(FILE_TOOL_NAMES)

    def _make_executor(self) -> TurnExecutor:
        """The executor for the session's tools (agenter's refusal and output tools excepted:
        they end the turn, and no permission is asked for them)."""
        backend = self.backend
        tools: dict[str, Any] = {}
        specs: dict[str, ToolSpec] = {}
        # File tools bound their own output (MAX_OUTPUT_CHARS and a footer): never saved to a file.
        file_chars = 2 * MAX_OUTPUT_CHARS
        for name in self.offered_file_tools():
            if name == TEXT_EDITOR_TOOL_NAME:
                tools[name], specs[name] = ReplyTool(self._run_text_editor), text_editor_spec(file_chars)
            else:
                tools[name], specs[name] = ReplyTool(self._run_file_tool), file_tool_spec(name, file_chars)
        if backend.has_shell:
            tools[BASH_TOOL_NAME], specs[BASH_TOOL_NAME] = ReplyTool(self._run_bash), shell_spec(RESULT_CHARS)
        for name, tool in self._custom_tools.items():
            tools[name], specs[name] = ReplyTool(self._run_custom_tool), custom_tool_spec(tool)
        for name, mcp_tool in (self.mcp.tools if self.mcp is not None else {}).items():
            tools[name], specs[name] = ReplyTool(self._run_mcp_tool), mcp_tool.spec(RESULT_CHARS)
        gate = cast("PermissionGate", PermitGate(self._permit, lambda: backend.gate))
        return TurnExecutor(tools, specs=specs, gate=gate, results_dir=self.results_dir,
                            on_start=self._announce, on_result=self._report_result)

    # ------------------------------------------------------------------ one response's calls
    def turn_ended(self) -> bool:
        """A refusal or an accepted structured output ends the turn."""
        return self.backend.refusal() is not None or self.backend.structured_output() is not None

    def _is_agenter_tool(self, name: str) -> bool:
        return name == REFUSAL_TOOL_NAME or (
            name == STRUCTURED_OUTPUT_TOOL_NAME and self.backend.spec.output_type is not None)

    async def run_tools(self, content: list[dict[str, Any]], input_errors: Mapping[str, str],
                        results: list[dict[str, Any]],
                        answers: Mapping[str, str] | None = None) -> AsyncIterator[BackendMessage]:
        """Answer every tool_use of one response, in order, into `results`.

        Consecutive calls of the session's tools go to the executor together (the gate first,
        read-only ones side by side); agenter's refusal and output tools, and calls whose input
        could not be read, are answered on their own. Once the turn has ended (refusal, accepted
        output), the calls after it are answered without running. A deferred call and the calls
        after it are `pending` (placeholder results). `answers`: a person's answers to calls of
        a paused run (tool_use id → "allow", "deny" or "always").
        """
        self.pending, self.pending_errors, self._deferred = [], {}, []
        blocks = [block for block in content if block["type"] == "tool_use"]
        self._take_answers(answers or {}, blocks)
        batch: list[dict[str, Any]] = []
        try:
            for index, block in enumerate(blocks):
                if self.turn_ended():
                    results.append(tool_result(block["id"], SKIPPED_RESULT, is_error=True))
                    continue
                error = input_errors.get(block["id"])
                if error is None and not self._is_agenter_tool(block["name"]):
                    batch.append(block)
                    continue
                async for message in self._run_batch(batch, results):
                    yield message
                if self._deferred:
                    self._hold_from(batch, blocks[index:], input_errors, results)
                    return
                batch = []
                async for message in self._call_inline(block, results, error):
                    yield message
            async for message in self._run_batch(batch, results):
                yield message
            if self._deferred:
                self._hold_from(batch, [], input_errors, results)
        finally:
            self._answers = {}

    def _take_answers(self, answers: Mapping[str, str], blocks: list[dict[str, Any]]) -> None:
        """The answers of a continued run; an "always" answer allows its tool on its target
        for the rest of the run (the gate remembers it)."""
        self._answers = dict(answers)
        gate, executor = self.backend.gate, self._executor
        if gate is None or executor is None:
            return
        for block in blocks:
            arguments = block.get("input")
            if answers.get(block["id"]) == "always" and block["name"] in executor.tools and isinstance(arguments, dict):
                gate.approve_always(executor.spec_for(block["name"]).call(block["name"], arguments))

    async def _permit(self, call: ToolCall) -> PermissionDecision:
        """The gate's decision for the executor's call: with the person's answer when the call
        was pending in a paused run, and deferred when nobody can answer now."""
        answer = self._answers.get(DECIDING.get(""))
        given = None if answer is None else PermissionAnswer(answer != "deny")
        return await self.backend.permit(call, answer=given, defer=True)

    def _hold_from(self, batch: list[dict[str, Any]], after: list[dict[str, Any]], input_errors: Mapping[str, str],
                   results: list[dict[str, Any]]) -> None:
        """The first deferred call of `batch` (the calls the executor had) and every call after
        it (`after`: not reached) are pending: placeholders in `results`, and each as the gate
        sees it now (the deferred one asked; a later one may need no approval)."""
        first = self._deferred[0].tool_use_id
        start = next(i for i, block in enumerate(batch) if block["id"] == first)
        gate, executor = self.backend.gate, self._executor
        assert gate is not None and executor is not None
        for position, block in enumerate([*batch[start:], *after]):
            results.append(tool_result(block["id"], PAUSED_RESULT, is_error=True))
            name, arguments = block["name"], block.get("input")
            error = input_errors.get(block["id"])
            if error is not None:
                self.pending_errors[block["id"]] = error
            if error is not None or name not in executor.tools or not isinstance(arguments, dict):
                self.pending.append(pending_call(block["id"], name, arguments, needs_approval=False))
                continue
            call = executor.spec_for(name).call(name, arguments)
            verdict = gate.evaluate(call)
            self.pending.append(pending_call(block["id"], name, arguments, call, verdict,
                                             needs_approval=position == 0 or verdict.behavior == "ask"))
        self._deferred = []

    async def _call_inline(self, block: dict[str, Any], results: list[dict[str, Any]],
                           input_error: str | None) -> AsyncIterator[BackendMessage]:
        """Refusal, structured output, or a call whose input is not a JSON object: a TOOL_CALL
        message, the reply, its TOOL_RESULT."""
        backend = self.backend
        name, arguments, tool_id = block["name"], block.get("input") or {}, block["id"]
        yield BackendMessage(MessageType.TOOL_CALL, tool_name=name, tool_input=arguments, tool_call_id=tool_id)
        if input_error:
            reply = ToolReply(f"Could not run {name}: {input_error}. Call it again with a JSON object.",
                              is_error=True)
        elif name == REFUSAL_TOOL_NAME:
            reply = backend.refuse(arguments)
        else:
            reply = backend.accept_output(arguments)
        content = truncate(reply.text, MAX_OUTPUT_CHARS)
        results.append(tool_result(tool_id, content, is_error=reply.is_error))
        yield BackendMessage(MessageType.TOOL_RESULT, content=truncate(content, EVENT_TEXT_LIMIT),
                             tool_name=name, tool_call_id=tool_id, is_error=reply.is_error)

    async def _run_batch(self, blocks: list[dict[str, Any]],
                         results: list[dict[str, Any]]) -> AsyncIterator[BackendMessage]:
        """Run calls through the executor in a task of their own, relaying its messages as they
        come. A tool runs only after its TOOL_CALL message was taken (lock-step with the session,
        so a budget that stops the turn stops it before the next tool); if the turn is cancelled
        or closed, the batch is cancelled and every call still gets its one result."""
        if not blocks:
            return
        executor = self._executor
        assert executor is not None
        relay = self._relay = Relay()
        uses = [ToolUse(b["id"], b["name"], b.get("input") or {}) for b in blocks]

        async def run() -> list[ToolResult]:
            try:
                return await executor.run_batch(uses)
            finally:
                relay.close()

        task = asyncio.ensure_future(run())
        answered: list[ToolResult] | None = None
        try:
            while (item := await relay.next()) is not None:
                message, taken = item
                yield message
                if taken is not None and not taken.done():
                    taken.set_result(None)
            answered = await task
        finally:
            if answered is None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait({task}, timeout=self.backend.settle_seconds)
                if task.done() and not task.cancelled() and task.exception() is None:
                    answered = task.result()
                else:
                    answered = executor.last_results or []
            self._relay = None
            for result in answered:
                if result.status == "deferred":
                    self._deferred.append(result)
                else:
                    results.append(result.to_block())

    async def _announce(self, use: ToolUse) -> None:
        """The executor is about to run `use` (it passed the gate): report the call and wait until
        the session has taken the report."""
        relay = self._relay
        if relay is not None:
            raw = {"type": "tool_use", "id": use.id, "name": use.name, "input": dict(use.input)}
            if use.name == BASH_TOOL_NAME:
                self._exit_code = None
                await relay.announce(BackendMessage(
                    MessageType.COMMAND_START, tool_name=use.name, tool_input=dict(use.input), tool_call_id=use.id,
                    details={"command": use.input.get("command")}, raw=raw))
            else:
                await relay.announce(BackendMessage(MessageType.TOOL_CALL, tool_name=use.name,
                                                    tool_input=dict(use.input), tool_call_id=use.id, raw=raw))

    def _report_result(self, result: ToolResult) -> None:
        relay = self._relay
        edits, self._edits = self._edits, []
        if relay is None:
            return
        content = truncate(result.content, EVENT_TEXT_LIMIT)
        if result.name == BASH_TOOL_NAME:
            relay.post(BackendMessage(MessageType.COMMAND_END, content=content, tool_name=result.name,
                                      tool_call_id=result.tool_use_id, is_error=result.is_error,
                                      details={"exit_code": self._exit_code}))
            self._exit_code = None
            return
        relay.post(BackendMessage(MessageType.TOOL_RESULT, content=content, tool_name=result.name,
                                  tool_call_id=result.tool_use_id, is_error=result.is_error))
        for path, added, removed in edits:
            relay.post(BackendMessage(MessageType.FILE_EDIT, tool_name=result.name, tool_call_id=result.tool_use_id,
                                      details={"path": path, "lines_added": added, "lines_removed": removed}))

    # ------------------------------------------------------------------ the tools
    async def _run_file_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        toolbox = self._toolbox
        assert toolbox is not None
        if name in READ_TOOLS and self._in_results_dir(arguments.get("path")):
            toolbox = self._results_box or toolbox
        # A tracked thread: a turn cancelled meanwhile waits for it before its last snapshot.
        outcome = await self.backend.in_thread_named(name, toolbox.run, name, arguments)
        return self._file_reply(name, outcome)

    async def _run_text_editor(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        toolbox = self._toolbox
        assert toolbox is not None
        if arguments.get("command") == "view" and self._in_results_dir(arguments.get("path")):
            toolbox = self._results_box or toolbox
        outcome = await self.backend.in_thread_named(name, toolbox.run_text_editor, arguments)
        return self._file_reply(name, outcome)

    def _file_reply(self, name: str, outcome: ToolOutcome) -> ToolReply:
        """What a file tool changed (tracked), refused (a denial, named in the result) and tells
        the model."""
        self.backend.track(written=sorted(outcome.written), deleted=sorted(outcome.deleted))
        self._edits.extend((path, added, removed) for path, (added, removed) in outcome.edits.items())
        if outcome.refused is not None:
            # The gate allowed the call; the sandbox's path check (or allowed_write_paths) did not.
            rule = "allowed_write_paths" if "writes are limited to" in outcome.content else "sandbox"
            self.backend.deny(name, outcome.refused, outcome.content, rule)
        return ToolReply(outcome.content, outcome.is_error)

    async def _run_bash(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolReply("'command' must be a non-empty string", is_error=True)
        backend = self.backend
        timeout = timeout_of(arguments, backend.config.shell_timeout)
        result = await run_shell(command, cwd=backend.cwd, timeout=timeout, sandbox=self._shell_sandbox,
                                 env=self._shell_env)
        self._exit_code = result.exit_code
        # What a command prints goes to the model: keys it finds are hidden like everywhere else.
        return ToolReply(backend.redact(result.text), result.is_error)

    async def _run_custom_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        return await self.backend.run_tool(self._custom_tools[name], arguments)

    async def _run_mcp_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        mcp = self.mcp
        if mcp is None:
            return ToolReply(f"{name}: the MCP servers were closed", is_error=True)
        return await mcp.call(name, arguments)

    def _in_results_dir(self, path: object) -> bool:
        """An absolute path into the run's tool-results folder (read there, not in the workspace)."""
        results = self.results_dir
        if results is None or not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
            return False
        return os.path.normpath(path).startswith(str(results) + os.sep)
