"""claude-cli: Claude Code's own CLI, `claude -p --output-format stream-json --verbose`.

The prompt goes through stdin, agenter's instructions through --append-system-prompt-file.
Edits are accepted (permission mode acceptEdits, never bypassPermissions); with sandbox=True,
commands run in Claude Code's OS sandbox (bubblewrap and socat on Linux; it fails instead of
running unsandboxed), without it `claude_allowed_tools` decides. Structured output uses
--json-schema, resume --resume <session id>.

A permission policy is compiled to Claude Code's own flags (it cannot call agenter back):
`_policy/claude.py`. What agenter knows of Claude Code itself (its tool results, usage, stream
events, sandbox), shared with the claude-code backend, is `_programs/claude.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from pydantic import Field

from agenter._types import Usage
from agenter.backends._programs.claude import CREDENTIALS as CLAUDE_CREDENTIALS
from agenter.backends._programs.claude import (
    FILE_WRITE_TOOLS,
    QUIET_ENV,
    SANDBOX_SETTINGS,
    SHELL_TOOL,
    StreamedBlocks,
    bundled_cli,
    compacted,
    exit_code,
    line_changes,
    result_text,
    sandbox_hint,
    sandbox_requirements,
    usage_from,
)
from agenter.backends._prompts import OutputChannel
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState, search_path, table
from agenter.backends.cli._policy.claude import SAFETY_DENIALS, claude_permissions
from agenter.backends.cli._runner import Invocation, Line
from agenter.host import Program, Requirement, find_program
from agenter.host.requirements import Credentials

__all__ = ["ClaudeCliBackend", "ClaudeCliOptions"]


class ClaudeCliOptions(CliOptions):
    """Options of the claude-cli backend."""

    claude_allowed_tools: list[str] = Field(
        default_factory=lambda: ["Read", "Edit", "Write", "Glob", "Grep", "Bash"],
        description=("Tools that run without asking (--allowedTools). With sandbox=True, Bash runs in the "
                     "sandbox whatever this says."))
    claude_tools: list[str] | None = Field(
        None, description="The built-in tools the model sees (--tools); None: Claude Code's default set.")
    claude_setting_sources: list[str] | None = Field(
        None, description="Settings files loaded (--setting-sources: user, project, local); None: all of them.")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="MCP servers in Claude Code's mcpServers format (--mcp-config).")


class ClaudeCliBackend(CliBackend[ClaudeCliOptions]):
    name: ClassVar[str] = "claude-cli"
    credentials: ClassVar[Credentials | None] = CLAUDE_CREDENTIALS
    auto_rank: ClassVar[int | None] = 30
    program: ClassVar[str] = "claude"
    install: ClassVar[str] = "npm install -g @anthropic-ai/claude-code"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True, mcp=True,
        filesystem_read=True, filesystem_edit=True, shell=True, subagents=True, sandbox=True, resume=True)
    options_model: ClassVar[type[ClaudeCliOptions]] = ClaudeCliOptions
    price_provider: ClassVar[str | None] = "anthropic"
    output_channel: ClassVar[OutputChannel] = "native"
    instructions_in_prompt: ClassVar[bool] = False
    internal_paths: ClassVar[tuple[str, ...]] = (".claude/.cc-writes/",)
    shell_tools: ClassVar[frozenset[str]] = frozenset({SHELL_TOOL})
    #: Compiled to --disallowedTools / --allowedTools patterns (claude_permissions).
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})

    @classmethod
    def locate(cls, options: CliOptions) -> str | None:
        return find_program(cls.program, options.program_path, search_path()) or (
            None if options.program_path else bundled_cli())

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        options = settings.options
        path = options.program_path or (None if find_program(cls.program, None, search_path()) else bundled_cli())
        return [Program(name=cls.program, install=cls.install, path=path, env_path=search_path()),
                *sandbox_requirements(settings.sandbox, options.env.get("PATH"))]

    def __init__(self, settings: BackendSettings[ClaudeCliOptions]):
        super().__init__(settings)
        self._message_usage: dict[str, Usage] = {}
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        # The main agent's text blocks as they stream (thinking blocks come whole).
        self._blocks = StreamedBlocks(self.redact, thinking=False)

    # ------------------------------------------------------------------ command
    def command(self, prompt: str) -> Invocation:
        opts = self.options
        mode, allowed, denied = "acceptEdits", list(opts.claude_allowed_tools), list(SAFETY_DENIALS)
        policy = self.settings.permissions
        if policy is not None:
            mode, allowed, denied = claude_permissions(policy)
            if policy.mode == "bypass":
                allowed = list(opts.claude_allowed_tools) + allowed
            elif policy.mode != "plan":
                # Read-only tools run in every mode; edits follow the mode; the rest (Bash) only
                # where an allow rule says so (headless, a question is a no).
                allowed = [t for t in opts.claude_allowed_tools if t in ("Read", "Glob", "Grep")] + allowed
        argv = [str(self.executable), "-p", "--output-format", "stream-json", "--verbose",
                "--include-partial-messages", "--permission-mode", mode]
        allowed = [t for t in allowed if not (self.settings.sandbox and t == "Bash")]
        if allowed:
            argv += ["--allowedTools", ",".join(allowed)]
        argv += ["--disallowedTools", ",".join(denied)]
        if opts.claude_tools is not None:
            argv += ["--tools", ",".join(opts.claude_tools)]
        if opts.claude_setting_sources is not None:
            argv += ["--setting-sources", ",".join(opts.claude_setting_sources)]
        if self.settings.sandbox:
            argv += ["--settings", json.dumps({"sandbox": SANDBOX_SETTINGS})]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        instructions = self.instructions(refusal_tool=None, output_channel="native")
        argv += ["--append-system-prompt-file", str(self.scratch_file("instructions.md", instructions))]
        if self.spec.output_type is not None:
            argv += ["--json-schema", json.dumps(self.spec.output_type.model_json_schema())]
        if opts.mcp_servers:
            config = self.scratch_file("mcp.json", json.dumps({"mcpServers": opts.mcp_servers}))
            argv += ["--mcp-config", str(config)]
        resume = self.resume_id()
        if resume:
            argv += ["--resume", resume]
        argv += opts.program_args
        env = self.environment(
            ANTHROPIC_API_KEY=self.api_key(), ANTHROPIC_BASE_URL=opts.base_url,
            CLAUDE_CODE_MAX_RETRIES=None if opts.max_retries is None else str(opts.max_retries), **QUIET_ENV)
        return Invocation(argv=argv, env=env, stdin=prompt.encode())

    # ------------------------------------------------------------------ events
    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        event = line.data
        if event is None:
            return []
        kind = event.get("type")
        if isinstance(event.get("session_id"), str):
            self._session_id = event["session_id"]
        if kind == "system" and event.get("subtype") == "init":
            if isinstance(event.get("model"), str):
                self.ledger.model = self.ledger.model or event["model"]
            return []
        subagent = event.get("parent_tool_use_id") is not None
        if kind == "stream_event":
            # Deltas of the main agent's texts; subagents' texts stay whole.
            return [] if subagent else self._blocks.event(event.get("event"))
        if kind == "assistant":
            # Whatever of a block is still held back goes out before the block whole.
            pending = [] if subagent else self._blocks.flush()
            return pending + self._assistant(event.get("message") or {}, turn, bool(event.get("error")), subagent)
        if kind == "user":
            return self._tool_results(event.get("message") or {}, event.get("tool_use_result"))
        if kind == "system" and event.get("subtype") == "compact_boundary":
            return [compacted(event)]
        if kind == "result":
            self._result(event, turn)
        return []

    def last_messages(self, turn: TurnState) -> list[BackendMessage]:
        # A stream that ended mid-block: its held-back rest still goes out.
        return self._blocks.flush() + super().last_messages(turn)

    def _assistant(self, message: dict[str, Any], turn: TurnState, failed: bool,
                   subagent: bool = False) -> list[BackendMessage]:
        model = message.get("model")
        if isinstance(model, str) and model != "<synthetic>":
            self.ledger.model = model
        if isinstance(message.get("usage"), dict) and message.get("id"):
            seen = self._message_usage.get(message["id"], Usage())
            self._message_usage[message["id"]] = seen.maximum(usage_from(message["usage"]))
            self.ledger.running(sum(self._message_usage.values(), Usage()))
        out: list[BackendMessage] = []
        for block in message.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                text = str(block.get("text", ""))
                if failed or model == "<synthetic>":
                    if self._blocks.open_text and not subagent:
                        # Streamed, then flagged as an error: the whole text still closes the deltas.
                        out.append(BackendMessage(MessageType.TEXT, self.redact(text)))
                    out.append(BackendMessage(MessageType.ERROR, self.redact(text), is_error=True))
                else:
                    out.append(self.text_message(text, turn))
                if not subagent:
                    self._blocks.open_text = False
            elif kind == "thinking":
                out.append(BackendMessage(MessageType.THINKING, self.redact(str(block.get("thinking", "")))))
            elif kind == "tool_use":
                name, arguments = str(block.get("name")), table(block.get("input"))
                self._calls[str(block.get("id"))] = (name, arguments)
                path = arguments.get(FILE_WRITE_TOOLS.get(name, ""))
                if isinstance(path, str):
                    self.track(written=[path])
                out.append(self.call_message(name, arguments, block.get("id"), raw=block))
        return out

    def _tool_results(self, message: dict[str, Any], tool_use_result: Any) -> list[BackendMessage]:
        """Tool results; `tool_use_result` is the tool's own account (a command's stdout, an
        edit's structuredPatch), as Claude Code reports it beside the message."""
        out = []
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id"))
                name, arguments = self._calls.get(call_id, ("", {}))
                failed = bool(block.get("is_error"))
                text = result_text(block.get("content"))
                raw = {**block, "tool_use_result": tool_use_result}
                code = exit_code(text, failed, tool_use_result) if name == SHELL_TOOL else None
                out.append(self.result_message(name, text, call_id, failed=failed, exit_code=code, raw=raw))
                path = arguments.get(FILE_WRITE_TOOLS.get(name, ""))
                if isinstance(path, str) and path and not failed:
                    added, removed = line_changes(name, arguments, tool_use_result)
                    out.append(self.edit_message(path, name, added=added, removed=removed, call_id=call_id, raw=raw))
        return out

    def _result(self, event: dict[str, Any], turn: TurnState) -> None:
        turn.finished = True
        self._message_usage.clear()
        self.settle(usage_from(event.get("usage")), cost=_run_cost(event))
        text = event.get("result")
        turn.result_text = text if isinstance(text, str) else None
        turn.output = event.get("structured_output")
        if event.get("stop_reason") == "refusal":
            self.refuse({"reason": turn.result_text or "the model declined the request (stop_reason refusal)"})
        elif event.get("is_error") or str(event.get("subtype", "")).startswith("error"):
            errors = event.get("errors")
            detail = turn.result_text or ("; ".join(map(str, errors)) if isinstance(errors, list) else "")
            status = event.get("api_error_status")
            turn.fail(self.redact(sandbox_hint(detail or str(event.get("subtype")))),
                      status_code=status if isinstance(status, int) else None)


def _run_cost(result: dict[str, Any]) -> float | None:
    """This process's cost. total_cost_usd counts the whole resumed session; the per-model figures
    since the last result count this run only. None: priced by the ledger."""
    since = result.get("model_usage_since_last_result")
    if not isinstance(since, dict):
        return None
    costs = [m.get("costUSD") for m in since.values() if isinstance(m, dict)]
    return float(sum(c for c in costs if isinstance(c, int | float)))
