"""The ACP client side agenter plays: it serves the agent's fs and permission requests inside the
sandbox and through the permission gate, and emits `session/update` notifications as
BackendMessages (the mapping itself is `_events`).

The gate sees what the agent brings to agenter: fs/read_text_file and fs/write_text_file (after the
sandbox's path check; a denial is the request's error, which agents relay to the model as the
tool's result) and session/request_permission (mapped from the tool call's kind: execute as a
shell command, edit/delete/move as edits, read/search as reads, fetch as network, MCP tools by
name). ACP's permission answer carries no reason, so the model reads the agent's own refusal text;
agenter's reason goes to the event, the denials and the session's next prompt. What an agent
does by itself, without asking, cannot be refused (terminals are not offered): a command it ran
unasked is read afterwards (`unasked_writes`), and each path it writes that agenter would have
refused (outside the workspace, in .git/, outside allowed_write_paths) is recorded as a denial
with the rule `unasked`, so the result names it even when no file of the workspace changed.

Approvals that can wait (docs/approvals.md): a call the gate defers ends the turn there. agenter
sends `session/cancel` and then answers the permission request `cancelled` (ACP's order for a
cancelled turn), so the agent does not run the call and ends its prompt with stop reason
`cancelled`; a permission asked later in that turn is answered `cancelled` too. A deferred
fs/write_text_file is not written (its error says why) and cancels the turn the same way. Each is
reported through `waiting`; a continued run's answers come back through `repeated` when the model
makes a paused call again.

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
from agenter.backends._pauses import RepeatedCalls
from agenter.backends.agents.acp._events import UpdateMapper, command_of, tool_name
from agenter.backends.base import UNASKED_RULE, BackendMessage, MessageType
from agenter.permissions import PermissionDecision, ToolCall, Workspace, analyze_shell
from agenter.sandbox.paths import PathResolver

log = logging.getLogger("agenter.backends.agents.acp")

#: JSON-RPC error code for a file request agenter refuses (sandbox). The message is written for
#: the model: agents relay it as the tool result.
SANDBOX_REFUSED = -32602
#: The spec's "resource not found" error, for a file that does not exist.
NOT_FOUND = -32002
#: Agents (by initialize's agentInfo.name) that are answered an empty text for a file that does
#: not exist, since they cannot tell any error answer from a failure. Gemini CLI (0.61) gets the
#: JSON-RPC error as a plain object, which its file service does not recognise as ENOENT (it
#: reads `.message` of Error instances only), so write_file's pre-read of a new file aborted the
#: write ("Error checking existing file"). Its read_file reads the disk itself; only write_file
#: and replace read through agenter, and for them an empty text means "create".
MISSING_AS_EMPTY = frozenset({"gemini-cli"})
#: Tool kinds that change files: their locations must be writable before a permission is granted.
WRITING_KINDS = frozenset({"edit", "delete", "move"})
#: Read results larger than this are refused rather than streamed into the agent's context.
MAX_READ_BYTES = 4 * 1024 * 1024
#: Tool-call statuses after which a command has run.
_RAN = ("completed", "failed")
#: Paths a command may write whatever the sandbox says: devices and the process's own descriptors.
_DEVICE_PREFIXES = ("/dev/", "/proc/self/fd/")
#: At most this many refused paths are recorded for one command.
MAX_UNASKED_TARGETS = 5

#: Input keys that describe a call rather than change it (Claude Code's Bash `description`): a
#: paused call made again may word them differently.
DESCRIPTIVE_KEYS = frozenset({"description"})
#: The error a file write gets when the turn ends at a call that waits (the agent relays it).
NOT_WRITTEN = "Not written: the run paused for a person's approval; you will be told when to go on."

#: Decides a call through the session's permission gate: permit(call, answer=..., defer=...).
Permit = Callable[..., Awaitable[PermissionDecision]]
#: Records a call the turn stops before: (call id, tool, input, call, asked): `asked` for the
#: call the gate deferred, False for a later one.
Waiting = Callable[[str, str, dict[str, Any], ToolCall, bool], Any]


class _TooLarge(Exception):
    pass


class ACPClient:
    """Serves one agent connection for the backend, through its hooks (all called on the event
    loop, in the order the agent sent its messages):

    - `emit(message)`: every BackendMessage;
    - `on_usage(update)`: every usage_update;
    - `on_denied(tool, target, reason, rule='')`: an action refused (a write, a permission), or
      a command the agent ran unasked that writes where agenter would refuse (rule `unasked`);
    - `on_file(path, read=, written=)`: file text served or written (path None for reads);
    - `in_thread(fn, *args)`: blocking file work, off the loop;
    - `permit(call, answer=, defer=)`: the permission gate (None: only the sandbox and the policy
      decide);
    - `waiting(...)`: a call the turn stops before (see the module docstring), and `cancel()`,
      which sends session/cancel; `can_defer` says whether the gate may defer at all (the agent
      can continue a paused session). `paused` says the turn stops, until `start_turn`.

    permission_policy: "deny" rejects every session/request_permission; "allow" lets the sandbox
    check and then the gate decide.
    """

    def __init__(self, *, resolver: PathResolver, permission_policy: str, fs: Collection[str],
                 emit: Callable[[BackendMessage], None],
                 on_usage: Callable[[UsageUpdate], None],
                 on_denied: Callable[..., Any],
                 on_file: Callable[..., None],
                 in_thread: Callable[..., Awaitable[Any]],
                 permit: Permit | None = None,
                 waiting: Waiting | None = None,
                 cancel: Callable[[], Awaitable[None]] | None = None):
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
        #: Answer a read of a missing file with an empty text, not the not-found error (set at
        #: initialize for the agents in MISSING_AS_EMPTY).
        self.missing_as_empty = False
        self.denied_in_turn = 0
        # session/update → BackendMessages (text deltas, commands, file edits, ...): _events
        self.events = UpdateMapper(relative=resolver.relative)
        # kind and paths each tool call announced, for permission requests that omit them
        self._tool_info: dict[str, tuple[str | None, list[str]]] = {}
        # the command line of each execute tool call, and the calls agenter was asked about or
        # has audited (a command the agent ran unasked is audited once, when it has run)
        self._commands: dict[str, str] = {}
        self._asked: set[str] = set()
        self._audited: set[str] = set()
        self._workspace = Workspace(resolver.given_cwd)
        self._waiting = waiting
        self._cancel = cancel
        self.can_defer = False
        self.paused = False
        self._writes = 0
        self.repeated = RepeatedCalls(DESCRIPTIVE_KEYS)

    # ------------------------------------------------------------------ turn bookkeeping
    def start_turn(self) -> None:
        self.active = True
        self.denied_in_turn = 0
        self.paused = False
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
            if isinstance(update, ToolCallStart | ToolCallProgress) and update.status in _RAN:
                self._audit_unasked(update.tool_call_id, update.status)
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
        except (FileNotFoundError, NotADirectoryError):
            if self.missing_as_empty:
                return ReadTextFileResponse(content="")
            # The spec's wording: agents that match on the message find "Resource not found".
            raise RequestError(NOT_FOUND, f"Resource not found: {path}", {"path": path}) from None
        except IsADirectoryError:
            raise RequestError(NOT_FOUND, f"Resource not found: {path} is a directory", {"path": path}) from None
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
        await self._gate(ToolCall.edit(path, name="fs/write_text_file"), "write", path,
                         {"path": path, "content": content})
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

    async def _gate(self, call: ToolCall, action: str, path: str, data: dict[str, Any] | None = None) -> None:
        """The permission gate for an fs request: a denial (recorded by the gate) is the
        request's error, whose message the agent relays to the model. A write the gate defers
        (`data`: its parameters, the call as it waits) is not done and ends the turn."""
        if self._permit is None:
            return
        tool = str(call.name)
        if data is not None and self.paused:
            await self._stop(self._write_id(), tool, data, call, asked=False)
            raise RequestError(SANDBOX_REFUSED, NOT_WRITTEN, {"path": path})
        answer = self.repeated.take(tool, data) if data is not None else None
        decision = await self._permit(call, answer=answer, defer=data is not None and self.can_defer)
        if decision.deferred and data is not None:
            await self._stop(self._write_id(), tool, data, call, asked=True)
            raise RequestError(SANDBOX_REFUSED, decision.reason, {"path": path})
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
        self._asked.add(tool_call.tool_call_id)
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
            call = permission_call(tool_call, kind, paths, tool)
            raw = dict(tool_call.raw_input) if isinstance(tool_call.raw_input, dict) else {}
            if self.paused:  # the turn ends at an earlier call that waits for a person
                return await self._stop(tool_call.tool_call_id, tool, raw, call, asked=False)
            decision = await self._permit(call, answer=self.repeated.take(tool, raw), defer=self.can_defer)
            if decision.deferred:
                return await self._stop(tool_call.tool_call_id, tool, raw, call, asked=True)
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

    def _write_id(self) -> str:
        """An id for a file write that waits (ACP gives fs requests none)."""
        self._writes += 1
        return f"fs-write-{self._writes}"

    async def _stop(self, call_id: str, tool: str, data: dict[str, Any], call: ToolCall, *,
                    asked: bool) -> RequestPermissionResponse:
        """End the turn before this call: record it as waiting, send session/cancel once, and
        answer the request `cancelled` (so the agent does not run it)."""
        self.flush()
        first = not self.paused
        self.paused = True
        if self._waiting is not None:
            self._waiting(call_id, tool, data, call, asked)
        if first and self._cancel is not None:
            await self._cancel()
        self._emit(BackendMessage(type=MessageType.STATUS,
                                  content=f"{tool} waits for a person's approval: the turn ends here" if asked
                                  else f"{tool} not run: the turn ends at an earlier call that waits"))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def _remember_tool(self, update: ToolCallStart | ToolCallProgress | ToolCallUpdate) -> None:
        kind, paths = self._tool_info.get(update.tool_call_id, (None, []))
        paths = list(paths) + _paths_of(update)
        self._tool_info[update.tool_call_id] = (update.kind or kind, paths)
        raw = update.raw_input
        command = command_of(raw) if isinstance(raw, dict) else ""  # rawInput only: a title is no command line
        if command:
            self._commands[update.tool_call_id] = command

    def _audit_unasked(self, tool_call_id: str, status: str | None) -> None:
        """A command the agent ran without asking (its own mode: codex-acp full-access, OpenCode's
        default, Gemini's yolo) could not be refused: record each path it writes that agenter would
        have refused, with what happened, so the result names it. Only what the command line says
        is known (agents that send no rawInput, like Gemini CLI, are not audited)."""
        kind, _ = self._tool_info.get(tool_call_id, (None, []))
        command = self._commands.get(tool_call_id)
        if kind != "execute" or not command or tool_call_id in self._asked or tool_call_id in self._audited:
            return
        self._audited.add(tool_call_id)
        targets = unasked_writes(command, self._workspace, self.resolver)[:MAX_UNASKED_TARGETS]
        if not targets:
            return
        self.flush()
        tool = self.events.name_of(tool_call_id) or "execute"
        shown = command if len(command) <= 200 else command[:197] + "..."
        for target, why in targets:
            if status == "completed":
                reason = (f"the agent ran `{shown}` without asking, so agenter could not refuse it: "
                          f"it writes {target!r}, which agenter does not allow ({why})")
            else:
                reason = (f"the agent ran `{shown}` without asking; it would write {target!r}, which "
                          f"agenter does not allow ({why}), and it failed (its own sandbox may have "
                          "stopped it)")
            self._on_denied(tool, target, reason, UNASKED_RULE)
            self._emit(BackendMessage(type=MessageType.STATUS, is_error=True, content=reason))

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


def unasked_writes(command: str, workspace: Workspace, resolver: PathResolver) -> list[tuple[str, str]]:
    """(path as shown, why) for each path `command` writes that `resolver` would refuse to
    write (outside the workspace, in .git/, outside allowed_write_paths), as far as the command
    line tells (agenter's shell parser, `cd` followed). Devices do not count."""
    found: dict[str, str] = {}
    for access in analyze_shell(command, workspace).accesses:
        path = access.path
        if access.access != "write" or path is None or path.real.startswith(_DEVICE_PREFIXES):
            continue
        shown = path.rel if path.rel is not None else path.real
        try:
            resolver.resolve_write(shown)
        except PathSecurityError as exc:
            why = str(exc).removeprefix("Refused: ").split("; use a path", 1)[0]
            found.setdefault(shown, why)
    return list(found.items())
