"""A permission policy as Claude Code's flags, for claude-cli: deny rules, and ask rules (nobody
can answer headless), become --disallowedTools patterns (`Bash(git push --force:*)`,
`Edit(.git/**)`, `Read(~/.ssh/**)`), allow rules --allowedTools, the mode --permission-mode; the
safety checks that are patterns are always added. bypass keeps acceptEdits: agenter never passes
bypassPermissions.
"""

from __future__ import annotations

from agenter.backends.cli._policy import cannot_compile
from agenter.permissions import PermissionPolicy, PermissionRule

__all__ = ["SAFETY_DENIALS", "claude_pattern", "claude_permissions"]

#: The bypass-immune safety checks that Claude Code's patterns can express. What they cannot
#: (a download piped into a shell, writes through shell redirections, paths outside the
#: workspace, a recursive delete of an unknown target) is not compiled: docs/backends/cli.md.
SAFETY_DENIALS = (
    "Edit(.git/**)", "Edit(.claude/**)", "Edit(~/.bashrc)", "Edit(~/.profile)", "Edit(~/.zshrc)",
    "Read(~/.ssh/**)", "Read(~/.aws/**)", "Read(~/.gnupg/**)", "Read(~/.netrc)", "Read(~/.docker/config.json)",
    "Read(~/.config/gh/**)", "Read(~/.kube/**)",
    "Bash(git push --force:*)", "Bash(git push -f:*)", "Bash(git push --force-with-lease:*)",
    "Bash(git reset --hard:*)", "Bash(git clean -f:*)", "Bash(git clean -fd:*)")
#: agenter's permission modes as Claude Code's --permission-mode.
_MODES = {"default": "default", "accept_edits": "acceptEdits", "plan": "plan", "bypass": "acceptEdits"}
#: agenter's rule kinds as Claude Code's tool names in patterns.
_TOOLS = {"read": "Read", "edit": "Edit", "shell": "Bash"}


def claude_permissions(policy: PermissionPolicy) -> tuple[str, list[str], list[str]]:
    """A policy as Claude Code's flags: (--permission-mode, --allowedTools, --disallowedTools)."""
    denied = [claude_pattern(rule) for rule in policy.rules if rule.effect in ("deny", "ask")]
    allowed = [claude_pattern(rule) for rule in policy.rules_with("allow")]
    return _MODES[policy.mode], allowed, denied + [d for d in SAFETY_DENIALS if d not in denied]


def claude_pattern(rule: PermissionRule) -> str:
    """One rule as a Claude Code permission pattern; ConfigurationError for kinds it has none for."""
    tool = _TOOLS.get(rule.kind)
    if tool is None:
        raise cannot_compile("claude-cli", f"the permission rule {rule}")
    pattern = rule.pattern
    if not pattern:
        return tool
    if tool == "Bash":
        # agenter's shell patterns are word prefixes with * wildcards; Claude Code's are a
        # prefix ending in ":*" (or an exact command).
        return f"Bash({pattern.rstrip('* ')}:*)"
    if pattern.startswith("/"):
        pattern = "/" + pattern  # Claude Code: //path is absolute, /path is relative to its settings
    return f"{tool}({pattern})"
