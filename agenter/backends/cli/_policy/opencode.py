"""A permission policy as OpenCode's `permission` map, for opencode-cli (OpenCode cannot call
agenter back): each kind starts from what the mode allows, then allow rules, then deny and ask
rules (nobody can answer) as "deny" patterns, then the safety checks that are patterns; OpenCode
lets the last matching pattern win. Paths outside the workspace are denied (external_directory).
"""

from __future__ import annotations

from typing import Any

from agenter.backends.cli._policy import cannot_compile
from agenter.permissions import PermissionPolicy, PermissionRule

__all__ = ["SAFETY_DENIALS", "opencode_patterns", "opencode_permissions"]

#: The bypass-immune safety checks OpenCode's patterns can express (its `*` also matches `/`).
#: What they cannot (a download piped into a shell, writes through shell redirections, a
#: recursive delete of an unknown target) is not compiled: docs/backends/cli.md.
SAFETY_DENIALS: dict[str, tuple[str, ...]] = {
    "edit": (".git/*", ".opencode/*", "opencode.json", "~/.bashrc", "~/.profile", "~/.zshrc"),
    "read": ("~/.ssh/*", "~/.aws/*", "~/.gnupg/*", "~/.netrc", "~/.docker/config.json", "~/.config/gh/*",
             "~/.kube/*"),
    "bash": ("git push --force*", "git push -f", "git push -f *", "git push * --force*", "git push * -f",
             "git push * -f *", "git reset --hard*", "git clean -f*"),
}
#: What each mode lets a kind do before any rule (headless, "ask" is a no).
_MODE_ACTIONS = {"default": {"read": "allow", "edit": "deny", "bash": "deny"},
                 "accept_edits": {"read": "allow", "edit": "allow", "bash": "deny"},
                 "plan": {"read": "allow", "edit": "deny", "bash": "deny"},
                 "bypass": {"read": "allow", "edit": "allow", "bash": "allow"}}
_KEYS = {"read": "read", "edit": "edit", "shell": "bash"}


def opencode_permissions(policy: PermissionPolicy | None) -> dict[str, Any]:
    """A policy as OpenCode's `permission` map; None (no policy): edits and commands allowed and
    everything else left to the user's configuration, as before policies existed."""
    if policy is None:
        return {"edit": "allow", "bash": "allow"}
    modes = _MODE_ACTIONS[policy.mode]
    maps: dict[str, dict[str, str]] = {key: {"*": action} for key, action in modes.items()}
    rules = policy.rules
    for effect in ("allow", "deny"):
        for rule in rules:
            if rule.effect == effect or (effect == "deny" and rule.effect == "ask"):
                key = _KEYS.get(rule.kind)
                if key is None:
                    raise cannot_compile("opencode-cli", f"the permission rule {rule}")
                for pattern in opencode_patterns(rule):
                    maps[key].pop(pattern, None)  # re-inserted last: the last match wins
                    maps[key][pattern] = effect
    for key, patterns in SAFETY_DENIALS.items():
        for pattern in patterns:
            maps[key].pop(pattern, None)
            maps[key][pattern] = "deny"
    outside = {"*": "deny", **{f"{root.rstrip('/')}/*": "allow" for root in (*policy.extra_roots, *policy.read_roots)}}
    return {**maps, "external_directory": outside}


def opencode_patterns(rule: PermissionRule) -> list[str]:
    """One rule's pattern in OpenCode's wildcards: `*` any characters (`/` too), `?` one."""
    pattern = rule.pattern
    if not pattern:
        return ["*"]
    if rule.kind == "shell":
        # agenter's shell patterns are word prefixes: `git push` also matches `git push origin`.
        base = pattern.rstrip("* ")
        if pattern.endswith("*") and not pattern[:-1].endswith(" "):
            return [pattern]
        return [base, f"{base} *"]
    while "**" in pattern:
        pattern = pattern.replace("**", "*")
    return [pattern + "*" if pattern.endswith("/") else pattern]
