"""The ACP client side agenter plays: it serves the agent's fs and permission requests inside the
sandbox and through the permission gate, and emits `session/update` notifications as
BackendMessages (the mapping itself is `_events`).

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

import logging
import shlex
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    FileEditToolCallContent,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    WriteTextFileResponse,
)
from agenter._errors import PathSecurityError
from agenter.backends._edits import text_counts
from agenter.backends.agents.acp._events import UpdateMapper, tool_name
from agenter.backends.base import BackendMessage, MessageType
from agenter.permissions import PermissionDecision, ToolCall
from agenter.sandbox.paths import PathResolver

log = logging.getLogger("agenter.backends.agents.acp")

#: JSON-RPC error code for a file request agenter refuses (sandbox). The message is written for
#: the model: agents relay it as the tool result.
SANDBOX_REFUSED = -32602
#: The spec's "resource not found" error, for a file that does not exist.
NOT_FOUND = -32002
#: Tool kinds that change files: their locations must be writable before a permission is granted.
WRITING_KINDS = frozenset({"edit", "delete", "move"})
#: Read results larger than this are refused rather than streamed into the agent's context.
MAX_READ_BYTES = 4 * 1024 * 1024

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
        # session/update → BackendMessages (text deltas, commands, file edits, ...): _events
        self.events = UpdateMapper(relative=resolver.relative)
        # kind and paths each tool call announced, for permission requests that omit them
        self._tool_info: dict[str, tuple[str | None, list[str]]] = {}

    # ------------------------------------------------------------------ turn bookkeeping
    def start_turn(self) -> None:
        self.active = True
        self.denied_in_turn = 0
        self.events.start_turn()

    def final_text(self) -> str:
        """The agent's last text segment of the turn (after its last tool call)."""
        return self.events.final_text()

    def full_text(self) -> str:
        return self.events.full_text()

    def flush(self) -> None:
        """Emit what is held: the whole text of the deltas so far, then tool calls not yet shown."""
        self._emit_all(self.events.flush())

    def _emit_all(self, messages: list[BackendMessage]) -> None:
        for message in messages:
            self._emit(message)

    # ------------------------------------------------------------------ session/update
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if not self.active or (self.session_id is not None and session_id != self.session_id):
            return
        try:
            if isinstance(update, ToolCallStart | ToolCallProgress):
                self._remember_tool(update)
            elif isinstance(update, UsageUpdate):
                self._on_usage(update)
            # The wire form: what the mapping reads, and every message's `raw`.
            self._emit_all(self.events.update(update.model_dump(mode="json", by_alias=True, exclude_none=True)))
        except Exception:
            log.exception("could not convert ACP session update %r", type(update).__name__)

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
            target, counts = await self._in_thread(self._write, path, content)
        except PathSecurityError as exc:
            self._refused("write", path, exc)
            self._on_denied("fs/write_text_file", self.resolver.relative(path), str(exc))
            raise RequestError(SANDBOX_REFUSED, str(exc), {"path": path}) from None
        except OSError as exc:
            raise RequestError(-32603, f"Could not write {path}: {exc.strerror}", {"path": path}) from None
        self._on_file(str(target), written=len(content))
        raw = {"method": "fs/write_text_file", "params": {"sessionId": session_id, "path": path, "content": content}}
        self._emit_all(self.events.file_written(str(target), counts, raw=raw))
        return WriteTextFileResponse()

    def _write(self, path: str, content: str) -> tuple[Path, tuple[int, int] | None]:
        """Write the file; returns where, and the lines added and removed (None when what it
        held could not be compared)."""
        target = self.resolver.resolve_write(path)
        counts: tuple[int, int] | None
        try:
            before = target.read_text(encoding="utf-8", errors="replace") \
                if target.stat().st_size <= MAX_READ_BYTES else None
            counts = text_counts(before, content) if before is not None else None
        except (FileNotFoundError, NotADirectoryError):
            counts = text_counts(None, content)
        except OSError:
            counts = None
        with self.resolver.open_for_write(path) as handle:
            handle.write(content)
        return self.resolver.resolve_write(path), counts

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
        data = tool_call.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.active and not self.events.knows(tool_call.tool_call_id):
            self._emit_all(self.events.announce(data))  # asked about before it was announced
        allow = self.permission_policy == "allow"
        reason = f"policy {self.permission_policy!r}"
        outside = self._outside_sandbox(tool_call) if allow else None
        if outside:
            allow, reason = False, f"it would change {outside!r}, outside the allowed paths"
        kind, paths = self._tool_info.get(tool_call.tool_call_id, (None, []))
        tool = self.events.name_of(tool_call.tool_call_id) or tool_name(data)
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
