"""ACPBackend: spawn an Agent Client Protocol agent, drive it over stdio as its client.

agenter plays the ACP *client*: it owns the working directory, serves the agent's
fs/read_text_file and fs/write_text_file requests inside the sandbox, answers
session/request_permission by policy, and streams session/update notifications as
BackendMessages. What the agent does by itself (its own file writes, its own shell) is seen
only afterwards, through a workspace snapshot diff: see docs/backends/acp.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter.backends._prompts import (
    AUTONOMOUS_CONTRACT,
    output_instructions,
    parse_structured_output,
    text_refusal,
)
from agenter.host import AgentProcess
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BackendSettings,
    BaseBackend,
    MessageType,
    ModifiedFiles,
    Refusal,
    SessionSpec,
)

log = logging.getLogger("agenter.backends.acp")

PERMISSION_POLICIES = ("deny", "allow")

#: How long a cancelled prompt may take to acknowledge session/cancel before the process goes.
CANCEL_GRACE_SECONDS = 1.0
#: How long an agent gets to exit after its stdin closes, before its process group is signalled.
EXIT_GRACE_SECONDS = 1.0

CONTINUE_PROMPT = (
    "No one is available to answer questions or confirm steps: this run is fully automated. "
    "Proceed now: make the changes the task needs directly in the working directory, then stop. "
    "If you cannot do the task, reply with a line starting with 'REFUSED:' and the reason."
)

_CONFIRMATION = re.compile(
    r"\b(shall i|should i|would you like|do you want|want me to|let me know|please confirm|"
    r"can you confirm|could you confirm|confirm (?:that|whether|if)|ready to proceed|"
    r"may i|okay to proceed|ok to proceed|proceed\?|go ahead\?|approve|permission to)\b",
    re.IGNORECASE,
)


def asks_for_confirmation(text: str) -> bool:
    """Does the agent's final text ask a human to confirm or answer instead of acting?"""
    tail = (text or "").strip()[-600:]
    if not tail:
        return False
    return tail.endswith("?") or bool(_CONFIRMATION.search(tail))


class ACPOptions(BackendOptions):
    """Options of the acp backend (keyword arguments of AutonomousCodingAgent)."""

    acp_command: str = Field(description="The ACP agent program, e.g. 'codex-acp' or 'claude-agent-acp'.")
    acp_args: list[str] = Field(default_factory=list, description="Arguments for acp_command.")
    acp_env: dict[str, str] = Field(
        default_factory=dict, description="Environment added to agenter's own for the agent process.")
    acp_mcp_servers: list[dict[str, Any]] = Field(
        default_factory=list,
        description="MCP servers for session/new, in ACP's shape: {name, command, args, env} "
                    "(stdio; env may be a dict) or {type: 'http'|'sse', name, url, headers}.")
    acp_permission_policy: str = Field(
        "deny", description="Answer to session/request_permission: 'deny' (pick a reject option) "
                            "or 'allow' (pick an allow-once option; still refused outside the sandbox).")
    acp_autonomous: bool = Field(
        True, description="Prepend agenter's autonomous contract to the first prompt and continue once "
                          "when the agent stops to ask for confirmation instead of editing.")
    acp_session_mode: str | None = Field(
        None, description="A session mode id to set after session/new (codex-acp: 'auto', "
                          "'full-access'; claude-agent-acp: 'acceptEdits', 'bypassPermissions', ...).")
    startup_timeout: float = Field(60.0, gt=0, description="Seconds for initialize + session/new.")

    def __init__(self, **data: Any):
        _check_policy(data.get("acp_permission_policy", "deny"))
        super().__init__(**data)


def _check_policy(policy: Any) -> None:
    if policy not in PERMISSION_POLICIES:
        raise ConfigurationError(f"invalid acp_permission_policy {policy!r}",
                                 parameter="acp_permission_policy", valid=list(PERMISSION_POLICIES))


def _mcp_server_json(server: dict[str, Any]) -> dict[str, Any]:
    """ACP wants stdio env as [{name, value}] and http headers as [{name, value}]; accept dicts."""
    out = dict(server)
    for key in ("env", "headers"):
        value = out.get(key)
        if isinstance(value, dict):
            out[key] = [{"name": str(k), "value": str(v)} for k, v in value.items()]
    if "type" not in out:  # stdio
        out.setdefault("args", [])
        out.setdefault("env", [])
    else:
        out.setdefault("headers", [])
    return out


class ACPBackend(BaseBackend):
    """Any ACP agent over stdio. agenter is the ACP client and owns the sandbox."""

    name: ClassVar[str] = "acp"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        custom_tools=False, structured_output=True, resume=True, sandbox=True)
    options_model: ClassVar[type[BackendOptions]] = ACPOptions

    def __init__(self, settings: BackendSettings):
        super().__init__(settings)
        self.options: ACPOptions = settings.options  # type: ignore[assignment]
        self._process: AgentProcess | None = None
        self._conn: Any = None
        self._client: Any = None
        self._spec: SessionSpec | None = None
        self._env: dict[str, str] = {}
        self._turns = 0
        self._cost_reported = 0.0  # the agent's own cumulative cost figure, last seen
        self._turn_base = Usage()
        self._turn_context_tokens = 0
        self._queue: collections.deque[BackendMessage] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._pending_notes: list[str] = []
        self.agent_info: dict[str, Any] = {}
        self.last_stop_reason: str | None = None
        self._last_process: AgentProcess | None = None
        self._watcher: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ settings
    @classmethod
    def check_settings(cls, settings: BackendSettings) -> None:
        options = settings.options
        if not isinstance(options, ACPOptions):
            raise ConfigurationError("the acp backend needs ACPOptions", parameter="options")
        _check_policy(options.acp_permission_policy)
        if not options.acp_command.strip():
            raise ConfigurationError("acp_command must name the ACP agent program", parameter="acp_command")
        if settings.tools:
            raise ConfigurationError(
                "the acp backend cannot add custom tools to an ACP agent; give the agent an MCP "
                "server with acp_mcp_servers instead", parameter="tools")
        if options.acp_mcp_servers:
            from acp.schema import HttpMcpServer, McpServerStdio, SseMcpServer
            from pydantic import TypeAdapter, ValidationError

            adapter = TypeAdapter(HttpMcpServer | SseMcpServer | McpServerStdio)
            for server in options.acp_mcp_servers:
                try:
                    adapter.validate_python(_mcp_server_json(server))
                except ValidationError as exc:
                    raise ConfigurationError(f"invalid MCP server {server.get('name')!r} in "
                                             f"acp_mcp_servers: {exc.errors()[0]['msg']}",
                                             parameter="acp_mcp_servers") from None

    # ------------------------------------------------------------------ lifecycle
    async def connect(self, spec: SessionSpec) -> None:
        import acp
        from acp.schema import (
            ClientCapabilities,
            FileSystemCapabilities,
            Implementation,
        )

        from agenter.backends.acp.client import ACPClient
        from agenter.sandbox.paths import PathResolver

        self._spec = spec
        cwd = Path(spec.cwd).resolve()
        self._wakeup = asyncio.Event()
        resolver = PathResolver(cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        self._client = ACPClient(resolver=resolver, permission_policy=self.options.acp_permission_policy,
                                 emit=self._emit, on_usage=self._on_usage)
        self._env = {**os.environ, **self.options.acp_env}
        program = shutil.which(self.options.acp_command, path=self._env.get("PATH")) or self.options.acp_command
        try:
            self._process = await AgentProcess.start([program, *self.options.acp_args], cwd=cwd, env=self._env,
                                                     limit=50 * 1024 * 1024)
        except OSError as exc:
            raise BackendError(f"could not start ACP agent {self.options.acp_command!r}: {exc.strerror or exc}",
                               backend=self.name) from None
        process = self._process.process
        self._conn = acp.connect_to_agent(self._client, process.stdin, process.stdout)
        self._watcher = asyncio.create_task(self._watch_exit(self._process, self._conn))
        try:
            await asyncio.wait_for(self._open_session(cwd, ClientCapabilities, FileSystemCapabilities,
                                                      Implementation), self.options.startup_timeout)
        except asyncio.CancelledError:
            await self._shutdown(graceful=False)
            raise
        except TimeoutError:
            await self._shutdown(graceful=False)
            raise BackendError(f"ACP agent {self.options.acp_command!r} did not start a session within "
                               f"{self.options.startup_timeout:g} s", backend=self.name,
                               stderr_tail=self._stderr_tail()) from None
        except BaseException as exc:  # noqa: BLE001 - every failure ends the process, then is reported
            error = exc if isinstance(exc, BackendError) else await self._failure(
                "could not start an ACP session", exc)
            await self._shutdown(graceful=False)
            raise error from None

    async def _watch_exit(self, process: AgentProcess, conn: Any) -> None:
        """An agent that dies while a child still holds its stdout never sends EOF: close the
        connection when the process exits, so pending requests fail instead of hanging."""
        with contextlib.suppress(Exception):
            # Process.wait() also waits for the pipes to close; returncode is set at exit itself.
            while process.returncode is None:
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.2)  # let the last lines it wrote be read
            if self._conn is conn:
                await asyncio.wait_for(conn.close(), 1)

    async def _open_session(self, cwd: Path, ClientCapabilities: Any, FileSystemCapabilities: Any,
                            Implementation: Any) -> None:
        import acp

        init = await self._conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            # Terminals are not offered: agenter could not confine the commands it would run.
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=False),
            client_info=Implementation(name="agenter", title="agenter", version=_version()),
        )
        if init.agent_info is not None:
            self.agent_info = init.agent_info.model_dump(exclude_none=True)
        mcp_servers = [_mcp_server_json(s) for s in self.options.acp_mcp_servers]
        resume = self._spec.resume_session_id if self._spec else None
        if resume:
            capabilities = init.agent_capabilities
            if not (capabilities and capabilities.load_session):
                raise BackendError("this ACP agent cannot load a previous session (no loadSession "
                                   "capability)", backend=self.name)
            response = await self._conn.load_session(cwd=str(cwd), session_id=resume, mcp_servers=mcp_servers)
            self._session_id = resume
        else:
            try:
                response = await self._conn.new_session(cwd=str(cwd), mcp_servers=mcp_servers)
            except acp.RequestError as exc:
                if exc.code != -32000 or not await self._authenticate(init):
                    raise
                response = await self._conn.new_session(cwd=str(cwd), mcp_servers=mcp_servers)
            self._session_id = response.session_id
        self._client.session_id = self._session_id
        await self._configure_session(response)

    async def _authenticate(self, init: Any) -> bool:
        """The agent wants authentication: use an env-var method whose variables are all set."""
        for method in init.auth_methods or []:
            data = method.model_dump(by_alias=True, exclude_none=True)
            variables = [v.get("name") for v in data.get("vars") or []]
            if data.get("type") == "env_var" and variables and all(self._env.get(v) for v in variables):
                await self._conn.authenticate(method_id=data["id"])
                return True
        methods = ", ".join(m.id for m in init.auth_methods or []) or "none offered"
        raise BackendError(f"the ACP agent requires authentication (methods: {methods}); set the "
                           "variables of an env_var method in acp_env, or configure the agent",
                           backend=self.name)

    async def _configure_session(self, response: Any) -> None:
        mode = self.options.acp_session_mode
        if mode:
            modes = getattr(response, "modes", None)
            available = [m.id for m in modes.available_modes] if modes else []
            if available and mode not in available:
                raise BackendError(f"the ACP agent has no session mode {mode!r} "
                                   f"(available: {', '.join(available)})", backend=self.name)
            await self._conn.set_session_mode(session_id=self._session_id, mode_id=mode)
        model = self.settings.model
        if model:
            option = next((o for o in getattr(response, "config_options", None) or []
                           if getattr(getattr(o, "root", o), "category", None) == "model"), None)
            option = getattr(option, "root", option)
            if option is None:
                self._pending_notes.append(
                    f"this ACP agent offers no model option; model {model!r} must be set in its own "
                    "configuration (acp_args / acp_env)")
                return
            values = [getattr(getattr(o, "root", o), "value", None) for o in getattr(option, "options", [])]
            if values and model not in values:
                raise BackendError(f"the ACP agent has no model {model!r} (available: "
                                   f"{', '.join(str(v) for v in values if v)})", backend=self.name)
            await self._conn.set_config_option(config_id=option.id, session_id=self._session_id, value=model)

    async def disconnect(self) -> None:
        await self._shutdown()

    async def _shutdown(self, graceful: bool = True) -> None:
        """Close the connection, give the agent a moment to exit, then end its process group."""
        conn, self._conn = self._conn, None
        process, self._process = self._process, None
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
        if process is not None:
            self._last_process = process
        if conn is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(conn.close(), 1)
        if process is None:
            return
        stdin = process.process.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):
                stdin.close()
        if graceful and process.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(process.process.wait()), EXIT_GRACE_SECONDS)
        # Agents that ignore a closed stdin (codex-acp does) are signalled here, by process group.
        descendants = _descendants(process.pid)
        await process.terminate(grace=1.5 if graceful else 0.5)
        # The leader may exit on SIGTERM while group members linger (Claude Code under
        # claude-agent-acp does): give them a moment, then SIGKILL the group and any descendant
        # that left it.
        for _ in range(5):
            if not _group_alive(process.pid):
                break
            await asyncio.sleep(0.1)
        await process.terminate(grace=0)
        for pid in descendants:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------ turns
    async def execute(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self._conn is None or self._client is None:
            raise BackendError("the acp backend is not connected", backend=self.name)
        self._start_turn()
        first = self._turns == 0
        self._turns += 1
        from agenter.sandbox.workspace import WorkspaceSnapshot

        cwd = Path(self._spec.cwd) if self._spec else Path.cwd()
        before = WorkspaceSnapshot.take(cwd)
        self._client.start_turn()
        self._turn_base = self._usage.model_copy()
        self._turn_context_tokens = 0
        for note in self._pending_notes:
            yield BackendMessage(type=MessageType.STATUS, content=note)
        self._pending_notes = []
        text = self._compose(prompt, first)
        continued = False
        try:
            while True:
                async with contextlib.aclosing(self._prompt_turn(text)) as stream:
                    async for message in stream:
                        yield message
                stop = self.last_stop_reason
                final = self._client.final_text()
                changed = before.changes_since() | self._fs_changes()
                if (stop == "end_turn" and self.options.acp_autonomous and not continued
                        and not changed and not text_refusal(final) and asks_for_confirmation(final)):
                    continued = True
                    yield BackendMessage(type=MessageType.STATUS,
                                         content="the agent asked for confirmation; continuing automatically")
                    self._client.start_turn()
                    text = CONTINUE_PROMPT
                    continue
                break
            if stop == "cancelled" and self._client.denied_in_turn:
                # Some agents (codex-acp) abort the turn when a permission is rejected.
                yield BackendMessage(type=MessageType.STATUS,
                                     content="the agent ended its turn after agenter denied a permission "
                                             "request (stop_reason=cancelled)")
                stop = "end_turn"
            self._finish_turn(stop, self._client.final_text())
        finally:
            if self._client is not None:
                self._client.active = False
            with contextlib.suppress(Exception):
                self._modified = before.changes_since() | self._fs_changes()

    def _compose(self, prompt: str, first: bool) -> str:
        spec = self._spec
        parts: list[str] = []
        if first:
            if self.options.acp_autonomous:
                parts.append(AUTONOMOUS_CONTRACT)
            if spec and spec.system_prompt:
                parts.append(spec.system_prompt)
            if spec and spec.allowed_write_paths is not None:
                allowed = ", ".join(spec.allowed_write_paths) or "(none)"
                parts.append(f"Only these paths (relative to the working directory) may be written: {allowed}")
        if spec and spec.output_type is not None:
            parts.append(output_instructions(spec.output_type))
        if not parts:
            return prompt
        return "\n\n".join(parts) + "\n\nTask:\n" + prompt

    async def _prompt_turn(self, text: str) -> AsyncIterator[BackendMessage]:
        """One session/prompt, its session/update stream yielded as it arrives."""
        from acp import text_block

        assert self._wakeup is not None
        self.last_stop_reason = None
        task = asyncio.create_task(self._conn.prompt(session_id=self._session_id, prompt=[text_block(text)]))
        task.add_done_callback(lambda _: self._wakeup.set() if self._wakeup else None)
        finished = False
        try:
            while True:
                while self._queue:
                    yield self._queue.popleft()
                if task.done():
                    self._client.flush()
                    while self._queue:
                        yield self._queue.popleft()
                    break
                self._wakeup.clear()
                if self._queue or task.done():
                    continue
                await self._wakeup.wait()
            finished = True
            try:
                response = task.result()
            except BaseException as exc:  # noqa: BLE001
                raise await self._failure("the ACP agent failed during the turn", exc) from None
            self.last_stop_reason = response.stop_reason
            self._apply_prompt_usage(getattr(response, "usage", None))
        finally:
            if not finished:
                await self._interrupt(task)

    async def _interrupt(self, task: asyncio.Task[Any]) -> None:
        """The consumer stopped the turn (time or token budget, or closing): cancel it at the agent,
        then end the process group; the session is over for this agent."""
        if not task.done() and self._conn is not None and self._session_id:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._conn.cancel(session_id=self._session_id), 0.5)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), CANCEL_GRACE_SECONDS)
        if not task.done():
            task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, 0.5)
        await self._shutdown(graceful=False)

    def _finish_turn(self, stop: str | None, final: str) -> None:
        if stop == "refusal":
            self._refusal = Refusal(reason=final.strip() or "the agent refused the request",
                                    category="agent_refusal")
            return
        reason = text_refusal(self._client.full_text())
        if reason:
            self._refusal = Refusal(reason=reason)
            return
        if stop in ("max_tokens", "max_turn_requests"):
            what = "the model's output token limit" if stop == "max_tokens" else "its own turn-request limit"
            raise BackendError(f"the ACP agent stopped the turn at {what} (stop_reason={stop}); "
                               "the work may be incomplete", backend=self.name)
        if stop == "cancelled":
            raise BackendError("the ACP agent cancelled the turn by itself (stop_reason=cancelled)",
                               backend=self.name)
        if self._spec and self._spec.output_type is not None:
            self._structured = parse_structured_output(self._client.full_text(), self._spec.output_type)

    def _fs_changes(self) -> ModifiedFiles:
        if self._client is None:
            return ModifiedFiles()
        return ModifiedFiles(written=set(self._client.fs_written), deleted=set(self._client.fs_deleted))

    # ------------------------------------------------------------------ messages & usage
    def _emit(self, message: BackendMessage) -> None:
        self._queue.append(message)
        if self._wakeup is not None:
            self._wakeup.set()

    def _on_usage(self, update: Any) -> None:
        """usage_update: `used` is the context size now (a floor for this turn's input tokens),
        `cost` the agent's cumulative session cost. Budgets see both at once."""
        self._turn_context_tokens = max(self._turn_context_tokens, int(update.used or 0))
        cost = getattr(update, "cost", None)
        if cost is not None and str(cost.currency).upper() == "USD":
            amount = float(cost.amount)
            # Cumulative per the spec; a drop means the agent restarted its count (per turn).
            delta = amount - self._cost_reported if amount >= self._cost_reported else amount
            self._cost_reported = amount
            self._usage = self._usage.model_copy(update={"cost_usd": self._usage.cost_usd + max(delta, 0.0)})
        base = self._turn_base
        floor = base.input_tokens + base.cache_read_tokens + base.cache_write_tokens + self._turn_context_tokens
        cached = self._usage.cache_read_tokens + self._usage.cache_write_tokens
        if self._usage.input_tokens + cached < floor:
            self._usage = self._usage.model_copy(update={"input_tokens": floor - cached})

    def _apply_prompt_usage(self, usage: Any) -> None:
        """PromptResponse.usage (unstable in ACP) counts this turn's tokens exactly: it replaces
        the context-size floor."""
        base = self._turn_base
        if usage is not None:
            self._usage = Usage(
                input_tokens=base.input_tokens + int(usage.input_tokens or 0),
                output_tokens=base.output_tokens + int(usage.output_tokens or 0),
                cache_read_tokens=base.cache_read_tokens + int(usage.cached_read_tokens or 0),
                cache_write_tokens=base.cache_write_tokens + int(usage.cached_write_tokens or 0),
                cost_usd=self._usage.cost_usd,
            )
        if self._cost_reported == 0.0 and self.settings.model:
            from agenter.usage import estimate_cost

            turn = Usage(input_tokens=self._usage.input_tokens - base.input_tokens,
                         output_tokens=self._usage.output_tokens - base.output_tokens,
                         cache_read_tokens=self._usage.cache_read_tokens - base.cache_read_tokens,
                         cache_write_tokens=self._usage.cache_write_tokens - base.cache_write_tokens)
            estimate = estimate_cost(self.settings.model, turn)
            if estimate:
                self._usage = self._usage.model_copy(update={"cost_usd": base.cost_usd + estimate})
        self._turn_base = self._usage.model_copy()
        self._turn_context_tokens = 0

    # ------------------------------------------------------------------ errors
    def _stderr_tail(self) -> str | None:
        process = self._process or self._last_process
        return process.stderr_tail() if process is not None else None

    async def _failure(self, what: str, exc: BaseException) -> BackendError:
        """A BackendError for a failed request: the agent's exit code and stderr tail when it died."""
        process = self._process
        detail = str(exc) or type(exc).__name__
        data = getattr(exc, "data", None)
        if data:
            detail = f"{detail}: {data}"
        if process is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(process.process.wait()), 1.0)
            if process.returncode is not None:
                detail = f"the agent process exited with code {process.returncode} ({detail})"
                await self._shutdown(graceful=False)  # reap the rest of its group, drain stderr
        tail = self._stderr_tail()
        from agenter.host import redact

        return BackendError(redact(f"{what}: {detail}", self._env), backend=self.name,
                            stderr_tail=tail or None)


def _descendants(pid: int) -> list[int]:
    """Every live descendant of pid (Linux /proc; empty elsewhere), found before anything is killed."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                ppid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _version() -> str:
    try:
        from agenter import __version__

        return __version__
    except Exception:  # noqa: BLE001
        return "0"
