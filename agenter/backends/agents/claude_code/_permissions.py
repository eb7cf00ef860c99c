"""Who may do what in a headless Claude Code run.

One PreToolUse hook sees every tool call the CLI is about to make (sub-agents' calls too). It
first confines the file tools to cwd and allowed_write_paths (the sandbox's rule), then maps the
call onto a `ToolCall` and decides it through the session's permission gate (`permit`): a denial
becomes the hook's deny with the gate's reason, which the model reads as the tool's result. The
permission prompts a headless run would otherwise hang on are answered by `can_use_tool`.

Approvals that can wait (docs/approvals.md): a call the gate defers is denied with the hook's
`continue: false`, so Claude Code ends the turn once the calls of that response are answered; any
later call of the turn (the same response's) is denied too, so nothing runs after it. Both are
reported through `waiting` (the backend's pending calls). A continued run's answers come back
through `repeated` when the model makes a paused call again.

Why the hook and not `can_use_tool` with a deny that interrupts: the gate decides in the hook, and
`can_use_tool` hears only of calls the hook answers "ask", which a permission mode may approve by
itself; an interrupt also ends the turn as an error (error_during_execution) with Claude Code's own
"STOP and wait" text as the call's result. `continue: false` ends it with a success result and the
gate's reason as the call's result. Recorded against Claude Code 2.1.332.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from agenter._errors import PathSecurityError
from agenter.backends._pauses import RepeatedCalls
from agenter.backends._programs.claude import FILE_WRITE_TOOLS, call_target
from agenter.backends._prompts import REFUSAL_TOOL_NAME
from agenter.permissions import PermissionDecision, ToolCall
from agenter.sandbox.paths import PathResolver
from agenter.tools import Tool

if TYPE_CHECKING:
    from claude_agent_sdk.types import HookCallback

__all__ = ["ENFORCED_KINDS", "Permissions", "tool_call"]

#: The rule kinds the hook enforces: every tool the CLI runs passes it.
ENFORCED_KINDS = frozenset({"read", "edit", "shell", "network", "mcp", "custom"})
#: The in-process MCP server of the custom tools (_setup.MCP_SERVER_NAME; _setup imports this module).
_SERVER = "agenter"
#: agenter's own tools: answers, not actions (never gated).
_OWN_TOOLS = frozenset({f"mcp__{_SERVER}__{REFUSAL_TOOL_NAME}", "StructuredOutput"})
#: Claude Code's bookkeeping tools: they change nothing outside the conversation (a sub-agent's
#: own tool calls pass the hook like any other).
_HARMLESS_TOOLS = frozenset({"TodoWrite", "TodoRead", "Task", "Agent", "ExitPlanMode", "EnterPlanMode",
                             "BashOutput", "TaskOutput", "KillShell", "KillBash", "TaskStop", "ToolSearch",
                             "ListMcpResourcesTool", "ReadMcpResourceTool", "AskUserQuestion"})
#: Seconds the CLI waits for the hook beyond the permission deadline (the gate answers by then).
_HOOK_SLACK = 30.0

#: Input keys of Claude Code's tools that describe a call rather than change it (a paused call
#: made again may word them differently).
DESCRIPTIVE_KEYS = frozenset({"description"})
#: What the model reads for a call after the one the turn paused at.
NOT_RUN = ("Not run: the run paused at an earlier call of this response, which waits for a person's approval. "
           "You will be told when to go on.")
#: What Claude Code notes when the turn ends at a call that waits.
STOP_REASON = "agenter paused the run: a tool call waits for a person's approval"

#: Decides a call through the gate: permit(call, answer=..., defer=...) (BaseBackend.permit).
Permit = Callable[..., Awaitable[PermissionDecision]]
#: Records a refused write: (tool, target, reason, rule).
Refused = Callable[[str, str, str, str], Any]
#: Records a call the turn stopped before: (tool_use_id, tool, input, call, asked): `asked` for
#: the call the gate deferred, False for a later one.
Waiting = Callable[[str, str, dict[str, Any], ToolCall, bool], Any]


def tool_call(name: str, tool_input: Mapping[str, Any], tools: Mapping[str, Tool] | None = None) -> ToolCall | None:
    """The gate's view of one Claude Code tool call (None for agenter's own tools).

    tools: the custom tools, by name (served as mcp__agenter__<name>).
    """
    data = dict(tool_input) if isinstance(tool_input, Mapping) else {}

    def text(key: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) else ""

    if name in _OWN_TOOLS:
        return None
    if name == "Bash":
        return ToolCall.shell(text("command"), name=name)
    if name in FILE_WRITE_TOOLS:
        path = text(FILE_WRITE_TOOLS[name])
        return ToolCall(kind="edit", name=name, paths=(path,) if path else (), input=data)
    if name in ("Read", "NotebookRead", "LS"):
        path = text("file_path") or text("notebook_path") or text("path")
        return ToolCall(kind="read", name=name, paths=(path,) if path else (), input=data, read_only=True,
                        destructive=False)
    if name in ("Glob", "Grep"):
        base = text("path") or "."
        paths = [base]
        if name == "Glob":
            # The literal directory a pattern starts with is read too (`~/.ssh/*` reads ~/.ssh).
            prefix = _literal_prefix(text("pattern"))
            if prefix:
                paths.append(prefix if prefix.startswith(("/", "~")) else os.path.join(base, prefix))
        return ToolCall(kind="read", name=name, paths=tuple(dict.fromkeys(paths)), input=data, read_only=True,
                        destructive=False)
    if name == "WebFetch":
        return ToolCall(kind="network", name=name, target=text("url"), input=data, read_only=True, destructive=False)
    if name == "WebSearch":
        return ToolCall(kind="network", name=name, input=data, read_only=True, destructive=False)
    if name.startswith("mcp__"):
        server, _, tool = name[len("mcp__"):].partition("__")
        if server == _SERVER:
            custom = (tools or {}).get(tool)
            if custom is not None and custom.spec is not None:
                return custom.spec.call(tool, data)
            return ToolCall(kind="custom", name=tool, input=data)
        return ToolCall.mcp(server, tool, data)
    if name in _HARMLESS_TOOLS:
        return ToolCall(kind="custom", name=name, input=data, read_only=True, destructive=False)
    return ToolCall(kind="custom", name=name, input=data)  # unknown: fail closed (needs permission)


def _literal_prefix(pattern: str) -> str:
    """The directories of a glob pattern before its first wildcard ('' when it starts with one)."""
    parts = []
    for part in pattern.split("/"):
        if any(c in part for c in "*?[{"):
            break
        parts.append(part)
    else:
        parts = parts[:-1]  # no wildcard: the last part is a file name
    return "/".join(parts) if parts != [""] else "/"


class Permissions:
    """Decisions for one session.

    resolver: checks write paths (None: writes are not confined).
    mode: the CLI's permission mode; in "default" mode a refused write becomes a prompt that
        `can_use_tool` denies, so the model reads a plain tool error.
    allowed: tool names allowed when the sandbox is on (the built-in tools we offer and ours).
    permit: decides a call through the session's permission gate (None: no gate, only the
        write confinement).
    tools: the custom tools (their specs tell the gate what they do).
    ask_timeout: the permission deadline (None: none); the CLI waits that long for the hook.
    refused: records a refusal of agenter's (for result.permission_denials): a write the
        confinement refused, a prompt `can_use_tool` denied. `refused_ids` holds the tool_use_ids
        of every call refused here (the gate's denials included), so the backend can tell Claude
        Code's own refusals in its result from agenter's.
    waiting: records the calls the turn stops before (see the module docstring); `paused` says
        the turn stops, until `begin_turn`. `repeated` holds a continued run's answers.
    """

    def __init__(self, *, resolver: PathResolver | None, mode: str, sandbox: bool, allowed: Collection[str],
                 permit: Permit | None = None, tools: Sequence[Tool] = (), ask_timeout: float | None = 60.0,
                 refused: Refused | None = None, waiting: Waiting | None = None):
        self.resolver = resolver
        self.mode = mode
        self.sandbox = sandbox
        self.allowed = frozenset(allowed)
        self.permit = permit
        self.tools = {t.name: t for t in tools}
        self.ask_timeout = ask_timeout
        self.refused = refused
        self.refused_ids: set[str] = set()
        self.waiting = waiting
        self.paused = False
        self.repeated = RepeatedCalls(DESCRIPTIVE_KEYS)

    def begin_turn(self) -> None:
        self.paused = False

    def write_denial(self, tool_name: str, tool_input: dict[str, Any]) -> str | None:
        """Why a file tool may not write where it wants, or None when it may."""
        if self.resolver is None or tool_name not in FILE_WRITE_TOOLS:
            return None
        path = tool_input.get(FILE_WRITE_TOOLS[tool_name])
        if not isinstance(path, str) or not path:
            return None  # the tool rejects a missing path itself
        try:
            self.resolver.resolve_write(path)
        except PathSecurityError as exc:
            return str(exc)
        return None

    def hooks(self) -> dict[str, Any] | None:
        """The CLI hooks to register: every tool call when there is a gate, else file writes
        when they are confined, else none."""
        if self.resolver is None and self.permit is None:
            return None
        from claude_agent_sdk import HookMatcher

        # The hook reads the plain dict the CLI sends; the SDK's TypedDict signature adds nothing here.
        hook = cast("HookCallback", self.pre_tool_use)
        if self.permit is None:
            return {"PreToolUse": [HookMatcher(matcher="|".join(FILE_WRITE_TOOLS), hooks=[hook])]}
        # The CLI must wait for a person's answer (the gate ends the wait at its deadline), and a
        # hook that fails or times out blocks the call instead of letting it through.
        timeout = (self.ask_timeout if self.ask_timeout is not None else 24 * 3600.0) + _HOOK_SLACK
        return {"PreToolUse": [HookMatcher(matcher=None, hooks=[hook], timeout=timeout, on_failure="block")]}

    async def pre_tool_use(self, input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        """The gate every tool call passes, whatever the CLI's permission mode says.

        A write outside the allowed paths is refused first: in the default permission mode as a
        prompt, which `can_use_tool` answers with a deny the model reads as a plain tool error; in
        the other modes a prompt might be auto-approved, so the hook denies by itself. Then the
        permission gate decides; its denials are the hook's deny, whatever the mode (the model
        reads Claude Code's "PreToolUse:<tool> hook error: <reason>" or the reason alone).
        """
        tool_name = str(input_data.get("tool_name", ""))
        tool_input = input_data.get("tool_input") or {}
        reason = self.write_denial(tool_name, tool_input)
        if reason is not None:
            self._refused_id(tool_use_id)
            if self.refused is not None and self.resolver is not None:
                path = str(tool_input.get(FILE_WRITE_TOOLS[tool_name]))
                rule = "allowed_write_paths" if self.resolver.allowed_write_paths is not None else "sandbox"
                self.refused(tool_name, path, reason, rule)
            return _hook_answer("ask" if self.mode == "default" else "deny", reason)
        if self.permit is None:
            return {}
        call = tool_call(tool_name, tool_input, self.tools)
        if call is None:
            return {}
        if self.paused:  # the turn ends at an earlier call that waits for a person
            self._wait(tool_use_id, tool_name, tool_input, call, asked=False)
            return _hook_answer("deny", NOT_RUN)
        decision = await self.permit(call, answer=self.repeated.take(tool_name, tool_input), defer=True)
        if decision.allowed:
            return {}
        if decision.deferred:
            self.paused = True
            self._wait(tool_use_id, tool_name, tool_input, call, asked=True)
            return {**_hook_answer("deny", decision.reason), "continue_": False, "stopReason": STOP_REASON}
        self._refused_id(tool_use_id)
        return _hook_answer("deny", decision.reason)

    def _wait(self, tool_use_id: Any, tool_name: str, tool_input: Any, call: ToolCall, *, asked: bool) -> None:
        self._refused_id(tool_use_id)
        if self.waiting is not None:
            call_id = tool_use_id if isinstance(tool_use_id, str) and tool_use_id else f"call-{len(self.refused_ids)}"
            self.waiting(call_id, tool_name, dict(tool_input) if isinstance(tool_input, Mapping) else {}, call, asked)

    async def can_use_tool(self, tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
        """Answers the permission prompts a headless run would otherwise hang on."""
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        reason = self.write_denial(tool_name, tool_input)
        if reason is not None:  # recorded when the hook turned it into this prompt
            self._refused_id(getattr(context, "tool_use_id", None))
            return PermissionResultDeny(message=reason)
        if not self.sandbox or tool_name in self.allowed:
            return PermissionResultAllow()
        message = f"{tool_name} is not permitted in this run (allowed: {', '.join(sorted(self.allowed))})."
        self._refused_id(getattr(context, "tool_use_id", None))
        if self.refused is not None:
            self.refused(tool_name, call_target(tool_name, tool_input), message, "claude_allowed_tools")
        return PermissionResultDeny(message=message)

    def _refused_id(self, tool_use_id: Any) -> None:
        if isinstance(tool_use_id, str) and tool_use_id:
            self.refused_ids.add(tool_use_id)


def _hook_answer(decision: str, reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                   "permissionDecisionReason": reason}}
