"""The declarative policy: tool calls, rules, modes.

A rule is `<effect> <kind>[:<pattern>]`, e.g. `deny shell:git push --force*`, `ask shell:npm
publish`, `allow edit:src/**`, `deny read:~/.aws/**`, `allow network:github.com`,
`deny mcp:github/delete_*`, `allow custom:lookup_*`. A policy is rules plus a mode; its text form
has one rule or setting per line (`mode accept_edits`, `mcp-server NAME`, `root DIR`,
`read-root DIR`, `protect PATTERN`, `# comments`).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast, get_args
from urllib.parse import urlsplit

from agenter._errors import ConfigurationError

__all__ = ["MODES", "TOOL_KINDS", "Effect", "PermissionMode", "PermissionPolicy", "PermissionRule", "ToolCall",
           "ToolKind"]

ToolKind = Literal["read", "edit", "shell", "network", "mcp", "custom"]
Effect = Literal["deny", "ask", "allow"]
PermissionMode = Literal["default", "accept_edits", "bypass", "plan"]

TOOL_KINDS: tuple[str, ...] = get_args(ToolKind)
EFFECTS: tuple[str, ...] = get_args(Effect)
MODES: tuple[str, ...] = get_args(PermissionMode)
_MODE_ALIASES = {"accept-edits": "accept_edits", "acceptedits": "accept_edits", "bypasspermissions": "bypass",
                 "bypass_permissions": "bypass", "read_only": "plan", "read-only": "plan", "readonly": "plan"}


def normalize_mode(value: str) -> PermissionMode:
    text = str(value).strip()
    mode = _MODE_ALIASES.get(text.lower(), text)
    if mode not in MODES:
        raise ConfigurationError(f"unknown permission mode {value!r}", parameter="mode", valid=list(MODES))
    return cast(PermissionMode, mode)


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the permission layer sees it.

    kind: read, edit, shell, network, mcp or custom.
    name: the tool's name as the model called it (Read, Bash, my_tool, github/create_issue).
    paths: files or directories the call reads (kind read) or writes (kind edit; custom and MCP
        tools: read when read_only, else written).
    command: the shell command line (kind shell), or the command that starts an MCP stdio server.
    target: the URL (network) or "server/tool" (mcp).
    input: the raw input, for summaries and tool-specific validation.
    read_only, requires_permission, destructive: what the tool declares (custom and MCP tools);
        the defaults are the fail-closed ones.
    mcp_server: the MCP server's name; with `starts_server` the call starts it (`command` then
        holds its stdio command line).
    validate: tool-specific validation: returns an error message, or None when the input is fine.
    """

    kind: ToolKind
    name: str
    paths: tuple[str, ...] = ()
    command: str | None = None
    target: str | None = None
    input: Mapping[str, Any] = field(default_factory=dict, compare=False)
    read_only: bool = False
    requires_permission: bool = True
    destructive: bool = True
    mcp_server: str | None = None
    starts_server: bool = False
    validate: Callable[[Mapping[str, Any]], str | None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in TOOL_KINDS:
            raise ConfigurationError(f"unknown tool kind {self.kind!r}", parameter="kind", valid=list(TOOL_KINDS))
        if isinstance(self.paths, str):
            object.__setattr__(self, "paths", (self.paths,))
        else:
            object.__setattr__(self, "paths", tuple(self.paths))

    # -- constructors for the built-in kinds

    @classmethod
    def shell(cls, command: str, *, name: str = "Bash", **input: Any) -> ToolCall:
        return cls(kind="shell", name=name, command=command, input={"command": command, **input})

    @classmethod
    def read(cls, *paths: str, name: str = "Read") -> ToolCall:
        return cls(kind="read", name=name, paths=paths, input={"paths": list(paths)}, read_only=True,
                   destructive=False)

    @classmethod
    def edit(cls, *paths: str, name: str = "Edit") -> ToolCall:
        return cls(kind="edit", name=name, paths=paths, input={"paths": list(paths)})

    @classmethod
    def network(cls, url: str, *, name: str = "WebFetch") -> ToolCall:
        return cls(kind="network", name=name, target=url, input={"url": url}, read_only=True, destructive=False)

    @classmethod
    def mcp(cls, server: str, tool: str, input: Mapping[str, Any] | None = None, *, read_only: bool = False,
            destructive: bool | None = None, paths: Iterable[str] = ()) -> ToolCall:
        return cls(kind="mcp", name=f"{server}/{tool}", target=f"{server}/{tool}", input=dict(input or {}),
                   read_only=read_only, destructive=(not read_only) if destructive is None else destructive,
                   mcp_server=server, paths=tuple(paths))

    @classmethod
    def mcp_server_start(cls, server: str, command: str) -> ToolCall:
        return cls(kind="mcp", name=f"start MCP server {server}", command=command, mcp_server=server,
                   starts_server=True, target=server, input={"server": server, "command": command})

    # -- display

    def summary(self, limit: int = 300) -> str:
        """A short one-line description of the input, for events and questions."""
        if self.kind == "shell" or self.starts_server:
            text = self.command or ""
        elif self.paths:
            text = ", ".join(self.paths)
        elif self.target:
            text = self.target
        else:
            import json

            try:
                text = json.dumps(dict(self.input), default=str, ensure_ascii=False)
            except (TypeError, ValueError):
                text = repr(self.input)
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------


_RULE = re.compile(r"^\s*(?P<effect>[A-Za-z]+)\s+(?P<kind>[A-Za-z]+)\s*(?::\s*(?P<pattern>.*?))?\s*$", re.S)


@dataclass(frozen=True)
class PermissionRule:
    """deny / ask / allow a kind of tool call, optionally only where `pattern` matches.

    Patterns: read/edit: gitignore-style paths relative to the workspace (`src/**`, `*.lock`),
    or absolute / `~/` paths; shell: a prefix over the command's words where `*` and `?` are
    wildcards (`git push *` also matches `git push`); network: a host (subdomains included) or a
    URL glob; mcp: `server` or `server/tool` globs; custom: a tool-name glob. No pattern (or `*`)
    matches every call of the kind.
    """

    effect: Effect
    kind: ToolKind
    pattern: str = ""

    def __post_init__(self) -> None:
        if self.effect not in EFFECTS:
            raise ConfigurationError(f"unknown rule effect {self.effect!r} in {self}", parameter="permissions",
                                     valid=list(EFFECTS))
        if self.kind not in TOOL_KINDS:
            raise ConfigurationError(f"unknown tool kind {self.kind!r} in {self}", parameter="permissions",
                                     valid=list(TOOL_KINDS))
        pattern = (self.pattern or "").strip()
        object.__setattr__(self, "pattern", "" if pattern == "*" else pattern)

    @classmethod
    def parse(cls, text: str) -> PermissionRule:
        """`deny shell:git push --force*` → PermissionRule("deny", "shell", "git push --force*")."""
        match = _RULE.match(text or "")
        if not match:
            raise ConfigurationError(f"cannot read permission rule {text!r}: expected '<effect> <kind>[:<pattern>]', "
                                     "e.g. 'deny shell:git push --force*'", parameter="permissions")
        effect = match.group("effect").lower()
        kind = match.group("kind").lower()
        return cls(effect=cast(Effect, effect), kind=cast(ToolKind, kind), pattern=match.group("pattern") or "")

    def __str__(self) -> str:
        return f"{self.effect} {self.kind}:{self.pattern}" if self.pattern else f"{self.effect} {self.kind}"

    @property
    def matches_all(self) -> bool:
        return not self.pattern

    # -- shell

    @cached_property
    def _command_regex(self) -> re.Pattern[str]:
        try:
            words = shlex.split(self.pattern)
        except ValueError:
            words = self.pattern.split()
        while words and words[-1] == "*":
            words.pop()
        body = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in " ".join(words))
        return re.compile(rf"{body}(?: .*)?", re.S)

    def matches_command(self, candidates: Iterable[str]) -> bool:
        """True when one of the command texts (words joined by spaces) matches."""
        if self.matches_all:
            return True
        regex = self._command_regex
        return any(regex.fullmatch(text) for text in candidates)

    # -- network, mcp, custom

    def matches_target(self, value: str | None) -> bool:
        if self.matches_all:
            return True
        if value is None:
            return False
        pattern = self.pattern
        if self.kind == "network":
            if "://" in pattern:
                return fnmatch.fnmatchcase(value, pattern) or fnmatch.fnmatchcase(value, pattern.rstrip("*") + "*")
            host = (urlsplit(value).hostname or value if "://" in value else value.split("/")[0]).lower()
            host = host.split(":")[0]
            pattern = pattern.lower()
            return fnmatch.fnmatchcase(host, pattern) or host.endswith("." + pattern.lstrip("*."))
        if self.kind == "mcp":
            if "/" not in pattern:
                return fnmatch.fnmatchcase(value.split("/")[0], pattern)
            return fnmatch.fnmatchcase(value, pattern)
        return fnmatch.fnmatchcase(value, pattern)

    # -- paths

    def path_spec(self, cwd: str, given_cwd: str, home: str) -> tuple[Any, bool]:
        """(pathspec, absolute): the pattern compiled for paths relative to the workspace, or
        (absolute=True) for absolute paths with the leading '/' removed."""
        import pathspec

        negate = "!" if self.pattern.startswith("!") else ""
        body = self.pattern[len(negate):]
        if body == "~" or body.startswith("~/"):
            body = home + body[1:]
        if body.startswith("/"):
            for root in (cwd, given_cwd):
                prefix = root.rstrip("/") + "/"
                if body.startswith(prefix) or body == root:
                    relative = body[len(prefix):] if body.startswith(prefix) else ""
                    return pathspec.GitIgnoreSpec.from_lines([f"{negate}/{relative}" if relative else "/**"]), False
            return pathspec.GitIgnoreSpec.from_lines([f"{negate}/{body.lstrip('/')}"]), True
        while body.startswith("./"):
            body = "/" + body[2:].lstrip("/")
        return pathspec.GitIgnoreSpec.from_lines([negate + body]), False


# ---------------------------------------------------------------------------------------------


def _as_tuple(value: Any, parameter: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | os.PathLike):
        return (os.fspath(value),)
    try:
        return tuple(os.fspath(v) for v in value)
    except TypeError:
        raise ConfigurationError(f"{parameter} must be a list of strings, got {type(value).__name__}",
                                 parameter=parameter) from None


#: Directories as the constructor takes them: one, or several (str or PathLike).
StrPaths: TypeAlias = "str | os.PathLike[str] | Iterable[str | os.PathLike[str]]"


@dataclass(frozen=True)
class PermissionPolicy:
    """Rules plus a mode, as given to the facade's `permissions=`.

    mode: "default" (ask; with no one to ask, deny), "accept_edits" (file edits in the workspace
        are allowed), "bypass" (everything allowed except what the safety checks stop), "plan"
        (read-only: nothing that changes anything).
    allowed_mcp_servers: names of MCP stdio servers that may be started.
    extra_roots: directories outside the working directory that count as workspace.
    read_roots: directories outside the workspace that may be read (not written).
    protected_paths: gitignore-style patterns whose writes always need a decision, like agent
        settings.
    """

    rules: tuple[PermissionRule, ...] = ()
    mode: PermissionMode = "default"
    allowed_mcp_servers: tuple[str, ...] = ()
    extra_roots: tuple[str, ...] = ()
    read_roots: tuple[str, ...] = ()
    protected_paths: tuple[str, ...] = ()

    if TYPE_CHECKING:  # what the constructor takes (normalized in __post_init__), for type checkers
        def __init__(self, rules: str | PermissionRule | Iterable[str | PermissionRule] = (),
                     mode: str = "default", allowed_mcp_servers: str | Iterable[str] = (),
                     extra_roots: StrPaths = (), read_roots: StrPaths = (),
                     protected_paths: str | Iterable[str] = ()) -> None: ...

    def __post_init__(self) -> None:
        rules: list[PermissionRule] = []
        raw_rules: Any = self.rules
        if isinstance(raw_rules, str | PermissionRule):
            raw_rules = [raw_rules]
        for rule in raw_rules or ():
            if isinstance(rule, PermissionRule):
                rules.append(rule)
            elif isinstance(rule, str):
                if rule.strip() and not rule.strip().startswith("#"):
                    rules.append(PermissionRule.parse(rule))
            else:
                raise ConfigurationError(f"a permission rule must be a string or PermissionRule, got "
                                         f"{type(rule).__name__}", parameter="permissions")
        object.__setattr__(self, "rules", tuple(rules))
        object.__setattr__(self, "mode", normalize_mode(self.mode))
        for name in ("allowed_mcp_servers", "extra_roots", "read_roots", "protected_paths"):
            object.__setattr__(self, name, _as_tuple(getattr(self, name), name))

    def rules_with(self, effect: Effect) -> tuple[PermissionRule, ...]:
        return tuple(rule for rule in self.rules if rule.effect == effect)

    def denies_tool(self, kind: str, name: str) -> bool:
        """True when every call of this tool would be denied by a rule, so a backend can leave
        the tool out of what the model sees: a deny rule for the whole kind, or (custom and MCP
        tools, `name` as "server/tool") one whose pattern matches the name."""
        for rule in self.rules_with("deny"):
            if rule.kind != kind:
                continue
            if rule.matches_all or (kind in ("custom", "mcp") and rule.matches_target(name)):
                return True
        return False

    def with_mode(self, mode: str) -> PermissionPolicy:
        return PermissionPolicy(rules=self.rules, mode=normalize_mode(mode),
                                allowed_mcp_servers=self.allowed_mcp_servers, extra_roots=self.extra_roots,
                                read_roots=self.read_roots, protected_paths=self.protected_paths)

    @classmethod
    def parse(cls, text: str) -> PermissionPolicy:
        """The text form: one rule or setting per line; `#` starts a comment line."""
        rules: list[PermissionRule] = []
        settings: dict[str, Any] = {"allowed_mcp_servers": [], "extra_roots": [], "read_roots": [],
                                    "protected_paths": []}
        keys = {"mcp-server": "allowed_mcp_servers", "root": "extra_roots", "read-root": "read_roots",
                "protect": "protected_paths"}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            head, _, rest = line.partition(" ")
            head = head.lower()
            if head == "mode":
                settings["mode"] = rest.strip()
            elif head in keys:
                if not rest.strip():
                    raise ConfigurationError(f"line {number}: {head!r} needs a value", parameter="permissions")
                settings[keys[head]].append(rest.strip())
            elif head in EFFECTS:
                rules.append(PermissionRule.parse(line))
            else:
                raise ConfigurationError(f"line {number}: cannot read {line!r}; lines are '<deny|ask|allow> "
                                         "<kind>[:<pattern>]', 'mode <mode>', 'mcp-server <name>', 'root <dir>', "
                                         "'read-root <dir>' or 'protect <pattern>'", parameter="permissions")
        return cls(rules=tuple(rules), **settings)

    @classmethod
    def coerce(cls, value: Any) -> PermissionPolicy:
        """Accept what `permissions=` may be given: None, a policy, a mode name, policy text, a list
        of rules, or a dict of the fields."""
        if value is None:
            return cls()
        if isinstance(value, PermissionPolicy):
            return value
        if isinstance(value, PermissionRule):
            return cls(rules=(value,))
        if isinstance(value, str):
            stripped = value.strip()
            if "\n" not in stripped and (stripped.lower() in MODES or stripped.lower() in _MODE_ALIASES):
                return cls(mode=normalize_mode(stripped))
            return cls.parse(value)
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ConfigurationError(f"unknown permission settings {unknown}", parameter="permissions",
                                         valid=sorted(known))
            return cls(**dict(value))
        if isinstance(value, Iterable):
            return cls(rules=tuple(value))
        raise ConfigurationError(f"permissions must be a PermissionPolicy, a mode, rules or a dict, got "
                                 f"{type(value).__name__}", parameter="permissions")
