"""A permission policy as Codex's own enforcement, for codex-cli (sandbox=True only): a permission
profile for its sandbox (`default_permissions`: the workspace writable or read-only by the mode,
`.git` and agent settings read-only, credentials and denied read paths unreadable, denied edit
paths read-only, network off) and an exec-policy rules file (`prefix_rule(...,
decision="forbidden")`) for denied command prefixes and destructive git commands.

Limits of Codex 0.169 that the backend works around: read-only entries may name only what exists
(a missing path is mounted over, which leaves an empty file or folder in the workspace and makes
`exec resume` fail), so `unmasked_paths` lists the ones left out and `left_by_mount` tells what a
mount left behind; the folders its sandbox keeps read-only in each writable root (`mount_points`)
are made and removed around every sandboxed command when missing, which can fail another
command's start (see mount_points), so the backend makes them before a turn; a config file that
sets sandbox_mode makes Codex ignore the profile (`sets_sandbox_mode`).
"""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from pathlib import Path
from typing import Any

from agenter.backends.cli._policy import cannot_compile, path_pattern
from agenter.permissions import PROTECTED_PATHS, PermissionPolicy, PermissionRule

__all__ = ["CODEX_MOUNTS", "PROFILE", "SAFETY_PREFIXES", "codex_permissions", "compile_policy", "left_by_mount",
           "mount_points", "sets_sandbox_mode", "unmasked_paths"]

#: The permission profile agenter defines for a run with a policy.
PROFILE = "agenter"
#: Destructive git commands as exec-policy prefixes (Codex matches argv prefixes exactly, so
#: `git push origin main --force` is not one; the sandbox still keeps .git read-only and the
#: network off). docs/backends/cli.md
SAFETY_PREFIXES: tuple[tuple[Any, ...], ...] = (
    ("git", "push", ("--force", "-f", "--force-with-lease", "--mirror", "--delete", "-d")),
    ("git", "reset", "--hard"), ("git", "clean", ("-f", "-fd", "-df", "-fdx", "-xdf", "-ffd", "--force")),
    ("git", "branch", ("-D", "-M", "-C")), ("git", ("filter-branch", "filter-repo")),
    ("git", "reflog", ("expire", "delete")), ("git", "stash", ("drop", "clear")), ("git", "update-ref", "-d"))
#: Credential files anywhere in the workspace are unreadable (.env.example too: the sandbox's
#: globs have no exceptions).
_WORKSPACE_SECRETS = ("**/.env", "**/.env.*", "**/*.env", "**/*.pem", "**/*.key", "**/*.p12", "**/*.pfx",
                      "**/id_rsa", "**/id_ed25519", "**/id_ecdsa", "**/credentials.json", "**/.netrc")


#: Folders Codex's sandbox keeps read-only in a writable workspace whatever the profile says; a
#: missing one it mounts over, leaving an empty folder behind.
CODEX_MOUNTS = (".git", ".codex", ".agents", ".aws")


def mount_points(config: dict[str, Any], cwd: Path) -> list[str]:
    """Where Codex's sandbox mounts over CODEX_MOUNTS in the workspace under the profile of
    `config` (compile_policy's overrides): each of them in each writable root of the workspace,
    as workspace-relative paths ("." first, then the others in the profile's order).

    Codex 0.169 makes a missing one (an empty folder) before each sandboxed command, its file
    reads included, and removes it afterwards, while other commands and reads run: another
    one's start lists the workspace for the profile's unreadable globs (`**/.env`, ...) and
    fails the whole command, or the session when it was reading AGENTS.md ("failed to enumerate
    unreadable glob paths under ...: <root>/.agents: No such file or directory"), when the
    folder it listed is gone before it looks inside. One that exists is neither made nor removed."""
    filesystem = config.get(f"permissions.{PROFILE}.filesystem") or {}
    roots = [path for path, access in (filesystem.get(":project_roots") or {}).items() if access == "write"]
    workspace = os.path.realpath(cwd)
    for path, access in filesystem.items():
        if access == "write" and path.startswith("/"):
            real = os.path.realpath(path)
            if real == workspace or real.startswith(workspace.rstrip("/") + "/"):
                roots.append(os.path.relpath(real, workspace))
    found: dict[str, None] = {}
    for root in roots:
        if any(ch in root for ch in "*?["):
            continue  # globs are never writable roots (compile_policy makes none)
        for name in CODEX_MOUNTS:
            found[os.path.normpath(os.path.join(root, name))] = None
    return list(found)


def left_by_mount(path: str) -> bool:
    """An empty regular file or an empty folder (what a sandbox's mount point leaves)."""
    try:
        if os.path.islink(path):
            return False
        if os.path.isdir(path):
            return not os.listdir(path)
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:
        return False


def codex_permissions(policy: PermissionPolicy, cwd: Path, home: Path) -> tuple[dict[str, Any], str]:
    """A policy as Codex's own enforcement: (config overrides selecting a permission profile,
    the text of an exec-policy rules file). ConfigurationError for what neither can express.

    Read-only entries name only what exists: Codex 0.169 keeps a missing path from being created
    by mounting over it, which leaves empty files and folders in the workspace and makes
    `exec resume` fail; `unmasked_paths` lists the ones left out (the backend removes what a
    turn creates there)."""
    config, rules, _ = compile_policy(policy, cwd, home)
    return config, rules


def unmasked_paths(policy: PermissionPolicy, cwd: Path, home: Path) -> list[str]:
    """Workspace paths the policy keeps read-only that do not exist, so the profile cannot name
    them (see codex_permissions)."""
    return compile_policy(policy, cwd, home)[2]


def compile_policy(policy: PermissionPolicy, cwd: Path, home: Path) -> tuple[dict[str, Any], str, list[str]]:
    """(config overrides, rules file, unmasked paths): codex_permissions and unmasked_paths at once."""
    writable = policy.mode in ("accept_edits", "bypass") or any(
        r.kind == "edit" and r.matches_all for r in policy.rules_with("allow"))
    roots: dict[str, str] = {".": "write" if writable else "read"}
    outside: dict[str, str] = {":root": "read", ":tmpdir": "write"}
    if policy.mode in ("default", "plan"):
        for rule in policy.rules_with("allow"):
            if rule.kind == "edit" and rule.pattern and policy.mode == "default":
                path = _codex_path(rule, cwd, home, directory=True)
                if os.path.isdir(path if path.startswith("/") else cwd / path):  # only what exists can be bound
                    (outside if path.startswith("/") else roots)[path] = "write"
    missing: list[str] = []

    def read_only(path: str) -> None:
        entry = _entry(path, cwd)
        if entry is None:
            missing.append(path)
        elif roots.get(entry) != "none":
            roots[entry] = "read"

    for name in (".git", *sorted(PROTECTED_PATHS.agent_dirs), *sorted(PROTECTED_PATHS.agent_files)):
        read_only(name)
    for pattern in policy.protected_paths:
        read_only(_codex_path(PermissionRule("deny", "edit", pattern), cwd, home))
    for pattern in _WORKSPACE_SECRETS:
        roots[pattern] = "none"
    credentials = sorted(PROTECTED_PATHS.credential_dirs | PROTECTED_PATHS.credential_files)
    for name in credentials + list(PROTECTED_PATHS.credential_home):
        if os.path.lexists(home / name):
            outside[str(home / name)] = "none"
    for root in policy.extra_roots:
        outside[str(Path(root).expanduser())] = "write"
    prefixes: list[tuple[Any, ...]] = list(SAFETY_PREFIXES)
    for rule in policy.rules:
        if rule.effect == "allow":
            continue  # what is allowed runs in the sandbox anyway
        if rule.kind in ("read", "edit"):
            if rule.matches_all:
                if rule.kind == "read":
                    raise cannot_compile("codex-cli", f"{rule}: Codex cannot work without reading")
                roots["."] = "read"
                continue
            access = "none" if rule.kind == "read" else "read"
            path = _codex_path(rule, cwd, home)
            if path.startswith("/"):
                outside[path] = access if access == "none" or outside.get(path) != "none" else "none"
            elif access == "read":
                read_only(path)
            elif any(ch in path for ch in "*?[") or os.path.lexists(cwd / path):
                # A glob matches what exists when a command starts; what does not exist has
                # nothing to read (and naming it would make Codex mount over it).
                roots[path] = "none"
        elif rule.kind == "shell":
            prefixes.append(_codex_prefix(rule))
        else:
            raise cannot_compile("codex-cli", f"the permission rule {rule}")
    filesystem: dict[str, Any] = {**outside, ":project_roots": roots, "glob_scan_max_depth": 8}
    config: dict[str, Any] = {"default_permissions": PROFILE, f"permissions.{PROFILE}.filesystem": filesystem}
    rules = "".join(f"prefix_rule(pattern={json.dumps(_pattern(p))}, decision=\"forbidden\", "
                    f"justification={json.dumps(_justification(p))})\n" for p in prefixes)
    return config, rules, missing


def _pattern(prefix: tuple[Any, ...]) -> list[Any]:
    return [list(token) if isinstance(token, tuple) else token for token in prefix]


def _justification(prefix: tuple[Any, ...]) -> str:
    words = " ".join(token if isinstance(token, str) else "|".join(token) for token in prefix)
    return f"agenter's permission policy forbids `{words}`. Do not retry it; do the task another way."


def _entry(path: str, cwd: Path) -> str | None:
    """A workspace path kept read-only, as the profile can name it: the path itself when it (for
    `folder/**`, the folder) exists or it holds a wildcard, else None. Codex 0.169 takes only
    exact paths and `folder/**` for read-only entries, and mounts over one that is missing, which
    leaves an empty file or folder behind in the workspace and breaks `exec resume`."""
    if path == ".":
        return path
    base = path[:-3] if path.endswith("/**") else path
    if any(ch in base for ch in "*?["):
        return path  # Codex refuses it at start-up, naming the pattern
    return path if os.path.lexists(cwd / base) else None


def _codex_path(rule: PermissionRule, cwd: Path, home: Path, *, directory: bool = False) -> str:
    """A path rule's pattern as a permission-profile entry: relative to the workspace, or absolute."""
    pattern = path_pattern(rule, home, "codex-cli")
    anchored = pattern.startswith(("/", "./"))
    if pattern.startswith("/"):
        root = str(cwd).rstrip("/") + "/"
        if not pattern.startswith(root):
            return pattern.rstrip("/") if not pattern.endswith("/**") else pattern[:-3]
        pattern = pattern[len(root):]
    pattern = pattern[2:] if pattern.startswith("./") else pattern
    if not anchored and "/" not in pattern.rstrip("/") and not pattern.startswith("**"):
        pattern = "**/" + pattern  # gitignore: a bare name matches at any depth
    pattern = pattern.strip("/")
    if pattern.endswith("/**"):
        pattern = pattern[:-3]  # the directory itself covers what is under it
    if directory and any(ch in pattern for ch in "*?["):
        raise cannot_compile("codex-cli", f"{rule}: Codex makes directories writable, not glob patterns")
    return pattern or "."


def _codex_prefix(rule: PermissionRule) -> tuple[str, ...]:
    """A shell rule as an exec-policy prefix. Codex matches whole argv words: a `*` at the end of
    the pattern (or of its last word) is dropped; any other wildcard cannot be compiled."""
    try:
        words = shlex.split(rule.pattern)
    except ValueError:
        words = rule.pattern.split()
    while words and words[-1] == "*":
        words.pop()
    if words and words[-1].endswith("*"):
        words[-1] = words[-1].rstrip("*")
    if not words or rule.matches_all or any(ch in word for word in words for ch in "*?"):
        what = "the shell as a whole" if rule.matches_all else f"the wildcard in {rule.pattern!r}"
        raise cannot_compile("codex-cli", f"{rule}: Codex's rules files cannot express {what}")
    return tuple(words)


def sets_sandbox_mode(config_file: Path) -> bool:
    """Whether a Codex config file sets sandbox_mode (which makes Codex ignore permission profiles)."""
    try:
        data = tomllib.loads(config_file.read_text())
    except (OSError, ValueError):
        return False
    profiles = data.get("profiles")
    named = profiles.values() if isinstance(profiles, dict) else ()
    return "sandbox_mode" in data or any(isinstance(p, dict) and "sandbox_mode" in p for p in named)
