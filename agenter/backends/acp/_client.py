"""The ACP client side agenter plays: it serves the agent's fs and permission requests inside the
sandbox and through the permission gate, and turns `session/update` notifications into
BackendMessages.

The gate sees what the agent brings to agenter: fs/read_text_file and fs/write_text_file (after the
sandbox's path check; a denial is the request's error, which agents relay to the model as the
tool's result) and session/request_permission (mapped from the tool call's kind: execute as a
shell command, edit/delete/move as edits, read/search as reads, fetch as network, MCP tools by
name). ACP's permission answer carries no reason, so the model reads the agent's own refusal text;
agenter's reason goes to the event, the denials and the session's next prompt. What an agent
does by itself, without asking, is not seen (terminals are not offered).

Imported only when an acp session connects (it imports the `acp` package at module level).
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ContentToolCallContent,
    CurrentModeUpdate,
    DeniedOutcome,
    FileEditToolCallContent,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    TerminalToolCallContent,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    WriteTextFileResponse,
)

from agenter._errors import PathSecurityError
from agenter.backends.base import BackendMessage, MessageType
from agenter.permissions import PermissionDecision, ToolCall
from agenter.sandbox.paths import PathResolver

log = logging.getLogger("agenter.backends.acp")

#: JSON-RPC error code for a file request agenter refuses (sandbox). The message is written for
#: the model: agents relay it as the tool result.
SANDBOX_REFUSED = -32602
#: The spec's "resource not found" error, for a file that does not exist.
NOT_FOUND = -32002
#: Tool kinds that change files: their locations must be writable before a permission is granted.
WRITING_KINDS = frozenset({"edit", "delete", "move"})
#: Read results larger than this are refused rather than streamed into the agent's context.
MAX_READ_BYTES = 4 * 1024 * 1024
_TOOL_RESULT_CHARS = 4000

#: Decides a call through the session's permission gate.
Permit = Callable[[ToolCall], Awaitable[PermissionDecision]]


class _TooLarge(Exception):
    pass


class ACPClient:
    """Serves one agent connection for the backend, through its hooks (all called on the event
    loop, in the order the agent sent its messages):

    - `emit(message)`: every BackendMessage;
    - `on_usage(update)`: every usage_update;
    - `on_denied(tool, target, reason)`: an action refused (a write, a permission);
    - `on_file(path, read=, written=)`: file text served or written (path None for reads);
    - `in_thread(fn, *args)`: blocking file work, off the loop;
    - `permit(call)`: the permission gate (None: only the sandbox and the policy decide).

    permission_policy: "deny" rejects every session/request_permission; "allow" lets the sandbox
    check and then the gate decide.
    """

    def __init__(self, *, resolver: PathResolver, permission_policy: str, fs: Collection[str],
                 emit: Callable[[BackendMessage], None],
                 on_usage: Callable[[UsageUpdate], None],
                 on_denied: Callable[[str, str, str], Any],
                 on_file: Callable[..., None],
                 in_thread: Callable[..., Awaitable[Any]],
                 permit: Permit | None = None):
        self.resolver = resolver
        self.permission_policy = permission_policy
        self._permit = permit
        self.fs = frozenset(fs)
        self._emit = emit
        self._on_usage = on_usage
        self._on_denied = on_denied
        self._on_file = on_file
        self._in_thread = in_thread
        self.session_id: str | None = None
        self.active = False  # updates outside a turn (history replay, command lists) are dropped
        self.denied_in_turn = 0
        self._text: list[str] = []
        self._text_type: MessageType | None = None
        self._text_message_id: str | None = None
        self._segments: list[str] = []
        self._tool_titles: dict[str, str] = {}
        # A tool_call often starts with an empty input that a tool_call_update fills in: hold it
        # until it runs (or anything else happens) so the TOOL_CALL message carries its input.
        self._pending_tools: dict[str, BackendMessage] = {}
        # kind and paths each tool call announced, for permission requests that omit them
        self._tool_info: dict[str, tuple[str | None, list[str]]] = {}

    # ------------------------------------------------------------------ turn bookkeeping
    def start_turn(self) -> None:
        self.active = True
        self.denied_in_turn = 0
        self._segments = []
        self._text, self._text_type, self._text_message_id = [], None, None

    def final_text(self) -> str:
        """The agent's last text segment of the turn (after its last tool call)."""
        return self._segments[-1] if self._segments else ""

    def full_text(self) -> str:
        return "\n".join(self._segments)

    def flush(self) -> None:
        """Emit what is buffered: text/thinking chunks as one message, then held tool calls."""
        self._flush_text()
        self._flush_tools()

    def _flush_tools(self, only: str | None = None) -> None:
        for call_id in [only] if only else list(self._pending_tools):
            message = self._pending_tools.pop(call_id, None)
            if message is not None:
                self._emit(message)

    def _flush_text(self) -> None:
        if self._text_type is None:
            return
        content = "".join(self._text)
        kind = self._text_type
        self._text, self._text_type, self._text_message_id = [], None, None
        if not content:
            return
        if kind is MessageType.TEXT and content.strip():
            self._segments.append(content)
        self._emit(BackendMessage(type=kind, content=content))

    # ------------------------------------------------------------------ session/update
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if not self.active or (self.session_id is not None and session_id != self.session_id):
            return
        try:
            self._convert(update)
        except Exception:
            log.exception("could not convert ACP session update %r", type(update).__name__)

    def _convert(self, update: Any) -> None:
        if isinstance(update, AgentMessageChunk | AgentThoughtChunk):
            kind = MessageType.TEXT if isinstance(update, AgentMessageChunk) else MessageType.THINKING
            message_id = getattr(update, "message_id", None)
            self._flush_tools()
            if self._text_type is not kind or (message_id and self._text_message_id
                                               and message_id != self._text_message_id):
                self._flush_text()
            self._text_type = kind
            self._text_message_id = message_id or self._text_message_id
            self._text.append(_block_text(update.content))
            return
        self._flush_text()
        if isinstance(update, ToolCallStart | ToolCallProgress):
            self._remember_tool(update)
        if isinstance(update, ToolCallStart):
            self._start_tool(update)
            if update.status in ("in_progress", "completed", "failed"):
                self._flush_tools(update.tool_call_id)
            if update.status in ("completed", "failed"):
                self._emit(self._tool_result(update))
            return
        if isinstance(update, ToolCallProgress):
            if update.tool_call_id not in self._tool_titles:
                # Never started (Gemini CLI announces a call only in its permission request or
                # its completion): this is its start.
                self._start_tool(update)
            held = self._pending_tools.get(update.tool_call_id)
            if held is not None:
                if isinstance(update.raw_input, dict) and update.raw_input:
                    held.tool_input = update.raw_input
                if update.title:
                    held.content = update.title
                if update.status in ("in_progress", "completed", "failed"):
                    self._flush_tools(update.tool_call_id)
            if update.status in ("completed", "failed"):
                self._flush_tools(update.tool_call_id)
                self._emit(self._tool_result(update))
            return
        self._flush_tools()
        if isinstance(update, AgentPlanUpdate):
            lines = [f"[{entry.status}] {entry.content}" for entry in update.entries]
            self._emit(BackendMessage(type=MessageType.PLAN, content="\n".join(lines)))
        elif isinstance(update, UsageUpdate):
            self._on_usage(update)
            cost = f", cost {update.cost.amount:.6g} {update.cost.currency}" if update.cost else ""
            self._emit(BackendMessage(type=MessageType.STATUS,
                                      content=f"usage: {update.used} of {update.size} context tokens{cost}"))
        elif isinstance(update, CurrentModeUpdate):
            self._emit(BackendMessage(type=MessageType.STATUS,
                                      content=f"agent switched to mode {update.current_mode_id!r}"))
        # user_message_chunk, available_commands_update, config/session info: not agent output

    def _start_tool(self, update: ToolCallStart | ToolCallProgress | ToolCallUpdate) -> None:
        """Hold the TOOL_CALL message of a tool call, until it runs or its input is known."""
        self._segments.append("")  # text before a tool call is not the final answer
        name = _tool_name(update)
        self._tool_titles[update.tool_call_id] = name
        self._pending_tools[update.tool_call_id] = BackendMessage(
            type=MessageType.TOOL_CALL, content=update.title or name, tool_name=name,
            tool_input=_as_input(update.raw_input), tool_call_id=update.tool_call_id)

    def _tool_result(self, update: ToolCallStart | ToolCallProgress) -> BackendMessage:
        name = self._tool_titles.get(update.tool_call_id) or _tool_name(update)
        text = _tool_content_text(update.content)
        if not text and update.raw_output is not None:
            raw = update.raw_output
            text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        if len(text) > _TOOL_RESULT_CHARS:
            text = text[:_TOOL_RESULT_CHARS] + " [...]"
        return BackendMessage(type=MessageType.TOOL_RESULT, content=text, tool_name=name,
                              tool_call_id=update.tool_call_id, is_error=update.status == "failed")

    # ------------------------------------------------------------------ fs/*
    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        if "read" not in self.fs:
            raise RequestError.method_not_found("fs/read_text_file")
        try:
            await self._in_thread(self.resolver.resolve_read, path)
        except PathSecurityError as exc:
            self._refused("read", path, exc)
            raise RequestError(SANDBOX_REFUSED, str(exc), {"path": path}) from None
        await self._gate(ToolCall.read(path, name="fs/read_text_file"), "read", path)
        try:
            content = await self._in_thread(self._read, path)
        except PathSecurityError as exc:
            self._refused("read", path, exc)
            raise RequestError(SANDBOX_REFUSED, str(exc), {"path": path}) from None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            # The spec's wording: agents that match on the message find "Resource not found".
            raise RequestError(NOT_FOUND, f"Resource not found: {path}", {"path": path}) from None
        except _TooLarge:
            raise RequestError(SANDBOX_REFUSED, f"Refused: {path} is larger than {MAX_READ_BYTES} "
                               "bytes; read a part of it another way", {"path": path}) from None
        except OSError as exc:
            raise RequestError(-32603, f"Could not read {path}: {exc.strerror}", {"path": path}) from None
        if line is not None or limit is not None:
            lines = content.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = start + limit if limit is not None else None
            content = "".join(lines[start:end])
        self._on_file(None, read=len(content))
        return ReadTextFileResponse(content=content)

    def _read(self, path: str) -> str:
        with self.resolver.open_for_read(path) as handle:
            data = handle.read(MAX_READ_BYTES + 1)
        if len(data) > MAX_READ_BYTES:
            raise _TooLarge
        return data.decode("utf-8", errors="replace")

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **kwargs: Any) -> WriteTextFileResponse:
        if "write" not in self.fs:
            raise RequestError.method_not_found("fs/write_text_file")
        try:
            await self._in_thread(self.resolver.resolve_write, path)
        except PathSecurityError as exc:
            self._refused("write", path, exc)
            self._on_denied("fs/write_text_file", self.resolver.relative(path), str(exc))
            raise RequestError(SANDBOX_REFUSED, str(exc), {"path": path}) from None
        await self._gate(ToolCall.edit(path, name="fs/write_text_file"), "write", path)
        try:
            target = await self._in_thread(self._write, path, content)
        except PathSecurityError as exc:
            self._refused("write", path, exc)
            self._on_denied("fs/write_text_file", self.resolver.relative(path), str(exc))
            raise RequestError(SANDBOX_REFUSED, str(exc), {"path": path}) from None
        except OSError as exc:
            raise RequestError(-32603, f"Could not write {path}: {exc.strerror}", {"path": path}) from None
        self._on_file(str(target), written=len(content))
        return WriteTextFileResponse()

    def _write(self, path: str, content: str) -> Path:
        with self.resolver.open_for_write(path) as handle:
            handle.write(content)
        return self.resolver.resolve_write(path)

    def _refused(self, action: str, path: str, exc: Exception | str) -> None:
        self.flush()
        self._emit(BackendMessage(type=MessageType.STATUS, is_error=True,
                                  content=f"refused fs/{action}_text_file for {path!r}: {exc}"))

    async def _gate(self, call: ToolCall, action: str, path: str) -> None:
        """The permission gate for an fs request: a denial (recorded by the gate) is the
        request's error, whose message the agent relays to the model."""
        if self._permit is None:
            return
        decision = await self._permit(call)
        if not decision.allowed:
            self._refused(action, path, decision.reason)
            raise RequestError(SANDBOX_REFUSED, decision.reason, {"path": path})

    # ------------------------------------------------------------------ permissions
    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate,
                                 options: list[PermissionOption], **kwargs: Any) -> RequestPermissionResponse:
        """Answer by policy, the sandbox and the permission gate (which may ask on_permission,
        within its deadline): an autonomous run must never hang."""
        title = tool_call.title or tool_call.kind or tool_call.tool_call_id
        log.debug("permission options for %r: %s", title, [(o.option_id, o.kind, o.name) for o in options])
        self._remember_tool(tool_call)
        if self.active and tool_call.tool_call_id not in self._tool_titles:
            self._flush_text()
            self._start_tool(tool_call)  # asked about before it was announced
        allow = self.permission_policy == "allow"
        reason = f"policy {self.permission_policy!r}"
        outside = self._outside_sandbox(tool_call) if allow else None
        if outside:
            allow, reason = False, f"it would change {outside!r}, outside the allowed paths"
        kind, paths = self._tool_info.get(tool_call.tool_call_id, (None, []))
        tool = self._tool_titles.get(tool_call.tool_call_id) or _tool_name(tool_call)
        recorded = False
        if allow and self._permit is not None:
            decision = await self._permit(permission_call(tool_call, kind, paths, tool))
            allow, reason, recorded = decision.allowed, decision.reason, True
        wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
        chosen = next((o for kind in wanted for o in options if o.kind == kind), None)
        self.flush()
        if not allow:
            self.denied_in_turn += 1
            if not recorded:
                self._on_denied(tool, outside or (paths[0] if paths else title),
                                f"permission refused by agenter ({reason})")
        if chosen is None:
            # No option of the wanted kind: the only safe answer left is "cancelled" (a refusal).
            self._emit(BackendMessage(type=MessageType.STATUS,
                                      content=f"permission for {title!r} cancelled ({reason}; no "
                                              f"{'allow' if allow else 'reject'} option offered)"))
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        verb = "granted" if allow else "denied"
        self._emit(BackendMessage(type=MessageType.STATUS,
                                  content=f"permission {verb} for {title!r} ({reason}): {chosen.name}"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    def _remember_tool(self, update: ToolCallStart | ToolCallProgress | ToolCallUpdate) -> None:
        kind, paths = self._tool_info.get(update.tool_call_id, (None, []))
        paths = list(paths) + _paths_of(update)
        self._tool_info[update.tool_call_id] = (update.kind or kind, paths)

    def _outside_sandbox(self, tool_call: ToolCallUpdate) -> str | None:
        """A path this file-changing tool call names that agenter would not write itself.

        Agents do not always repeat kind and locations in the permission request; what the
        tool call announced in session/update counts too."""
        kind, paths = self._tool_info[tool_call.tool_call_id]
        has_diff = any(isinstance(item, FileEditToolCallContent) for item in tool_call.content or [])
        if kind not in WRITING_KINDS and not has_diff:
            return None
        for path in paths:
            if not self.resolver.is_allowed_write(path):
                return path
        return None

    # ------------------------------------------------------------------ not offered
    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/kill")

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("elicitation/create")  # no human to ask

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None


def permission_call(update: Any, kind: str | None, paths: list[str], name: str) -> ToolCall:
    """The gate's view of a tool call the agent asks permission for (by its ACP kind)."""
    raw = update.raw_input if isinstance(getattr(update, "raw_input", None), dict) else {}
    unique = tuple(dict.fromkeys(p for p in paths if p))
    if kind == "execute":
        command = _command(raw) or (update.title or "").strip().strip("`")
        return ToolCall(kind="shell", name=name, command=command, input=raw or {"command": command})
    if kind in WRITING_KINDS:
        return ToolCall(kind="edit", name=name, paths=unique, input=raw)
    if kind in ("read", "search"):
        return ToolCall(kind="read", name=name, paths=unique, input=raw, read_only=True, destructive=False)
    if kind == "fetch":
        url = raw.get("url") if isinstance(raw.get("url"), str) else None
        return ToolCall(kind="network", name=name, target=url, input=raw, read_only=True, destructive=False)
    if kind in ("think", "switch_mode"):
        return ToolCall(kind="custom", name=name, input=raw, read_only=True, destructive=False)
    if name.startswith("mcp__"):
        server, _, tool = name[len("mcp__"):].partition("__")
        if server and tool:
            return ToolCall.mcp(server, tool, raw, paths=unique)
    return ToolCall(kind="custom", name=name, paths=unique, input=raw)  # unknown: needs permission


def _command(raw: dict[str, Any]) -> str:
    """The command line in a tool call's raw input (a string, or an argv list)."""
    for key in ("command", "cmd"):
        value = raw.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return shlex.join(value)
    return ""


def _block_text(block: Any) -> str:
    if isinstance(block, TextContentBlock):
        return block.text
    kind = getattr(block, "type", "content")
    uri = getattr(block, "uri", None) or getattr(getattr(block, "resource", None), "uri", None)
    return f"[{kind}{': ' + uri if uri else ''}]"


def _tool_name(update: Any) -> str:
    meta = getattr(update, "field_meta", None) or {}
    for value in meta.values():  # agents put their own tool name in _meta (e.g. claudeCode.toolName)
        if isinstance(value, dict) and isinstance(value.get("toolName"), str):
            return value["toolName"]
    return getattr(update, "kind", None) or getattr(update, "title", None) or "tool"


_PATH_KEYS = ("file_path", "path", "filePath", "notebook_path", "target", "destination")


def _paths_of(update: Any) -> list[str]:
    """Paths a tool call names: its locations, its diffs, and path-like keys of its raw input."""
    paths = [loc.path for loc in getattr(update, "locations", None) or []]
    paths += [item.path for item in getattr(update, "content", None) or []
              if isinstance(item, FileEditToolCallContent)]
    raw = getattr(update, "raw_input", None)
    if isinstance(raw, dict):
        paths += [raw[key] for key in _PATH_KEYS if isinstance(raw.get(key), str) and raw[key]]
        changes = raw.get("changes")
        if isinstance(changes, dict):  # codex-acp: {"changes": {"/abs/path": {...}}}
            paths += [key for key in changes if isinstance(key, str)]
    return paths


def _as_input(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    return raw if isinstance(raw, dict) else {"input": raw}


def _tool_content_text(content: list[Any] | None) -> str:
    parts: list[str] = []
    for item in content or []:
        if isinstance(item, ContentToolCallContent):
            parts.append(_block_text(item.content))
        elif isinstance(item, FileEditToolCallContent):
            parts.append(f"edited {item.path}")
        elif isinstance(item, TerminalToolCallContent):
            parts.append(f"[terminal {item.terminal_id}]")
    return "\n".join(p for p in parts if p)
