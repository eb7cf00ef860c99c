"""opencode-cli: OpenCode's CLI, `opencode run --format json` with the prompt on stdin.

OpenCode has no sandbox of its own, so it runs only with sandbox=False (in a container or VM of
yours). Edits and commands are allowed through its permission config; everything else keeps your
configuration's rule (a question nobody can answer headless is declined). agenter's settings for
a run (the provider's base_url and key, MCP servers, permissions) go in OPENCODE_CONFIG_CONTENT,
merged over your opencode.json, which is never changed. OpenCode judges paths by $PWD, which is
set to the working directory. Resume: --session <id>.

A permission policy is compiled to OpenCode's `permission` map (`_policy/opencode.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import Field

from agenter._errors import ConfigurationError
from agenter._types import Usage
from agenter.backends._edits import diff_counts, line_count
from agenter.backends._prompts import OutputChannel
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState, table
from agenter.backends.cli._policy.opencode import opencode_permissions
from agenter.backends.cli._runner import Invocation, Line
from agenter.host.requirements import MODEL_PROVIDER_KEYS, Credentials

__all__ = ["OpenCodeCliBackend", "OpenCodeCliOptions"]

#: OpenCode's tools that write the file named in their input.
_WRITE_TOOLS = {"write": "filePath", "edit": "filePath"}
class OpenCodeCliOptions(CliOptions):
    """Options of the opencode-cli backend."""

    opencode_agent: str | None = Field(None, description="The OpenCode agent to run (--agent); None: its default.")
    opencode_config: dict[str, Any] = Field(
        default_factory=dict, description="More OpenCode config for agenter's runs (opencode.json keys).")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="MCP servers in OpenCode's `mcp` config format.")


class OpenCodeCliBackend(CliBackend[OpenCodeCliOptions]):
    name: ClassVar[str] = "opencode-cli"
    credentials: ClassVar[Credentials | None] = Credentials(
        env=MODEL_PROVIDER_KEYS, files=("$XDG_DATA_HOME/opencode/auth.json", "~/.local/share/opencode/auth.json"))
    auto_rank: ClassVar[int | None] = 60
    program: ClassVar[str] = "opencode"
    install: ClassVar[str] = "npm install -g opencode-ai"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, mcp=True,
        filesystem_read=True, filesystem_edit=True, shell=True, subagents=True, resume=True)
    options_model: ClassVar[type[OpenCodeCliOptions]] = OpenCodeCliOptions
    output_channel: ClassVar[OutputChannel] = "text"
    live_usage: ClassVar[bool] = False  # a step's usage comes after its tool calls ran: estimated until then
    shell_tools: ClassVar[frozenset[str]] = frozenset({"bash"})
    #: Compiled to OpenCode's permission map (opencode_permissions).
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        super().validate_settings(settings)
        options = settings.options
        if (options.base_url or options.api_key is not None) and "/" not in (settings.model or ""):
            raise ConfigurationError(
                "the opencode-cli backend needs model='provider/model' (e.g. 'openai/gpt-4.1') with base_url or "
                "api_key: they configure that provider", parameter="model")

    def config(self) -> dict[str, Any]:
        """OpenCode config for agenter's runs (merged over the user's by OpenCode)."""
        opts = self.options
        config: dict[str, Any] = {"permission": opencode_permissions(self.settings.permissions), "autoupdate": False}
        model = self.settings.model
        if model:
            config["model"] = model
        provider_options: dict[str, Any] = {}
        if opts.base_url:
            provider_options["baseURL"] = opts.base_url
        if self.api_key():
            provider_options["apiKey"] = self.api_key()
        if provider_options and model:
            config["provider"] = {model.split("/", 1)[0]: {"options": provider_options}}
        if opts.mcp_servers:
            config["mcp"] = opts.mcp_servers
        return _merge(config, opts.opencode_config)

    # ------------------------------------------------------------------ command
    def command(self, prompt: str) -> Invocation:
        opts = self.options
        # --title: otherwise OpenCode first asks a small model for a session title.
        argv = [str(self.executable), "run", "--format", "json", "--title", "agenter"]
        if self.settings.model:
            argv += ["-m", self.settings.model]
        if opts.opencode_agent:
            argv += ["--agent", opts.opencode_agent]
        resume = self.resume_id()
        if resume:
            argv += ["--session", resume]
        argv += opts.program_args
        variables = {"OPENCODE_CONFIG_CONTENT": json.dumps(self.config()), "PWD": str(self.cwd),
                     "OPENCODE_DISABLE_AUTOUPDATE": "1"}
        if self.home_dir is not None:
            home = self.home_dir
            variables.update(XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local" / "share"),
                             XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".local" / "state"))
        return Invocation(argv=argv, env=self.environment(**variables), stdin=prompt.encode())

    # ------------------------------------------------------------------ events
    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        event = line.data
        if event is None:
            return []
        if isinstance(event.get("sessionID"), str):
            self._session_id = event["sessionID"]
        kind = event.get("type")
        part = table(event.get("part"))
        if kind == "text":
            return [self.text_message(str(part.get("text", "")), turn)]
        if kind == "reasoning":
            return [BackendMessage(MessageType.THINKING, self.redact(str(part.get("text", ""))))]
        if kind == "tool_use":
            return self._tool(part)
        if kind == "step_finish":
            cost = part.get("cost")
            self.settle(_usage(part.get("tokens")), cost=float(cost) if isinstance(cost, int | float) else None)
        elif kind == "error":
            error = table(event.get("error"))
            data = table(error.get("data"))
            status = data.get("statusCode")
            message = data.get("message") or error.get("name") or "the run failed"
            turn.fail(self.redact(f"{error.get('name', 'Error')}: {message}"),
                      status_code=status if isinstance(status, int) else None)
            return [BackendMessage(MessageType.ERROR, self.redact(str(message)), is_error=True)]
        return []

    def _tool(self, part: dict[str, Any]) -> list[BackendMessage]:
        name, call_id = str(part.get("tool")), part.get("callID")
        state = table(part.get("state"))
        arguments = table(state.get("input"))
        failed = state.get("status") == "error"
        output = state.get("error") if failed else state.get("output")
        metadata = table(state.get("metadata"))
        code = metadata.get("exit")
        out = [self.call_message(name, arguments, call_id, raw=part),
               self.result_message(name, str(output or ""), call_id, failed=failed,
                                   exit_code=code if isinstance(code, int) else None, raw=part)]
        path = arguments.get(_WRITE_TOOLS.get(name, ""))
        if isinstance(path, str) and not failed:
            added, removed = edit_counts(name, arguments, metadata)
            out.append(self.edit_message(path, name, added=added, removed=removed, call_id=call_id, raw=part))
        return out


def edit_counts(name: str, arguments: dict[str, Any], metadata: dict[str, Any]) -> tuple[int, int]:
    """Lines added and removed by write or edit: OpenCode's own figures (metadata.filediff),
    else its diff, else the tool's input (a written file's lines as added)."""
    filediff = table(metadata.get("filediff"))
    added, removed = filediff.get("additions"), filediff.get("deletions")
    if isinstance(added, int) and isinstance(removed, int):
        return added, removed
    diff = metadata.get("diff")
    if isinstance(diff, str) and diff:
        return diff_counts(diff)
    if name == "write":
        return line_count(arguments.get("content")), 0
    return line_count(arguments.get("newString")), line_count(arguments.get("oldString"))


def _usage(tokens: Any) -> Usage:
    """OpenCode's step tokens: input without the cache, cache read and write apart."""
    tokens = table(tokens)
    cache = table(tokens.get("cache"))

    def number(table: dict[str, Any], key: str) -> int:
        value = table.get(key)
        return int(value) if isinstance(value, int | float) else 0

    return Usage(input_tokens=number(tokens, "input"), output_tokens=number(tokens, "output") + number(tokens, "reasoning"),
                 cache_read_tokens=number(cache, "read"), cache_write_tokens=number(cache, "write"))


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged
