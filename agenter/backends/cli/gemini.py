"""gemini-cli: Google's Gemini CLI, `gemini -p "" -o stream-json` with the prompt on stdin.

Headless Gemini CLI declares its editing and shell tools only when every call is approved, so
it runs with --approval-mode yolo: with sandbox=True inside its own container sandbox
(--sandbox: Docker or Podman, or GEMINI_SANDBOX), with sandbox=False unconfined, as asked.
Settings agenter needs for a run (API-key auth with base_url, retries, MCP servers) go into a
settings.json of its own, your settings merged in, in a home of its own (GEMINI_CLI_HOME,
~/.cache/agenter/gemini-home-<hash>) whose other entries link to your ~/.gemini: your login and
history are used, your files never changed. (Gemini CLI accepts a system settings file only when
root owns it and every folder above it.) Resume: --session-id on the first turn, --resume <id> after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from agenter._types import Usage
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState, table
from agenter.backends.cli._runner import Invocation, Line
from agenter.host import Requirement

__all__ = ["GeminiCliBackend", "GeminiCliOptions"]

#: Gemini CLI's tools that write the file named in their input.
_WRITE_TOOLS = {"write_file": "file_path", "replace": "file_path"}
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
    program: ClassVar[str] = "gemini"
    install: ClassVar[str] = "npm install -g @google/gemini-cli"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, mcp=True,
        filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True)
    options_model: ClassVar[type[GeminiCliOptions]] = GeminiCliOptions
    price_provider: ClassVar[str | None] = "google"
    output_channel = "text"
    live_usage = False  # stream-json reports usage in its result
    shell_tools: ClassVar[frozenset[str]] = frozenset({"run_shell_command"})

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

    async def prepare(self) -> None:
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
        return Invocation(argv=argv, env=self.environment(**variables), stdin=prompt.encode())

    # ------------------------------------------------------------------ events
    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        event = line.data
        if event is None:
            return []
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            piece = str(event.get("content", ""))
            turn.add_delta(piece)
            return [BackendMessage(MessageType.TEXT_DELTA, self.redact(piece))]
        out = []
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
            out.append(self.call_message(name, arguments, call_id))
        elif kind == "tool_result":
            call_id = event.get("tool_id")
            name, path = self._calls.get(str(call_id), ("", None))
            failed = event.get("status") != "success"
            error = table(event.get("error"))
            output = event.get("output") if not failed else error.get("message", event.get("output", ""))
            out.append(self.result_message(name, str(output or ""), call_id, failed=failed))
            if path and not failed:
                out.append(self.edit_message(path, name))
        elif kind == "error":
            out.append(BackendMessage(MessageType.ERROR, self.redact(str(event.get("message", ""))), is_error=True))
        elif kind == "result":
            self._result(event, turn)
        return out

    def _result(self, event: dict[str, Any], turn: TurnState) -> None:
        turn.finished = True
        stats = table(event.get("stats"))
        self.settle(_usage(stats))
        if event.get("status") != "success":
            error = table(event.get("error"))
            turn.fail(self.redact(str(error.get("message") or "the run failed")))


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
