"""Who may do what in a headless Claude Code run: the PreToolUse hook that confines file writes to
cwd and allowed_write_paths, and the answers to permission prompts (which would otherwise hang).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, cast

from agenter._errors import PathSecurityError
from agenter.backends.claude_code._events import FILE_WRITE_TOOLS
from agenter.sandbox.paths import PathResolver

if TYPE_CHECKING:
    from claude_agent_sdk.types import HookCallback

__all__ = ["Permissions"]


class Permissions:
    """Decisions for one session.

    resolver: checks write paths (None: writes are not confined).
    mode: the CLI's permission mode; in "default" mode a refused write becomes a prompt that
        `can_use_tool` denies, so the model reads a plain tool error.
    allowed: tool names allowed when the sandbox is on (the built-in tools we offer and ours).
    """

    def __init__(self, *, resolver: PathResolver | None, mode: str, sandbox: bool, allowed: Collection[str]):
        self.resolver = resolver
        self.mode = mode
        self.sandbox = sandbox
        self.allowed = frozenset(allowed)

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
        """The CLI hooks to register (only when writes are confined)."""
        if self.resolver is None:
            return None
        from claude_agent_sdk import HookMatcher

        # The hook reads the plain dict the CLI sends; the SDK's TypedDict signature adds nothing here.
        hook = cast("HookCallback", self.pre_tool_use)
        return {"PreToolUse": [HookMatcher(matcher="|".join(FILE_WRITE_TOOLS), hooks=[hook])]}

    async def pre_tool_use(self, input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        """The gate every file write passes, whatever the permission rules say.

        In the default permission mode a refused write is turned into a permission prompt, which
        `can_use_tool` answers with a deny the model reads as a plain tool error. In the other
        modes a prompt might be auto-approved, so the hook denies by itself (the model then sees
        Claude Code's "PreToolUse:... hook error: <reason>").
        """
        reason = self.write_denial(str(input_data.get("tool_name", "")), input_data.get("tool_input") or {})
        if reason is None:
            return {}
        decision = "ask" if self.mode == "default" else "deny"
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                       "permissionDecisionReason": reason}}

    async def can_use_tool(self, tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
        """Answers the permission prompts a headless run would otherwise hang on."""
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        reason = self.write_denial(tool_name, tool_input)
        if reason is not None:
            return PermissionResultDeny(message=reason)
        if not self.sandbox or tool_name in self.allowed:
            return PermissionResultAllow()
        return PermissionResultDeny(
            message=f"{tool_name} is not permitted in this run (allowed: {', '.join(sorted(self.allowed))}).")
