"""A permission policy as a Gemini CLI policy file, for gemini-cli: TOML for its policy engine,
passed with --admin-policy (the admin tier, above the user's own and the built-in policies, yolo's
allow-all included). Each agenter rule is a [[rule]] with decision "deny" or "allow" (nobody can
answer headless, so ask rules are deny): the mode's baseline, then allow rules, then deny and ask
rules, then the safety checks that patterns can express, each tier a higher priority. Shell rules
match the command and, as Gemini CLI checks them, each command of a compound line; path rules
match the file tools' path arguments (argsPattern). Limit: the command patterns are textual
(`cat $D/id_rsa` with D=~/.ssh is not caught).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agenter.backends.cli._policy import cannot_compile, path_pattern
from agenter.permissions import PROTECTED_PATHS, PermissionPolicy, PermissionRule

__all__ = ["EDIT_TOOLS", "READ_TOOLS", "SHELL_TOOL", "SYSTEM_POLICIES", "gemini_policy"]

#: Gemini CLI's tools by what they do with the paths in their arguments.
READ_TOOLS = ("read_file", "read_many_files", "list_directory", "glob", "grep_search")
EDIT_TOOLS = ("write_file", "replace")
SHELL_TOOL = "run_shell_command"
#: Where Gemini CLI looks for administrators' policies; when it holds any, --admin-policy is ignored.
SYSTEM_POLICIES = Path("/etc/gemini-cli/policies")
#: Priorities within agenter's policy file: a later tier wins over an earlier one.
_BASELINE, _ALLOW, _DENY, _SAFETY = 100, 200, 300, 400
#: The safety checks as command patterns (regexes on the command text; Gemini CLI also checks
#: each command of a compound line): destructive git, a download piped into a shell, commands
#: naming credential files or git hooks. Textual: `cat $D/id_rsa` with D=~/.ssh is not caught.
_SAFETY_COMMANDS = (
    r'git push(?: [^"]*|) (?:--force[^ "]*|-f|-[a-zA-Z]*f|--mirror|--delete|-d)(?=[\s"]|\\")',
    r'git reset(?: [^"]*|) --hard', r'git clean(?: [^"]*|) (?:-[a-zA-Z]*f|--force)',
    r'git branch(?: [^"]*|) -[a-zA-Z]*[DMC]', r"git (?:filter-branch|filter-repo)",
    r"git reflog (?:expire|delete)", r"git stash (?:drop|clear)", r"git update-ref -d",
    r'[^"]*\b(?:curl|wget|http|xh|aria2c)\b[^"|]*\|\s*(?:sudo\s+|)(?:ba|z|da|k|fi|)sh\b',
    r'[^"]*(?:bash|sh|eval|source)\b[^"]*\$\((?:curl|wget)\b',
    r'[^"]*(?:\.ssh/|\.aws/|\.gnupg/|\.netrc|id_rsa|id_ed25519|\.git-credentials|\.git/hooks|\.git/config)',
)


def gemini_policy(policy: PermissionPolicy, cwd: Path, home: Path) -> str:
    """A policy as a Gemini CLI policy file (TOML). ConfigurationError for what it cannot express."""
    rules: list[dict[str, Any]] = []

    def add(decision: str, priority: int, tools: Sequence[str], *, args: str | None = None,
            command: str | None = None, why: str = "") -> None:
        rule: dict[str, Any] = {"toolName": list(tools) if len(tools) > 1 else tools[0], "decision": decision,
                                "priority": priority}
        for pattern in (command, args):
            if pattern is not None and not _gemini_accepts(pattern if args else f'"command":"{pattern}'):
                raise cannot_compile("gemini-cli", f"{why}: Gemini CLI would drop the pattern {pattern!r} as unsafe")
        if command is not None:
            rule["commandRegex"] = command
        if args is not None:
            rule["argsPattern"] = args
        if decision == "deny":
            rule["denyMessage"] = (f"Permission denied by agenter's policy ({why}). Do not retry this call; "
                                   "find another way, or say in your answer why it is needed.")
        elif policy.mode in ("accept_edits", "bypass"):
            rule["allowRedirection"] = True
        rules.append(rule)

    edits_allowed = policy.mode in ("accept_edits", "bypass")
    if not edits_allowed:
        add("deny", _BASELINE, EDIT_TOOLS, why=f"mode {policy.mode}: no edits")
    if policy.mode != "bypass":
        add("deny", _BASELINE, [SHELL_TOOL], why=f"mode {policy.mode}: no commands without an allow rule")
    for rule in policy.rules:
        if rule.kind not in ("read", "edit", "shell"):
            raise cannot_compile("gemini-cli", f"the permission rule {rule}")
        if rule.effect == "allow" and policy.mode == "plan" and rule.kind != "read":
            continue  # plan mode is read-only whatever the allow rules say
        decision, priority = ("allow", _ALLOW) if rule.effect == "allow" else ("deny", _DENY)
        tools = {"read": READ_TOOLS, "edit": EDIT_TOOLS, "shell": [SHELL_TOOL]}[rule.kind]
        if rule.matches_all:
            add(decision, priority, tools, why=str(rule))
        elif rule.kind == "shell":
            add(decision, priority, tools, command=_command_regex(rule), why=str(rule))
        else:
            add(decision, priority, tools, args=_path_args(rule, cwd, home), why=str(rule))
    # The safety checks: writes to git internals, agent settings, shell start-up files and
    # credentials, reads of credentials, and the command patterns.
    for names, tools in ((sorted(PROTECTED_PATHS.agent_dirs | {".git"}), EDIT_TOOLS),):
        for name in names:
            add("deny", _SAFETY, tools, args=_path_args(PermissionRule("deny", "edit", f"{name}/"), cwd, home),
                why=f"safety: {name}/ is protected")
    for name in sorted(PROTECTED_PATHS.agent_files | PROTECTED_PATHS.startup_files) + list(policy.protected_paths):
        add("deny", _SAFETY, EDIT_TOOLS, args=_path_args(PermissionRule("deny", "edit", name), cwd, home),
            why=f"safety: {name} is protected")
    credentials = [f"{d}/" for d in sorted(PROTECTED_PATHS.credential_dirs)]
    for name in credentials + sorted(PROTECTED_PATHS.credential_files) + list(PROTECTED_PATHS.credential_globs):
        add("deny", _SAFETY, [*READ_TOOLS, *EDIT_TOOLS],
            args=_path_args(PermissionRule("deny", "read", name), cwd, home), why=f"safety: {name} holds credentials")
    for command in _SAFETY_COMMANDS:
        add("deny", _SAFETY, [SHELL_TOOL], command=command, why="safety: a command the safety checks stop")
    return "\n".join(_toml_rule(rule) for rule in rules)


#: Gemini CLI's guard against slow patterns: it drops (with a warning only) a pattern longer than
#: 2048 characters or with a quantified group after a group holding a quantifier, such as
#: `(?:a+)?` or even `(?:x)...(?:y)?`. agenter's patterns use `(?:x|)` for optional parts.
_NESTED_QUANTIFIER = re.compile(r"\([^)]*[*+?{].*\)[*+?{]")


def _gemini_accepts(pattern: str) -> bool:
    return len(pattern) <= 2048 and _NESTED_QUANTIFIER.search(pattern) is None


def _toml_rule(rule: dict[str, Any]) -> str:
    # JSON strings and arrays of them are TOML values too.
    return "[[rule]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in rule.items())


def _escape(text: str) -> str:
    """Regex metacharacters escaped the way JavaScript accepts them (no identity escapes)."""
    return "".join("\\" + ch if ch in r".^$*+?()[]{}|\/" else ch for ch in text)


def _command_regex(rule: PermissionRule) -> str:
    """A shell rule's word prefix as Gemini CLI's commandRegex (anchored at the command's start)."""
    words = rule.pattern.split()
    while words and words[-1] == "*":
        words.pop()
    text = " ".join(words)
    body = "".join('[^"]*' if ch == "*" else '[^"]' if ch == "?" else _escape(ch) for ch in text)
    return body if text.endswith("*") else body + r'(?=[\s"]|\\")'


def _path_args(rule: PermissionRule, cwd: Path, home: Path) -> str:
    """A path rule as an argsPattern: a path argument (file_path, dir_path, or an item of
    read_many_files' include) naming a matching path, relative or absolute."""
    import pathspec

    pattern = path_pattern(rule, home, "gemini-cli")
    prefix = "(?:" + _escape(str(cwd).rstrip("/") + "/") + r"|\./|)"
    if pattern.startswith("/"):
        root = str(cwd).rstrip("/") + "/"
        if pattern.startswith(root):
            pattern = "/" + pattern[len(root):]  # anchored at the workspace
        else:
            prefix, pattern = "/", "/" + pattern.lstrip("/")
    with warnings.catch_warnings():  # its successor has no pattern_to_regex of its own
        warnings.simplefilter("ignore", DeprecationWarning)
        regex, _ = pathspec.patterns.GitWildMatchPattern.pattern_to_regex(pattern)
    body = (str(regex).removeprefix("^").replace("(?P<ps_d>/)", "/").replace("$", '"')
            .replace("[^/]", '[^/"]').replace(".+", '[^"]+').replace(".*", '[^"]*').replace(")?", "|)"))
    return r'(?:\x00"(?:file_path|dir_path)":|[\[,]|"include":\[)"' + prefix + body
