"""CodexBackend: OpenAI's Codex agent driven through `codex app-server` (JSON-RPC over stdio).

One backend instance = one `codex app-server` process = one Codex thread; every execute() is a
turn on that thread, so retries continue the same conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter.backends._prompts import (
    AUTONOMOUS_CONTRACT,
    REFUSAL_TOOL_NAME,
    output_schema,
    parse_structured_output,
    text_refusal,
)
from agenter.host import AgentProcess, redact
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
from agenter.backends.codex._options import CodexOptions
from agenter.backends.codex._rpc import AppServerConnection, Closed, Notification
from agenter.backends.codex._setup import (
    config_overrides,
    find_codex,
    merge_dotted,
    native_codex_binary,
    prepare_sandbox_bin,
    render_toml,
)
from agenter.backends.codex._tools_server import SERVER_NAME, TOKEN_ENV_VAR, ToolsServer
from agenter.sandbox.workspace import WorkspaceSnapshot

PROVIDER_NAME = "agenter"
API_KEY_ENV_VAR = "AGENTER_CODEX_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Codex features that reach services agenter never uses (plugin sync, apps, browser, image
#: generation) or that would make a dead model server hang instead of fail.
DISABLED_FEATURES = (
    "plugins", "apps", "remote_plugin", "browser_use", "browser_use_external", "computer_use",
    "image_generation", "goals", "unbounded_connection_retries",
)
REQUEST_TIMEOUT = 60.0
#: Environment variables hidden from the commands Codex runs (Codex matches them case-insensitively).
SECRET_ENV_PATTERNS = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*", "AGENTER_*")
#: Synthetic notification the request handler queues to report its approval decisions.
DECISION_EVENT = "agenter/decision"
#: Codex turn errors that mean the model declined for policy reasons.
POLICY_REFUSALS = {"cyberPolicy", "misalignmentPolicyViolation", "inferenceHookDenied"}

_sandbox_checks: dict[str, str | None] = {}


class CodexBackend(BaseBackend):
    name: ClassVar[str] = "codex"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        custom_tools=True, structured_output=True, resume=True, sandbox=True)
    options_model: ClassVar[type[CodexOptions]] = CodexOptions
    default_model: str | None = None

    def __init__(self, settings: BackendSettings):
        super().__init__(settings)
        self.options: CodexOptions = settings.options  # type: ignore[assignment]
        self._spec: SessionSpec | None = None
        self._cwd = Path(".")
        self._session_dir: Path | None = None
        self._process: AgentProcess | None = None
        self._conn: AppServerConnection | None = None
        self._tools_server: ToolsServer | None = None
        self._env: dict[str, str] = {}
        self._model: str | None = settings.model
        self._last_total: Usage = Usage()
        self._pending_changes: dict[str, list[str]] = {}
        self._writable_roots: list[Path] = []

    # ------------------------------------------------------------------ settings
    @classmethod
    def check_settings(cls, settings: BackendSettings) -> None:
        options = settings.options
        assert isinstance(options, CodexOptions)
        if options.codex_home is not None and not Path(options.codex_home).expanduser().is_dir():
            raise ConfigurationError(f"codex_home {str(options.codex_home)!r} is not a directory",
                                     parameter="codex_home")
        if options.model_provider and (options.base_url or options.api_key):
            raise ConfigurationError("model_provider uses a provider from codex_home's config.toml; "
                                     "do not combine it with base_url or api_key",
                                     parameter="model_provider")
        if options.model_provider and options.codex_home is None:
            raise ConfigurationError("model_provider names a provider in your own config.toml, so "
                                     "it needs codex_home", parameter="model_provider")
        if settings.tools:
            if not _mcp_sdk_ready():
                raise ConfigurationError(
                    "custom tools with the codex backend need the MCP SDK 2.x (with uvicorn): "
                    "pip install 'agenter-sdk[codex]'", parameter="tools")
            names = [tool.name for tool in settings.tools]
            if REFUSAL_TOOL_NAME in names:
                raise ConfigurationError(f"the tool name {REFUSAL_TOOL_NAME!r} is reserved",
                                         parameter="tools")

    # ------------------------------------------------------------------ lifecycle
    async def connect(self, spec: SessionSpec) -> None:
        self._spec = spec
        self._cwd = Path(spec.cwd).resolve()
        try:
            await self._start(spec)
        except BaseException:
            await self.disconnect()
            raise

    async def _start(self, spec: SessionSpec) -> None:
        options = self.options
        self._session_dir = Path(tempfile.mkdtemp(prefix="agenter-codex-"))
        private_tmp = self._session_dir / "tmp"
        private_tmp.mkdir()
        bin_dir = self._session_dir / "bin"
        codex_home = (Path(options.codex_home).expanduser().resolve() if options.codex_home
                      else self._session_dir / "home")
        codex_home.mkdir(parents=True, exist_ok=True)

        env = dict(os.environ)
        env.update(options.env)
        env["CODEX_HOME"] = str(codex_home)
        # Sandboxed commands may write here and in cwd only: /tmp itself stays read-only.
        env["TMPDIR"] = str(private_tmp)
        api_key = self._api_key(env)
        if api_key:
            env[API_KEY_ENV_VAR] = api_key
        codex = find_codex(options.codex_path, self._cwd, env)

        if self.settings.sandbox:
            problem = prepare_sandbox_bin(codex, bin_dir, env)
            if problem:
                raise BackendError(f"Codex's sandbox cannot run: {problem}. Pass codex_path pointing "
                                   "at a standard npm install of @openai/codex, or sandbox=False.",
                                   backend="codex")
            if bin_dir.is_dir():
                env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
            await self._check_sandbox(codex, env)
        self._writable_roots = [self._cwd, private_tmp]

        if self.settings.tools:
            self._tools_server = await ToolsServer.start(self.settings.tools, self._record_refusal)
            env[TOKEN_ENV_VAR] = self._tools_server.token
        self._env = env

        config = self._config(private_tmp)
        command = [codex, "app-server"]
        if options.codex_home is None:
            (codex_home / "config.toml").write_text(render_toml(config))
        else:
            command += config_overrides(config)
        self._process = await AgentProcess.start(command, cwd=self._cwd, env=env, stdin_pipe=True)
        self._conn = AppServerConnection(self._process, self._answer_server_request, self._observe)

        await self._conn.request("initialize", {
            "clientInfo": {"name": "agenter", "title": "agenter", "version": _version()},
        }, REQUEST_TIMEOUT)
        self._conn.notify("initialized")
        thread_params: dict[str, Any] = {
            "cwd": str(self._cwd),
            "approvalPolicy": _codex_approval_policy(options.codex_approval_policy),
            "sandbox": "workspace-write" if self.settings.sandbox else "danger-full-access",
            "developerInstructions": self._developer_instructions(spec),
        }
        if self.settings.model:
            thread_params["model"] = self.settings.model
        if spec.resume_session_id:
            result = await self._conn.request(
                "thread/resume", {"threadId": spec.resume_session_id, **thread_params}, REQUEST_TIMEOUT)
        else:
            result = await self._conn.request("thread/start", thread_params, REQUEST_TIMEOUT)
        self._session_id = result["thread"]["id"]
        self._model = result.get("model") or self._model
        self.default_model = self._model

    async def disconnect(self) -> None:
        conn, process, server = self._conn, self._process, self._tools_server
        self._conn = self._process = self._tools_server = None
        if process is not None:
            stdin = process.process.stdin
            if stdin is not None:
                with contextlib.suppress(Exception):
                    stdin.close()
            await process.terminate(grace=2.0)
        if conn is not None:
            await conn.aclose()
        if server is not None:
            await server.stop()
        if self._session_dir is not None:  # private CODEX_HOME, TMPDIR and bin dir
            shutil.rmtree(self._session_dir, ignore_errors=True)
        self._session_dir = None

    # ------------------------------------------------------------------ one turn
    async def execute(self, prompt: str) -> AsyncIterator[BackendMessage]:
        conn = self._conn
        if conn is None or self._session_id is None:
            raise BackendError("execute() before connect()", backend="codex")
        self._start_turn()
        before = await asyncio.to_thread(WorkspaceSnapshot.take, self._cwd)
        reported = ModifiedFiles()
        final_text = ""
        turn_id: str | None = None
        finished = False
        failure: dict[str, Any] | None = None
        params: dict[str, Any] = {"threadId": self._session_id,
                                  "input": [{"type": "text", "text": prompt, "text_elements": []}]}
        if self._spec is not None and self._spec.output_type is not None:
            params["outputSchema"] = strict_schema(output_schema(self._spec.output_type))
        if self.options.codex_reasoning_effort:
            params["effort"] = self.options.codex_reasoning_effort
        try:
            result = await conn.request("turn/start", params, REQUEST_TIMEOUT)
            turn_id = (result.get("turn") or {}).get("id")
            while not finished:
                event = await conn.events.get()
                if isinstance(event, Closed):
                    raise BackendError(f"Codex stopped mid-turn: {event.reason}", backend="codex",
                                       stderr_tail=self._stderr_tail())
                method, data = event.method, event.params
                if method == "thread/tokenUsage/updated":
                    self._record_usage(data)
                    continue
                if method == DECISION_EVENT:
                    yield BackendMessage(MessageType.STATUS, data["text"], is_error=data["declined"])
                    continue
                if data.get("threadId") not in (None, self._session_id):
                    continue
                event_turn = data.get("turnId") or (data.get("turn") or {}).get("id")
                if turn_id and event_turn and event_turn != turn_id:
                    continue  # a late notification of an earlier turn
                if method == "turn/completed":
                    finished = True
                    turn = data.get("turn") or {}
                    if turn.get("status") != "completed":
                        failure = {"status": turn.get("status"), **(turn.get("error") or {})}
                    for item in turn.get("items") or []:
                        if item.get("type") == "agentMessage" and item.get("text"):
                            final_text = item["text"]
                    continue
                if method == "item/completed" and (data.get("item") or {}).get("type") == "agentMessage":
                    final_text = data["item"].get("text") or final_text
                if method == "item/completed" and (data.get("item") or {}).get("type") == "fileChange":
                    reported = reported | self._file_change(data["item"])
                for message in self._messages(method, data):
                    yield message
        finally:
            if not finished and turn_id and conn.closed is None:
                conn.send_nowait("turn/interrupt", {"threadId": self._session_id, "turnId": turn_id})
            with contextlib.suppress(Exception):
                self._modified = reported | before.diff(WorkspaceSnapshot.take(self._cwd))
        self._finish_turn(final_text, failure)

    def _finish_turn(self, final_text: str, failure: dict[str, Any] | None) -> None:
        if failure is not None:
            info = failure.get("codexErrorInfo")
            message = failure.get("message") or f"turn {failure.get('status')}"
            if isinstance(info, str) and info in POLICY_REFUSALS:
                self._refusal = self._refusal or Refusal(reason=message, category="policy")
                return
            status_code = None
            if isinstance(info, dict):
                for detail in info.values():
                    if isinstance(detail, dict) and detail.get("httpStatusCode"):
                        status_code = int(detail["httpStatusCode"])
            if isinstance(info, dict) and self.options.model_provider is None:
                message = f"{message} (model server {self.options.base_url or DEFAULT_BASE_URL})"
            if failure.get("additionalDetails"):
                message = f"{message} ({failure['additionalDetails']})"
            raise BackendError(f"Codex turn {failure.get('status') or 'failed'}: {redact(message, self._env)}",
                               backend="codex", stderr_tail=self._stderr_tail(), status_code=status_code)
        if self._refusal is None:
            reason = text_refusal(final_text)
            if reason:
                self._refusal = Refusal(reason=reason)
        if self._spec is not None and self._spec.output_type is not None and final_text:
            self._structured = parse_structured_output(final_text, self._spec.output_type)

    # ------------------------------------------------------------------ notifications
    def _messages(self, method: str, data: dict[str, Any]) -> list[BackendMessage]:
        item = data.get("item") or {}
        kind = item.get("type")
        item_id = item.get("id")
        if method == "item/started":
            if kind == "commandExecution":
                return [BackendMessage(MessageType.TOOL_CALL, item.get("command") or "", tool_name="shell",
                                       tool_input={"command": item.get("command"), "cwd": item.get("cwd")},
                                       tool_call_id=item_id)]
            if kind == "fileChange":
                paths = [change.get("path", "") for change in item.get("changes") or []]
                return [BackendMessage(MessageType.TOOL_CALL, "\n".join(paths), tool_name="apply_patch",
                                       tool_input={"paths": paths}, tool_call_id=item_id)]
            if kind == "mcpToolCall":
                name = f"{item.get('server')}.{item.get('tool')}"
                arguments = item.get("arguments")
                if not isinstance(arguments, dict):
                    arguments = {"arguments": arguments}
                return [BackendMessage(MessageType.TOOL_CALL, name, tool_name=name, tool_input=arguments,
                                       tool_call_id=item_id)]
            if kind in ("webSearch", "dynamicToolCall", "imageView"):
                return [BackendMessage(MessageType.TOOL_CALL, str(item.get("query") or item.get("tool") or ""),
                                       tool_name=kind, tool_call_id=item_id)]
            return []
        if method == "item/completed":
            if kind == "agentMessage" and item.get("text"):
                return [BackendMessage(MessageType.TEXT, item["text"])]
            if kind == "reasoning":
                text = "\n".join([*(item.get("summary") or []), *(item.get("content") or [])])
                return [BackendMessage(MessageType.THINKING, text)] if text.strip() else []
            if kind == "plan" and item.get("text"):
                return [BackendMessage(MessageType.PLAN, item["text"])]
            if kind == "commandExecution":
                status = item.get("status")
                failed = status in ("failed", "declined") or (item.get("exitCode") not in (None, 0))
                output = (item.get("aggregatedOutput") or "")[-4000:]
                if status == "declined":
                    output = output or "command declined"
                return [BackendMessage(MessageType.TOOL_RESULT, output, tool_name="shell",
                                       tool_call_id=item_id, is_error=failed)]
            if kind == "fileChange":
                self._pending_changes.pop(item_id, None)
                status = item.get("status")
                paths = [change.get("path", "") for change in item.get("changes") or []]
                return [BackendMessage(MessageType.TOOL_RESULT, f"{status}: " + ", ".join(paths),
                                       tool_name="apply_patch", tool_call_id=item_id,
                                       is_error=status != "completed")]
            if kind == "mcpToolCall":
                error = item.get("error")
                text = _mcp_result_text(item.get("result")) if not error else str(error.get("message", error))
                return [BackendMessage(MessageType.TOOL_RESULT, text,
                                       tool_name=f"{item.get('server')}.{item.get('tool')}",
                                       tool_call_id=item_id, is_error=bool(error) or item.get("status") == "failed")]
            return []
        if method == "turn/plan/updated":
            steps = data.get("plan") or []
            text = "\n".join(f"[{step.get('status')}] {step.get('step')}" for step in steps)
            return [BackendMessage(MessageType.PLAN, text)] if text else []
        if method == "error":
            error = data.get("error") or {}
            note = " (Codex retries)" if data.get("willRetry") else ""
            return [BackendMessage(MessageType.ERROR, redact(str(error.get("message", "")), self._env) + note,
                                   is_error=True)]
        if method in ("warning", "configWarning", "deprecationNotice"):
            text = data.get("message") or data.get("summary") or str(data)
            return [BackendMessage(MessageType.STATUS, f"codex {method}: {text}")]
        return []

    def _file_change(self, item: dict[str, Any]) -> ModifiedFiles:
        changed = ModifiedFiles()
        if item.get("status") != "completed":
            return changed
        for change in item.get("changes") or []:
            kind = (change.get("kind") or {}).get("type")
            path = self._relative(change.get("path"))
            if path is None:
                continue
            if kind == "delete":
                changed.deleted.add(path)
            else:
                move_to = self._relative((change.get("kind") or {}).get("move_path"))
                if move_to:
                    changed.deleted.add(path)
                    changed.written.add(move_to)
                else:
                    changed.written.add(path)
        return changed

    def _relative(self, path: str | None) -> str | None:
        if not path:
            return None
        absolute = Path(path) if Path(path).is_absolute() else self._cwd / path
        try:
            return Path(os.path.normpath(absolute)).relative_to(self._cwd).as_posix()
        except ValueError:
            return None

    def _record_usage(self, data: dict[str, Any]) -> None:
        """Codex reports cumulative thread totals: keep the latest, price only the increase."""
        if data.get("threadId") not in (None, self._session_id):
            return
        total = (data.get("tokenUsage") or {}).get("total") or {}
        cached = int(total.get("cachedInputTokens") or 0)
        cache_write = int(total.get("cacheWriteInputTokens") or 0)
        current = Usage(
            input_tokens=max(int(total.get("inputTokens") or 0) - cached - cache_write, 0),
            output_tokens=int(total.get("outputTokens") or 0),
            cache_read_tokens=cached,
            cache_write_tokens=cache_write,
        )
        previous = self._last_total
        delta = Usage(
            input_tokens=max(current.input_tokens - previous.input_tokens, 0),
            output_tokens=max(current.output_tokens - previous.output_tokens, 0),
            cache_read_tokens=max(current.cache_read_tokens - previous.cache_read_tokens, 0),
            cache_write_tokens=max(current.cache_write_tokens - previous.cache_write_tokens, 0),
        )
        if delta.total_tokens == 0:
            return
        self._last_total = current
        from agenter.usage import estimate_cost

        cost = estimate_cost(self._model, delta, provider="openai") or 0.0
        self._usage = current.model_copy(update={"cost_usd": self._usage.cost_usd + cost})

    # ------------------------------------------------------------------ server requests
    def _observe(self, notification: Notification) -> None:
        """Runs in the reader, before any later approval request is answered: remember which
        files a pending patch touches (the approval request itself does not say)."""
        if notification.method == "item/started":
            item = notification.params.get("item") or {}
            if item.get("type") == "fileChange" and item.get("id"):
                self._pending_changes[item["id"]] = [c.get("path", "") for c in item.get("changes") or []]

    def _answer_server_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Headless answers to Codex's questions; see docs/backends/codex.md for the policy."""
        if method == "item/commandExecution/requestApproval":
            accept, why = self._command_decision(params)
            self._report_decision(accept, f"command {params.get('command')!r}", why)
            return {"decision": "accept" if accept else "decline"}
        if method == "item/fileChange/requestApproval":
            accept, why = self._file_change_decision(params)
            paths = self._pending_changes.get(params.get("itemId") or "", [])
            self._report_decision(accept, f"file change {', '.join(paths) or '(unknown paths)'}", why)
            return {"decision": "accept" if accept else "decline"}
        if method in ("execCommandApproval", "applyPatchApproval"):  # legacy v1 requests
            accept = not self.settings.sandbox and self.options.codex_approval_policy != "untrusted"
            self._report_decision(accept, method, "legacy approval request")
            return {"decision": "approved" if accept else "denied"}
        if method == "item/permissions/requestApproval":
            self._report_decision(False, "extra permissions", "agenter grants no permissions beyond the sandbox")
            return {"permissions": {}, "scope": "turn"}
        if method == "item/tool/requestUserInput":
            self._report_decision(False, "question to the user", "no human is available in a headless run")
            return {"answers": {}}
        if method == "mcpServer/elicitation/request":
            self._report_decision(False, f"MCP elicitation from {params.get('serverName')!r}",
                                  "no human is available in a headless run")
            return {"action": "decline", "content": None}
        raise LookupError(method)

    def _command_decision(self, params: dict[str, Any]) -> tuple[bool, str]:
        policy = self.options.codex_approval_policy
        if policy == "untrusted":
            return False, ("approval policy 'untrusted': only commands Codex itself trusts run; "
                           "nobody can vouch for this one in a headless run")
        if not self.settings.sandbox:
            return True, "sandbox=False: commands already run with full access"
        return False, (f"approval policy {policy!r} with sandbox=True: Codex asks only to leave "
                       "its sandbox, and the sandbox stays closed")

    def _file_change_decision(self, params: dict[str, Any]) -> tuple[bool, str]:
        if params.get("grantRoot") and self.settings.sandbox:
            return False, f"asks for write access to {params['grantRoot']!r} outside the workspace"
        paths = self._pending_changes.get(params.get("itemId") or "")
        if not self.settings.sandbox:
            return True, "sandbox=False"
        if not paths:
            return False, "cannot tell which files the change touches"
        outside = [p for p in paths if not self._is_writable(p)]
        if outside:
            return False, f"outside the workspace: {', '.join(outside)}"
        return True, "every path is inside the workspace"

    def _is_writable(self, path: str) -> bool:
        absolute = Path(os.path.normpath(Path(path) if Path(path).is_absolute() else self._cwd / path))
        return any(absolute == root or root in absolute.parents for root in self._writable_roots)

    def _report_decision(self, accept: bool, what: str, why: str) -> None:
        if self._conn is not None:
            verdict = "approved" if accept else "declined"
            self._conn.events.put_nowait(Notification(DECISION_EVENT, {
                "text": f"agenter {verdict} {what}: {why}", "declined": not accept}))

    def _record_refusal(self, reason: str, category: str | None) -> None:
        self._refusal = Refusal(reason=reason, category=category)

    # ------------------------------------------------------------------ helpers
    def _api_key(self, env: dict[str, str]) -> str | None:
        if self.options.api_key is not None:
            return self.options.api_key.get_secret_value()
        return env.get("CODEX_API_KEY") or env.get("OPENAI_API_KEY")

    def _config(self, private_tmp: Path) -> dict[str, Any]:
        options = self.options
        # approval_policy goes with thread/start: Codex's config file no longer accepts "untrusted".
        config: dict[str, Any] = {
            "sandbox_mode": "workspace-write" if self.settings.sandbox else "danger-full-access",
            "check_for_update_on_startup": False,
            "web_search": "disabled",
            "sandbox_workspace_write": {
                # Writes go to cwd and the private TMPDIR only, not to all of /tmp.
                "exclude_slash_tmp": True,
                "exclude_tmpdir_env_var": False,
                "network_access": options.network_access,
            },
            # Commands the model runs must not see API keys or the tools server's token.
            "shell_environment_policy": {
                "inherit": "all",
                "ignore_default_excludes": False,
                "exclude": list(SECRET_ENV_PATTERNS),
            },
            "features": {name: False for name in DISABLED_FEATURES},
            "analytics": {"enabled": False},
            "agents": {"enabled": False},  # no sub-agents: one thread per session
        }
        if self.settings.model:
            config["model"] = self.settings.model
        if options.codex_reasoning_effort:
            config["model_reasoning_effort"] = options.codex_reasoning_effort
        if options.model_provider:
            config["model_provider"] = options.model_provider
        elif options.base_url or options.codex_home is None or options.api_key:
            provider: dict[str, Any] = {
                "name": "agenter",
                "base_url": options.base_url or DEFAULT_BASE_URL,
                "wire_api": options.wire_api,
                "env_key": API_KEY_ENV_VAR,
            }
            if options.max_retries is not None:
                provider["request_max_retries"] = options.max_retries
                provider["stream_max_retries"] = options.max_retries
            if options.stream_idle_timeout_seconds is not None:
                provider["stream_idle_timeout_ms"] = int(options.stream_idle_timeout_seconds * 1000)
            config["model_provider"] = PROVIDER_NAME
            config["model_providers"] = {PROVIDER_NAME: provider}
        servers: dict[str, Any] = {server.name: server.to_config() for server in options.codex_mcp_servers}
        if self._tools_server is not None:
            # The user handed these tools to agenter: Codex may call them without asking.
            servers[SERVER_NAME] = {"url": self._tools_server.url, "bearer_token_env_var": TOKEN_ENV_VAR,
                                    "default_tools_approval_mode": "approve"}
        if servers:
            config["mcp_servers"] = servers
        merge_dotted(config, copy.deepcopy(options.config_overrides))
        return config

    def _developer_instructions(self, spec: SessionSpec) -> str:
        parts = [AUTONOMOUS_CONTRACT]
        if self._tools_server is not None:
            parts.append(f"To decline the task, call the `{REFUSAL_TOOL_NAME}` tool of the "
                         f"`{SERVER_NAME}` MCP server with the reason.")
        else:
            parts.append("To decline the task, reply with one line starting with 'REFUSED:' and the reason.")
        if spec.allowed_write_paths is not None:
            allowed = ", ".join(spec.allowed_write_paths) or "(none: do not change any file)"
            parts.append(f"Only create, change or delete files matching these gitignore-style patterns "
                         f"(relative to the working directory): {allowed}. Other changes fail the task.")
        if spec.system_prompt:
            parts.append(spec.system_prompt)
        return "\n\n".join(parts)

    async def _check_sandbox(self, codex: str, env: dict[str, str]) -> None:
        """Run `true` in Codex's sandbox once per binary, so a machine where it cannot work
        (no user namespaces, no bubblewrap) fails now with a clear message, not command by command."""
        key = str(native_codex_binary(codex) or codex)
        if key not in _sandbox_checks:
            _sandbox_checks[key] = await _probe_sandbox(codex, env, self._session_dir or Path(tempfile.gettempdir()))
        problem = _sandbox_checks[key]
        if problem:
            raise BackendError(
                "Codex's sandbox (workspace-write) cannot run on this machine; pass sandbox=False to "
                f"run Codex unconfined (danger-full-access). Sandbox check said: {problem}",
                backend="codex")

    def _stderr_tail(self) -> str | None:
        return self._process.stderr_tail() if self._process is not None else None


async def _probe_sandbox(codex: str, env: dict[str, str], workdir: Path) -> str | None:
    probe_dir = workdir / "sandbox-check"
    probe_dir.mkdir(parents=True, exist_ok=True)
    command = [codex, "sandbox", "-c", 'sandbox_mode="workspace-write"', "--", "sh", "-c", "echo ok > probe"]
    process = await AgentProcess.start(command, cwd=probe_dir, env=env, stdin_pipe=False, stdout_pipe=False)
    try:
        code = await asyncio.wait_for(process.process.wait(), 30)
    except asyncio.TimeoutError:
        return "the sandbox check did not finish within 30 s"
    finally:
        await process.terminate(grace=1.0)
    if code == 0 and (probe_dir / "probe").is_file():
        return None
    lines = [line for line in process.stderr_tail().splitlines() if "PATH aliases" not in line]
    return "\n".join(lines[-5:]) or f"exit code {code}"


def _mcp_sdk_ready() -> bool:
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec("mcp") is None or importlib.util.find_spec("uvicorn") is None:
        return False
    try:
        return int(version("mcp").split(".")[0]) >= 2
    except (PackageNotFoundError, ValueError):
        return False


def _codex_approval_policy(policy: str) -> str:
    # Codex 0.15x+ dropped "on-failure" from its protocol; it behaves like "on-request" there.
    return "on-request" if policy == "on-failure" else policy


def _mcp_result_text(result: Any) -> str:
    if not isinstance(result, dict):
        return "" if result is None else str(result)
    texts = [block.get("text", "") for block in result.get("content") or [] if isinstance(block, dict)]
    return "\n".join(t for t in texts if t) or str(result.get("structuredContent") or "")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema made acceptable to OpenAI's strict structured outputs: every object
    closed (additionalProperties false) with all properties required (optional ones nullable)."""
    schema = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and isinstance(node.get("properties"), dict):
                required = set(node.get("required") or [])
                for name, prop in node["properties"].items():
                    if name not in required and isinstance(prop, dict) and not _nullable(prop):
                        node["properties"][name] = {"anyOf": [prop, {"type": "null"}]}
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


def _nullable(prop: dict[str, Any]) -> bool:
    if prop.get("type") == "null" or (isinstance(prop.get("type"), list) and "null" in prop["type"]):
        return True
    return any(isinstance(option, dict) and option.get("type") == "null" for option in prop.get("anyOf") or [])


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("agenter")
    except Exception:
        return "0"
