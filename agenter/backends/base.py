"""The backend contract, and BaseBackend: the half of it that every backend shares.

The session knows a backend only through `CodingBackend` and its declared capabilities. A backend
knows nothing of validators or budgets beyond reporting usage as it arrives.

`BaseBackend` owns the turn template, so a backend writes only what is its own:

- `_connect(spec)`: start the agent program or client;
- `_turn(prompt)`: one turn, translating the agent's wire into BackendMessages;
- `_disconnect()`: end it, leaving no process or connection behind;
- optionally `requirements(settings)` and `validate_settings(settings)`, checked when the facade
  is built.

Everything else is done here once: connect/disconnect bookkeeping (disconnect is idempotent and
follows a failed connect), the workspace's changes over every turn (a ChangeDetector started at
connect, all its work off the event loop) united with the files the tools reported, the wait for
tool calls still running when a turn is cancelled, the usage ledger, the instructions every model
gets, refusal and structured-output handling, the custom-tool call (errors redacted before the
model reads them), and the tool-name check.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from agenter._errors import BackendError, ConfigurationError
from agenter._types import ModifiedFiles, PendingCall, Usage
from agenter.backends._prompts import (
    AGENTER_TOOL_NAMES,
    REFUSAL_REPLY,
    STRUCTURED_OUTPUT_TOOL_NAME,
    OutputChannel,
    compose_instructions,
    parse_structured_output,
    text_refusal,
    validation_problems,
)
from agenter.backends.capabilities import BackendCapabilities
from agenter.host.redact import Redactor
from agenter.host.requirements import Credentials, Program, Requirement, check_requirements, find_program
from agenter.permissions import PermissionAnswer, PermissionDecision, PermissionGate, PermissionPolicy, ToolCall
from agenter.sandbox.paths import relative_to
from agenter.tools import Tool
from agenter.usage import UsageLedger

if TYPE_CHECKING:
    from agenter.sandbox.changes import ChangeDetector

__all__ = [
    "BackendCapabilities", "BackendClass", "BackendMessage", "BackendOptions", "BackendSettings", "BaseBackend",
    "CodingBackend", "Denial", "MessageType", "ModifiedFiles", "Refusal", "SessionSpec", "ToolReply", "TurnReport",
]

log = logging.getLogger("agenter.backends")


class MessageType(str, Enum):
    """What a BackendMessage is. The session maps each to the event vocabulary (CodingEvent.kind)."""

    TEXT = "text"  # a whole text; after TEXT_DELTAs, the same text whole (not emitted again)
    TEXT_DELTA = "text_delta"  # a piece of streamed text
    THINKING = "thinking"
    THINKING_DELTA = "thinking_delta"
    PERMISSION = "permission"  # a permission decision: tool_input holds the decision's data
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    COMMAND_START = "command_start"  # a shell command starts (instead of TOOL_CALL); details: command
    COMMAND_END = "command_end"  # it ended (instead of TOOL_RESULT); details: exit_code
    FILE_EDIT = "file_edit"  # a file was edited; details: path, lines_added, lines_removed
    USAGE = "usage"  # usage was settled into the ledger (the session adds the running totals)
    COMPACTED = "compacted"  # the agent compacted its context; details: tokens_before, tokens_after
    PLAN = "plan"
    STEERED = "steered"  # a message the user sent while the agent works reached it; details: text, where
    STATUS = "status"  # lifecycle notes: "retrying after 529", "session resumed", ...
    ERROR = "error"  # a recoverable problem the backend reports but survives


#: Event fields a message's details may not replace.
_RESERVED = frozenset({"message_type", "content", "tool_name", "tool_input", "tool_call_id", "is_error",
                       "raw", "kind", "iteration", "request"})


@dataclass
class BackendMessage:
    """One thing a backend said or did, streamed while the turn runs.

    `details` holds what a kind of message says beyond text (exit_code, path, lines_added, ...),
    `raw` the agent's own payload (JSON-like) for callers who need more than the vocabulary.
    """

    type: MessageType
    content: str = ""
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_call_id: str | None = None
    is_error: bool = False
    details: dict[str, Any] | None = None
    raw: Any = None

    def event_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message_type": self.type.value, "content": self.content}
        if self.tool_name is not None:
            data["tool_name"] = self.tool_name
        if self.tool_input is not None:
            data["tool_input"] = self.tool_input
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.is_error:
            data["is_error"] = True
        if self.details:
            data.update((k, v) for k, v in self.details.items() if k not in _RESERVED)
        if self.raw is not None:
            from pydantic_core import to_jsonable_python

            # Events are JSON: a payload object becomes its JSON form (repr where it has none).
            data["raw"] = to_jsonable_python(self.raw, fallback=repr)
        return data


def trace_env() -> dict[str, str]:
    """TRACEPARENT (and TRACESTATE) of the current OpenTelemetry span, for the environment of an
    agent program that continues the trace; empty when OpenTelemetry is not in use."""
    if "opentelemetry.trace" not in sys.modules:  # nobody configured tracing: cost nothing
        return {}
    try:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return {}
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return {name.upper(): value for name, value in carrier.items()}


@dataclass
class Refusal:
    reason: str
    category: str | None = None


class BackendOptions(BaseModel):
    """Base for a backend's own options (passed as keyword arguments to the facade).

    Naming rule (backends/AGENTS.md): a concept that several backends share has one unprefixed
    name everywhere (api_key, base_url, env, program_path, max_retries, request_timeout,
    mcp_servers, permission_policy); an option only one backend has carries its prefix.
    `renamed` maps old option names to their new names; the old ones keep working.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    renamed: ClassVar[dict[str, str]] = {}

    def __init__(self, **data: Any):
        for old, new in self.renamed.items():
            if old in data:
                if new in data:
                    raise ConfigurationError(f"{old!r} is the old name of {new!r}; pass only {new!r}",
                                             parameter=old)
                data[new] = data.pop(old)
        super().__init__(**data)

    def secrets(self) -> list[str]:
        """Values of the secret options (API keys), for redaction."""
        values = []
        for name in type(self).model_fields:
            value = getattr(self, name, None)
            if isinstance(value, SecretStr):
                values.append(value.get_secret_value())
        return values


OptionsT = TypeVar("OptionsT", bound=BackendOptions)


@dataclass
class BackendSettings(Generic[OptionsT]):
    """Per-agent settings, fixed when the facade is built."""

    model: str | None
    tools: list[Tool]
    sandbox: bool
    options: OptionsT
    #: The user's permission policy; None when none was given (the default policy applies:
    #: bypass mode, the safety checks still hold, where the backend enforces them).
    permissions: PermissionPolicy | None = None
    on_permission: Callable[..., Any] | None = None
    permission_timeout: float | None = 60.0
    #: The agent's mode (also each session's `SessionSpec.mode`), for a backend whose runtime
    #: differs by mode (openai: the context path of analysis and patch mode).
    mode: str = "autonomous"
    #: What a question nobody answers does: "deny" it, or "pause" the run (backends with the
    #: pause capability; docs/approvals.md).
    on_ask: str = "deny"


@dataclass
class SessionSpec:
    """Per-session settings from the request."""

    cwd: Path
    allowed_write_paths: list[str] | None = None
    system_prompt: str | None = None
    output_type: type[BaseModel] | None = None
    resume_session_id: str | None = None
    #: "autonomous" (the agent edits), "patch" (agenter applies proposed changes) or "analysis".
    mode: str = "autonomous"
    #: The folder of the run's transcripts (None: the run writes none). A backend that keeps its
    #: conversation itself keeps it beside them (agenter's own agent: `<log_dir>/conversations`).
    log_dir: Path | None = None
    #: The folder of the transcript `resume_session_id` was read from (None: the resume named
    #: the session id itself): where that conversation was kept.
    resume_log_dir: Path | None = None


#: The rule of a Denial for an action the agent took without asking (its own mode lets it), which
#: agenter would have refused: it could not be stopped, only named.
UNASKED_RULE = "unasked"


@dataclass(frozen=True)
class Denial:
    """An action the run refused (a write outside the allowed paths, a denied command), or, with
    the rule UNASKED_RULE, one the agent took without asking that agenter would have refused
    (it ran; the reason says what came of it)."""

    tool: str
    target: str
    reason: str
    rule: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"tool": self.tool, "target": self.target, "reason": self.reason, "rule": self.rule}


@dataclass(frozen=True)
class TurnReport:
    """What one turn did, read once by the session when the turn has ended (also after it was
    cancelled): the files it changed by any means, its structured output and refusal, the
    actions refused since the previous report (connect-time refusals in the first), tool calls
    still running, and, for a backend made of backends, every member it tried."""

    files: ModifiedFiles = field(default_factory=ModifiedFiles)
    output: Any | None = None
    refusal: Refusal | None = None
    denials: tuple[Denial, ...] = ()
    unfinished_tools: tuple[str, ...] = ()
    #: A wrapper's members, each with its part (fallback.Attempt: `as_dict()`); empty for one backend.
    attempts: tuple[Any, ...] = ()
    #: The calls the turn stopped before because their question waits for a person (a backend
    #: with the pause capability): the session pauses the run (`hold`) when there are any.
    pending: tuple[PendingCall, ...] = ()
    #: What the backend suggests when the turn's model made no tool call (the option or mode that
    #: fits such a model), for the result's error; empty when it has nothing to suggest.
    advice: str = ""


@dataclass
class ToolReply:
    """What a tool call answers the model."""

    text: str
    is_error: bool = False


@runtime_checkable
class CodingBackend(Protocol):
    """The contract between the session and a backend (one instance serves one session).

    - `connect(spec)` starts the agent for the session. If it raises, the session still calls
      `disconnect()`.
    - `execute(prompt)` runs one turn and yields messages as they arrive; it raises BackendError
      when the agent fails. The session may cancel the task consuming it at any await (the time
      budget) or stop consuming it (token and cost budgets, a closed stream): the turn must then
      stop promptly, wait at most a few seconds for work in flight, and still leave
      `modified_files()` truthful for everything it changed.
    - `usage()` is cumulative for the session and updated while the turn streams, so budgets can
      stop a turn mid-way.
    - `last_turn()` reports what the latest turn did, once it has ended (or was cancelled): the
      session reads a turn's outcome there and nowhere else.
    - `permit(call)` decides a call agenter makes on the agent's behalf (patch mode's writes)
      through the session's permission gate; a refusal is recorded like the agent's own.
    - A backend with the `pause` capability may end a turn at calls that wait for a person
      (`TurnReport.pending`); the session then calls `hold(record)`, which keeps the paused run
      where a later process finds it and returns its handle, and that process continues the turn
      with `continue_paused(held, answers)` on a backend connected to resume its session.
    - `disconnect()` ends the session: no process, thread or connection the backend started may
      outlive it, also after a cancelled turn or a failed connect. Calling it twice is harmless.
    """

    name: ClassVar[str]
    capabilities: ClassVar[BackendCapabilities]
    options_model: ClassVar[type[BackendOptions]]
    #: genai-prices provider id its usage is priced with (None: inferred from the model name).
    price_provider: ClassVar[str | None]

    @classmethod
    def check_settings(cls, settings: BackendSettings[Any]) -> None:
        """Raise ConfigurationError (RequirementError for what is missing) before anything runs."""

    @property
    def default_model(self) -> str | None:
        """The model the backend will use, when known (None: the agent's own default)."""

    async def connect(self, spec: SessionSpec) -> None:
        """Start the agent for one session (spawn the process, open the client)."""

    def execute(self, prompt: str) -> AsyncGenerator[BackendMessage, None]:
        """Run one turn; yields messages as they arrive. Raises BackendError on failure."""

    def last_turn(self) -> TurnReport:
        """What the latest turn did (see TurnReport)."""

    def usage(self) -> Usage:
        """Cumulative usage for the whole session, updated as it arrives."""

    def denials(self) -> list[Denial]:
        """Actions refused during the session (writes outside the sandbox, denied commands)."""

    async def permit(self, call: ToolCall) -> PermissionDecision:
        """Decide a call through the session's permission gate (a refusal is recorded)."""

    def steer(self, text: str) -> str | None:
        """Deliver a user message to the turn that runs, at its next safe point: None when taken
        (a STEERED message in the turn says where it landed), else why it cannot be."""

    async def hold(self, record: dict[str, Any]) -> str:
        """Keep a paused run (the session's `record` and the backend's own state) for a later
        process; returns its handle. Raises StoreError when it cannot be kept."""

    def continue_paused(self, held: dict[str, Any],
                        answers: dict[str, str]) -> AsyncGenerator[BackendMessage, None]:
        """The paused turn, continued: the pending calls with the person's `answers` (call id →
        "allow", "deny" or "always"; a call without one is decided as usual), then the turn
        goes on as `execute` would. `held` is the record `hold` kept."""

    @property
    def session_id(self) -> str | None:
        """The agent's own session/thread id, for resume."""

    async def disconnect(self) -> None:
        """End the session; nothing the backend started may outlive this. Idempotent."""


_T = TypeVar("_T")

_tool_pool: concurrent.futures.ThreadPoolExecutor | None = None
_tool_pool_lock = threading.Lock()


def _tool_executor() -> concurrent.futures.ThreadPoolExecutor:
    """Threads for blocking tool work, apart from the event loop's default executor, so a tool
    that hangs cannot starve snapshots and other sessions."""
    global _tool_pool
    with _tool_pool_lock:
        if _tool_pool is None:
            _tool_pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="agenter-tool")
        return _tool_pool


def _forget_tool_pool() -> None:
    """A forked child has the executor but not its threads: it starts its own."""
    global _tool_pool
    _tool_pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_tool_pool)

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class BackendClass:
    """What a backend declares about itself as a class, checked before anything runs: its name,
    capabilities, options, the rule kinds it enforces, where its credentials are, its place in
    backend="auto", what it needs from the machine, and the checks the facade makes when an
    agent is built. Shared by BaseBackend (one agent) and WrapperBackend (backends made of
    backends)."""

    name: ClassVar[str] = "base"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities()
    options_model: ClassVar[type[BackendOptions]] = BackendOptions
    #: Tool names the agent itself uses; custom tools may not take them (nor agenter's own).
    reserved_tool_names: ClassVar[frozenset[str]] = frozenset()
    #: Names custom tools must match (the Anthropic API's and MCP's rule by default).
    tool_name_pattern: ClassVar[re.Pattern[str]] = _TOOL_NAME
    #: genai-prices provider id for the ledger (None: inferred from the model name).
    price_provider: ClassVar[str | None] = None
    #: Path prefixes (relative to cwd) the agent writes for its own bookkeeping; never reported.
    internal_paths: ClassVar[tuple[str, ...]] = ()
    #: Longest a turn's end waits for tool calls still running (the session allows 5 s in all).
    settle_seconds: ClassVar[float] = 2.5
    #: Permission rule kinds this backend enforces through the gate ("read", "edit", "shell",
    #: "network", "mcp", "custom"). A user policy that needs a kind not listed fails when the
    #: facade is built; a policy mode other than bypass needs "edit" (and "shell" where the agent
    #: has a shell).
    permission_kinds: ClassVar[frozenset[str]] = frozenset()
    #: Where this backend's credentials may be (`agenter backends` and backend="auto" look there,
    #: by name only). None: it cannot tell (the agent or model configured decides).
    credentials: ClassVar[Credentials | None] = None
    #: Its place in backend="auto"'s order (lower first); None: never chosen automatically.
    auto_rank: ClassVar[int | None] = None

    # ------------------------------------------------------------------ configuration
    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        """What this machine must have for these settings (extras, programs, Python version)."""
        return ()

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """Where this backend keeps paused runs for an agent with these settings and log_dir
        (an agenter.store ConversationStore). Only a backend with the pause capability has one."""
        raise ConfigurationError(f"the {cls.name} backend cannot pause a run (no pause capability)",
                                 parameter="on_ask")

    @classmethod
    def locate(cls, options: Any) -> str | None:
        """The agent program this backend runs, where it is found (None: not found, or no program:
        then `agenter backends` shows the main package's version). Default: the first Program
        of its requirements."""
        settings = BackendSettings(model=None, tools=[], sandbox=False, options=options)
        for requirement in cls.requirements(settings):
            if isinstance(requirement, Program):
                return find_program(requirement.name, requirement.path, requirement.env_path)
        return None

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        """Raise ConfigurationError for combinations this backend cannot honour."""

    @classmethod
    def model_for(cls, settings: BackendSettings[Any]) -> str | None:
        """The model a backend built with `settings` uses, when the class knows it before anything
        runs (the agent's repr); None: the agent program's own default, known once it runs."""
        return settings.model

    @classmethod
    def check_settings(cls, settings: BackendSettings[Any]) -> None:
        """Called when the facade is built: requirements first, then tool names and options."""
        check_requirements(cls.requirements(settings), backend=cls.name)
        cls.check_tool_names(settings.tools)
        cls.check_permissions(settings)
        cls.validate_settings(settings)

    @classmethod
    def check_permissions(cls, settings: BackendSettings[Any]) -> None:
        """A policy this backend cannot enforce fails now, never silently ignored."""
        policy = settings.permissions
        if policy is None:
            return
        kinds, configured = cls.permission_kinds_for(settings)
        needed = {rule.kind for rule in policy.rules}
        if policy.mode != "bypass":
            needed.add("edit")
            if cls.capabilities.shell:
                needed.add("shell")
        missing = sorted(needed - kinds)
        if missing:
            enforced = ", ".join(sorted(kinds)) or "none"
            raise ConfigurationError(
                f"the {cls.name} backend{configured} cannot enforce permission rules for: {', '.join(missing)} "
                f"(it enforces: {enforced}; policy mode {policy.mode!r}). See docs/permissions.md for "
                "what each backend enforces.", parameter="permissions")

    @classmethod
    def permission_kinds_for(cls, settings: BackendSettings[Any]) -> tuple[frozenset[str], str]:
        """The rule kinds enforced with these settings, and how to name the configuration in an
        error (" with ..."); `permission_kinds` and "" unless they depend on the settings (the
        agent program an ACP backend runs, say)."""
        return cls.permission_kinds, ""

    @classmethod
    def check_tool_names(cls, tools: Sequence[Tool]) -> None:
        reserved = AGENTER_TOOL_NAMES | cls.reserved_tool_names
        seen: set[str] = set()
        for tool in tools:
            if not cls.tool_name_pattern.match(tool.name):
                raise ConfigurationError(
                    f"tool name {tool.name!r} is not valid for the {cls.name} backend (letters, digits, "
                    "'_' and '-', at most 64 characters)", parameter="tools")
            if tool.name in reserved:
                raise ConfigurationError(
                    f"tool name {tool.name!r} is reserved by the {cls.name} backend; rename the tool",
                    parameter="tools", valid=None)
            if tool.name in seen:
                raise ConfigurationError(f"two tools are named {tool.name!r}", parameter="tools")
            seen.add(tool.name)


class BaseBackend(BackendClass, Generic[OptionsT]):
    """The shared half of every backend (see the module docstring). Subclass it and implement
    `_connect`, `_turn` and `_disconnect`."""

    def __init__(self, settings: BackendSettings[OptionsT]):
        self.settings = settings
        self.options: OptionsT = settings.options
        self.ledger = UsageLedger(settings.model, self.price_provider)
        self._usage_reported = Usage()  # the ledger's settled figure at the last USAGE message
        self._usage_by_base = False  # ... and whether the base sent that message
        self.redact = Redactor(extra=settings.options.secrets())
        self._spec: SessionSpec | None = None
        self._cwd: Path | None = None
        self._state = "new"
        self._closing: asyncio.Future[None] | None = None
        self._modified = ModifiedFiles()
        self._tracked = ModifiedFiles()
        self._detector: ChangeDetector | None = None
        self._structured: Any | None = None
        self._refusal: Refusal | None = None
        self._session_id: str | None = None
        self._inflight: dict[concurrent.futures.Future[Any] | asyncio.Future[Any], str] = {}
        self._denials: list[Denial] = []
        self._denial_mark = 0  # denials before it were in an earlier turn's report
        self._turn_denials: tuple[Denial, ...] = ()
        self.gate: PermissionGate | None = None
        self._decisions: list[PermissionDecision] = []
        self._unfinished: list[str] = []
        self._pending: list[PendingCall] = []
        #: TurnReport.advice for the current turn (a backend sets it; reset at each turn's start).
        self.advice = ""

    # ------------------------------------------------------------------ the contract
    @property
    def default_model(self) -> str | None:
        return self.ledger.model or self.settings.model

    @property
    def spec(self) -> SessionSpec:
        if self._spec is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        return self._spec

    @property
    def cwd(self) -> Path:
        """The working directory, symlinks resolved."""
        if self._cwd is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        return self._cwd

    @property
    def connected(self) -> bool:
        return self._state == "connected"

    async def connect(self, spec: SessionSpec) -> None:
        if self._state != "new":
            raise BackendError(f"the {self.name} backend was already connected once", backend=self.name)
        self._spec = spec
        self._cwd = Path(os.path.realpath(spec.cwd))
        self._state = "connecting"
        settings = self.settings
        self.gate = PermissionGate(
            settings.permissions or PermissionPolicy(mode="bypass"), self._cwd,
            on_permission=settings.on_permission, ask_timeout=settings.permission_timeout,
            on_decision=self._decisions.append, on_ask="pause" if settings.on_ask == "pause" else "deny",
            can_pause=self.capabilities.pause)
        from agenter.sandbox.changes import ChangeDetector

        # The first walk of the workspace runs (in a thread) while the agent starts.
        self._detector = ChangeDetector(self._cwd)
        baseline = asyncio.ensure_future(self._detector.start())
        try:
            await self._connect(spec)
            await baseline
        except BaseException:
            baseline.cancel()
            with contextlib.suppress(Exception):
                await self.disconnect()
            raise
        if self._state == "connecting":
            self._state = "connected"
        # The price table loads in a thread while the first request is under way (the ledger's
        # lookups wait for it). Not beside _connect, which imports the backend's packages: two
        # threads importing one dependency at once (httpx2) can meet a half-initialised module.
        self.ledger.preload()

    def execute(self, prompt: str) -> AsyncGenerator[BackendMessage, None]:
        return self._run_turn(lambda: self._turn(prompt))

    def continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncGenerator[BackendMessage, None]:
        return self._run_turn(lambda: self._continue_paused(held, answers))

    async def hold(self, record: dict[str, Any]) -> str:
        """A backend with the pause capability writes this (see the contract)."""
        raise BackendError(f"the {self.name} backend cannot pause a run (no pause capability)", backend=self.name)

    async def _run_turn(self, start: Callable[[], AsyncIterator[BackendMessage]]) -> AsyncGenerator[BackendMessage, None]:
        """One turn, whichever way it starts: its messages, the usage updates and permission
        decisions between them, the change detection around it."""
        if self._state != "connected":
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        self._modified = ModifiedFiles()
        self._tracked = ModifiedFiles()
        self._structured = None
        self._refusal = None
        self._unfinished = []
        self._pending = []
        self.advice = ""
        if self._detector is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        await self._detector.begin_turn()
        messages = start()
        try:
            async for message in messages:
                for decision in self._take_decisions():
                    yield decision
                if message.type is MessageType.USAGE:  # a backend that says it itself
                    if self._usage_by_base and self.ledger.settled == self._usage_reported:
                        continue  # the base reported it already, after the message that settled it
                    self._usage_reported, self._usage_by_base = self.ledger.settled, False
                    yield message
                    continue
                # usage settled before this message (a response that ended before its tools ran)
                # comes first, so a status line drawn while a tool runs shows the response's tokens
                update = self._usage_update()
                if update is not None:
                    yield update
                yield message
                update = self._usage_update()
                if update is not None:
                    yield update
                note = self.ledger.take_note()
                if note:
                    yield BackendMessage(MessageType.STATUS, note)
            for decision in self._take_decisions():
                yield decision
            update = self._usage_update()
            if update is not None:
                yield update
        finally:
            aclose = getattr(messages, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            await self._end_turn()

    def _usage_update(self) -> BackendMessage | None:
        """A USAGE message when responses were settled since the last one (what they added in
        details["usage"]; the session adds the running totals), so every backend reports usage
        the same way without saying so itself."""
        settled = self.ledger.settled
        if settled == self._usage_reported:
            return None
        added = settled.minus(self._usage_reported)
        self._usage_reported, self._usage_by_base = settled, True
        return BackendMessage(MessageType.USAGE, details={"usage": added.model_dump()})

    def last_turn(self) -> TurnReport:
        return TurnReport(files=self._modified, output=self._structured, refusal=self._refusal,
                          denials=self._turn_denials, unfinished_tools=tuple(self._unfinished),
                          pending=tuple(self._pending), advice=self.advice)

    def modified_files(self) -> ModifiedFiles:
        """The latest turn's files (last_turn() reports them with the rest)."""
        return self._modified

    def usage(self) -> Usage:
        return self.ledger.total

    def structured_output(self) -> Any | None:
        return self._structured

    def refusal(self) -> Refusal | None:
        return self._refusal

    def unfinished_tools(self) -> list[str]:
        return list(self._unfinished)

    def denials(self) -> list[Denial]:
        """Actions refused during the session so far."""
        return list(self._denials)

    def steer(self, text: str) -> str | None:
        """A backend with the `steering` capability writes this (see the contract); the others
        say why a message cannot reach a running agent."""
        return (f"the {self.name} backend cannot take a message while its agent works (no steering "
                "capability): send it as the next request")

    @property
    def session_id(self) -> str | None:
        return self._session_id

    async def disconnect(self) -> None:
        if self._closing is None:
            self._state = "closed"
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        for future in list(self._inflight):
            future.cancel()
        try:
            await self._disconnect()
        finally:
            if self._detector is not None:
                self._detector.close()

    # ------------------------------------------------------------------ what a backend writes
    async def _connect(self, spec: SessionSpec) -> None:
        """Start the agent for the session."""

    def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        raise NotImplementedError

    def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """A backend with the pause capability continues a paused turn here (see the contract)."""
        raise BackendError(f"the {self.name} backend cannot continue a paused run (no pause capability)",
                           backend=self.name)

    async def _disconnect(self) -> None:
        """End everything `_connect` and the turns started."""

    # ------------------------------------------------------------------ services for backends
    def trace_env(self) -> dict[str, str]:
        """TRACEPARENT/TRACESTATE to add to an agent program's environment (empty without
        OpenTelemetry). Called in `_connect` it names the session's span, in `_turn` the turn's."""
        return trace_env()

    def instructions(self, *, refusal_tool: str | None, output_channel: OutputChannel,
                     output_tool: str = STRUCTURED_OUTPUT_TOOL_NAME, contract: bool | str = True) -> str:
        """The instructions for the model: contract, sandbox, allowed paths, refusal, output,
        then the user's system prompt. See `_prompts.compose_instructions`."""
        spec = self.spec
        return compose_instructions(
            cwd=str(self.cwd), sandbox=self.settings.sandbox, allowed_write_paths=spec.allowed_write_paths,
            system_prompt=spec.system_prompt, output_type=spec.output_type, refusal_tool=refusal_tool,
            output_channel=output_channel, output_tool=output_tool, contract=contract)

    async def permit(self, call: ToolCall, *, answer: PermissionAnswer | None = None,
                     defer: bool = False) -> PermissionDecision:
        """Decide a tool call through the session's permission gate. A denial is recorded (it
        goes to result.permission_denials); the caller tells the model `decision.reason`.
        `answer`: a person's answer given beforehand (a paused run continued); `defer=True`: the
        caller can stop before the call when nobody can answer now (the decision is then
        "defer", and the caller reports the call with `defer_calls`)."""
        gate = self.gate
        if gate is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        decision = await gate.decide(call, answer=answer, defer=defer)
        if decision.behavior == "deny":
            self.deny(decision.tool, decision.summary, decision.reason, decision.rule)
        return decision

    def defer_calls(self, pending: Sequence[PendingCall]) -> None:
        """The turn stops before these calls: they wait for a person's answer (the session
        pauses the run; `last_turn().pending`)."""
        self._pending.extend(pending)

    def leave_confinement_to_the_sandbox(self) -> None:
        """With no policy given, staying inside the workspace is the `sandbox` option's business,
        as it was before the gate: the gate's outside-workspace check stands down; every other
        safety check holds. (A backend calls it in `_connect` when that is its rule.)"""
        if self.settings.permissions is None and self.gate is not None:
            self.gate.add_root(os.sep)

    def _take_decisions(self) -> list[BackendMessage]:
        """Permission decisions made since the last message, as messages (events)."""
        if not self._decisions:
            return []
        decisions, self._decisions[:] = list(self._decisions), []
        return [BackendMessage(MessageType.PERMISSION, self.redact(d.reason), tool_name=d.tool,
                               tool_input=self.redact.data(d.event_data()),  # type: ignore[arg-type]
                               is_error=d.behavior == "deny") for d in decisions]

    def deny(self, tool: str, target: str, reason: str, rule: str = "") -> Denial:
        """Record a refused action (the model is told `reason` by the caller)."""
        denial = Denial(tool=tool, target=self.redact(target), reason=self.redact(reason), rule=rule)
        self._denials.append(denial)
        return denial

    def refuse(self, arguments: dict[str, Any]) -> ToolReply:
        """The refusal tool: record the refusal; the backend ends the turn."""
        reason = str(arguments.get("reason") or "").strip() or "No reason given."
        category = arguments.get("category")
        self._refusal = Refusal(reason=self.redact(reason), category=str(category) if category else None)
        return ToolReply(REFUSAL_REPLY)

    def refuse_from_text(self, text: str | None) -> bool:
        """A 'REFUSED: reason' line in the agent's text (agents whose tools we cannot extend)."""
        if self._refusal is None:
            reason = text_refusal(text or "")
            if reason:
                self._refusal = Refusal(reason=self.redact(reason))
        return self._refusal is not None

    def accept_output(self, data: Any) -> ToolReply:
        """The structured-output tool: validate against output_type, or say what to fix."""
        output_type = self.spec.output_type
        if output_type is None:
            return ToolReply("No structured output was requested.", is_error=True)
        try:
            self._structured = output_type.model_validate(data)
        except ValidationError as exc:
            return ToolReply(f"The result does not match the schema: {validation_problems(exc)}. "
                             f"Call {STRUCTURED_OUTPUT_TOOL_NAME} again with corrected input.", is_error=True)
        return ToolReply("Result accepted.")

    def parse_output(self, *candidates: str | dict[str, Any] | None) -> Any | None:
        """Structured output from the agent's final text or a JSON object (first that parses)."""
        output_type = self.spec.output_type
        if output_type is None:
            return None
        for candidate in candidates:
            parsed = parse_structured_output(candidate, output_type)
            if parsed is not None:
                self._structured = parsed
                break
        return self._structured

    async def run_tool(self, tool: Tool, arguments: dict[str, Any]) -> ToolReply:
        """Call a custom tool. Never raises for the tool's own failure: the model reads the
        (redacted) error and can adapt. The call is tracked, so a cancelled turn can wait for it."""
        task = asyncio.ensure_future(tool.run(arguments or {}, run_sync=functools.partial(self.in_thread_named, tool.name)))
        self._track_future(task, tool.name)
        try:
            text = await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        except ValidationError as exc:
            return ToolReply(f"Invalid arguments for {tool.name}: {validation_problems(exc)}", is_error=True)
        except Exception as exc:  # noqa: BLE001 - reported to the model, never lost
            return ToolReply(self.redact(f"{tool.name} failed: {type(exc).__name__}: {exc}"), is_error=True)
        return ToolReply(self.redact(text))

    async def in_thread(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Blocking work of a turn (a file tool, a sync custom tool), off the event loop. A
        cancelled turn waits for it (bounded) before its last snapshot, so what it wrote counts."""
        return await self.in_thread_named(getattr(fn, "__name__", "tool"), fn, *args, **kwargs)

    async def in_thread_named(self, label: str, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        future = _tool_executor().submit(functools.partial(fn, *args, **kwargs))
        self._track_future(future, label)
        return await asyncio.wrap_future(future)

    def track(self, *, written: Sequence[str] = (), deleted: Sequence[str] = ()) -> None:
        """Files a tool reported writing or deleting (absolute or relative to cwd)."""
        w = {p for p in (self.relative(x) for x in written) if p}
        d = {p for p in (self.relative(x) for x in deleted) if p}
        self._tracked = self._tracked | ModifiedFiles(written=w, deleted=d)

    def relative(self, path: str | os.PathLike[str] | None) -> str | None:
        """POSIX path relative to cwd, or None when it is not inside cwd."""
        if not path or self._cwd is None:
            return None
        cwd = str(self._cwd)
        text = os.fspath(path)
        candidate = os.path.normpath(text if os.path.isabs(text) else os.path.join(cwd, text))
        for root in {cwd, os.path.normpath(os.path.abspath(self.spec.cwd))}:
            if candidate.startswith(root.rstrip(os.sep) + os.sep):
                return relative_to(candidate, root)
        real = os.path.realpath(candidate)
        if real.startswith(cwd.rstrip(os.sep) + os.sep):
            return relative_to(real, cwd)
        return None

    async def changes_so_far(self) -> ModifiedFiles:
        """What the running turn changed until now (the change detector, off the loop, plus tools)."""
        if self._detector is None or not self._detector.in_turn:
            return self._tracked
        diff = await self._detector.changes_so_far()
        return self._tracked | diff

    # ------------------------------------------------------------------ internals
    def _track_future(self, future: concurrent.futures.Future[Any] | asyncio.Future[Any], label: str) -> None:
        self._inflight[future] = label
        future.add_done_callback(lambda f: self._inflight.pop(f, None))

    async def _end_turn(self) -> None:
        """Wait (bounded) for tool calls still running, then diff the workspace, off the loop.

        Shielded: a second cancellation must not leave `modified_files()` untruthful.
        """
        task = asyncio.ensure_future(self._changes_after_turn())
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
        if not task.done():
            # Cancelled again while finishing: finish anyway (bounded by settle_seconds).
            await asyncio.wait({task}, timeout=self.settle_seconds + 2)
        if task.done() and not task.cancelled() and task.exception() is None:
            self._modified = task.result()
        else:
            log.warning("%s: could not determine the turn's changed files", self.name)
            self._modified = self._tracked
        # This turn's report: what was refused since the previous report (connect time included).
        self._turn_denials = tuple(self._denials[self._denial_mark:])
        self._denial_mark = len(self._denials)

    async def _changes_after_turn(self) -> ModifiedFiles:
        pending = {f: label for f, label in self._inflight.items() if not f.done()}
        if pending:
            for future in pending:
                if isinstance(future, asyncio.Future):
                    future.cancel()
            waiters = [f if isinstance(f, asyncio.Future) else asyncio.wrap_future(f) for f in pending]
            await asyncio.wait(waiters, timeout=self.settle_seconds)
            self._unfinished = sorted({label for f, label in pending.items() if not f.done()})
            if self._unfinished:
                log.warning("%s: tool call(s) still running after the turn ended: %s", self.name,
                            ", ".join(self._unfinished))
        detector = self._detector
        if detector is None or not detector.in_turn:
            return self._tracked
        diff = await detector.end_turn()
        # Tool-reported files count when they exist now (written) or existed before (deleted):
        # a file created and removed within the turn changed nothing. A reported deletion of a
        # file that existed before and is gone now is in the detector's deletions already.
        cwd, reported = self.cwd, self._tracked.written - diff.written
        if reported:  # stat calls give up the GIL: in a thread, not on the loop
            written = diff.written | await asyncio.to_thread(
                lambda: {p for p in reported if os.path.lexists(cwd / p)})
        else:
            written = set(diff.written)
        deleted = set(diff.deleted)
        written -= deleted
        internal = self.internal_paths
        if internal:
            written = {p for p in written if not p.startswith(internal)}
            deleted = {p for p in deleted if not p.startswith(internal)}
        return ModifiedFiles(written=written, deleted=deleted, created=diff.created & written)
