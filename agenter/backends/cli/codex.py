"""codex-cli: OpenAI's Codex CLI, `codex exec --json` (and `codex exec resume <id>`).

The prompt goes through stdin (`-`), never a terminal. sandbox=True is Codex's workspace-write
sandbox, checked once per program before the first run (a machine where it cannot work fails at
connect, not command by command); sandbox=False is danger-full-access. Approvals are never asked
for (exec is headless). Structured output uses --output-schema, resume `exec resume <thread id>`.
With base_url, agenter adds a model provider entry through `-c` overrides, so your own
~/.codex/config.toml is read but never changed.

A permission policy (sandbox=True only) is compiled to a permission profile and an exec-policy
rules file that Codex enforces by itself (`_policy/codex.py`). Codex loads rules files only from
$CODEX_HOME/rules, so the run gets a CODEX_HOME of its own in the scratch directory whose entries
link to the real one (login, config, sessions). See docs/backends/cli.md. The diffs of file
changes come from the thread's rollout file (`_codex_rollout.py`); what agenter knows of Codex
itself, shared with the codex backend, is `_programs/codex.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from agenter._errors import ConfigurationError
from agenter.backends._programs.codex import (
    API_KEY_ENV_VAR,
    CREDENTIALS,
    INSTALL,
    PROVIDER_NAME,
    check_sandbox,
    env_api_key,
    provider_entry,
    sandbox_bin,
    sandbox_config,
    token_usage,
    toml_value,
)
from agenter.backends._prompts import OutputChannel, strict_schema
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState, table
from agenter.backends.cli._codex_rollout import Rollout, change_counts
from agenter.backends.cli._policy.codex import (
    CODEX_MOUNTS,
    PROFILE,
    codex_permissions,
    compile_policy,
    left_by_mount,
    mount_points,
    sets_sandbox_mode,
)
from agenter.backends.cli._runner import Invocation, Line
from agenter.host.requirements import Credentials
from agenter.permissions import PermissionPolicy
from agenter.sandbox.paths import is_within
from agenter.usage import RunningTotal

__all__ = ["CodexCliBackend", "CodexCliOptions"]


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
    credentials: ClassVar[Credentials | None] = CREDENTIALS
    auto_rank: ClassVar[int | None] = 40
    program: ClassVar[str] = "codex"
    install: ClassVar[str] = INSTALL
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, mcp=True,
        filesystem_read=True, filesystem_edit=True, shell=True, apply_patch=True, sandbox=True, resume=True)
    options_model: ClassVar[type[CodexCliOptions]] = CodexCliOptions
    price_provider: ClassVar[str | None] = "openai"
    output_channel: ClassVar[OutputChannel] = "native"
    live_usage: ClassVar[bool] = False  # exec reports usage when its turn ends
    shell_tools: ClassVar[frozenset[str]] = frozenset({"shell"})
    #: Compiled to a permission profile and a rules file (codex_permissions); sandbox=True only.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        """Every config value must be one TOML can hold: Codex would read anything else as a string."""
        super().validate_settings(settings)
        options = settings.options
        for parameter, values in (("codex_config", options.codex_config), ("mcp_servers", options.mcp_servers)):
            for key, value in values.items():
                try:
                    toml_value(value)
                except TypeError as exc:
                    raise ConfigurationError(f"{parameter}[{key!r}]: {exc}; use strings, numbers, booleans, "
                                             "lists and tables", parameter=parameter) from None

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
            if sets_sandbox_mode(config_file):
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
        """A turn under the policy's profile as the workspace is now. The folders Codex's
        sandbox mounts over in the writable workspace (`mount_points`) that are missing are
        made before Codex starts and stay for the whole turn: Codex would make and remove them
        around each sandboxed command, and another command starting meanwhile can fail on one
        that vanished (see mount_points). When the turn ends (the run is stopped first, so
        Codex and what it started have exited), what is left is tidied up: those folders, the
        empty files and folders its sandbox mounts over other missing paths (Codex 0.169 can
        leave them in the workspace), and a path the policy keeps read-only that did not exist
        (so the profile could not name it) and that the turn created: removed, and recorded as
        a denial."""
        policy = self.settings.permissions
        unmasked: list[str] = []
        absent: list[str] = []
        held: list[str] = []
        if policy is not None:
            self._policy_config, _, unmasked = compile_policy(policy, Path(self.cwd), self._policy_home())
            mounts = mount_points(self._policy_config, Path(self.cwd))
            absent = [p for p in dict.fromkeys([*unmasked, *CODEX_MOUNTS, *mounts])
                      if not os.path.lexists(os.path.join(self.cwd, p))]
            held = [p for p in mounts if p in absent]
        try:
            self._hold(held)
            # aclosing: when this turn is closed early (a budget, the consumer stopping), the
            # run is stopped, and what it started ended, before anything below is removed.
            async with contextlib.aclosing(super()._turn(prompt)) as messages:  # type: ignore[type-var]
                async for message in messages:
                    yield message
        finally:
            self._deny_refused()
            if absent:  # in a thread: removing a folder the agent filled may take a while
                await asyncio.to_thread(self._tidy, absent, set(unmasked))

    def _hold(self, paths: list[str]) -> None:
        """Make the missing mount points `paths` (empty folders) for the turn (see _turn); one
        that cannot be made is left to Codex, as before."""
        cwd = os.path.realpath(self.cwd)
        for rel in paths:
            target = os.path.normpath(os.path.join(cwd, rel))
            if is_within(target, cwd) and is_within(os.path.realpath(os.path.dirname(target)), cwd):
                with contextlib.suppress(OSError):
                    os.mkdir(target)

    def _deny_refused(self) -> None:
        """The calls Codex refused by itself this run (its rules, its sandbox or permission
        profile) as denials: `codex exec --json` makes no item of them, its rollout has them."""
        for refused in self._rollout.refused(self._sessions(), self._session_id):
            targets = refused.targets if refused.tool == "shell" else [self.relative(t) or t for t in refused.targets]
            self.deny(refused.tool, ", ".join(targets), refused.reason, refused.rule)

    def _tidy(self, absent: list[str], unmasked: set[str]) -> None:
        """Remove what the turn made of the paths that were `absent` when it began (see _turn),
        the mount points _hold made included (still empty: Codex keeps them read-only)."""
        cwd = os.path.realpath(self.cwd)
        for rel in absent:
            target = os.path.normpath(os.path.join(cwd, rel))
            if not is_within(target, cwd) or not os.path.lexists(target):
                continue
            left_by_codex = left_by_mount(target)
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
            self._bin_dir = sandbox_bin(str(self.executable), self.scratch / "bin", os.environ, backend=self.name)
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
            argv += ["-c", f"{key}={toml_value(value)}"]
        if self.settings.model:
            argv += ["-m", self.settings.model]
        if self.spec.output_type is not None:
            schema = strict_schema(self.spec.output_type.model_json_schema())
            argv += ["--output-schema", str(self.scratch_file("schema.json", json.dumps(schema)))]
        argv += opts.program_args
        if resume:
            argv.append(resume)
        argv.append("-")
        variables = {**self._path(), API_KEY_ENV_VAR: self._key(), "CODEX_API_KEY": self.api_key(),
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
            # Dotted keys: each setting overrides one of the user's config, not its whole table.
            sandbox = sandbox_config(self.settings.sandbox, opts.codex_network_access)
            config = {"sandbox_mode": sandbox["sandbox_mode"], "approval_policy": "never",
                      **{f"sandbox_workspace_write.{key}": value
                         for key, value in sandbox["sandbox_workspace_write"].items()}}
        if opts.base_url:
            config[f"model_providers.{PROVIDER_NAME}"] = provider_entry(
                opts.base_url, opts.codex_wire_api, max_retries=opts.max_retries, env_key=bool(self._key()))
            config["model_provider"] = PROVIDER_NAME
        if opts.codex_reasoning_effort:
            config["model_reasoning_effort"] = opts.codex_reasoning_effort
        for name, server in opts.mcp_servers.items():
            config[f"mcp_servers.{name}"] = server
        config.update(opts.codex_config)
        return config

    def _key(self) -> str | None:
        if not self.options.base_url:
            return None
        return self.api_key() or env_api_key({**os.environ, **self.options.env})

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
            self.settle(self._thread_usage.usage(token_usage(event.get("usage"))))
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
