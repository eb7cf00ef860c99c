"""Tool dispatch: how the harness answers the tool calls of one model response.

`ToolRunner` owns a session's tools: the file tools (or Anthropic's text editor) in the
workspace, the bash tool in its sandbox, the user's custom tools, and agenter's refusal and
structured-output tools. Calls of the session's tools go through the executor
(agenter.tools.executor via builtin.TurnExecutor): the permission gate decides each one (through
the backend's `permit`, so denials are recorded and every decision is an event), reads run side by
side, everything else alone, and oversize results go to the run's private folder. Every tool_use
gets exactly one tool_result, also when the turn is cancelled mid-batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agenter._errors import BackendError
from agenter.backends._prompts import REFUSAL_TOOL_NAME, STRUCTURED_OUTPUT_TOOL_NAME
from agenter.backends.base import BackendMessage, MessageType, SessionSpec, ToolReply
from agenter.backends.model_api._harness.builtin import (
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
)
from agenter.backends.model_api._harness.shell import (
    BASH_TOOL_NAME,
    RESULT_CHARS,
    ShellSandbox,
    hidden_home_paths,
    probe_sandbox,
    run_shell,
    shell_env,
    timeout_of,
)
from agenter.sandbox.confine import choose_mechanism, unavailable_reason
from agenter.tools.executor import ToolResult, ToolUse

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from agenter.backends.model_api._harness.loop import HarnessBackend
    from agenter.permissions import PermissionGate
    from agenter.tools.spec import ToolSpec

#: Characters of a tool's result an event carries (the model gets the whole result).
EVENT_TEXT_LIMIT = 4000


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
        self._executor = self._make_executor()
        if backend.has_shell:
            await self._prepare_shell()

    async def close(self) -> None:
        run_dir, self.run_dir = self.run_dir, None
        if run_dir is not None:
            await asyncio.to_thread(shutil.rmtree, run_dir, True)

    async def _prepare_shell(self) -> None:
        backend = self.backend
        self._shell_env = shell_env()
        if not backend.settings.sandbox:
            return
        # The shell sandbox's mechanism (agenter.sandbox.confine): Landlock, bubblewrap or Seatbelt.
        prefer = backend.config.shell_sandbox
        mechanism = choose_mechanism(prefer)
        if mechanism is None:
            raise BackendError(unavailable_reason(prefer), backend=backend.name, kind="missing_program")
        gate = backend.gate
        assert gate is not None and self.results_dir is not None
        workspace = gate.workspace

        def is_credential(path: str) -> bool:
            resolved = workspace.resolve(path)
            return any(f.check == "credentials" for f in workspace.findings(resolved, "read"))

        hidden = await asyncio.to_thread(hidden_home_paths, workspace.home, is_credential,
                                         keep=[str(backend.cwd), str(self.results_dir)])
        self._shell_sandbox = ShellSandbox(
            cwd=backend.cwd, network=backend.shell_network, read_only=backend.read_only_session,
            writable=tuple(workspace.extra_roots), readable=tuple(dict.fromkeys(workspace.read_roots)),
            hidden=tuple(hidden),
            program=shutil.which("bwrap") or "bwrap", mechanism=mechanism, tmpdir=await self._shell_tmpdir())
        await probe_sandbox(self._shell_sandbox, self._shell_env, backend.name)

    async def _shell_tmpdir(self) -> str:
        """The commands' TMPDIR, private to the session (0700, in the run's folder, removed with it)."""
        assert self.run_dir is not None
        tmpdir = self.run_dir / "tmp"
        await asyncio.to_thread(tmpdir.mkdir, 0o700, False, True)
        return str(tmpdir)

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
        gate = cast("PermissionGate", PermitGate(backend.permit, lambda: backend.gate))
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
                        results: list[dict[str, Any]]) -> AsyncIterator[BackendMessage]:
        """Answer every tool_use of one response, in order, into `results`.

        Consecutive calls of the session's tools go to the executor together (the gate first,
        read-only ones side by side); agenter's refusal and output tools, and calls whose input
        could not be read, are answered on their own. Once the turn has ended (refusal, accepted
        output), the calls after it are answered without running.
        """
        batch: list[dict[str, Any]] = []
        for block in content:
            if block["type"] != "tool_use":
                continue
            if self.turn_ended():
                results.append(tool_result(block["id"], SKIPPED_RESULT, is_error=True))
                continue
            error = input_errors.get(block["id"])
            if error is None and not self._is_agenter_tool(block["name"]):
                batch.append(block)
                continue
            async for message in self._run_batch(batch, results):
                yield message
            batch = []
            async for message in self._call_inline(block, results, error):
                yield message
        async for message in self._run_batch(batch, results):
            yield message

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
            results.extend(result.to_block() for result in answered)

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
        self.backend.track(written=sorted(outcome.written), deleted=sorted(outcome.deleted))
        self._edits.extend((path, added, removed) for path, (added, removed) in outcome.edits.items())
        return ToolReply(outcome.content, outcome.is_error)

    async def _run_text_editor(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        toolbox = self._toolbox
        assert toolbox is not None
        if arguments.get("command") == "view" and self._in_results_dir(arguments.get("path")):
            toolbox = self._results_box or toolbox
        outcome = await self.backend.in_thread_named(name, toolbox.run_text_editor, arguments)
        self.backend.track(written=sorted(outcome.written), deleted=sorted(outcome.deleted))
        self._edits.extend((path, added, removed) for path, (added, removed) in outcome.edits.items())
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

    def _in_results_dir(self, path: object) -> bool:
        """An absolute path into the run's tool-results folder (read there, not in the workspace)."""
        results = self.results_dir
        if results is None or not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
            return False
        return os.path.normpath(path).startswith(str(results) + os.sep)
