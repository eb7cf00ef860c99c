"""ClaudeCodeBackend: Claude Code (the `claude` CLI) through claude-agent-sdk's ClaudeSDKClient.

One connected client per session, so every iteration (and the retry prompt with validation
errors) lands in the same Claude Code conversation. What the CLI does is reported as it streams;
what changed on disk comes from the file tools' results plus a workspace snapshot diff, so edits
made by Bash count too. With sandbox=True, Bash runs in Claude Code's OS sandbox (bubblewrap +
socat on Linux, failIfUnavailable) and a PreToolUse hook confines the file tools to cwd and
allowed_write_paths.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import sys
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import BackendError, ConfigurationError, PathSecurityError
from agenter._types import Usage
from agenter.backends._prompts import (
    AUTONOMOUS_CONTRACT,
    REFUSAL_TOOL_DESCRIPTION,
    REFUSAL_TOOL_NAME,
    REFUSAL_TOOL_SCHEMA,
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
from agenter.host import _pids
from agenter.backends.claude_code._options import ClaudeCodeOptions

log = logging.getLogger("agenter.backends.claude_code")

#: Name of the in-process MCP server that carries custom tools and the refusal tool.
MCP_SERVER_NAME = "agenter"
#: Claude Code's tools that write a file named in their input, and the input key holding the path.
FILE_WRITE_TOOLS: dict[str, str] = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
#: Claude Code's own bookkeeping inside cwd; never reported as a change.
INTERNAL_PATH_PREFIXES = (".claude/.cc-writes/",)
#: Folders Claude Code may create in cwd for itself; removed again at disconnect when empty.
INTERNAL_DIRS = (".claude/.cc-writes", ".claude")
#: What Claude Code's sandbox needs on Linux, and the Debian/Ubuntu packages that provide it.
LINUX_SANDBOX_PROGRAMS = {"bwrap": "bubblewrap", "socat": "socat"}
#: How long the CLI may take to exit after its stdin closes before it is terminated.
GRACEFUL_EXIT_SECONDS = 5.0
STDERR_TAIL_LINES = 60


def mcp_tool_name(name: str) -> str:
    """The name Claude Code gives a tool of our in-process MCP server."""
    return f"mcp__{MCP_SERVER_NAME}__{name}"


def _usage_from(raw: dict[str, Any] | None) -> Usage:
    raw = raw or {}

    def number(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, int | float) else 0

    return Usage(
        input_tokens=number("input_tokens"),
        output_tokens=number("output_tokens"),
        cache_read_tokens=number("cache_read_input_tokens"),
        cache_write_tokens=number("cache_creation_input_tokens"),
    )


def _max_usage(a: Usage, b: Usage) -> Usage:
    """Streamed copies of one API message repeat its usage; keep the largest of each count."""
    return Usage(
        input_tokens=max(a.input_tokens, b.input_tokens),
        output_tokens=max(a.output_tokens, b.output_tokens),
        cache_read_tokens=max(a.cache_read_tokens, b.cache_read_tokens),
        cache_write_tokens=max(a.cache_write_tokens, b.cache_write_tokens),
    )


def _result_text(content: Any) -> str:
    """Text of a tool result's content (a string or a list of MCP-style blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                parts.append(str(block.get("text", "")) if block.get("type") == "text" else f"[{block.get('type')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return str(content)


def _silence_shadowed_callback_warning() -> None:
    """The SDK warns that allowed_tools shadow can_use_tool; here that is intended (the callback only
    answers prompts for tools outside the list). A targeted filter, installed once: a
    catch_warnings() held across an await would race with concurrent sessions."""
    from claude_agent_sdk.types import CanUseToolShadowedWarning

    if not any(f[2] is CanUseToolShadowedWarning for f in warnings.filters):
        warnings.filterwarnings("ignore", category=CanUseToolShadowedWarning)


#: Set to a fresh value for each CLI we start: everything the CLI starts inherits it, so its
#: leftovers are found even when the CLI was killed and they were reparented to init.
PROCESS_MARK_ENV = "AGENTER_CLI_MARK"


class _Connection:
    """One running CLI: the SDK client, the pid of its `claude` process, its process mark."""

    def __init__(self, client: Any, pid: int | None, mark: str):
        self.client = client
        self.pid = pid
        self.mark = mark


class ClaudeCodeBackend(BaseBackend):
    """Runs Claude Code headless; see docs/backends/claude-code.md."""

    name: ClassVar[str] = "claude-code"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        custom_tools=True, structured_output=True, resume=True, sandbox=True
    )
    options_model: ClassVar[type[ClaudeCodeOptions]] = ClaudeCodeOptions

    def __init__(self, settings: BackendSettings):
        super().__init__(settings)
        self.options: ClaudeCodeOptions = settings.options  # type: ignore[assignment]
        self._spec: SessionSpec | None = None
        self._cwd: Path | None = None
        self._env: dict[str, str] = {}
        self._redact = Redactor()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._connection: _Connection | None = None
        self._shutdowns: list[asyncio.Task[None]] = []
        self._resolver: Any = None
        self._model_name: str | None = settings.model
        # Usage: finished turns (from result messages) + the running turn (per API message id).
        self._finished_usage = Usage()
        self._streamed: dict[str, Usage] = {}
        self._process_cost_seen = 0.0  # the CLI reports cost cumulatively per process
        self._pending_refusal: Refusal | None = None
        self._last_text = ""
        self._preexisting_dirs: set[str] = set()

    # ------------------------------------------------------------------ configuration
    @classmethod
    def check_settings(cls, settings: BackendSettings) -> None:
        if importlib.util.find_spec("claude_agent_sdk") is None:
            raise ConfigurationError(
                "the claude-code backend needs the claude-agent-sdk package: "
                "pip install 'agenter-sdk[claude-code]'", parameter="backend")
        names = [t.name for t in settings.tools]
        if REFUSAL_TOOL_NAME in names:
            raise ConfigurationError(f"a custom tool may not be named {REFUSAL_TOOL_NAME!r} (reserved)",
                                     parameter="tools")
        if len(set(names)) != len(names):
            raise ConfigurationError("custom tool names must be unique", parameter="tools")

    def _cli_env(self) -> dict[str, str]:
        """Variables for the CLI on top of ours: API endpoint and key, quiet headless defaults."""
        env = {
            # No telemetry, auto-update or other side traffic from a pipeline run.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        if self.options.base_url:
            env["ANTHROPIC_BASE_URL"] = self.options.base_url
        if self.options.api_key is not None:
            env["ANTHROPIC_API_KEY"] = self.options.api_key.get_secret_value()
        env.update(self.options.env)
        return env

    def _check_sandbox_programs(self) -> None:
        """Fail before starting when Claude Code's Linux sandbox cannot run (never run unsandboxed)."""
        if not self.settings.sandbox or not sys.platform.startswith("linux"):
            return
        search_path = self._env.get("PATH", os.environ.get("PATH", os.defpath))
        missing = [prog for prog in LINUX_SANDBOX_PROGRAMS if shutil.which(prog, path=search_path) is None]
        if missing:
            packages = " ".join(LINUX_SANDBOX_PROGRAMS[p] for p in missing)
            raise BackendError(
                f"Claude Code's sandbox cannot start: {', '.join(missing)} not found on PATH. "
                f"Install {packages} (Debian/Ubuntu: apt-get install bubblewrap socat; Fedora: dnf "
                "install bubblewrap socat), or pass sandbox=False to run Claude Code without its "
                "OS sandbox.", backend=self.name)

    def _permission_mode(self) -> str:
        if self.settings.sandbox:
            return "default"
        # bypassPermissions is refused for root unless the CLI is told it runs in a sandbox
        # (IS_SANDBOX=1); then allow-everything comes from our permission callback instead.
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
        if is_root and self._env.get("IS_SANDBOX", os.environ.get("IS_SANDBOX")) != "1":
            return "acceptEdits"
        return "bypassPermissions"

    def _system_prompt_append(self, spec: SessionSpec) -> str:
        parts = [
            AUTONOMOUS_CONTRACT,
            f"The refusal tool is {mcp_tool_name(REFUSAL_TOOL_NAME)}.",
        ]
        if spec.output_type is not None:
            parts.append("Return the requested result with the StructuredOutput tool before you stop.")
        if spec.system_prompt:
            parts.append(spec.system_prompt)
        return "\n\n".join(parts)

    def _agent_options(self, spec: SessionSpec, resume: str | None) -> Any:
        from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

        opts = self.options
        built_in = list(opts.allowed_tools)
        ours = [mcp_tool_name(t.name) for t in self.settings.tools] + [mcp_tool_name(REFUSAL_TOOL_NAME)]
        kwargs: dict[str, Any] = {
            "cwd": str(spec.cwd),
            "tools": built_in,
            "allowed_tools": built_in + ours,
            "mcp_servers": {MCP_SERVER_NAME: self._mcp_server()},
            "strict_mcp_config": True,
            "setting_sources": list(opts.setting_sources),
            "system_prompt": {"type": "preset", "preset": "claude_code",
                              "append": self._system_prompt_append(spec)},
            "permission_mode": self._permission_mode(),
            "can_use_tool": self._can_use_tool,
            "env": dict(self._env),
            "stderr": self._on_stderr,
            "model": self.settings.model,
            "max_turns": opts.max_turns,
            "resume": resume,
        }
        if opts.cli_path:
            kwargs["cli_path"] = opts.cli_path
        if opts.claude_max_thinking_tokens is not None:
            kwargs["thinking"] = ({"type": "disabled"} if opts.claude_max_thinking_tokens == 0 else
                                  {"type": "enabled", "budget_tokens": opts.claude_max_thinking_tokens})
        if spec.output_type is not None:
            kwargs["output_format"] = {"type": "json_schema", "schema": spec.output_type.model_json_schema()}
        if self.settings.sandbox:
            kwargs["sandbox"] = {
                "enabled": True,
                "failIfUnavailable": True,  # never fall back to an unsandboxed shell
                "autoAllowBashIfSandboxed": True,
                "allowUnsandboxedCommands": False,  # no dangerouslyDisableSandbox escape
            }
        if self._resolver is not None:
            kwargs["hooks"] = {"PreToolUse": [HookMatcher(matcher="|".join(FILE_WRITE_TOOLS),
                                                          hooks=[self._pre_tool_use])]}
        return ClaudeAgentOptions(**kwargs)

    # ------------------------------------------------------------------ tools and permissions
    def _mcp_server(self) -> Any:
        from claude_agent_sdk import SdkMcpTool, create_sdk_mcp_server

        tools = [SdkMcpTool(name=t.name, description=t.description, input_schema=t.input_schema,
                            handler=self._tool_handler(t)) for t in self.settings.tools]
        tools.append(SdkMcpTool(name=REFUSAL_TOOL_NAME, description=REFUSAL_TOOL_DESCRIPTION,
                                input_schema=REFUSAL_TOOL_SCHEMA, handler=self._refuse_task))
        return create_sdk_mcp_server(MCP_SERVER_NAME, tools=tools)

    def _tool_handler(self, tool: Any) -> Any:
        async def handler(arguments: dict[str, Any]) -> dict[str, Any]:
            try:
                output = await tool.run(arguments)
            except Exception as exc:  # noqa: BLE001 - the model reads the error and can adapt
                return {"content": [{"type": "text", "text": f"Error: {type(exc).__name__}: {exc}"}],
                        "is_error": True}
            return {"content": [{"type": "text", "text": output}]}

        return handler

    async def _refuse_task(self, arguments: dict[str, Any]) -> dict[str, Any]:
        reason = str(arguments.get("reason") or "").strip() or "no reason given"
        category = arguments.get("category")
        self._pending_refusal = Refusal(reason=reason, category=str(category) if category else None)
        return {"content": [{"type": "text", "text": "Refusal recorded. Stop now: no more tool calls."}]}

    def _write_denial(self, tool_name: str, tool_input: dict[str, Any]) -> str | None:
        """Why a file tool may not write where it wants, or None when it may."""
        if self._resolver is None or tool_name not in FILE_WRITE_TOOLS:
            return None
        path = tool_input.get(FILE_WRITE_TOOLS[tool_name])
        if not isinstance(path, str) or not path:
            return None  # the tool rejects a missing path itself
        try:
            self._resolver.resolve_write(path)
        except PathSecurityError as exc:
            return str(exc)
        return None

    async def _pre_tool_use(self, input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        """The gate every file write passes, whatever the permission rules say.

        In the default permission mode a refused write is turned into a permission prompt, which
        `_can_use_tool` answers with a deny the model reads as a plain tool error. In the other
        modes a prompt might be auto-approved, so the hook denies by itself (the model then sees
        Claude Code's "PreToolUse:... hook error: <reason>").
        """
        reason = self._write_denial(str(input_data.get("tool_name", "")), input_data.get("tool_input") or {})
        if reason is None:
            return {}
        decision = "ask" if self._permission_mode() == "default" else "deny"
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                       "permissionDecisionReason": reason}}

    async def _can_use_tool(self, tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
        """Answers the permission prompts a headless run would otherwise hang on."""
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        reason = self._write_denial(tool_name, tool_input)
        if reason is not None:
            return PermissionResultDeny(message=reason)
        if not self.settings.sandbox:
            return PermissionResultAllow()
        allowed = set(self.options.allowed_tools) | {mcp_tool_name(t.name) for t in self.settings.tools}
        allowed.add(mcp_tool_name(REFUSAL_TOOL_NAME))
        if tool_name in allowed:
            return PermissionResultAllow()
        return PermissionResultDeny(
            message=f"{tool_name} is not permitted in this run (allowed: {', '.join(sorted(allowed))}).")

    def _on_stderr(self, line: str) -> None:
        self._stderr.append(line)

    # ------------------------------------------------------------------ lifecycle
    async def connect(self, spec: SessionSpec) -> None:
        self._spec = spec
        self._cwd = Path(os.path.realpath(spec.cwd))
        if not self._cwd.is_dir():
            raise BackendError(f"working directory does not exist: {spec.cwd}", backend=self.name)
        self._env = self._cli_env()
        self._redact = Redactor(self._env)
        if self.settings.sandbox or spec.allowed_write_paths is not None:
            from agenter.sandbox.paths import PathResolver

            self._resolver = PathResolver(self._cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        self._check_sandbox_programs()
        self._preexisting_dirs = {d for d in INTERNAL_DIRS if (self._cwd / d).exists()}
        if self.options.cli_path and not os.access(self.options.cli_path, os.X_OK):
            raise BackendError(f"Claude Code CLI not found or not executable: {self.options.cli_path}",
                               backend=self.name)
        await self._open(resume=spec.resume_session_id)

    async def _open(self, resume: str | None) -> None:
        from claude_agent_sdk import ClaudeSDKClient, ClaudeSDKError

        assert self._spec is not None
        mark = uuid.uuid4().hex
        self._env[PROCESS_MARK_ENV] = mark
        options = self._agent_options(self._spec, resume)
        _silence_shadowed_callback_warning()
        client = ClaudeSDKClient(options)
        try:
            await client.connect()
        except ClaudeSDKError as exc:
            raise self._error_from(exc, "Claude Code could not start") from None
        except OSError as exc:
            raise self._error(f"Claude Code could not start: {exc}") from None
        self._connection = _Connection(client, self._find_pid(client), mark)
        self._process_cost_seen = 0.0

    def _find_pid(self, client: Any) -> int | None:
        # The SDK does not expose the pid publicly; read it where the transport keeps it.
        process = getattr(getattr(client, "_transport", None), "_process", None)
        pid = getattr(process, "pid", None)
        if isinstance(pid, int):
            return pid
        found = _pids.children_running(self.options.cli_path or self._bundled_cli())
        return found.pop() if len(found) == 1 else None

    @staticmethod
    def _bundled_cli() -> str:
        import claude_agent_sdk

        return str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")

    @property
    def cli_pid(self) -> int | None:
        """Pid of the running `claude` process (None when none runs)."""
        return self._connection.pid if self._connection else None

    async def disconnect(self) -> None:
        if self._connection is not None:
            self._stop_connection(graceful=True)
        if self._shutdowns:
            await asyncio.gather(*(asyncio.shield(t) for t in self._shutdowns), return_exceptions=True)
            self._shutdowns = [t for t in self._shutdowns if not t.done()]
        self._remove_internal_dirs()

    def _remove_internal_dirs(self) -> None:
        """Leave the repository as we found it: drop the CLI's own folders if it created them empty."""
        if self._cwd is None:
            return
        for name in INTERNAL_DIRS:
            if name not in self._preexisting_dirs:
                with contextlib.suppress(OSError):  # not empty or not there: leave it
                    (self._cwd / name).rmdir()

    def _stop_connection(self, *, graceful: bool) -> asyncio.Task[None]:
        """Detach the running CLI and end it in a task that a second cancellation cannot stop."""
        connection, self._connection = self._connection, None
        assert connection is not None
        task = asyncio.ensure_future(self._end_cli(connection, graceful=graceful))
        self._shutdowns.append(task)
        return task

    async def _end_cli(self, connection: _Connection, *, graceful: bool) -> None:
        """Close the client; SIGTERM the CLI if it lingers; SIGKILL whatever is left of its tree.

        Bounded to about GRACEFUL_EXIT_SECONDS + 4 s so the session's own wait never cuts it off.
        """
        pid = connection.pid if connection.pid and self._is_our_child(connection.pid) else None
        family = _pids.descendants(pid) if pid else set()
        if not graceful and pid:
            _pids.kill({pid}, signal.SIGTERM)
        closing = asyncio.ensure_future(connection.client.disconnect())
        await asyncio.wait({closing}, timeout=GRACEFUL_EXIT_SECONDS if graceful else 2.0)
        if not closing.done() and pid:
            family |= _pids.descendants(pid)
            _pids.kill({pid}, signal.SIGTERM)
            await asyncio.wait({closing}, timeout=2.0)
        if pid:
            family |= _pids.descendants(pid)
            family.add(pid)
        leftovers = {p for p in family if _pids.is_alive(p)}
        leftovers |= _pids.with_environment(PROCESS_MARK_ENV, connection.mark)
        if leftovers:
            _pids.kill(leftovers, signal.SIGKILL)
        if not closing.done():
            await asyncio.wait({closing}, timeout=2.0)  # lets the SDK reap the killed CLI
            if not closing.done():
                closing.cancel()
        if closing.done() and not closing.cancelled() and closing.exception() is not None:
            log.debug("claude-code disconnect: %s", closing.exception())

    @staticmethod
    def _is_our_child(pid: int) -> bool:
        """Guards the kill against a recycled pid: the CLI is always our direct child."""
        parent = _pids.parent_map().get(pid)
        return parent is None or parent == os.getpid()

    # ------------------------------------------------------------------ one turn
    async def execute(self, prompt: str) -> AsyncIterator[BackendMessage]:
        from claude_agent_sdk import ClaudeSDKError, ResultMessage

        from agenter.sandbox.workspace import WorkspaceSnapshot

        if self._spec is None or self._cwd is None:
            raise BackendError("execute() called before connect()", backend=self.name)
        self._start_turn()
        self._pending_refusal = None
        self._last_text = ""
        self._streamed = {}
        if self._connection is None:
            # A cancelled turn ended the previous CLI; continue the same Claude Code session.
            await self._open(resume=self._session_id)
        connection = self._connection
        assert connection is not None
        before = await asyncio.to_thread(WorkspaceSnapshot.take, self._cwd)
        tool_calls: dict[str, tuple[str, dict[str, Any]]] = {}
        written_by_tools: set[str] = set()
        finished = False
        try:
            got_result = False
            await connection.client.query(prompt)
            async for message in connection.client.receive_response():
                for out in self._convert(message, tool_calls, written_by_tools):
                    yield out
                if isinstance(message, ResultMessage):
                    got_result = True
                    self._finish_turn(message)
            if not got_result:
                raise self._error("Claude Code ended the turn without a result (the CLI exited or "
                                  "closed its output)")
            finished = True
        except ClaudeSDKError as exc:
            raise self._error_from(exc, "Claude Code failed") from None
        finally:
            after = WorkspaceSnapshot.take(self._cwd)
            self._modified = self._changes(before.diff(after), written_by_tools)
            if not finished:
                # Cancelled (time budget), abandoned, or failed: stop the CLI now, and count
                # what the turn used so far.
                self._finished_usage = self.usage()
                self._streamed = {}
                if self._connection is connection:
                    await asyncio.shield(self._stop_connection(graceful=False))

    def _convert(self, message: Any, tool_calls: dict[str, tuple[str, dict[str, Any]]],
                 written_by_tools: set[str]) -> list[BackendMessage]:
        from claude_agent_sdk import (
            AssistantMessage,
            SystemMessage,
            TextBlock,
            ThinkingBlock,
            ToolResultBlock,
            ToolUseBlock,
            UserMessage,
        )

        out: list[BackendMessage] = []
        if isinstance(message, AssistantMessage):
            if message.model and message.model != "<synthetic>":
                self._model_name = message.model
            if message.usage and message.message_id:
                previous = self._streamed.get(message.message_id, Usage())
                self._streamed[message.message_id] = _max_usage(previous, _usage_from(message.usage))
            for block in message.content:
                if isinstance(block, TextBlock):
                    kind = MessageType.ERROR if message.error else MessageType.TEXT
                    if not message.error and block.text.strip():
                        self._last_text = block.text.strip()
                    out.append(BackendMessage(kind, self._redact(block.text), is_error=bool(message.error)))
                elif isinstance(block, ThinkingBlock):
                    out.append(BackendMessage(MessageType.THINKING, block.thinking))
                elif isinstance(block, ToolUseBlock):
                    tool_calls[block.id] = (block.name, block.input)
                    out.append(BackendMessage(MessageType.TOOL_CALL, tool_name=block.name,
                                              tool_input=block.input, tool_call_id=block.id))
                elif hasattr(block, "name") and hasattr(block, "id"):  # server tools (web search, ...)
                    out.append(BackendMessage(MessageType.TOOL_CALL, tool_name=str(block.name),
                                              tool_input=getattr(block, "input", None), tool_call_id=str(block.id)))
        elif isinstance(message, UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if not isinstance(block, ToolResultBlock):
                    continue
                name, tool_input = tool_calls.get(block.tool_use_id, (None, {}))
                if not block.is_error and name in FILE_WRITE_TOOLS:
                    rel = self._relative(tool_input.get(FILE_WRITE_TOOLS[name]))
                    if rel:
                        written_by_tools.add(rel)
                out.append(BackendMessage(MessageType.TOOL_RESULT, self._redact(_result_text(block.content)),
                                          tool_name=name, tool_call_id=block.tool_use_id,
                                          is_error=bool(block.is_error)))
        elif isinstance(message, SystemMessage):
            if message.subtype == "init":
                session_id = message.data.get("session_id")
                if isinstance(session_id, str):
                    self._session_id = session_id
                model = message.data.get("model")
                if isinstance(model, str) and not self._model_name:
                    self._model_name = model
                out.append(BackendMessage(MessageType.STATUS,
                                          f"Claude Code session {session_id} (model {model}, "
                                          f"permission mode {message.data.get('permissionMode')})"))
            elif message.subtype.startswith("model_refusal"):
                # The API refused (stop_reason "refusal") and Claude Code gave up on the turn.
                explanation = message.data.get("api_refusal_explanation")
                category = message.data.get("api_refusal_category")
                if self._pending_refusal is None:
                    self._pending_refusal = Refusal(
                        reason=str(explanation or self._last_text or "the model refused the request"),
                        category=str(category) if category else "refusal")
                out.append(BackendMessage(MessageType.STATUS, f"Claude Code: {message.subtype}"))
            elif message.subtype == "informational" and message.data.get("content"):
                out.append(BackendMessage(MessageType.STATUS, self._redact(str(message.data["content"]))))
            elif any(word in message.subtype for word in ("retry", "error", "compact")):
                out.append(BackendMessage(MessageType.STATUS, f"Claude Code: {message.subtype}"))
        return out

    def _finish_turn(self, result: Any) -> None:
        """Usage, cost, structured output and refusal from the turn's result message."""
        if isinstance(result.session_id, str) and result.session_id:
            self._session_id = result.session_id
        turn = _usage_from(result.usage)
        if not turn.total_tokens and self._streamed:
            turn = sum(self._streamed.values(), Usage())
        reported = result.total_cost_usd
        if isinstance(reported, int | float):
            # Cumulative per CLI process: this turn cost the difference.
            cost = reported - self._process_cost_seen if reported >= self._process_cost_seen else reported
            self._process_cost_seen = float(reported)
        else:
            cost = self._estimate_cost(turn)
        self._finished_usage = self._finished_usage + turn.model_copy(update={"cost_usd": max(cost, 0.0)})
        self._streamed = {}
        refusal = self._pending_refusal
        if refusal is None and result.stop_reason == "refusal":
            refusal = Refusal(reason=self._last_text or "the model refused the request", category="refusal")
        if refusal is None and not result.is_error:
            reason = text_refusal(result.result or "")
            if reason:
                refusal = Refusal(reason=reason)
        self._refusal = refusal
        if refusal is not None:
            return  # a refusal is an outcome, not a failure (even when the CLI flags it as an error)
        if result.is_error and result.subtype == "error_max_structured_output_retries":
            # The agent did not return the structured output: not a crash. The session sees no
            # output and retries with that problem in the prompt.
            log.info("claude-code: the turn ended without structured output")
            return
        if result.is_error:
            raise self._result_error(result)
        spec = self._spec
        assert spec is not None
        if spec.output_type is not None:
            structured = result.structured_output
            self._structured = parse_structured_output(
                structured if isinstance(structured, dict) else result.result, spec.output_type)

    def _estimate_cost(self, usage: Usage) -> float:
        try:
            from agenter.usage import estimate_cost
        except ImportError:
            return 0.0
        return estimate_cost(self._model_name, usage, "anthropic") or 0.0

    def usage(self) -> Usage:
        if not self._streamed:
            return self._finished_usage
        running = sum(self._streamed.values(), Usage())
        running = running.model_copy(update={"cost_usd": self._estimate_cost(running)})
        return self._finished_usage + running

    # ------------------------------------------------------------------ files
    def _relative(self, path: Any) -> str | None:
        """cwd-relative POSIX path of a file inside cwd, else None."""
        if not isinstance(path, str) or not path or self._cwd is None:
            return None
        absolute = Path(path) if os.path.isabs(path) else self._cwd / path
        real = Path(os.path.realpath(absolute))
        try:
            rel = real.relative_to(self._cwd)
        except ValueError:
            return None
        text = rel.as_posix()
        return None if text in ("", ".") else text

    def _changes(self, diff: ModifiedFiles, written_by_tools: set[str]) -> ModifiedFiles:
        assert self._cwd is not None
        written = set(diff.written)
        for rel in written_by_tools:
            if (self._cwd / rel).exists():
                written.add(rel)
        deleted = set(diff.deleted) - written

        def ours(path: str) -> bool:
            return not path.startswith(INTERNAL_PATH_PREFIXES)

        return ModifiedFiles(written={p for p in written if ours(p)}, deleted={p for p in deleted if ours(p)})

    # ------------------------------------------------------------------ errors
    def _stderr_tail(self) -> str | None:
        tail = self._redact("\n".join(self._stderr)).strip()
        return tail or None

    def _error(self, message: str, status_code: int | None = None) -> BackendError:
        return BackendError(self._redact(message), backend=self.name, stderr_tail=self._stderr_tail(),
                            status_code=status_code)

    def _error_from(self, exc: BaseException, what: str) -> BackendError:
        from claude_agent_sdk import CLINotFoundError, ProcessError, ResultError

        if isinstance(exc, CLINotFoundError):
            return self._error(f"Claude Code CLI not found ({exc}). Install claude-agent-sdk (it bundles "
                               "the CLI) or pass cli_path=...")
        if isinstance(exc, ResultError):
            return self._result_error(exc)
        if isinstance(exc, ProcessError) and exc.exit_code is not None:
            how = f"was killed by signal {-exc.exit_code}" if exc.exit_code < 0 else f"exited with code {exc.exit_code}"
            return self._error(f"{what}: the claude process {how}")
        return self._error(f"{what}: {exc}")

    def _result_error(self, result: Any) -> BackendError:
        """A BackendError for an error result (a ResultMessage or the SDK's ResultError)."""
        status = getattr(result, "api_error_status", None)
        text = (getattr(result, "result", None) or "").strip()
        errors = [str(e) for e in (getattr(result, "errors", None) or [])]
        subtype = getattr(result, "subtype", None)
        detail = "; ".join([text] + errors if text else errors) or str(result)
        if status:
            message = f"Claude Code API error (HTTP {status}): {detail}"
        elif subtype and subtype != "success":
            message = f"Claude Code stopped with {subtype}: {detail}"
        else:
            message = f"Claude Code failed: {detail}"
        if "sandbox" in message.lower() and "unavailable" in message.lower():
            message += (" — Claude Code's sandbox needs bubblewrap and socat on Linux (apt-get install "
                        "bubblewrap socat); pass sandbox=False to run without it.")
        return self._error(message, status_code=status if isinstance(status, int) else None)


__all__ = ["FILE_WRITE_TOOLS", "MCP_SERVER_NAME", "ClaudeCodeBackend", "mcp_tool_name"]
