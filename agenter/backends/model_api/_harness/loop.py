"""HarnessBackend: agenter's own tool-use loop over any model wire (wire.py).

One turn is one iteration: the prompt is appended to the conversation as a user turn, then the
model and the tools take turns until the model stops asking for tools (or refuses, or returns its
final_result). The conversation is kept for the next turn.

Around each model response the loop keeps the conversation valid and going:
- a response cut off at the output limit: its complete tool calls run, max_tokens is raised once
  (to the wire's `output_limit`), then up to MAX_CUTOFF_NUDGES "continue" notes;
- a request refused as too long (a `context_length` failure) is withheld and sent again after a
  compaction, and so is the next request after a response that filled the context window
  (compaction.py; at most MAX_COMPACTIONS in a row);
- a session with structured output whose model stops without calling final_result is reminded
  once;
- every tool_use is answered by exactly one tool_result, also when the turn fails or is
  cancelled (conversation.close_open_tool_uses);
- a failed request is retried as the one policy says (retry.py over agenter.backends._failures);
- tool calls the model writes in its text (textcalls.py), for models that make none on the wire:
  `LoopConfig.tool_calls` "text" (or a wire without native tools) describes the tools in the
  system prompt, sends the conversation as text and reads each reply for calls; "auto" starts
  native and switches to text for the rest of the session when a reply makes no native call but
  holds a text call naming an offered tool (that reply's calls run); a call that cannot be read
  goes back to the model with the parse error. A file's text and an edit's texts go as code
  blocks after the call (the parser is given the tools' schemas for that), in the model's
  replies and in the history sent back.

A provider's backend subclasses HarnessBackend and writes only what is its own: its options and
`loop_config` (what the harness reads of them), `requirements`, and `_open_wire` (its client and
wire). Analysis and patch mode (and a plan-mode policy) run the same loop read-only: only the
tools that read are offered and the bash tool's sandbox is read-only.

The tools of the MCP servers in the `mcp_servers` option are the model's too (mcptools.py,
started at connect and ended at disconnect). The conversation is kept in a conversation store
(keeper.py: `_save_conversation` when a prompt was added, after each round of tool results, at the
end of a turn and after a compaction), and a connect with `SessionSpec.resume_session_id` loads it
(`_load_conversation`), so `resume=` continues a run of another process (in text tool-call mode
too: the store's metadata says so, and the resumed session starts in it).

Approvals that can wait (docs/approvals.md): a call the gate defers ends the turn with the calls
of its response from it on pending (dispatch.py): the conversation is saved with placeholder
results for them, the turn reports them (`defer_calls`), and the session has the run kept by
`hold` (a pause record beside the conversation, in the same store). A later process connects to
resume the conversation and `continue_paused` runs the pending calls with the person's answers,
puts their results where the placeholders were, and goes on with the loop from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agenter._errors import BackendError, ConfigurationError
from agenter.backends._mcp import MCPServer
from agenter.backends._pauses import keep, no_pause_without_store, store_for_pauses
from agenter.backends._prompts import (
    REFUSAL_TOOL_DESCRIPTION,
    REFUSAL_TOOL_NAME,
    REFUSAL_TOOL_SCHEMA,
    STRUCTURED_OUTPUT_TOOL_NAME,
    output_schema,
)
from agenter.backends._steer import EMPTY, IDLE, steered, undelivered
from agenter.backends.base import BackendMessage, BackendSettings, BaseBackend, MessageType, OptionsT, SessionSpec
from agenter.backends.model_api._harness.codeedits import code_edits
from agenter.backends.model_api._harness.compaction import Compactor
from agenter.backends.model_api._harness.conversation import append_user_content, close_open_tool_uses
from agenter.backends.model_api._harness.dispatch import PAUSED_RESULT, ToolRunner
from agenter.backends.model_api._harness.files import (
    FILE_TOOL_DEFINITIONS,
    FILE_TOOL_NAMES,
    TEXT_EDITOR_TOOL_DEFINITION,
    TEXT_EDITOR_TOOL_NAME,
)
from agenter.backends.model_api._harness.keeper import ConversationKeeper, load, same_store, stores_for
from agenter.backends.model_api._harness.options import HarnessOptions
from agenter.backends.model_api._harness.prompts import (
    ANNOUNCED_CODE_NUDGE,
    ATTACHED_ANSWER,
    ATTACHED_NOTE,
    CODE_EDITS_NOT_WRITTEN,
    CODE_WITHOUT_CALL_NUDGE,
    CODE_WITHOUT_PATH_NUDGE,
    CONTEXT_NUDGE,
    CUTOFF_NUDGE,
    EMPTY_REPLY_CALL_NUDGE,
    EMPTY_REPLY_NUDGE,
    REPEATING_CALL_NUDGE,
    REPEATING_NUDGE,
    STEER_NOTE,
    STRUCTURED_NUDGE,
    tool_guidance,
)
from agenter.backends.model_api._harness.repetition import STOPPED_REPEATING, RepetitionWatch, repeating_tail
from agenter.backends.model_api._harness.retry import RetryPolicy
from agenter.backends.model_api._harness.shell import BASH_TOOL_NAME, bash_tool_definition, network_allowed
from agenter.backends.model_api._harness.textcalls import (
    STOP_SEQUENCES,
    describe_tools,
    fenced,
    looks_like_text_calls,
    new_call_id,
    parse_calls,
    to_text_messages,
)
from agenter.backends.model_api._harness.wire import (
    Block,
    BlockDone,
    Delta,
    Message,
    ModelWire,
    Piece,
    Running,
    StreamIncomplete,
    WireRequest,
    WireResponse,
)
from agenter.host.redact import Redactor
from agenter.host.requirements import PythonPackage, Requirement
from agenter.sandbox.confine import ShellSandboxAvailable
from agenter.store import ConversationStore

MAX_CUTOFF_NUDGES = 3
#: The files a first prompt names that go with it (attach_named_files): at most this many, and
#: this many characters of text in all (about 8k tokens).
ATTACHED_FILES = 4
ATTACHED_CHARS = 32_000


@dataclass(frozen=True)
class LoopConfig:
    """What the harness reads of a backend's options, under neutral names: each provider's
    backend maps its own options onto it (`HarnessBackend.loop_config`)."""

    #: Output token limit per model response (raised once after a cut-off, see the module).
    max_tokens: int
    #: Model responses per execute() call before the loop stops, and the option that sets it
    #: (named in the STATUS message).
    max_turns: int = 50
    max_turns_option: str = "max_turns_per_iteration"
    #: The bash tool, and the option that turns it off (named in error messages).
    shell: bool = True
    shell_option: str = "shell"
    #: How the bash tool is confined with sandbox=True ("auto" or a mechanism of agenter.sandbox.confine).
    shell_sandbox: str = "auto"
    #: Seconds a command may run unless the model asks for another limit.
    shell_timeout: float = 120.0
    #: Anthropic's text editor tool instead of agenter's file tools (a wire with provider_tools).
    text_editor: bool = False
    max_retries: int = 4
    max_retry_wait: float = 60.0
    request_timeout: float = 600.0
    #: Sampling and reasoning settings sent with every request of the loop (None: the model's default).
    temperature: float | None = None
    thinking: str | int | None = None
    effort: str | None = None
    #: How the model makes tool calls: "native" (on the wire), "text" (written in its reply,
    #: textcalls.py), "auto" (native until a reply holds text calls instead); and the option
    #: that sets it (named in messages).
    tool_calls: str = "native"
    tool_calls_option: str = ""  # empty: the backend has no such option (its models call tools)
    #: Text mode: a reply that makes no call has its code blocks read as file edits (codeedits.py).
    code_edits: bool = True
    #: Text mode: a reply whose code blocks were all written cleanly as edits ends the turn.
    edits_end_turn: bool = True
    #: The files the task names go with its first message (their text in fenced blocks): True,
    #: False, or None (in text tool-call mode only: small local models edit what they see, and
    #: rarely read first).
    attach_named_files: bool | None = None
    #: MCP servers whose tools the model gets (mcptools.py).
    mcp_servers: tuple[MCPServer, ...] = ()
    #: Where the conversation is kept (keeper.py): None, the default file store; False, nowhere
    #: but the process; else a ConversationStore.
    conversation_store: Any = None


@dataclass
class _Answer:
    """Where one attempt at a model response leaves it (an async generator returns nothing)."""

    response: WireResponse | None = None


def _has_code_block(text: str) -> bool:
    """Whether a line of `text` opens (or closes) a fenced code block."""
    return any(line.lstrip().startswith(("```", "~~~")) for line in text.splitlines())


class HarnessBackend(BaseBackend[OptionsT]):
    """agenter's own agent over a model wire. Subclass it per provider: declare the class
    attributes, and write `loop_config`, `requirements` and `_open_wire`."""

    reserved_tool_names: ClassVar[frozenset[str]] = frozenset({TEXT_EDITOR_TOOL_NAME, BASH_TOOL_NAME,
                                                               *FILE_TOOL_NAMES})
    # Every tool call of the loop passes the gate; "network" is the bash tool's network access,
    # "mcp" the MCP servers' starts and tool calls.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell", "network", "mcp", "custom"})

    def __init__(self, settings: BackendSettings[OptionsT]):
        super().__init__(settings)
        config = self.loop_config(self.options)
        if isinstance(self.options, HarnessOptions):  # the options every harness backend has
            config = dataclasses.replace(config, code_edits=self.options.text_code_edits,
                                         edits_end_turn=self.options.text_edits_end_turn,
                                         attach_named_files=self.options.attach_named_files)
        self.config = config
        self._wire: ModelWire | None = None
        self._compactor: Compactor | None = None
        self._retry: RetryPolicy | None = None
        self._tools = ToolRunner(self)
        self._messages: list[Message] = []
        self._tool_definitions: list[dict[str, Any]] = []
        self._system = ""
        self._max_tokens = self.config.max_tokens
        self._escalated = False
        self._pending_results: list[Block] | None = None
        #: Text tool-call mode (see the module docstring): its system prompt once switched on,
        #: the parse error to send back, and the STATUS note of an automatic switch.
        self._text_system: str | None = None
        self._text_feedback: str | None = None
        self._text_notice: str | None = None
        #: The files the run's prompts name (the files an unlabelled code block may apply to), and
        #: whether this turn told the model why a code block was not written.
        self._named: list[str] = []
        self._edits_only = False
        self._code_told = False
        #: Whether the latest reply's code blocks included a quote of a file as it is (no nudge).
        self._quoted = False
        #: The latest reply when its call could not be read, and whether it repeated the one
        #: before it word for word after the repair message (the turn then ends).
        self._last_broken: str | None = None
        self._broken_again = False
        #: Messages the user sent while a turn runs (steer), and whether one runs.
        self._steers: list[str] = []
        self._in_turn = False
        self._keeper: ConversationKeeper | None = None
        self._store: ConversationStore | None = None
        self._resume_store: ConversationStore | None = None
        self._loaded: Any = None  # the agenter.store.Conversation a resume loaded
        #: What `hold` adds of the harness's own to a pause record (input errors of pending calls).
        self._held: dict[str, Any] = {}

    # ------------------------------------------------------------------ what a provider writes
    @classmethod
    def loop_config(cls, options: Any) -> LoopConfig:
        """The harness's settings from this backend's options."""
        raise NotImplementedError

    async def _open_wire(self) -> ModelWire:
        """Import the SDK (off the event loop), build the client (redacting its key) and return
        the wire. Raises ConfigurationError for missing credentials."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the conversation store (keeper.py)
    async def _load_conversation(self, session_id: str) -> list[Message] | None:
        """The stored conversation `session_id` names, to continue it (None: none is stored;
        connect then refuses to resume)."""
        store = self._resume_store
        if store is None:
            return None
        found = await load(store, session_id, backend=self.name, redact=self.redact)
        if found is None:
            return None
        messages, self._loaded = found
        return messages

    async def _save_conversation(self) -> None:
        """Keep the conversation where it is complete (every tool_use answered)."""
        if self._keeper is not None:
            await self._keeper.keep(self._messages)

    def _start_keeping(self, session_id: str) -> None:
        """The keeper of this session: it continues the loaded conversation when the run writes
        to the store it came from, else saves it whole first."""
        store = self._store
        if store is None:
            return
        metadata = {"backend": self.name, "model": self.ledger.model,
                    "tools": [tool["name"] for tool in self._tool_definitions],
                    "tool_calls": "native" if self._text_system is None else "text"}
        loaded = self._loaded
        if loaded is None:
            self._keeper = ConversationKeeper(store, session_id, metadata)
        elif self._resume_store is not None and same_store(store, self._resume_store):
            self._keeper = ConversationKeeper(store, session_id, metadata, stored=loaded.messages,
                                              revision=loaded.revision)
        else:
            self._keeper = ConversationKeeper(store, session_id, metadata, revision=None)

    def _resumes_in_text_mode(self) -> bool:
        """A resumed conversation that was in text tool-call mode (an automatic switch included)
        goes on in it: its tool calls are in its text."""
        loaded = self._loaded
        return loaded is not None and self.config.tool_calls != "native" and \
            loaded.metadata.get("tool_calls") == "text"

    def _cannot_resume(self, session_id: str) -> str:
        where = ("conversation_store=False keeps the conversation only in the process that ran it"
                 if self._resume_store is None else
                 f"{self._resume_store!r} holds no conversation under that id (resume with the earlier run's "
                 "transcript, or with the log_dir that run had)")
        return f"the {self.name} backend cannot resume session {session_id!r}: {where}"

    # ------------------------------------------------------------------ class-level checks
    @classmethod
    def _config_of(cls, settings: BackendSettings[Any]) -> LoopConfig:
        options = settings.options if isinstance(settings.options, cls.options_model) else cls.options_model()
        return cls.loop_config(options)

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        """The bash tool's sandbox, when it is offered with sandbox=True (where none can be
        built the check fails with what to do, rather than quietly leaving the tool out). A
        provider adds its package in front."""
        config = cls._config_of(settings)
        needs: list[Requirement] = []
        if config.mcp_servers:
            needs.append(PythonPackage(module="mcp", distribution="mcp", min_major=2,
                                       install="pip install 'agenter-sdk[mcp]'"))
        if settings.sandbox and config.shell:
            needs.append(ShellSandboxAvailable(config.shell_sandbox))
        return needs

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        from agenter.backends._confinement import check_network_rules

        config = cls._config_of(settings)
        check_network_rules(settings, backend=cls.name, shell=config.shell, shell_option=config.shell_option)
        no_pause_without_store(settings.on_ask, config.conversation_store)

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> ConversationStore:
        """The store the conversation of a run with these settings is kept in, where its pause
        record is too (the conversation_store option; by default the file store beside log_dir's
        transcripts, else in the user's cache)."""
        return store_for_pauses(cls._config_of(settings).conversation_store, log_dir,
                                Redactor(extra=settings.options.secrets()))

    # ------------------------------------------------------------------ state
    @property
    def messages(self) -> list[Message]:
        """The conversation so far (the messages sent to the model, in the neutral shape)."""
        return self._messages

    @property
    def has_shell(self) -> bool:
        """Whether the model gets the bash tool. With sandbox=True it must be confined (Landlock,
        bubblewrap, Seatbelt): where none is, the requirement check fails with what to do."""
        return self.config.shell

    @property
    def read_only_session(self) -> bool:
        """Analysis or patch mode, or a plan-mode policy: no tool that writes is offered."""
        gate = self.gate
        return self.spec.mode in ("analysis", "patch") or (gate is not None and gate.mode == "plan")

    @property
    def shell_network(self) -> bool:
        """Whether sandboxed commands get the network (see `shell.network_allowed`)."""
        return network_allowed(self.settings.permissions)

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        from agenter.usage import is_known_model

        self._store, self._resume_store = stores_for(self.config.conversation_store, spec.log_dir,
                                                     spec.resume_log_dir, self.redact)
        session_id = uuid.uuid4().hex
        if spec.resume_session_id:
            stored = await self._load_conversation(spec.resume_session_id)
            if stored is None:
                raise ConfigurationError(self._cannot_resume(spec.resume_session_id), parameter="resume")
            self._messages, session_id = list(stored), spec.resume_session_id
        await self._tools.open(spec)
        # The first imports of the SDK and of the price table take seconds on a busy machine:
        # the wire imports off the event loop, and so does the price lookup.
        wire = self._wire = await self._open_wire()
        config = self.config
        if not wire.features.native_tools and config.tool_calls == "native":
            raise ConfigurationError(
                f"the {self.name} backend's wire has no native tool calls: pass {config.tool_calls_option}='text' "
                "(or 'auto') for tool calls written in the model's reply", parameter=config.tool_calls_option)
        await asyncio.to_thread(is_known_model, self.ledger.model, self.ledger.provider)
        self._retry = RetryPolicy(
            max_retries=config.max_retries, max_wait=config.max_retry_wait, backend=self.name,
            api_label=wire.api_label, auth_hint=wire.auth_hint, failure=wire.failure, redact=self.redact)
        self._compactor = Compactor(wire, self.ledger, backend=self.name, request_timeout=config.request_timeout,
                                    redact=self.redact)
        self._session_id = session_id
        self._system = self._system_prompt()
        self._tool_definitions = self._build_tool_definitions(spec)
        if config.tool_calls == "text" or not wire.features.native_tools or self._resumes_in_text_mode():
            self._start_text_mode()
        self._start_keeping(session_id)

    async def _disconnect(self) -> None:
        wire, self._wire = self._wire, None
        try:
            if wire is not None:
                with contextlib.suppress(Exception):  # closing must never mask the session's outcome
                    await wire.close()
        finally:
            await self._tools.close()

    def _system_prompt(self) -> str:
        shared = self.instructions(refusal_tool=REFUSAL_TOOL_NAME, output_channel="tool")
        guidance = tool_guidance(cwd=str(self.cwd), shell=self.has_shell, read_only=self.read_only_session)
        return guidance + "\n\n" + shared

    def _build_tool_definitions(self, spec: SessionSpec) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        offered = self._tools.offered_file_tools()
        if offered == [TEXT_EDITOR_TOOL_NAME]:
            tools.append(dict(TEXT_EDITOR_TOOL_DEFINITION))
        else:
            tools.extend(dict(definition) for definition in FILE_TOOL_DEFINITIONS if definition["name"] in offered)
        if self.has_shell:
            tools.append(bash_tool_definition(sandbox=self.settings.sandbox, network=self.shell_network,
                                              read_only=self.read_only_session, timeout=self.config.shell_timeout))
        for tool in self.settings.tools:
            tools.append({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
        if self._tools.mcp is not None:
            tools.extend(self._tools.mcp.definitions(read_only=self.read_only_session))
        tools.append({"name": REFUSAL_TOOL_NAME, "description": REFUSAL_TOOL_DESCRIPTION,
                      "input_schema": REFUSAL_TOOL_SCHEMA})
        if spec.output_type is not None:
            tools.append({
                "name": STRUCTURED_OUTPUT_TOOL_NAME,
                "description": "Return the final result of the task. Call it once, when the work is done.",
                "input_schema": output_schema(spec.output_type),
            })
        return tools

    # ------------------------------------------------------------------ one turn
    def steer(self, text: str) -> str | None:
        """Take a user message for the running turn: it reaches the model at the next safe point,
        with the next request after the tool results, or, when the model had finished, as a new
        message the turn goes on with. Between turns there is nothing to deliver it to."""
        if not isinstance(text, str) or not text.strip():
            return EMPTY
        if not self._in_turn:
            return IDLE
        self._steers.append(text)
        return None

    def _files_named_in(self, prompt: str) -> list[str]:
        from agenter.backends._workspace import list_files, select_named_files

        return select_named_files(prompt, list_files(self.cwd))

    def _with_files(self, prompt: str, named: list[str]) -> tuple[str, list[str]]:
        """The prompt with the text of the files it names (at most ATTACHED_FILES, within
        ATTACHED_CHARS in all; a larger one is left for the model to read)."""
        parts, shown, total = [], [], 0
        for path in named[:ATTACHED_FILES]:
            text = self._tools.read_text(path)
            if text is None or total + len(text) > ATTACHED_CHARS:
                continue
            total += len(text)
            shown.append(path)
            parts.append(f"{path}\n{fenced(text if text.endswith(chr(10)) or not text else text + chr(10), path)}")
        if not parts:
            return prompt, []
        # Text mode reads code blocks as edits: say last how to answer, with the files at hand.
        after = "\n\n" + ATTACHED_ANSWER if self._text_system is not None and self._edits_code_blocks() else ""
        return prompt + "\n\n" + ATTACHED_NOTE + "\n\n" + "\n\n".join(parts) + after, shown

    def _take_steers(self, where: str) -> tuple[list[Block], list[BackendMessage]]:
        """The pending steers as text blocks for the next user message, and their STEERED messages."""
        steers, self._steers = self._steers, []
        blocks: list[Block] = [{"type": "text", "text": STEER_NOTE + text} for text in steers]
        return blocks, [steered(text, where) for text in steers]

    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        first = not self._messages
        attach = self.config.attach_named_files
        attaching = first and (attach or (attach is None and self._text_system is not None))
        # The files a prompt names serve attaching and code blocks as edits (text mode, from the
        # start or once switched): a turn with native calls only does not list the repository.
        named: list[str] = []
        if attaching or (self._edits_code_blocks() and (self._text_system is not None or self.config.tool_calls == "auto")):
            named = await self.in_thread(self._files_named_in, prompt)
            self._named.extend(path for path in named if path not in self._named)
        if attaching and named:
            prompt, shown = await self.in_thread(self._with_files, prompt, named)
            if shown:
                yield BackendMessage(MessageType.STATUS, content=f"the task names {', '.join(shown)}: their text "
                                     "goes with it")
        append_user_content(self._messages, [{"type": "text", "text": prompt}])
        self._in_turn = True
        await self._save_conversation()
        async for message in self._in_a_turn(self._tool_loop()):
            yield message

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued (see the module docstring)."""
        own = held.get("harness") or {}
        blocks = self._paused_blocks([str(call.get("id")) for call in held.get("pending") or []])
        gate = self.gate
        assert gate is not None
        gate.restore_approvals(own.get("approvals") or [])
        self._max_tokens = int(own.get("max_tokens") or self._max_tokens)
        self._escalated = bool(own.get("escalated"))
        self._in_turn = True
        async for message in self._in_a_turn(self._resume_loop(blocks, own.get("input_errors") or {}, answers)):
            yield message

    def _paused_blocks(self, ids: list[str]) -> list[Block]:
        """The pending calls' tool_use blocks, from the loaded conversation: it must end where the
        run paused (their placeholder results last), else it went on without them."""
        messages = self._messages
        last = messages[-1]["content"] if messages and messages[-1]["role"] == "user" else []
        waiting = {block.get("tool_use_id") for block in last if isinstance(block, dict)
                   and block.get("type") == "tool_result" and block.get("content") == PAUSED_RESULT}
        calls = messages[-2]["content"] if len(messages) > 1 and messages[-2]["role"] == "assistant" else []
        blocks = [block for block in calls if isinstance(block, dict) and block.get("type") == "tool_use"
                  and block.get("id") in ids]
        if not ids or waiting != set(ids) or len(blocks) != len(ids):
            raise ConfigurationError(
                f"the conversation {self.session_id!r} went on after the run paused (it no longer ends at the "
                "calls waiting for approval), so the paused calls cannot be answered", parameter="handle")
        return blocks

    async def _resume_loop(self, blocks: list[Block], input_errors: dict[str, str],
                           answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The pending calls with the answers, their results in place of the placeholders, then
        the loop goes on (or pauses again at a later call that asks)."""
        results: list[Block] = []
        try:
            async for message in self._tools.run_tools(blocks, input_errors, results, answers):
                yield message
        finally:  # also when cancelled: the calls that ran have their results, the rest still wait
            answered = {block["tool_use_id"]: block for block in results}
            last = self._messages[-1]
            last["content"] = [answered.get(block.get("tool_use_id"), block) if block.get("type") == "tool_result"
                               else block for block in last["content"]]
        await self._save_conversation()
        if self._tools.pending:
            yield self._pause_here()
            return
        if self._tools.turn_ended():
            return
        async for message in self._tool_loop():
            yield message

    async def _in_a_turn(self, loop: AsyncIterator[BackendMessage]) -> AsyncIterator[BackendMessage]:
        """A turn's loop, and what every turn ends with: steers not delivered reported, every
        tool_use answered, the conversation saved."""
        try:
            async for message in loop:
                yield message
            self._in_turn = False
            for text in self._steers:  # the turn ended another way (refused, out of responses)
                yield undelivered(text, "the turn ended first")
        finally:
            self._in_turn = False
            self._steers = []
            self.advice = self._no_call_advice()
            # Invariant: every tool_use is answered, also when cancelled or failing mid-turn.
            close_open_tool_uses(self._messages, self._pending_results)
            self._pending_results = None
        await self._save_conversation()

    def _no_call_advice(self) -> str:
        """TurnReport.advice: what to try with a model that made no tool call in the turn (the
        session shows it only then)."""
        # Only a backend with the text option has a patch mode that needs no tool call (its
        # default context path shows the repository and asks for one answer).
        if self.read_only_session or not self.config.tool_calls_option:
            return ""
        patch = "mode='patch' asks the model for the change as one structured answer instead"
        if self._text_system is None:
            return (f"a model that writes its tool calls in its reply needs {self.config.tool_calls_option}='text' "
                    f"(docs/text-tool-calls.md); {patch}")
        return f"the model wrote no call in the form the system prompt describes; {patch}"

    async def _tool_loop(self) -> AsyncIterator[BackendMessage]:
        cutoffs = 0
        compactions = 0  # in a row: a response the model completes resets it
        nudged_for_result = False
        nudged_for_code = False
        nudged_for_nothing = False  # an empty reply, or one cut before its code (_nothing_written)
        told_repeating = False
        self._code_told = False
        limit = self.config.max_turns
        responses = 0
        while responses < limit:
            answer = _Answer()
            overflow: BackendError | None = None
            try:
                async for message in self._respond(answer):
                    yield message
            except BackendError as exc:
                # Withheld: a prompt that no longer fits is compacted and sent again; the error
                # surfaces only when compaction cannot help.
                if exc.kind != "context_length":
                    raise
                overflow = exc
            if overflow is not None:
                compactions += 1
                yield await self._compact(compactions, overflow)
                continue
            response = self._kept_response(answer)
            if self._text_notice is not None:
                yield BackendMessage(MessageType.STATUS, content=self._text_notice)
                self._text_notice = None
            responses += 1
            if response.stop != "context_length":
                compactions = 0
            content = response.content
            if content:
                self._messages.append({"role": "assistant", "content": content})
            if response.stop == "refusal":
                reason = response.text().strip() or (
                    f"The model declined the request (stop_reason={response.stop_detail or 'refusal'}).")
                self.refuse({"reason": reason, "category": "refusal"})
                return
            results: list[Block] = []
            self._pending_results = results
            async for message in self._tools.run_tools(content, response.input_errors, results):
                yield message
            self._pending_results = None
            if self._tools.pending:  # a call waits for a person: the run pauses here
                feedback, self._text_feedback = self._text_feedback, None
                append_user_content(self._messages, results + (
                    [{"type": "text", "text": feedback}] if feedback is not None else []))
                await self._save_conversation()
                yield self._pause_here()
                return
            follow_up: list[Block] = list(results)
            feedback, self._text_feedback = self._text_feedback, None
            if feedback is not None:  # a text call that could not be read: the model corrects it
                follow_up.append({"type": "text", "text": feedback})
            if self._tools.turn_ended():
                append_user_content(self._messages, follow_up)
                return
            if feedback is not None and self._broken_again:
                # Told how to write the call, the model wrote the same broken reply again: at a low
                # temperature it would go on doing so until the budget runs out (measured: eight
                # times). The turn ends; the validators' findings start the next one afresh.
                self._last_broken = None
                yield await self._turn_ends(follow_up, (
                    "the model wrote the same tool call that could not be read again, after being told how to "
                    "write it: the turn ends there"))
                return
            if self._edits_done(results, feedback):
                yield await self._turn_ends(follow_up, (
                    "the reply's code blocks were written as edits: the turn ends there (text_edits_end_turn)"))
                return
            if response.stop == "context_length":
                # The response filled the context window: its complete tool calls ran; the
                # history is compacted before the model continues.
                follow_up.append({"type": "text", "text": CONTEXT_NUDGE})
                append_user_content(self._messages, follow_up)
                compactions += 1
                yield await self._compact(compactions, None)
                continue
            if response.stop == "max_tokens":
                cutoffs += 1
                if repeating_tail(response.text()) is not None:
                    # A loop, not a long answer: asked to continue, with the repetition in its
                    # context, the model goes on repeating (repetition.py). Left out, told once.
                    if told_repeating:
                        yield await self._turn_ends(follow_up, (
                            "the model's response repeated the same lines until it was cut off, again after "
                            "being told: the turn ends there"))
                        return
                    told_repeating = True
                    self._leave_out_repetition()
                    follow_up.append({"type": "text", "text": REPEATING_NUDGE if self._edits_code_blocks()
                                      else REPEATING_CALL_NUDGE})
                    where = ("stopped by agenter" if response.stop_detail == STOPPED_REPEATING
                             else "cut off at max_tokens")
                    yield BackendMessage(MessageType.STATUS, content=(
                        f"response {where} while repeating the same lines: the repetition is left "
                        "out of the conversation and the model is told"))
                elif cutoffs > MAX_CUTOFF_NUDGES:
                    append_user_content(self._messages, follow_up)
                    yield BackendMessage(MessageType.ERROR, content=(
                        f"the model's responses were cut off at the output limit {cutoffs} times; "
                        "ending this iteration"), is_error=True)
                    return
                else:
                    note = self._escalate_max_tokens()
                    follow_up.append({"type": "text", "text": CUTOFF_NUDGE})
                    yield BackendMessage(MessageType.STATUS, content="response cut off at max_tokens; "
                                         f"asking the model to continue{note}")
            elif not results and feedback is None and not self._steers:
                if self.spec.output_type is not None and not nudged_for_result:
                    nudged_for_result = True
                    follow_up.append({"type": "text", "text": STRUCTURED_NUDGE})
                elif not nudged_for_code and self._code_without_call(response):
                    nudged_for_code = True
                    follow_up.append({"type": "text", "text": CODE_WITHOUT_CALL_NUDGE if not self.config.code_edits
                                      else CODE_WITHOUT_PATH_NUDGE})
                elif not nudged_for_nothing and (asked := self._nothing_written(response)) is not None:
                    nudged_for_nothing = True
                    nudge, why = asked
                    follow_up.append({"type": "text", "text": nudge})
                    yield BackendMessage(MessageType.STATUS, content=f"{why}: asking once more")
                else:
                    return
            if self._steers:
                # The safe point: after this response's tool calls ran, before the next request.
                where = ("after the tool calls, with their results" if results
                         else "after the model's answer: the turn goes on")
                blocks, steered = self._take_steers(where)
                follow_up.extend(blocks)
                for message in steered:
                    yield message
            append_user_content(self._messages, follow_up)
            await self._save_conversation()
        yield BackendMessage(MessageType.STATUS, content=(
            f"stopped after {limit} model responses in this iteration ({self.config.max_turns_option})"))

    def _pause_here(self) -> BackendMessage:
        """End the turn at the pending calls: the turn reports them (the session pauses the run)."""
        pending = self._tools.pending
        self.defer_calls(pending)
        self._held = {"input_errors": dict(self._tools.pending_errors)}
        asking = [call for call in pending if call.needs_approval]
        return BackendMessage(MessageType.STATUS, content=(
            f"paused: {len(asking)} call(s) wait for a person's approval ({asking[0].tool}: {asking[0].reason})"
            if asking else f"paused: {len(pending)} call(s) wait"), details={"pending": [c.id for c in pending]})

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run beside its conversation (agenter.store's pause records): the
        session's record with the harness's own part (the gate's "always" answers, the output
        limit as raised, input errors of pending calls). StoreError when the store fails."""
        gate = self.gate
        own = {**self._held, "approvals": gate.approvals if gate is not None else [],
               "max_tokens": self._max_tokens, "escalated": self._escalated}
        return await keep(self._store, record, backend=self.name, session_id=self.session_id, own={"harness": own})

    async def _compact(self, number: int, overflow: BackendError | None) -> BackendMessage:
        compactor = self._compactor
        assert compactor is not None
        message = await compactor.compact(self._messages, number, overflow)
        await self._save_conversation()
        return message

    async def _turn_ends(self, follow_up: list[Block], why: str) -> BackendMessage:
        """The turn ends early: the follow-up is kept in the conversation (saved), and the STATUS
        message that says `why`."""
        append_user_content(self._messages, follow_up)
        await self._save_conversation()
        return BackendMessage(MessageType.STATUS, content=why)

    def _leave_out_repetition(self) -> None:
        """The last reply, a text only, without its repetition (one round of it kept): what
        the model sees of it from now on (repetition.py)."""
        if not self._messages or self._messages[-1]["role"] != "assistant":
            return
        last = self._messages[-1]
        blocks = last["content"]
        if not isinstance(blocks, list) or len(blocks) != 1 or blocks[0].get("type") != "text":
            return
        offset = repeating_tail(blocks[0]["text"])
        if offset is not None and blocks[0]["text"][:offset].strip():
            last["content"] = [{"type": "text", "text": blocks[0]["text"][:offset].rstrip()}]

    def _escalate_max_tokens(self) -> str:
        if self._escalated:
            return ""
        self._escalated = True
        assert self._wire is not None
        ceiling = self._wire.features.output_limit
        if ceiling is None or self._max_tokens >= ceiling:
            return ""
        # 0: none was sent (the provider's default cut it off): ask for the model's ceiling.
        self._max_tokens = min(ceiling, self._max_tokens * 2) if self._max_tokens > 0 else ceiling
        return f" (max_tokens raised to {self._max_tokens})"

    # ------------------------------------------------------------------ model responses
    def _request(self) -> WireRequest:
        """The loop's next request: the session's system prompt and tools (fixed, so the prefix
        a provider caches stays the same), the conversation so far. In text mode the tools are
        in the system prompt and the conversation is sent as text."""
        config = self.config
        if self._text_system is not None:
            return WireRequest(system=self._text_system, messages=to_text_messages(self._messages, self._tool_definitions),
                               max_tokens=self._max_tokens, temperature=config.temperature,
                               thinking=config.thinking, effort=config.effort, stop=STOP_SEQUENCES)
        return WireRequest(system=self._system, messages=self._messages, tools=self._tool_definitions,
                           max_tokens=self._max_tokens, temperature=config.temperature, thinking=config.thinking,
                           effort=config.effort)

    def _kept_response(self, answer: _Answer) -> WireResponse:
        """The response as the loop goes on with it: native tool calls as the wire read them; in
        text mode (or on switching to it) the calls read from its text."""
        response = answer.response
        assert response is not None
        if self._text_system is None:
            if not self._switches_to_text(response):
                return response
            self._start_text_mode()
            self._text_notice = (
                "the model wrote its tool calls in its reply instead of on the wire: reading them from the text "
                f"from now on ({self.config.tool_calls_option}='text' starts that way)")
        text = response.text()
        turn = parse_calls(text, self._tool_definitions)
        self._text_feedback = turn.feedback
        broken = text.strip() if turn.error is not None else None
        self._broken_again = broken is not None and broken == self._last_broken
        self._last_broken = broken
        blocks, calls = turn.blocks, bool(turn.calls)
        self._quoted = False
        self._edits_only = False
        if not turn.calls and turn.error is None and self._edits_code_blocks():
            blocks, calls = self._code_blocks_as_calls(text, blocks)
            self._edits_only = calls
        kept = [block for block in response.content if block.get("type") not in ("text", "tool_use")]
        return WireResponse(content=kept + blocks, stop="tool_use" if calls else response.stop,
                            usage=response.usage, stop_detail=response.stop_detail)

    def _edits_done(self, results: list[Block], feedback: str | None) -> bool:
        """Text mode: the reply was code blocks only, all written as edits without a problem, so
        the turn ends (config.edits_end_turn): the validators judge the edits, as they would the
        reply of an edit-format tool, instead of a request only for the model to say it is done."""
        return (self.config.edits_end_turn and self._edits_only and feedback is None and bool(results)
                and not any(block.get("is_error") for block in results) and not self._steers)

    def _edits_code_blocks(self) -> bool:
        return self.config.code_edits and any(tool.get("name") == "write_file" for tool in self._tool_definitions)

    def _code_blocks_as_calls(self, text: str, blocks: list[Block]) -> tuple[list[Block], bool]:
        """Text mode, a reply with no call: its code blocks as write_file calls (codeedits.py)."""
        found = code_edits(text, read=self._tools.read_text, candidates=[*self._named, *self._files_read()])
        self._quoted = found.quotes > 0
        if found.problems and not self._code_told:  # once a turn: the model may mean its block as text
            self._code_told = True
            self._text_feedback = CODE_EDITS_NOT_WRITTEN.format(problems="; ".join(found.problems))
        if not found.edits:
            return blocks, False
        out: list[Block] = []
        taken = 0
        for edit in found.edits:
            if text[taken:edit.start].strip():
                out.append({"type": "text", "text": text[taken:edit.start].strip("\n")})
            out.append({"type": "tool_use", "id": new_call_id(), "name": "write_file",
                        "input": {"path": edit.path, "content": edit.content}})
            taken = edit.end
        if text[taken:].strip():
            out.append({"type": "text", "text": text[taken:].strip("\n")})
        self._text_notice = "; ".join(f"the reply's code block {edit.how}" for edit in found.edits) + \
            " (a write_file call: text tool-call mode reads code blocks as edits)"
        return out, True

    def _files_read(self) -> list[str]:
        """The paths the model's read_file calls named in this conversation."""
        paths: list[str] = []
        for message in self._messages:
            if message["role"] != "assistant" or not isinstance(message["content"], list):
                continue
            for block in message["content"]:
                if block.get("type") == "tool_use" and block.get("name") == "read_file":
                    path = (block.get("input") or {}).get("path")
                    if isinstance(path, str) and path not in paths:
                        paths.append(path)
        return paths

    def _code_without_call(self, response: WireResponse) -> bool:
        """Text mode: a reply that ends the turn with a code block while the turn changed no file
        and write_file is offered (the model meant to write it; it is told how, never guessed).
        Not a reply that quotes a file as it is (an explanation: telling the model its block
        names no file would mislead it)."""
        if self._text_system is None or self._tracked or (self.config.code_edits and self._quoted):
            return False
        if not any(tool.get("name") == "write_file" for tool in self._tool_definitions):
            return False
        return _has_code_block(response.text())

    def _nothing_written(self, response: WireResponse) -> tuple[str, str] | None:
        """Text mode, a reply with no call in a turn that has changed no file, that the stop
        sequence may have cut at the tool-result tag: what to tell the model, and why, or None.

        - An empty reply (see EMPTY_REPLY_NUDGE). After a change an empty reply is the model's
          way of saying it is done, and the turn ends.
        - With code blocks read as edits, a reply with no code block whose text ends with a colon
          ("Here's the updated function:"). Measured: on three of the benchmark's retries
          Qwen2.5-Coder-1.5B wrote that sentence and then `<tool_response>`; the turn ended with
          nothing written (see ANNOUNCED_CODE_NUDGE). Only the choice to ask once more: nothing
          is read from the prose."""
        if self._text_system is None or self._tracked:
            return None
        text = response.text().rstrip()
        edits = self._edits_code_blocks()
        if not text.strip():
            return (EMPTY_REPLY_NUDGE if edits else EMPTY_REPLY_CALL_NUDGE,
                    "the model's reply was empty (in text mode a reply that begins with the tool-result tag is cut "
                    "there by the stop sequence)")
        if edits and text.endswith(":") and not _has_code_block(text):
            return (ANNOUNCED_CODE_NUDGE, "the model's reply ends announcing code that never came (in text mode the "
                    "stop sequence cuts a reply at the tool-result tag)")
        return None

    def _switches_to_text(self, response: WireResponse) -> bool:
        """Automatic mode: a reply that made no native call but holds a text call naming an
        offered tool."""
        if self.config.tool_calls != "auto" or any(b.get("type") == "tool_use" for b in response.content):
            return False
        return looks_like_text_calls(response.text(), self._tool_definitions)

    def _start_text_mode(self) -> None:
        """Tool calls in text from now on: the tools described in the system prompt (fixed from
        here, so the prefix stays the same); the conversation store is told at its next write."""
        own = self.reserved_tool_names | {REFUSAL_TOOL_NAME}
        self._text_system = self._system + "\n\n" + describe_tools(self._tool_definitions, brief=own)
        if self._keeper is not None:
            self._keeper.metadata["tool_calls"] = "text"

    async def _respond(self, answer: _Answer) -> AsyncIterator[BackendMessage]:
        """One model response, streamed; failed attempts are retried as the policy says."""
        retry_policy = self._retry
        assert retry_policy is not None
        attempt = 0
        while True:
            try:
                async for message in self._stream_once(answer):
                    yield message
                return
            except Exception as exc:
                retry = retry_policy.decide(exc, attempt)
                if retry is None:
                    raise
            attempt += 1
            yield BackendMessage(MessageType.STATUS, content=(
                f"retrying after {retry.summary} (retry {attempt}/{self.config.max_retries}, "
                f"waiting {retry.delay:.1f}s)"))
            await asyncio.sleep(retry.delay)

    async def _stream_once(self, answer: _Answer) -> AsyncIterator[BackendMessage]:
        """One attempt: the wire's pieces as messages, the response into `answer`. The tokens
        are priced once, when the response is complete; while it streams, budgets see them at
        estimated per-token rates; a dropped, failed or cancelled attempt's tokens were still
        spent (abandoned, not settled)."""
        wire = self._wire
        assert wire is not None
        answer.response = None
        watch = RepetitionWatch()
        try:
            async with contextlib.aclosing(wire.stream(self._request())) as pieces:
                async for piece in pieces:
                    if isinstance(piece, Delta) and not piece.thinking and piece.text and watch.feed(piece.text):
                        # A loop (repetition.py): stopped here rather than at the output limit.
                        # The stream is closed, so the server stops generating; the tokens so
                        # far are spent (abandoned: no usage comes for them).
                        self.ledger.abandon_running()
                        answer.response = WireResponse(content=[{"type": "text", "text": watch.text}],
                                                       stop="max_tokens", stop_detail=STOPPED_REPEATING)
                        break
                    message = self._take(piece, answer)
                    if message is not None:
                        yield message
        finally:
            if answer.response is None:
                self.ledger.abandon_running()
        if answer.response is None:
            raise StreamIncomplete("the response stream ended before the response was complete")

    def _take(self, piece: Piece, answer: _Answer) -> BackendMessage | None:
        """One piece of a stream: the message it makes, if any; usage into the ledger; the
        response into `answer`."""
        if isinstance(piece, Delta):
            kind = MessageType.THINKING_DELTA if piece.thinking else MessageType.TEXT_DELTA
            return BackendMessage(kind, content=piece.text, raw=piece.raw) if piece.text else None
        if isinstance(piece, BlockDone):
            return _block_message(piece.block)
        if isinstance(piece, Running):
            self.ledger.running(piece.usage)
        else:
            self.ledger.settle(piece.usage, cost=piece.cost)
            answer.response = piece
        return None


def _block_message(block: Block) -> BackendMessage | None:
    """Text and thinking as each block completes. Tool calls are reported when they run."""
    kind = block.get("type")
    if kind == "text" and block.get("text"):
        return BackendMessage(MessageType.TEXT, content=str(block["text"]))
    if kind == "thinking" and block.get("thinking"):
        return BackendMessage(MessageType.THINKING, content=str(block["thinking"]))
    return None

