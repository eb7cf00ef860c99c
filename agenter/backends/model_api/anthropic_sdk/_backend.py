"""AnthropicSDKBackend: agenter's own tool-use loop over the Anthropic Messages API (streaming).

One turn is one iteration: the prompt is appended to the conversation as a user turn, then the
model and the tools take turns until the model stops asking for tools (or refuses, or returns its
final_result). The conversation is kept for the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import os
import shutil
import ssl
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from agenter._errors import BackendError, ConfigurationError
from agenter.backends._prompts import (
    REFUSAL_TOOL_DESCRIPTION,
    REFUSAL_TOOL_NAME,
    REFUSAL_TOOL_SCHEMA,
    STRUCTURED_OUTPUT_TOOL_NAME,
    output_schema,
)
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
    ToolReply,
)
from agenter.backends.model_api.anthropic_sdk._conversation import (
    CACHE_MARK,
    SKIPPED_RESULT,
    StreamAccumulator,
    StreamedBlock,
    api_usage,
    append_user_content,
    close_open_tool_uses,
    compact,
    compaction_boundary,
    estimate_tokens,
    mechanical_summary,
    render_transcript,
    summarized_part,
    tool_result,
    with_cache_marks,
)
from agenter.backends.model_api.anthropic_sdk._file_tools import (
    FILE_TOOL_DEFINITIONS,
    FILE_TOOL_NAMES,
    MAX_OUTPUT_CHARS,
    TEXT_EDITOR_TOOL_DEFINITION,
    TEXT_EDITOR_TOOL_NAME,
    FileToolbox,
    ToolOutcome,
)
from agenter.backends.model_api.anthropic_sdk._options import DEFAULT_BEDROCK_MODEL, DEFAULT_MODEL, AnthropicSDKOptions
from agenter.backends.model_api.anthropic_sdk._retry import (
    RetryPolicy,
    StreamIncomplete,
    error_message,
    error_type,
    is_transport_error,
)
from agenter.backends.model_api.anthropic_sdk._shell import (
    BASH_TOOL_NAME,
    RESULT_CHARS,
    ShellSandbox,
    bash_tool_definition,
    hidden_home_paths,
    network_allowed,
    probe_sandbox,
    run_shell,
    shell_env,
    timeout_of,
)
from agenter.backends.model_api.anthropic_sdk._tools import (
    READ_TOOLS,
    PermitGate,
    Relay,
    ReplyTool,
    TurnExecutor,
    custom_tool_spec,
    file_tool_spec,
    shell_spec,
    text_editor_spec,
)
from agenter.host.requirements import Credentials, PythonPackage, Requirement
from agenter.sandbox.confine import ShellSandboxAvailable, choose_mechanism, unavailable_reason
from agenter.tools.executor import ToolResult, ToolUse
from agenter.tools.spec import ToolSpec

if TYPE_CHECKING:
    from agenter.permissions import PermissionGate

log = logging.getLogger(__name__)

MAX_CUTOFF_NUDGES = 3
CUTOFF_NUDGE = ("Your last response was cut off at the output limit. Continue where you stopped, "
                "in smaller steps (for example, write a large file in several edits).")
STRUCTURED_NUDGE = (f"You have not called the {STRUCTURED_OUTPUT_TOOL_NAME} tool yet. Call it now with "
                    "the result; the task is not finished until it is accepted.")
EVENT_TEXT_LIMIT = 4000

#: Compactions in a row (with no model response between them) before a context_length
#: BackendError; the share of the conversation (after the task) the first and the second of
#: them keep verbatim, the rest summarized.
MAX_COMPACTIONS = 2
KEEP_FRACTIONS = (0.3, 0.1)
CONTEXT_NUDGE = ("Your last response was cut off: the conversation had filled the model's context window. "
                 "Its earlier part is summarized above now; continue where you stopped.")
#: The summary request: small, bounded in time, never retried (a failure falls back to a
#: mechanical summary).
SUMMARY_MAX_TOKENS = 4096
SUMMARY_TIMEOUT = 120.0
SUMMARY_SYSTEM = ("You write the working notes an autonomous coding agent continues its task from, after the "
                  "older part of its conversation is dropped to fit the context window. Be factual and "
                  "specific; never invent work that is not in the transcript.")
SUMMARY_REQUEST = """\
Summarize this transcript of the earlier part of the session (the agent's tool calls and their \
results). The agent keeps its task and its most recent turns; this summary replaces everything \
shown here. Include:
- what has been done: files created, edited or deleted (paths) and what changed in them;
- what was learned: facts about the code (paths, names, signatures), commands and their outcomes, errors;
- what was tried and failed, and why;
- what remains to be done, as far as the transcript shows.
Plain text, at most about 600 words, no preamble.

<transcript>
{transcript}
</transcript>"""

# Output-token ceilings per model family (substring match, most specific first), for the
# one-time max_tokens escalation after a cut-off response.
_MODEL_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("sonnet-5", 128000), ("opus-5", 128000), ("haiku-5", 128000), ("fable-5", 128000),
    ("mythos-5", 128000), ("opus-4-5", 64000), ("opus-4-6", 64000), ("opus-4-7", 64000),
    ("opus-4-8", 64000), ("opus-4-1", 32000), ("opus-4-0", 32000), ("opus-4", 32000),
    ("sonnet-4", 64000), ("haiku-4", 64000), ("3-7-sonnet", 64000), ("3-5-haiku", 8192),
    ("3-5-sonnet", 8192), ("3-haiku", 4096),
)

#: How this backend's model works with its tools; the shared instructions follow it.
TOOL_GUIDANCE = """\
You are an autonomous coding agent. You work in the repository at {cwd} (the working directory).

How to work:
- Inspect before you change: list directories, glob, grep and read the files that matter.
- Make complete, working changes with the file tools. Paths are relative to the working directory.
- Keep the existing style of the code. Do not create files the task does not need.
{shell}
- A tool call that is not permitted comes back as an error that says why: do not repeat it.
- When the work is done, stop calling tools and reply with a short summary of what you changed."""

SHELL_GUIDANCE = """\
- Run programs with the bash tool: tests, builds, linters, git status and diff. Change files with
  the file tools rather than with shell redirections. Validators also check your changes after you
  stop, and their findings come back to you as a new message if something must be fixed."""

NO_SHELL_GUIDANCE = """\
- There is no shell: you cannot run programs or tests. Validators check your changes after you stop,
  and their findings come back to you as a new message if something must be fixed."""

READ_ONLY_GUIDANCE = """\
You are a coding agent in a read-only session. You work in the repository at {cwd} (the working
directory).

How to work:
- Read, list, glob and grep the files that matter; paths are relative to the working directory.
- Do not change anything: there are no tools that write files{shell}.
- A tool call that is not permitted comes back as an error that says why: do not repeat it.
- When you have the answer, stop calling tools and reply with it."""


def model_output_limit(model: str) -> int | None:
    for fragment, limit in _MODEL_OUTPUT_LIMITS:
        if fragment in model:
            return limit
    return None


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


class AnthropicSDKBackend(BaseBackend[AnthropicSDKOptions]):
    """The default backend: Claude through the Anthropic SDK with agenter's sandboxed file tools
    and a bash tool (confined by Landlock, bubblewrap or Seatbelt with sandbox=True)."""

    name: ClassVar[str] = "anthropic-sdk"
    credentials: ClassVar[Credentials | None] = Credentials(
        env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"))
    auto_rank: ClassVar[int | None] = 80
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True)
    options_model: ClassVar[type[AnthropicSDKOptions]] = AnthropicSDKOptions
    reserved_tool_names: ClassVar[frozenset[str]] = frozenset({TEXT_EDITOR_TOOL_NAME, BASH_TOOL_NAME,
                                                               *FILE_TOOL_NAMES})
    price_provider: ClassVar[str | None] = "anthropic"
    # Every tool call of the loop passes the gate; "network" is the bash tool's network access.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell", "network", "custom"})

    def __init__(self, settings: BackendSettings[AnthropicSDKOptions]):
        super().__init__(settings)
        bedrock = self.options.anthropic_bedrock
        self.model: str = self.model_for(settings) or DEFAULT_MODEL
        self.ledger.model = self.model
        if bedrock:
            self.ledger.provider = "aws"  # genai-prices' Bedrock prices
        self._client: Any | None = None
        self._toolbox: FileToolbox | None = None
        self._results_box: FileToolbox | None = None
        self._run_dir: Path | None = None
        self._results_dir: Path | None = None
        self._executor: TurnExecutor | None = None
        self._relay: Relay | None = None
        # What the running tool call reported for its events: the bash tool's exit code, the
        # file tools' edits (path, lines added, lines removed). Calls that change things run one
        # at a time, so one slot each is enough; _report_result takes them.
        self._exit_code: int | None = None
        self._edits: list[tuple[str, int, int]] = []
        self._shell_sandbox: ShellSandbox | None = None
        self._shell_env: dict[str, str] = {}
        self._messages: list[dict[str, Any]] = []
        self._tool_definitions: list[dict[str, Any]] = []
        self._system_blocks: list[dict[str, Any]] = []
        self._custom_tools = {tool.name: tool for tool in settings.tools}
        self._max_tokens = self.options.max_tokens
        self._escalated = False
        self._pending_results: list[dict[str, Any]] | None = None
        self._retry = RetryPolicy(
            max_retries=self.options.max_retries, max_wait=self.options.max_retry_wait, backend=self.name,
            auth_hint=self._auth_hint(), redact=self.redact)

    def _auth_hint(self) -> str:
        """What to check after a 401: the key the user gave, where it came from."""
        if self.options.anthropic_bedrock:
            return "check your AWS credentials"
        if self.options.api_key is not None:
            return "check the api_key= passed to AutonomousCodingAgent"
        return "check ANTHROPIC_API_KEY"

    @classmethod
    def model_for(cls, settings: BackendSettings[Any]) -> str | None:
        return settings.model or (DEFAULT_BEDROCK_MODEL if getattr(settings.options, "anthropic_bedrock", False)
                                  else DEFAULT_MODEL)

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs: list[Requirement] = [PythonPackage(module="anthropic", distribution="anthropic",
                                                  install="pip install agenter-sdk")]
        if getattr(settings.options, "anthropic_bedrock", False):
            bedrock = "pip install 'agenter-sdk[bedrock]'"
            needs += [PythonPackage(module="boto3", distribution="boto3", install=bedrock),
                      PythonPackage(module="botocore", distribution="botocore", install=bedrock)]
        if settings.sandbox and _has_shell(settings):
            needs.append(ShellSandboxAvailable(getattr(settings.options, "anthropic_shell_sandbox", "auto")))
        return needs

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        policy = settings.permissions
        if settings.sandbox or not _has_shell(settings) or policy is None:
            return
        if any(rule.kind == "network" and not (rule.effect == "allow" and rule.matches_all) for rule in policy.rules):
            raise ConfigurationError(
                "network rules other than 'allow network' need sandbox=True with the anthropic-sdk backend: the "
                "bash tool's network is cut by its sandbox, and without the sandbox a command can reach any host "
                "(or pass anthropic_shell=False)", parameter="permissions")

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (the messages sent to the API, without cache marks)."""
        return self._messages

    @property
    def has_shell(self) -> bool:
        """Whether the model gets the bash tool (see `_has_shell`)."""
        return _has_shell(self.settings)

    @property
    def read_only_session(self) -> bool:
        """Analysis mode or a plan-mode policy: no tool that writes is offered."""
        gate = self.gate
        return self.spec.mode in ("analysis", "patch") or (gate is not None and gate.mode == "plan")

    @property
    def shell_network(self) -> bool:
        """Whether sandboxed commands get the network (see `_shell.network_allowed`)."""
        return network_allowed(self.settings.permissions)

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        from agenter.sandbox.paths import PathResolver
        from agenter.usage import is_known_model

        if spec.resume_session_id:
            # Resume here means the retries of one run share a conversation; it lives in memory.
            raise ConfigurationError(
                f"the {self.name} backend cannot resume session {spec.resume_session_id!r}: its "
                "conversation lives only as long as one run", parameter="resume")
        self._toolbox = FileToolbox(PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox))
        # The run's folder (private, 0700): oversize tool results are saved there; the gate and
        # the tools may read it, nothing writes it but the executor.
        self._run_dir = Path(tempfile.mkdtemp(prefix="agenter-anthropic-sdk-"))
        self._results_dir = self._run_dir / "tool-results"
        self._results_dir.mkdir()
        self._results_box = FileToolbox(PathResolver(self._results_dir, [], sandbox=True))
        gate = self.gate
        assert gate is not None
        gate.add_read_root(self._results_dir)
        if not self.settings.sandbox:
            # sandbox=False (and no policy): the tools may go anywhere, as before the gate.
            self.leave_confinement_to_the_sandbox()
        self._executor = self._make_executor()
        if self.has_shell:
            await self._prepare_shell()
        # The first imports of anthropic and of the price table take seconds on a busy machine:
        # do them off the event loop so the session's other tasks (and timers) keep running.
        await asyncio.to_thread(importlib.import_module, "anthropic")
        await asyncio.to_thread(is_known_model, self.model, self.ledger.provider)
        self._client = self._make_client()
        self._session_id = uuid.uuid4().hex
        self._system_blocks = [{"type": "text", "text": self._system_prompt()}]
        self._tool_definitions = self._build_tool_definitions(spec)
        if self.options.anthropic_prompt_caching:
            self._system_blocks[-1]["cache_control"] = dict(CACHE_MARK)
            self._tool_definitions[-1] = {**self._tool_definitions[-1], "cache_control": dict(CACHE_MARK)}

    async def _prepare_shell(self) -> None:
        self._shell_env = shell_env()
        if not self.settings.sandbox:
            return
        # The shell sandbox's mechanism (agenter.sandbox.confine): Landlock, bubblewrap or Seatbelt.
        mechanism = choose_mechanism(self.options.anthropic_shell_sandbox)
        if mechanism is None:
            raise BackendError(unavailable_reason(self.options.anthropic_shell_sandbox), backend=self.name,
                               kind="missing_program")
        gate = self.gate
        assert gate is not None and self._results_dir is not None
        workspace = gate.workspace

        def is_credential(path: str) -> bool:
            resolved = workspace.resolve(path)
            return any(f.check == "credentials" for f in workspace.findings(resolved, "read"))

        hidden = await asyncio.to_thread(hidden_home_paths, workspace.home, is_credential,
                                         keep=[str(self.cwd), str(self._results_dir)])
        self._shell_sandbox = ShellSandbox(
            cwd=self.cwd, network=self.shell_network, read_only=self.read_only_session,
            writable=tuple(workspace.extra_roots), readable=tuple(dict.fromkeys(workspace.read_roots)),
            hidden=tuple(hidden),
            program=shutil.which("bwrap") or "bwrap", mechanism=mechanism, tmpdir=await self._shell_tmpdir())
        await probe_sandbox(self._shell_sandbox, self._shell_env, self.name)

    async def _shell_tmpdir(self) -> str:
        """The commands' TMPDIR, private to the session (0700, in the run's folder, removed with it)."""
        assert self._run_dir is not None
        tmpdir = self._run_dir / "tmp"
        await asyncio.to_thread(tmpdir.mkdir, 0o700, False, True)
        return str(tmpdir)

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        try:
            if client is not None:
                try:
                    await client.close()
                except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
                    pass
        finally:
            run_dir, self._run_dir = self._run_dir, None
            if run_dir is not None:
                await asyncio.to_thread(shutil.rmtree, run_dir, True)

    def _make_client(self) -> Any:
        import anthropic

        options = self.options
        common: dict[str, Any] = {"max_retries": 0, "timeout": options.request_timeout}
        if options.base_url:
            common["base_url"] = options.base_url
        if options.anthropic_bedrock:
            def secret(value: Any) -> str | None:
                return value.get_secret_value() if value is not None else None

            return anthropic.AsyncAnthropicBedrock(
                aws_region=options.anthropic_aws_region, aws_profile=options.anthropic_aws_profile,
                aws_access_key=secret(options.anthropic_aws_access_key),
                aws_secret_key=secret(options.anthropic_aws_secret_key),
                aws_session_token=secret(options.anthropic_aws_session_token), **common)
        api_key = options.api_key.get_secret_value() if options.api_key else os.environ.get("ANTHROPIC_API_KEY")
        if not api_key and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            raise ConfigurationError(
                "no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key=...", parameter="api_key")
        self.redact.add(api_key)
        # Loading the trust store costs ~150 ms; build it once per process, not per session.
        http_client = anthropic.DefaultAsyncHttpxClient(verify=_shared_ssl_context())
        return anthropic.AsyncAnthropic(api_key=api_key, http_client=http_client, **common)

    def _system_prompt(self) -> str:
        shared = self.instructions(refusal_tool=REFUSAL_TOOL_NAME, output_channel="tool")
        shell = self.has_shell
        if self.read_only_session:
            guidance = READ_ONLY_GUIDANCE.format(
                cwd=self.cwd, shell=" (run only commands that read: the others are refused)" if shell else "")
        else:
            guidance = TOOL_GUIDANCE.format(cwd=self.cwd, shell=SHELL_GUIDANCE if shell else NO_SHELL_GUIDANCE)
        return guidance + "\n\n" + shared

    def _offered_file_tools(self) -> list[str]:
        """File tools the model gets: the text editor or agenter's tools; in a read-only session
        only the tools that read."""
        if self.read_only_session:
            return [name for name in FILE_TOOL_NAMES if name in READ_TOOLS]
        if self.options.anthropic_text_editor:
            return [TEXT_EDITOR_TOOL_NAME]
        return list(FILE_TOOL_NAMES)

    def _build_tool_definitions(self, spec: SessionSpec) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        offered = self._offered_file_tools()
        if offered == [TEXT_EDITOR_TOOL_NAME]:
            tools.append(dict(TEXT_EDITOR_TOOL_DEFINITION))
        else:
            tools.extend(dict(definition) for definition in FILE_TOOL_DEFINITIONS if definition["name"] in offered)
        if self.has_shell:
            tools.append(bash_tool_definition(sandbox=self.settings.sandbox, network=self.shell_network,
                                              read_only=self.read_only_session,
                                              timeout=self.options.anthropic_shell_timeout))
        for tool in self.settings.tools:
            tools.append({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
        tools.append({"name": REFUSAL_TOOL_NAME, "description": REFUSAL_TOOL_DESCRIPTION,
                      "input_schema": REFUSAL_TOOL_SCHEMA})
        if spec.output_type is not None:
            tools.append({
                "name": STRUCTURED_OUTPUT_TOOL_NAME,
                "description": "Return the final result of the task. Call it once, when the work is done.",
                "input_schema": output_schema(spec.output_type),
            })
        return tools

    def _make_executor(self) -> TurnExecutor:
        """The executor for the session's tools (agenter's refusal and output tools excepted:
        they end the turn, and no permission is asked for them)."""
        tools: dict[str, Any] = {}
        specs: dict[str, ToolSpec] = {}
        # File tools bound their own output (MAX_OUTPUT_CHARS and a footer): never saved to a file.
        file_chars = 2 * MAX_OUTPUT_CHARS
        for name in self._offered_file_tools():
            if name == TEXT_EDITOR_TOOL_NAME:
                tools[name], specs[name] = ReplyTool(self._run_text_editor), text_editor_spec(file_chars)
            else:
                tools[name], specs[name] = ReplyTool(self._run_file_tool), file_tool_spec(name, file_chars)
        if self.has_shell:
            tools[BASH_TOOL_NAME], specs[BASH_TOOL_NAME] = ReplyTool(self._run_bash), shell_spec(RESULT_CHARS)
        for name, tool in self._custom_tools.items():
            tools[name], specs[name] = ReplyTool(self._run_custom_tool), custom_tool_spec(tool)
        gate = cast("PermissionGate", PermitGate(self.permit, lambda: self.gate))
        return TurnExecutor(tools, specs=specs, gate=gate, results_dir=self._results_dir,
                            on_start=self._announce, on_result=self._report_result)

    # ------------------------------------------------------------------ one turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        append_user_content(self._messages, [{"type": "text", "text": prompt}])
        try:
            async for message in self._tool_loop():
                yield message
        finally:
            # Invariant: every tool_use is answered, also when cancelled or failing mid-turn.
            close_open_tool_uses(self._messages, self._pending_results)
            self._pending_results = None

    def _turn_ended(self) -> bool:
        return self.refusal() is not None or self.structured_output() is not None

    async def _tool_loop(self) -> AsyncIterator[BackendMessage]:
        cutoffs = 0
        compactions = 0  # in a row: a response the model completes resets it
        nudged_for_result = False
        limit = self.options.anthropic_max_turns_per_iteration
        responses = 0
        while responses < limit:
            response = StreamAccumulator()
            overflow: BackendError | None = None
            try:
                async for message in self._respond(response):
                    yield message
            except BackendError as exc:
                # Withheld: a prompt that no longer fits is compacted and sent again; the error
                # surfaces only when compaction cannot help.
                if exc.kind != "context_length":
                    raise
                overflow = exc
            if overflow is not None:
                compactions += 1
                async for message in self._compact(compactions, overflow):
                    yield message
                continue
            responses += 1
            if response.stop_reason != "model_context_window_exceeded":
                compactions = 0
            content = response.content()
            if content:
                self._messages.append({"role": "assistant", "content": content})
            if response.stop_reason == "refusal":
                reason = response.text().strip() or "The model declined the request (stop_reason=refusal)."
                self.refuse({"reason": reason, "category": "refusal"})
                return
            results: list[dict[str, Any]] = []
            self._pending_results = results
            async for message in self._run_tools(content, response.input_errors(), results):
                yield message
            self._pending_results = None
            follow_up: list[dict[str, Any]] = list(results)
            if self._turn_ended():
                append_user_content(self._messages, follow_up)
                return
            if response.stop_reason == "model_context_window_exceeded":
                # The response filled the context window: its complete tool calls ran; the
                # history is compacted before the model continues.
                follow_up.append({"type": "text", "text": CONTEXT_NUDGE})
                append_user_content(self._messages, follow_up)
                compactions += 1
                async for message in self._compact(compactions, None):
                    yield message
                continue
            if response.stop_reason == "max_tokens":
                cutoffs += 1
                if cutoffs > MAX_CUTOFF_NUDGES:
                    append_user_content(self._messages, follow_up)
                    yield BackendMessage(MessageType.ERROR, content=(
                        f"the model's responses were cut off at the output limit {cutoffs} times; "
                        "ending this iteration"), is_error=True)
                    return
                note = self._escalate_max_tokens()
                follow_up.append({"type": "text", "text": CUTOFF_NUDGE})
                yield BackendMessage(MessageType.STATUS, content="response cut off at max_tokens; "
                                     f"asking the model to continue{note}")
            elif not results:
                if self.spec.output_type is not None and not nudged_for_result:
                    nudged_for_result = True
                    follow_up.append({"type": "text", "text": STRUCTURED_NUDGE})
                else:
                    return
            append_user_content(self._messages, follow_up)
        yield BackendMessage(MessageType.STATUS, content=(
            f"stopped after {limit} model responses in this iteration (anthropic_max_turns_per_iteration)"))

    # ------------------------------------------------------------------ compaction
    async def _compact(self, number: int, overflow: BackendError | None) -> AsyncIterator[BackendMessage]:
        """Compaction `number` in a row: the turns after the task and before the most recent ones
        become one summary (the model's, else a mechanical one). Raises a context_length
        BackendError past MAX_COMPACTIONS in a row or when nothing is left to compact.

        The bound is on compactions in a row, not per iteration: a long iteration may compact
        each time it outgrows the window again, as long as the model answers in between (at most
        anthropic_max_turns_per_iteration times)."""
        why = "the prompt was too long" if overflow is not None else "a response filled the context window"
        messages = self._messages
        boundary = compaction_boundary(messages, KEEP_FRACTIONS[number - 1]) if number <= MAX_COMPACTIONS else None
        if boundary is None:
            # Past the bound, or only the task (and a summary) left: nothing more to summarize.
            if overflow is not None and number == 1:
                raise overflow
            done = min(number - 1, MAX_COMPACTIONS)
            detail = f": {overflow}" if overflow is not None else ""
            raise BackendError(
                f"the conversation does not fit the model's context window even after {done} "
                f"compaction{'s' if done != 1 else ''} in a row{detail}", backend=self.name,
                kind="context_length", status_code=overflow.status_code if overflow is not None else None)
        older = summarized_part(messages, boundary)
        summary, failure = await self._summarize(older)
        before = estimate_tokens(messages)
        self._messages[:] = compact(messages, boundary, summary or mechanical_summary(older))
        after = estimate_tokens(self._messages)
        source = "the model's summary" if summary else f"a mechanical summary ({failure})"
        yield BackendMessage(
            MessageType.COMPACTED, content=(
                f"context compacted: {why}; {boundary - 1} earlier messages replaced by {source}, "
                f"about {before} -> {after} tokens (compaction {number}/{MAX_COMPACTIONS} in a row)"),
            details={"tokens_before": before, "tokens_after": after, "messages_removed": boundary - 1,
                     "summary": "model" if summary else "mechanical"})

    async def _summarize(self, older: list[dict[str, Any]]) -> tuple[str | None, str]:
        """The model's summary of `older` by one small request, or (None, why it failed)."""
        client = self._client
        assert client is not None
        request = SUMMARY_REQUEST.format(transcript=render_transcript(older))
        try:
            answer = await client.messages.create(
                model=self.model, max_tokens=SUMMARY_MAX_TOKENS, system=SUMMARY_SYSTEM,
                messages=[{"role": "user", "content": request}],
                timeout=min(self.options.request_timeout, SUMMARY_TIMEOUT))
        except Exception as exc:  # noqa: BLE001 - any failure falls back to the mechanical summary
            status = getattr(exc, "status_code", None)
            failure = (f"the summary request failed: {status} {error_type(getattr(exc, 'body', None)) or ''}".strip()
                       if status is not None else f"the summary request failed: {type(exc).__name__}")
            log.info("%s (%s)", failure, self.redact(error_message(exc)))
            return None, failure
        self.ledger.settle(api_usage(getattr(answer, "usage", None)))
        text = "".join(getattr(block, "text", "") for block in getattr(answer, "content", None) or []
                       if getattr(block, "type", None) == "text").strip()
        return (text, "") if text else (None, "the summary request came back empty")

    def _escalate_max_tokens(self) -> str:
        if self._escalated:
            return ""
        self._escalated = True
        ceiling = model_output_limit(self.model)
        if ceiling is None or self._max_tokens >= ceiling:
            return ""
        self._max_tokens = min(ceiling, self._max_tokens * 2)
        return f" (max_tokens raised to {self._max_tokens})"

    # ------------------------------------------------------------------ tools
    def _is_agenter_tool(self, name: str) -> bool:
        return name == REFUSAL_TOOL_NAME or (name == STRUCTURED_OUTPUT_TOOL_NAME and self.spec.output_type is not None)

    async def _run_tools(self, content: list[dict[str, Any]], input_errors: dict[str, str],
                         results: list[dict[str, Any]]) -> AsyncIterator[BackendMessage]:
        """Answer every tool_use of one response, in order, into `results`.

        Consecutive calls of the session's tools go to the executor together (the gate first,
        read-only ones side by side); agenter's refusal and output tools, and calls whose input
        could not be read, are answered on their own. Once the turn has ended (refusal, accepted
        output), the calls after it are answered without running.
        """
        batch: list[dict[str, Any]] = []
        for block in content:
            if block["type"] != "tool_use":
                continue
            if self._turn_ended():
                results.append(tool_result(block["id"], SKIPPED_RESULT, is_error=True))
                continue
            error = input_errors.get(block["id"])
            if error is None and not self._is_agenter_tool(block["name"]):
                batch.append(block)
                continue
            async for message in self._run_batch(batch, results):
                yield message
            batch = []
            async for message in self._call_inline(block, results, error):
                yield message
        async for message in self._run_batch(batch, results):
            yield message

    async def _call_inline(self, block: dict[str, Any], results: list[dict[str, Any]],
                           input_error: str | None) -> AsyncIterator[BackendMessage]:
        """Refusal, structured output, or a call whose input is not a JSON object: a TOOL_CALL
        message, the reply, its TOOL_RESULT."""
        name, arguments, tool_id = block["name"], block.get("input") or {}, block["id"]
        yield BackendMessage(MessageType.TOOL_CALL, tool_name=name, tool_input=arguments, tool_call_id=tool_id)
        if input_error:
            reply = ToolReply(f"Could not run {name}: {input_error}. Call it again with a JSON object.",
                              is_error=True)
        elif name == REFUSAL_TOOL_NAME:
            reply = self.refuse(arguments)
        else:
            reply = self.accept_output(arguments)
        content = _truncate(reply.text, MAX_OUTPUT_CHARS)
        results.append(tool_result(tool_id, content, is_error=reply.is_error))
        yield BackendMessage(MessageType.TOOL_RESULT, content=_truncate(content, EVENT_TEXT_LIMIT),
                             tool_name=name, tool_call_id=tool_id, is_error=reply.is_error)

    async def _run_batch(self, blocks: list[dict[str, Any]],
                         results: list[dict[str, Any]]) -> AsyncIterator[BackendMessage]:
        """Run calls through the executor in a task of their own, relaying its messages as they
        come. A tool runs only after its TOOL_CALL message was taken (lock-step with the session,
        so a budget that stops the turn stops it before the next tool); if the turn is cancelled
        or closed, the batch is cancelled and every call still gets its one result."""
        if not blocks:
            return
        executor = self._executor
        assert executor is not None
        relay = self._relay = Relay()
        uses = [ToolUse(b["id"], b["name"], b.get("input") or {}) for b in blocks]

        async def run() -> list[ToolResult]:
            try:
                return await executor.run_batch(uses)
            finally:
                relay.close()

        task = asyncio.ensure_future(run())
        answered: list[ToolResult] | None = None
        try:
            while (item := await relay.next()) is not None:
                message, taken = item
                yield message
                if taken is not None and not taken.done():
                    taken.set_result(None)
            answered = await task
        finally:
            if answered is None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait({task}, timeout=self.settle_seconds)
                if task.done() and not task.cancelled() and task.exception() is None:
                    answered = task.result()
                else:
                    answered = executor.last_results or []
            self._relay = None
            results.extend(result.to_block() for result in answered)

    async def _announce(self, use: ToolUse) -> None:
        """The executor is about to run `use` (it passed the gate): report the call and wait until
        the session has taken the report."""
        relay = self._relay
        if relay is not None:
            raw = {"type": "tool_use", "id": use.id, "name": use.name, "input": dict(use.input)}
            if use.name == BASH_TOOL_NAME:
                self._exit_code = None
                await relay.announce(BackendMessage(
                    MessageType.COMMAND_START, tool_name=use.name, tool_input=dict(use.input), tool_call_id=use.id,
                    details={"command": use.input.get("command")}, raw=raw))
            else:
                await relay.announce(BackendMessage(MessageType.TOOL_CALL, tool_name=use.name,
                                                    tool_input=dict(use.input), tool_call_id=use.id, raw=raw))

    def _report_result(self, result: ToolResult) -> None:
        relay = self._relay
        edits, self._edits = self._edits, []
        if relay is None:
            return
        content = _truncate(result.content, EVENT_TEXT_LIMIT)
        if result.name == BASH_TOOL_NAME:
            relay.post(BackendMessage(MessageType.COMMAND_END, content=content, tool_name=result.name,
                                      tool_call_id=result.tool_use_id, is_error=result.is_error,
                                      details={"exit_code": self._exit_code}))
            self._exit_code = None
            return
        relay.post(BackendMessage(MessageType.TOOL_RESULT, content=content, tool_name=result.name,
                                  tool_call_id=result.tool_use_id, is_error=result.is_error))
        for path, added, removed in edits:
            relay.post(BackendMessage(MessageType.FILE_EDIT, tool_name=result.name, tool_call_id=result.tool_use_id,
                                      details={"path": path, "lines_added": added, "lines_removed": removed}))

    async def _run_file_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        toolbox = self._toolbox
        assert toolbox is not None
        if name in READ_TOOLS and self._in_results_dir(arguments.get("path")):
            toolbox = self._results_box or toolbox
        # A tracked thread: a turn cancelled meanwhile waits for it before its last snapshot.
        outcome = await self.in_thread_named(name, toolbox.run, name, arguments)
        return self._file_reply(name, outcome)

    async def _run_text_editor(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        toolbox = self._toolbox
        assert toolbox is not None
        if arguments.get("command") == "view" and self._in_results_dir(arguments.get("path")):
            toolbox = self._results_box or toolbox
        outcome = await self.in_thread_named(name, toolbox.run_text_editor, arguments)
        return self._file_reply(name, outcome)

    def _file_reply(self, name: str, outcome: ToolOutcome) -> ToolReply:
        """What a file tool changed (tracked), refused (a denial) and tells the model."""
        self.track(written=sorted(outcome.written), deleted=sorted(outcome.deleted))
        self._edits.extend((path, added, removed) for path, (added, removed) in outcome.edits.items())
        if outcome.refused is not None:
            # The gate allowed the call; the sandbox's path check (or allowed_write_paths) did not.
            rule = "allowed_write_paths" if "writes are limited to" in outcome.content else "sandbox"
            self.deny(name, outcome.refused, outcome.content, rule)
        return ToolReply(outcome.content, outcome.is_error)

    async def _run_bash(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolReply("'command' must be a non-empty string", is_error=True)
        timeout = timeout_of(arguments, self.options.anthropic_shell_timeout)
        result = await run_shell(command, cwd=self.cwd, timeout=timeout, sandbox=self._shell_sandbox,
                                 env=self._shell_env)
        self._exit_code = result.exit_code
        # What a command prints goes to the model: keys it finds are hidden like everywhere else.
        return ToolReply(self.redact(result.text), result.is_error)

    async def _run_custom_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        return await self.run_tool(self._custom_tools[name], arguments)

    def _in_results_dir(self, path: object) -> bool:
        """An absolute path into the run's tool-results folder (read there, not in the workspace)."""
        results = self._results_dir
        if results is None or not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
            return False
        return os.path.normpath(path).startswith(str(results) + os.sep)

    # ------------------------------------------------------------------ requests
    def _request_params(self) -> dict[str, Any]:
        options = self.options
        messages = with_cache_marks(self._messages) if options.anthropic_prompt_caching else self._messages
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._max_tokens,
            "system": self._system_blocks,
            "tools": self._tool_definitions,
            "messages": messages,
        }
        if options.temperature is not None:
            params["temperature"] = options.temperature
        thinking = options.thinking
        if isinstance(thinking, int):
            params["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        elif thinking is not None:
            params["thinking"] = {"type": thinking}
        if options.effort is not None:
            params["output_config"] = {"effort": options.effort}
        return params

    async def _respond(self, response: StreamAccumulator) -> AsyncIterator[BackendMessage]:
        """One model response, streamed; failed attempts are retried as the policy says."""
        attempt = 0
        while True:
            try:
                async for message in self._stream_once(response):
                    yield message
                return
            except Exception as exc:
                retry = self._retry.decide(exc, attempt)
                if retry is None:
                    raise
            attempt += 1
            yield BackendMessage(MessageType.STATUS, content=(
                f"retrying after {retry.summary} (retry {attempt}/{self.options.max_retries}, "
                f"waiting {retry.delay:.1f}s)"))
            await asyncio.sleep(retry.delay)

    async def _stream_once(self, response: StreamAccumulator) -> AsyncIterator[BackendMessage]:
        import anthropic

        assert self._client is not None
        response.reset()  # a retry starts the response from scratch
        settled = False
        try:
            stream = await self._client.messages.create(**self._request_params(), stream=True)
            async with stream:
                async for event in stream:
                    usage_before = response.usage
                    completed = response.feed(event)
                    if response.finished and not settled:
                        # Priced once, when the response is complete (message_stop).
                        self.ledger.settle(response.usage)
                        settled = True
                    elif response.usage is not usage_before:
                        # Budgets see the tokens as they arrive, at estimated per-token rates.
                        self.ledger.running(response.usage)
                    delta = _text_delta(event)
                    if delta:
                        # Streamed as it arrives; the whole text that follows is not sent again.
                        yield BackendMessage(MessageType.TEXT_DELTA, content=delta, raw=event)
                    if completed is not None:
                        message = _block_message(completed)
                        if message is not None:
                            yield message
        except Exception as exc:
            if not isinstance(exc, anthropic.APIError) and is_transport_error(exc):
                raise StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        finally:
            if not settled:
                # Dropped, failed or cancelled: the tokens streamed so far were still spent.
                self.ledger.abandon_running()
        if not response.finished:
            raise StreamIncomplete("the response stream ended before message_stop")


def _text_delta(event: Any) -> str | None:
    """The text of a text_delta stream event (None for any other event)."""
    if getattr(event, "type", None) != "content_block_delta":
        return None
    delta = getattr(event, "delta", None)
    if getattr(delta, "type", None) != "text_delta":
        return None
    text = getattr(delta, "text", None)
    return text if isinstance(text, str) else None


def _block_message(block: StreamedBlock) -> BackendMessage | None:
    """Text and thinking as each block completes. Tool calls are reported when they run."""
    if block.type == "text" and block.text:
        return BackendMessage(MessageType.TEXT, content=block.text)
    if block.type == "thinking" and block.thinking:
        return BackendMessage(MessageType.THINKING, content=block.thinking)
    return None


@functools.lru_cache(maxsize=1)
def _shared_ssl_context() -> ssl.SSLContext:
    """The system trust store (honours SSL_CERT_FILE / SSL_CERT_DIR), shared by all sessions."""
    return ssl.create_default_context()


def _has_shell(settings: BackendSettings[Any]) -> bool:
    """The bash tool is offered when anthropic_shell is on. With sandbox=True it must be confined
    (Landlock, bubblewrap, Seatbelt): where none is, the requirement check fails with what to do
    rather than quietly leaving the tool out."""
    return bool(getattr(settings.options, "anthropic_shell", True))
