"""gemini-cli: Google's Gemini CLI, `gemini -p "" -o stream-json` with the prompt on stdin.

Headless Gemini CLI declares its editing and shell tools only when every call is approved, so
it runs with --approval-mode yolo: with sandbox=True inside its own container sandbox
(--sandbox: Docker or Podman, or GEMINI_SANDBOX), with sandbox=False unconfined, as asked.
Settings agenter needs for a run (API-key auth with base_url, retries, MCP servers) go into a
settings.json of its own, your settings merged in, in a home of its own (GEMINI_CLI_HOME,
~/.cache/agenter/gemini-home-<hash>) whose other entries link to your ~/.gemini: your login and
history are used, your files never changed. (Gemini CLI accepts a system settings file only when
root owns it and every folder above it.) Resume: --session-id on the first turn, --resume <id> after it.

A permission policy is compiled to a policy file for Gemini CLI's policy engine, passed with
--admin-policy (`_policy/gemini.py`; see docs/backends/cli.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from agenter._errors import BackendError
from agenter._types import Usage
from agenter.backends._edits import diff_counts, line_count
from agenter.backends._prompts import OutputChannel
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState, table
from agenter.backends.cli._policy.gemini import SYSTEM_POLICIES, gemini_policy
from agenter.backends.cli._runner import Invocation, Line
from agenter.host import Requirement
from agenter.host.requirements import Credentials

__all__ = ["GeminiCliBackend", "GeminiCliOptions"]

#: Gemini CLI's tools that write the file named in their input.
_WRITE_TOOLS = {"write_file": "file_path", "replace": "file_path"}
# How run_shell_command's own account names a non-zero exit ("Exit Code: 3").
_EXIT_CODE = re.compile(r"Exit Code: (-?\d+)")
_SANDBOXES = ("docker", "podman")


class GeminiCliOptions(CliOptions):
    """Options of the gemini-cli backend."""

    gemini_settings: dict[str, Any] = Field(
        default_factory=dict, description="More Gemini CLI settings for agenter's runs (settings.json keys).")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="MCP servers in Gemini CLI's mcpServers format.")


@dataclass(frozen=True)
class _ContainerSandbox(Requirement):
    """A container engine for Gemini CLI's --sandbox (or GEMINI_SANDBOX naming another)."""

    env: dict[str, str]

    def problem(self) -> str | None:
        chosen = self.env.get("GEMINI_SANDBOX", os.environ.get("GEMINI_SANDBOX", ""))
        if chosen not in ("", "true", "1") or any(shutil.which(name) for name in _SANDBOXES):
            return None
        return ("Docker or Podman for Gemini CLI's sandbox (--sandbox); or pass sandbox=False to run "
                "Gemini CLI unconfined")


class GeminiCliBackend(CliBackend[GeminiCliOptions]):
    name: ClassVar[str] = "gemini-cli"
    credentials: ClassVar[Credentials | None] = Credentials(env=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_APPLICATION_CREDENTIALS"),
        files=("$GEMINI_CLI_HOME/.gemini/oauth_creds.json", "~/.gemini/oauth_creds.json"))
    auto_rank: ClassVar[int | None] = 50
    program: ClassVar[str] = "gemini"
    install: ClassVar[str] = "npm install -g @google/gemini-cli"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, mcp=True,
        filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True)
    options_model: ClassVar[type[GeminiCliOptions]] = GeminiCliOptions
    price_provider: ClassVar[str | None] = "google"
    output_channel: ClassVar[OutputChannel] = "text"
    live_usage: ClassVar[bool] = False  # stream-json reports usage in its result
    shell_tools: ClassVar[frozenset[str]] = frozenset({"run_shell_command"})
    #: Compiled to a Gemini CLI policy file (gemini_policy).
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})

    @classmethod
    def check_permissions(cls, settings: BackendSettings[Any]) -> None:
        super().check_permissions(settings)
        if settings.permissions is not None:
            gemini_policy(settings.permissions, Path.cwd(), Path.home())  # what it cannot express fails now

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs = list(super().requirements(settings))
        if settings.sandbox:
            needs.append(_ContainerSandbox(dict(settings.options.env)))
        return needs

    def __init__(self, settings: BackendSettings[GeminiCliOptions]):
        super().__init__(settings)
        self._gemini_home: Path | None = None
        self._new_session: str | None = None
        self._calls: dict[str, tuple[str, str | None]] = {}
        self._inputs: dict[str, dict[str, Any]] = {}
        self._chat_log = ChatLog()
        # Shell and edit results waiting for their exit codes and diffs (see _settle).
        self._held: list[tuple[str, str, str, bool, dict[str, Any]]] = []
        self._policies: Path | None = None

    async def prepare(self) -> None:
        policy = self.settings.permissions
        if policy is not None:
            if any(SYSTEM_POLICIES.glob("*.toml")):
                raise BackendError(
                    f"Gemini CLI ignores --admin-policy while {SYSTEM_POLICIES} holds policies, so agenter's permission "
                    f"policy would not hold; add its rules there, or run without permissions=", backend=self.name,
                    kind="config")
            self._policies = self.scratch / "policies"
            self._policies.mkdir()
            (self._policies / "agenter.toml").write_text(gemini_policy(policy, Path(self.cwd), self.home_dir or Path.home()))
        self._gemini_home = self.home_dir
        overrides = self.settings_overrides()
        if not overrides:
            return
        if self.options.home == "private":  # agenter's own: its settings go in directly
            assert self.home_dir is not None
            self._gemini_home = overlay_home(None, self.home_dir, overrides)
            return
        source = self.home_dir or Path.home()
        digest = hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:12]
        # Kept between sessions (sessions created through it live there too, so resume works),
        # one per set of overrides (concurrent runs with other settings never share one).
        overlay = source / ".cache" / "agenter" / f"gemini-home-{digest}"
        self._gemini_home = await asyncio.to_thread(overlay_home, source / ".gemini", overlay, overrides)

    def settings_overrides(self) -> dict[str, Any]:
        """Settings agenter's runs need on top of the user's ({} when none)."""
        opts = self.options
        ours: dict[str, Any] = {}
        if opts.api_key is not None or opts.base_url:
            # Without it, GOOGLE_GEMINI_BASE_URL makes Gemini CLI pick an auth it then rejects.
            ours["security"] = {"auth": {"selectedType": "gemini-api-key"}}
        if opts.max_retries is not None:
            ours["general"] = {"maxAttempts": min(opts.max_retries + 1, 10)}
        if opts.mcp_servers:
            ours["mcpServers"] = opts.mcp_servers
        return _merge(ours, opts.gemini_settings)

    # ------------------------------------------------------------------ command
    def command(self, prompt: str) -> Invocation:
        opts = self.options
        argv = [str(self.executable), "-p", "", "-o", "stream-json", "--approval-mode", "yolo", "--skip-trust"]
        if self.settings.sandbox:
            argv.append("--sandbox")
        if self._policies is not None:
            argv += ["--admin-policy", str(self._policies)]
        if self.settings.model:
            argv += ["-m", self.settings.model]
        resume = self.resume_id()
        if resume:
            argv += ["--resume", resume]
        else:
            self._new_session = str(uuid.uuid4())
            argv += ["--session-id", self._new_session]
        argv += opts.program_args
        variables: dict[str, str | None] = {"GEMINI_API_KEY": self.api_key(), "GOOGLE_GEMINI_BASE_URL": opts.base_url}
        if self._gemini_home is not None:
            variables["GEMINI_CLI_HOME"] = str(self._gemini_home)
        env = self.environment(**variables)
        if self._policies is not None and self.settings.sandbox:
            # The container sees the policy file at the same path (read-only), for --admin-policy.
            mounts = env.get("SANDBOX_MOUNTS", "").strip(",")
            env["SANDBOX_MOUNTS"] = ",".join(filter(None, [mounts, f"{self._policies}:{self._policies}:ro"]))
        return Invocation(argv=argv, env=env, stdin=prompt.encode())

    # ------------------------------------------------------------------ events
    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        event = line.data
        if event is None:
            return []
        kind = event.get("type")
        out = [] if kind == "tool_result" else self._settle()
        if kind == "message" and event.get("role") == "assistant":
            piece = str(event.get("content", ""))
            turn.add_delta(piece)
            return [*out, BackendMessage(MessageType.TEXT_DELTA, self.redact(piece))]
        text = turn.close_text()
        if text is not None:
            out.append(BackendMessage(MessageType.TEXT, self.redact(text)))
        if kind == "init":
            session = event.get("session_id")
            self._session_id = session if isinstance(session, str) else self._new_session
            if isinstance(event.get("model"), str):
                self.ledger.model = event["model"]
        elif kind == "tool_use":
            name, arguments, call_id = str(event.get("tool_name")), table(event.get("parameters")), event.get("tool_id")
            path = arguments.get(_WRITE_TOOLS.get(name, ""))
            self._calls[str(call_id)] = (name, path if isinstance(path, str) else None)
            if isinstance(path, str):
                self.track(written=[path])
            self._inputs[str(call_id)] = arguments
            out.append(self.call_message(name, arguments, call_id, raw=event))
        elif kind == "tool_result":
            call_id = event.get("tool_id")
            name, path = self._calls.get(str(call_id), ("", None))
            failed = event.get("status") != "success"
            error = table(event.get("error"))
            output = event.get("output") if not failed else error.get("message", event.get("output", ""))
            if name in self.shell_tools or (path and not failed):
                self._held.append((str(call_id), name, str(output or ""), failed, event))
            else:
                out.append(self.result_message(name, str(output or ""), call_id, failed=failed, raw=event))
        elif kind == "error":
            out.append(BackendMessage(MessageType.ERROR, self.redact(str(event.get("message", ""))), is_error=True))
        elif kind == "result":
            self._result(event, turn)
        return out

    def _settle(self) -> list[BackendMessage]:
        """The shell and edit results held back. Gemini CLI's tool_result carries neither a
        command's exit code nor an edit's diff; both are in its chat recording, written after the
        batch's tool_result lines and before anything else it prints, so a held result goes out
        with the next other line (or when the run ends)."""
        if not self._held:
            return []
        held, self._held = self._held, []
        calls = self._chat_log.calls(self._chats(), self._session_id) if self._session_id else {}
        out = []
        for call_id, name, output, failed, event in held:
            recorded = calls.get(call_id, {})
            raw = {**event, "recorded": recorded} if recorded else event
            if name in self.shell_tools:
                code = shell_exit_code(recorded.get("status"), recorded_output(recorded)) if recorded else None
                out.append(self.result_message(name, output, call_id, failed=failed, exit_code=code, raw=raw))
                continue
            out.append(self.result_message(name, output, call_id, failed=failed, raw=event))
            _, path = self._calls.get(call_id, ("", None))
            added, removed = edit_counts(name, self._inputs.get(call_id, {}), table(recorded.get("resultDisplay")))
            out.append(self.edit_message(str(path), name, added=added, removed=removed, call_id=call_id, raw=raw))
        return out

    def _chats(self) -> Path:
        return (self._gemini_home or Path.home()) / ".gemini" / "tmp"

    def last_messages(self, turn: TurnState) -> list[BackendMessage]:
        return self._settle() + super().last_messages(turn)

    def _result(self, event: dict[str, Any], turn: TurnState) -> None:
        turn.finished = True
        stats = table(event.get("stats"))
        self.settle(_usage(stats))
        if event.get("status") != "success":
            error = table(event.get("error"))
            turn.fail(self.redact(str(error.get("message") or "the run failed")))


def shell_exit_code(status: Any, told: str) -> int | None:
    """A run_shell_command's exit code from what Gemini CLI told the model ("Output: ...", then
    "Exit Code: N" only when it is not 0, "Signal: ..." or "Error: ..." when it did not exit);
    None when it does not say (a failed call, a summarized or backgrounded output)."""
    match = _EXIT_CODE.search(told)
    if match:
        return int(match.group(1))
    body = told.removeprefix("<untrusted_context>").lstrip()
    if status != "success" or not body.startswith("Output:") or re.search(r"(?m)^(Signal|Error): ", body):
        return None
    return 0


def recorded_output(call: dict[str, Any]) -> str:
    """What a recorded tool call's result told the model."""
    parts = call.get("result")
    return "\n".join(str(table(table(table(part).get("functionResponse")).get("response")).get("output", ""))
                     for part in (parts if isinstance(parts, list) else []))


class ChatLog:
    """Finished tool calls in a Gemini CLI session's chat recording
    (.gemini/tmp/<project>/chats/session-<time>-<id prefix>.jsonl), read on from where the last
    look stopped."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._offset = 0
        self._calls: dict[str, dict[str, Any]] = {}

    def calls(self, chats: Path, session: str) -> dict[str, dict[str, Any]]:
        """Recorded calls by id: their status, result and resultDisplay."""
        if self._path is None or f"-{session[:8]}." not in self._path.name:
            found = sorted(chats.glob(f"*/chats/session-*-{session[:8]}.jsonl"), key=_mtime)
            self._path, self._offset, self._calls = (found[-1] if found else None), 0, {}
        if self._path is None:
            return {}
        try:
            with open(self._path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return self._calls
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(whole)
        for line in whole.splitlines():
            if b'"toolCalls"' in line:
                with contextlib.suppress(ValueError):
                    for call in table(json.loads(line)).get("toolCalls") or []:
                        if isinstance(call, dict) and call.get("result"):
                            self._calls[str(call.get("id"))] = call
        return self._calls


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def edit_counts(name: str, arguments: dict[str, Any], display: dict[str, Any]) -> tuple[int, int]:
    """Lines added and removed by write_file or replace: from the diff in the chat recording's
    resultDisplay, else from the tool's input (a written file's lines as added; a replacement's
    new_string as added and old_string as removed)."""
    diff = display.get("fileDiff")
    if isinstance(diff, str) and "@@" in diff:
        return diff_counts(diff)
    if name == "write_file":
        return line_count(arguments.get("content")), 0
    times = arguments.get("expected_replacements")
    times = times if isinstance(times, int) and times > 0 else 1
    return times * line_count(arguments.get("new_string")), times * line_count(arguments.get("old_string"))


def _usage(stats: dict[str, Any]) -> Usage:
    """Gemini CLI counts cached input inside input_tokens; `input` is the rest."""

    def number(key: str) -> int:
        value = stats.get(key)
        return int(value) if isinstance(value, int | float) else 0

    cached = number("cached")
    fresh = number("input") if "input" in stats else max(number("input_tokens") - cached, 0)
    return Usage(input_tokens=fresh, output_tokens=number("output_tokens"), cache_read_tokens=cached)


def overlay_home(source: Path | None, home: Path, overrides: dict[str, Any]) -> Path:
    """A Gemini CLI home: its .gemini links every entry of `source` (the user's .gemini) but
    settings.json, which is `source`'s settings (or its own) with `overrides` merged in."""
    target = home / ".gemini"
    target.mkdir(parents=True, exist_ok=True)
    settings_from = (source or target) / "settings.json"
    if source is not None and source.is_dir():
        for entry in source.iterdir():
            link = target / entry.name
            if entry.name != "settings.json" and not os.path.lexists(link):
                link.symlink_to(entry)
    try:
        settings = json.loads(settings_from.read_text())
    except (OSError, ValueError):
        settings = {}
    merged = _merge(settings if isinstance(settings, dict) else {}, overrides)
    fd, temporary = tempfile.mkstemp(dir=target, prefix=".settings-")
    with os.fdopen(fd, "w") as handle:
        json.dump(merged, handle, indent=2)
    os.replace(temporary, target / "settings.json")  # a concurrent run reads the old or the new file
    return home


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
