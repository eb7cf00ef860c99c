"""codex-cli: OpenAI's Codex CLI, `codex exec --json` (and `codex exec resume <id>`).

The prompt goes through stdin (`-`), never a terminal. sandbox=True is Codex's workspace-write
sandbox, checked once per program before the first run (a machine where it cannot work fails at
connect, not command by command); sandbox=False is danger-full-access. Approvals are never asked
for (exec is headless). Structured output uses --output-schema, resume `exec resume <thread id>`.
With base_url, agenter adds a model provider entry through `-c` overrides, so your own
~/.codex/config.toml is read but never changed.

A permission policy (sandbox=True only) is compiled to two things Codex enforces by itself:
a permission profile for its sandbox (`default_permissions`: the workspace writable or read-only
by the mode, `.git` and agent settings read-only, credentials and denied read paths unreadable,
denied edit paths read-only, network off) and an exec-policy rules file (`prefix_rule(...,
decision="forbidden")`) for denied command prefixes and destructive git commands. Codex loads
rules files only from $CODEX_HOME/rules, so the run gets a CODEX_HOME of its own in the scratch
directory whose entries link to the real one (login, config, sessions). See docs/backends/cli.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sys
import tomllib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter.backends._edits import diff_counts, line_count
from agenter.backends._programs.codex import CREDENTIALS as CODEX_CREDENTIALS
from agenter.backends._programs.codex import check_sandbox, prepare_sandbox_bin
from agenter.backends._prompts import strict_schema
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState, table
from agenter.backends.cli._runner import Invocation, Line
from agenter.host.requirements import Credentials
from agenter.permissions import PROTECTED_PATHS, PermissionPolicy, PermissionRule
from agenter.sandbox.paths import is_within
from agenter.usage import RunningTotal

__all__ = ["CodexCliBackend", "CodexCliOptions"]

#: The provider entry agenter adds for base_url, and the variable carrying its key.
PROVIDER = "agenter"
KEY_VARIABLE = "AGENTER_CODEX_API_KEY"


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


def codex_permissions(policy: PermissionPolicy, cwd: Path, home: Path) -> tuple[dict[str, Any], str]:
    """A policy as Codex's own enforcement: (config overrides selecting a permission profile,
    the text of an exec-policy rules file). ConfigurationError for what neither can express.

    Read-only entries name only what exists: Codex 0.169 keeps a missing path from being created
    by mounting over it, which leaves empty files and folders in the workspace and makes
    `exec resume` fail; `unmasked_paths` lists the ones left out (the backend removes what a
    turn creates there)."""
    config, rules, _ = _compile(policy, cwd, home)
    return config, rules


def unmasked_paths(policy: PermissionPolicy, cwd: Path, home: Path) -> list[str]:
    """Workspace paths the policy keeps read-only that do not exist, so the profile cannot name
    them (see codex_permissions)."""
    return _compile(policy, cwd, home)[2]


def _compile(policy: PermissionPolicy, cwd: Path, home: Path) -> tuple[dict[str, Any], str, list[str]]:
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
                    raise ConfigurationError(f"the codex-cli backend cannot compile {rule}: Codex cannot work without "
                                             "reading", parameter="permissions")
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
            raise ConfigurationError(f"the codex-cli backend cannot compile the permission rule {rule}",
                                     parameter="permissions")
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


#: Folders Codex's sandbox keeps read-only in a writable workspace whatever the profile says; a
#: missing one it mounts over, leaving an empty folder behind.
_CODEX_MOUNTS = (".git", ".codex", ".agents", ".aws")


def _empty(path: str) -> bool:
    """An empty regular file or an empty folder (what a sandbox's mount point leaves)."""
    try:
        if os.path.islink(path):
            return False
        if os.path.isdir(path):
            return not os.listdir(path)
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:
        return False


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
    pattern = rule.pattern
    if pattern.startswith("!"):
        raise ConfigurationError(f"the codex-cli backend cannot compile the negated pattern in {rule}",
                                 parameter="permissions")
    if pattern == "~" or pattern.startswith("~/"):
        pattern = str(home) + pattern[1:]
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
        raise ConfigurationError(f"the codex-cli backend cannot compile {rule}: Codex makes directories "
                                 "writable, not glob patterns", parameter="permissions")
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
        raise ConfigurationError(f"the codex-cli backend cannot compile {rule}: Codex's rules files cannot "
                                 f"express {what}", parameter="permissions")
    return tuple(words)


def _sandbox_mode_in(config_file: Path) -> bool:
    """Whether a Codex config file sets sandbox_mode (which makes Codex ignore permission profiles)."""
    try:
        data = tomllib.loads(config_file.read_text())
    except (OSError, ValueError):
        return False
    profiles = data.get("profiles")
    named = profiles.values() if isinstance(profiles, dict) else ()
    return "sandbox_mode" in data or any(isinstance(p, dict) and "sandbox_mode" in p for p in named)


class CodexCliOptions(CliOptions):
    """Options of the codex-cli backend."""

    codex_wire_api: Literal["responses", "chat"] = Field(
        "responses", description="The API the base_url endpoint speaks.")
    codex_reasoning_effort: Literal["minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, description="model_reasoning_effort; None: Codex's default.")
    codex_network_access: bool = Field(
        False, description="Whether sandboxed commands may use the network.")
    codex_config: dict[str, Any] = Field(
        default_factory=dict, description="More config overrides, as -c dotted.key=value (values as TOML).")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="MCP servers in Codex's mcp_servers config format.")


class CodexCliBackend(CliBackend[CodexCliOptions]):
    name: ClassVar[str] = "codex-cli"
    credentials: ClassVar[Credentials | None] = CODEX_CREDENTIALS
    auto_rank: ClassVar[int | None] = 40
    program: ClassVar[str] = "codex"
    install: ClassVar[str] = "npm install -g @openai/codex"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, mcp=True,
        filesystem_read=True, filesystem_edit=True, shell=True, apply_patch=True, sandbox=True, resume=True)
    options_model: ClassVar[type[CodexCliOptions]] = CodexCliOptions
    price_provider: ClassVar[str | None] = "openai"
    output_channel = "native"
    live_usage = False  # exec reports usage when its turn ends
    shell_tools: ClassVar[frozenset[str]] = frozenset({"shell"})
    #: Compiled to a permission profile and a rules file (codex_permissions); sandbox=True only.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})

    @classmethod
    def check_permissions(cls, settings: BackendSettings[Any]) -> None:
        super().check_permissions(settings)
        if settings.permissions is not None and not settings.sandbox:
            raise ConfigurationError(
                "the codex-cli backend enforces a permission policy through Codex's sandbox: pass sandbox=True "
                "(with sandbox=False Codex runs unconfined and nothing would hold)", parameter="permissions")
        if settings.permissions is not None:
            codex_permissions(settings.permissions, Path.cwd(), Path.home())  # what it cannot express fails now

    def __init__(self, settings: BackendSettings[CodexCliOptions]):
        super().__init__(settings)
        self._bin_dir: Path | None = None
        self._rollout = Rollout()
        # File changes whose diffs the rollout did not hold yet: (item id, changes, the item).
        self._unsettled: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = []
        self._tmp: Path | None = None
        self._thread_usage = RunningTotal()
        self._codex_home: Path | None = None
        self._policy_config: dict[str, Any] = {}

    def real_codex_home(self) -> Path:
        """The CODEX_HOME the user's runs use (the `home` option, else $CODEX_HOME, else ~/.codex)."""
        if self.home_dir is not None:
            return self.home_dir
        given = self.options.env.get("CODEX_HOME") or os.environ.get("CODEX_HOME")
        return Path(given).expanduser() if given else Path.home() / ".codex"

    def _compile_policy(self, policy: PermissionPolicy) -> None:
        """The policy's profile (for config()) and rules file, in a CODEX_HOME of this session's:
        its entries link to the real one's (login, config, sessions, the user's own rules)."""
        real = self.real_codex_home()
        for config_file in (real / "config.toml", Path(self.cwd) / ".codex" / "config.toml"):
            if _sandbox_mode_in(config_file):
                raise ConfigurationError(
                    f"{config_file} sets sandbox_mode, which makes Codex ignore the permission profile agenter "
                    "compiles the policy to; remove it to use permissions= with the codex-cli backend",
                    parameter="permissions")
        self._policy_config, rules = codex_permissions(policy, Path(self.cwd), self._policy_home())
        overlay = self.scratch / "codex-home"
        (overlay / "rules").mkdir(parents=True)
        (real / "sessions").mkdir(parents=True, exist_ok=True)  # linked, so sessions outlive the scratch dir
        if real.is_dir():
            for entry in real.iterdir():
                # Not the thread databases: they would record this home's paths, which end with
                # the session; Codex finds a thread's rollout in sessions/ without them.
                if entry.name != "rules" and ".sqlite" not in entry.name:
                    (overlay / entry.name).symlink_to(entry)
            if (real / "rules").is_dir():
                for entry in (real / "rules").iterdir():
                    (overlay / "rules" / entry.name).symlink_to(entry)
        (overlay / "rules" / "zz-agenter.rules").write_text(rules)
        self._codex_home = overlay

    def _policy_home(self) -> Path:
        return self.home_dir or Path.home()

    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        """A turn under the policy's profile as the workspace is now. When it ends, what Codex
        left behind is tidied up: the empty files and folders its sandbox mounts over missing
        paths to keep them from being created (Codex 0.169 leaves them in the workspace), and a
        path the policy keeps read-only that did not exist (so the profile could not name it)
        and that the turn created: removed, and recorded as a denial."""
        policy = self.settings.permissions
        unmasked: list[str] = []
        absent: list[str] = []
        if policy is not None:
            self._policy_config, _, unmasked = _compile(policy, Path(self.cwd), self._policy_home())
            absent = [p for p in dict.fromkeys([*unmasked, *_CODEX_MOUNTS])
                      if not os.path.lexists(os.path.join(self.cwd, p))]
        try:
            async for message in super()._turn(prompt):
                yield message
        finally:
            if absent:  # in a thread: removing a folder the agent filled may take a while
                await asyncio.to_thread(self._tidy, absent, set(unmasked))

    def _tidy(self, absent: list[str], unmasked: set[str]) -> None:
        """Remove what the turn made of the paths that were `absent` when it began (see _turn)."""
        cwd = os.path.realpath(self.cwd)
        for rel in absent:
            target = os.path.normpath(os.path.join(cwd, rel))
            if not is_within(target, cwd) or not os.path.lexists(target):
                continue
            left_by_codex = _empty(target)
            if not left_by_codex and rel not in unmasked:
                continue  # not the policy's: the agent's own
            try:
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target)
                else:
                    os.unlink(target)
            except OSError as exc:
                if not left_by_codex:
                    self.deny("write", rel, f"the policy keeps {rel!r} read-only; the agent created it and it "
                                            f"could not be removed ({exc.strerror})", "safety")
                continue
            if not left_by_codex:
                self.deny("write", rel, f"the policy keeps {rel!r} read-only; the agent created it, so it was "
                                        "removed when the turn ended", "safety")

    async def prepare(self) -> None:
        policy = self.settings.permissions
        if policy is not None:
            self._compile_policy(policy)
        if self.settings.sandbox:
            self._tmp = self.scratch / "tmp"
            self._tmp.mkdir()
        if self.settings.sandbox and sys.platform.startswith("linux"):
            problem = prepare_sandbox_bin(str(self.executable), self.scratch / "bin", os.environ)
            if problem:
                raise BackendError(f"Codex's sandbox cannot run: {problem}. Pass program_path pointing at a "
                                   "standard npm install of @openai/codex, or sandbox=False.",
                                   backend=self.name, kind="config")
            if (self.scratch / "bin").is_dir():
                self._bin_dir = self.scratch / "bin"
            env = self.environment(**self._path())
            if self.home_dir is not None:
                env["CODEX_HOME"] = str(self.home_dir)
            if self._codex_home is not None:
                env["CODEX_HOME"] = str(self._codex_home)
            await check_sandbox(str(self.executable), env, self.scratch, backend=self.name)

    def _path(self) -> dict[str, str]:
        if self._bin_dir is None:
            return {}
        return {"PATH": os.pathsep.join([str(self._bin_dir), self.options.env.get("PATH", os.environ.get("PATH", ""))])}

    # ------------------------------------------------------------------ command
    def command(self, prompt: str) -> Invocation:
        opts = self.options
        argv = [str(self.executable), "exec"]
        resume = self.resume_id()
        self._rollout.start(self._sessions(), resume)
        self._unsettled = []
        if resume:
            argv.append("resume")
        argv += ["--json", "--skip-git-repo-check", "--disable", "unbounded_connection_retries"]
        for key, value in self.config().items():
            argv += ["-c", f"{key}={_toml(value)}"]
        if self.settings.model:
            argv += ["-m", self.settings.model]
        if self.spec.output_type is not None:
            schema = strict_schema(self.spec.output_type.model_json_schema())
            argv += ["--output-schema", str(self.scratch_file("schema.json", json.dumps(schema)))]
        argv += opts.program_args
        if resume:
            argv.append(resume)
        argv.append("-")
        variables = {**self._path(), KEY_VARIABLE: self._key(), "CODEX_API_KEY": self.api_key(),
                     "TMPDIR": str(self._tmp) if self._tmp else None}
        if self.home_dir is not None:
            variables["CODEX_HOME"] = str(self.home_dir)
        if self._codex_home is not None:
            variables["CODEX_HOME"] = str(self._codex_home)
        return Invocation(argv=argv, env=self.environment(**variables), stdin=prompt.encode())

    def config(self) -> dict[str, Any]:
        """Config overrides for this run, as dotted keys."""
        opts = self.options
        config: dict[str, Any]
        if self._policy_config:
            # A permission profile replaces sandbox_mode (Codex ignores the profile when both are set).
            config = {"approval_policy": "never", **self._policy_config}
            if opts.codex_network_access:
                config[f"permissions.{PROFILE}.network.enabled"] = True
        else:
            config = {
                "sandbox_mode": "workspace-write" if self.settings.sandbox else "danger-full-access",
                "approval_policy": "never",
                "sandbox_workspace_write.network_access": opts.codex_network_access,
                # Writable: the workspace and the run's own TMPDIR, not all of /tmp.
                "sandbox_workspace_write.exclude_slash_tmp": True,
                "sandbox_workspace_write.exclude_tmpdir_env_var": False,
            }
        if opts.base_url:
            provider: dict[str, Any] = {"name": PROVIDER, "base_url": opts.base_url, "wire_api": opts.codex_wire_api}
            if self._key():
                provider["env_key"] = KEY_VARIABLE
            if opts.max_retries is not None:
                provider["request_max_retries"] = provider["stream_max_retries"] = opts.max_retries
            config[f"model_providers.{PROVIDER}"] = provider
            config["model_provider"] = PROVIDER
        if opts.codex_reasoning_effort:
            config["model_reasoning_effort"] = opts.codex_reasoning_effort
        for name, server in opts.mcp_servers.items():
            config[f"mcp_servers.{name}"] = server
        config.update(opts.codex_config)
        return config

    def _key(self) -> str | None:
        if not self.options.base_url:
            return None
        env = {**os.environ, **self.options.env}
        return self.api_key() or env.get("CODEX_API_KEY") or env.get("OPENAI_API_KEY")

    # ------------------------------------------------------------------ events
    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        event = line.data
        if event is None:
            return []
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self._session_id = event["thread_id"]
        elif kind in ("item.started", "item.updated", "item.completed"):
            return self._item(event.get("item") or {}, turn, done=kind == "item.completed")
        elif kind == "turn.completed":
            turn.finished = True
            # The figures count the whole thread, earlier runs of a resumed one included.
            self.settle(self._thread_usage.usage(_usage(event.get("usage"))))
        elif kind == "turn.failed":
            turn.finished = True
            error = event.get("error") or {}
            turn.fail(self.redact(str(error.get("message", "the turn failed"))))
        elif kind == "error":
            # Also sent for retries ("Reconnecting... 2/5"); the turn fails only with turn.failed.
            return [BackendMessage(MessageType.ERROR, self.redact(str(event.get("message", ""))), is_error=True)]
        return []

    def _item(self, item: dict[str, Any], turn: TurnState, *, done: bool) -> list[BackendMessage]:
        kind, item_id = item.get("type"), item.get("id")
        if kind == "agent_message" and done:
            return [self.text_message(str(item.get("text", "")), turn)]
        if kind == "reasoning" and done:
            return [BackendMessage(MessageType.THINKING, self.redact(str(item.get("text", ""))))]
        if kind == "todo_list":
            return [BackendMessage(MessageType.PLAN, self.redact(json.dumps(item.get("items", []))))]
        if kind == "error":
            return [BackendMessage(MessageType.ERROR, self.redact(str(item.get("message", ""))), is_error=True)]
        if kind == "command_execution":
            if not done:
                return [self.call_message("shell", {"command": item.get("command")}, item_id, raw=item)]
            code = item.get("exit_code")
            failed = item.get("status") == "failed" or code not in (0, None)
            return [self.result_message("shell", str(item.get("aggregated_output", "")), item_id, failed=failed,
                                        exit_code=code if isinstance(code, int) else None, raw=item)]
        if kind == "file_change":
            changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
            if not done:
                return [self.call_message("apply_patch", {"changes": changes}, item_id, raw=item)]
            failed = item.get("status") == "failed"
            out = [self.result_message("apply_patch", "failed" if failed else "applied", item_id, failed=failed,
                                       raw=item)]
            if not failed:
                out += self._edits(str(item_id), changes, item, final=False)
            return out
        if kind == "mcp_tool_call":
            name = f"{item.get('server')}.{item.get('tool')}"
            if not done:
                return [self.call_message(name, table(item.get("arguments")), item_id, raw=item)]
            return [self.result_message(name, json.dumps(item.get("result")), item_id,
                                        failed=item.get("status") == "failed", raw=item)]
        return []

    def _edits(self, item_id: str, changes: list[dict[str, Any]], item: dict[str, Any], *,
               final: bool) -> list[BackendMessage]:
        """FILE_EDITs of one file_change, one per file. `codex exec --json` names each file and
        its kind only; the diffs are in the thread's rollout file, which Codex writes beside its
        output. A change not in it yet waits for the end of the run (`final`), when it is."""
        diffs = self._rollout.take(self._sessions(), self._session_id, [str(c.get("path")) for c in changes])
        if diffs is None and not final:
            self._unsettled.append((item_id, changes, item))
            return []
        out = []
        for change in changes:
            path = str(change.get("path"))
            recorded = table((diffs or {}).get(path))
            added, removed = change_counts(recorded, change, Path(self.cwd) / path)
            # The raw record leaves out an added or deleted file's whole text.
            raw = {**change, **{key: value for key, value in recorded.items() if key != "content"}}
            out.append(self.edit_message(path, "apply_patch", added=added, removed=removed, call_id=item_id,
                                         deleted=change.get("kind") == "delete", raw=raw))
        return out

    def last_messages(self, turn: TurnState) -> list[BackendMessage]:
        unsettled, self._unsettled = self._unsettled, []
        out = [m for item_id, changes, item in unsettled for m in self._edits(item_id, changes, item, final=True)]
        return out + super().last_messages(turn)

    def _sessions(self) -> Path:
        return (self._codex_home or self.real_codex_home()) / "sessions"


def change_counts(recorded: dict[str, Any], change: dict[str, Any], path: Path) -> tuple[int, int]:
    """Lines added and removed by one file of a file_change: from the rollout's record of it (the
    added or deleted text, an update's unified diff); without one, an added file's lines as it is
    now, and for an update or a delete whatever the record lacks counts as none."""
    kind = recorded.get("type") or change.get("kind")
    if kind == "add":
        content = recorded.get("content")
        if not isinstance(content, str):
            try:
                content = path.read_text(errors="replace")
            except OSError:
                content = ""
        return line_count(content), 0
    if kind == "delete":
        return 0, line_count(recorded.get("content"))
    diff = recorded.get("unified_diff")
    return diff_counts(diff) if isinstance(diff, str) else (0, 0)


class Rollout:
    """The file changes Codex records in a thread's rollout (sessions/.../rollout-*-<thread>.jsonl),
    read on from where the last look stopped. `codex exec --json` numbers its items itself
    (item_0, ...), so a record is matched to an item by its files, in order."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._offset = 0
        self._records: list[dict[str, Any]] = []

    def start(self, sessions: Path, thread: str | None) -> None:
        """A new run: records already in a resumed thread's rollout are earlier runs'."""
        self._path, self._offset, self._records = None, 0, []
        if thread is not None and self._locate(sessions, thread) is not None:
            with contextlib.suppress(OSError):
                self._offset = os.path.getsize(str(self._path))

    def take(self, sessions: Path, thread: str | None, paths: list[str]) -> dict[str, Any] | None:
        """The record (path → {type, content | unified_diff}) of the run's next change of exactly
        `paths`; None when the rollout holds none (yet)."""
        if thread is not None and self._locate(sessions, thread) is not None:
            self._read()
        for index, record in enumerate(self._records):
            if sorted(record) == sorted(paths):
                return self._records.pop(index)
        return None

    def _locate(self, sessions: Path, thread: str) -> Path | None:
        if self._path is None:
            found = sorted(sessions.glob(f"*/*/*/rollout-*-{thread}.jsonl"))
            self._path = found[-1] if found else None
        return self._path

    def _read(self) -> None:
        assert self._path is not None
        try:
            with open(self._path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(whole)
        for line in whole.splitlines():
            if b'"FileChange"' not in line or b'"item_completed"' not in line:
                continue
            try:
                item = table(table(table(json.loads(line)).get("payload")).get("item"))
            except ValueError:
                continue
            if item.get("type") == "FileChange":
                self._records.append(table(item.get("changes")))


def _usage(raw: Any) -> Usage:
    """Codex counts cached input inside input_tokens; agenter counts it apart."""
    raw = table(raw)

    def number(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, int | float) else 0

    cached = number("cached_input_tokens")
    return Usage(input_tokens=max(number("input_tokens") - cached, 0), output_tokens=number("output_tokens"),
                 cache_read_tokens=cached, cache_write_tokens=number("cache_write_input_tokens"))


def _toml(value: Any) -> str:
    """One TOML value for -c (JSON strings, numbers and booleans are TOML too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)
