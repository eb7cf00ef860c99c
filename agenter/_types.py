"""Request, budget, usage and result models: the data that crosses the public API."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to a mistyped `name` (`promt` → `prompt`), or None when none is close."""
    import difflib

    folded = {candidate.lower().replace("-", "_"): candidate for candidate in candidates}
    close = difflib.get_close_matches(name.lower().replace("-", "_"), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def suggestion(name: str, candidates: Iterable[str], *, own: Iterable[str] = (), owner: str = "") -> str:
    """"; did you mean 'X'?" for a mistyped keyword, or "" when nothing is close. `own` are the
    caller's own arguments, named as such (a facade argument given where backend options go)."""
    own = list(own)
    close = did_you_mean(name, [*candidates, *own])
    if close is None:
        return ""
    return f"; did you mean {close!r}" + (f" (an argument of {owner})" if owner and close in own else "") + "?"


def describe_validation_error(exc: ValidationError, what: str,
                              fields: Iterable[str] = ()) -> tuple[str, str]:
    """(message, field) for the first problem of a pydantic error, without pydantic's boilerplate.

    An unknown field comes first: `CodingRequest(promt=...)` is about `promt` (with the closest of
    `fields` suggested), not about the `prompt` that is then missing."""
    errors = exc.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    name = ".".join(str(p) for p in first["loc"]) or what
    if first["type"] == "extra_forbidden":
        return f"unknown {what} field {name!r}{suggestion(name, fields)}", name
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return f"invalid {what} field {name!r}: {message}", name


class _Checked(BaseModel):
    """Construction errors are ConfigurationErrors (still ValueErrors) that name the field."""

    if not TYPE_CHECKING:
        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:
                from agenter._errors import ConfigurationError

                what = type(self).__name__
                valid = sorted(type(self).model_fields)
                message, name = describe_validation_error(exc, what, valid)
                gone = _FIELDS_017.get((what, name))
                if gone is not None and message.startswith("unknown"):
                    message = f"unknown {what} field {name!r}: it was agenter 0.1.7's; today {gone}"
                valid = valid if message.startswith("unknown") else None
                raise ConfigurationError(f"{message}", parameter=name, valid=valid,
                                         valid_label=f"{what} fields" if valid else None) from None


#: (model, field) of agenter 0.1.7 that are gone, and what replaces them.
_FIELDS_017 = {
    ("CodingRequest", "max_iterations"): "write CodingRequest(budget=Budget(max_iterations=...)), or "
                                         "AutonomousCodingAgent(max_iterations=...)",
    ("CodingRequest", "verbosity"): "logs come from agenter.configure_logging(level=...), progress from "
                                    "stream_execute() events",
}


class Budget(_Checked):
    """Hard limits for one coding session. Every limit is checked before, during and after a turn.

    `None` means unlimited (tokens, cost, time); iterations are always bounded.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int | None = Field(
        default=500_000, gt=0,
        description="Tokens across all iterations: input, output, cache reads and cache writes.")
    max_cost_usd: float | None = Field(default=10.0, gt=0, description="Estimated cost in US dollars.")
    max_time_seconds: float | None = Field(default=3600.0, gt=0, description="Wall clock from session start.")
    max_iterations: int = Field(default=5, gt=0, description="Backend turns (first attempt plus retries).")


class CodingRequest(_Checked):
    """What to do and where. `cwd` is the repository the agent may edit."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    prompt: str = Field(min_length=1)
    cwd: Path
    system_prompt: str | None = None
    budget: Budget | None = None
    allowed_write_paths: list[str] | None = Field(
        default=None, description="Gitignore-style patterns, relative to cwd, that writes must match."
    )
    output_type: type[BaseModel] | None = Field(
        default=None, description="A pydantic model the agent must return as structured output."
    )
    require_changes: bool = Field(
        default=True,
        description=(
            "A run that changed no file and that no validator really checked is not a success "
            "unless this is False (question-answering or structured-output-only tasks)."
        ),
    )
    resume: str | Path | None = Field(
        default=None,
        description=(
            "Continue an earlier run of the agent (backends with the resume capability): its "
            "transcript (a Path, or a str ending in .jsonl or naming a path) or the agent's own "
            "session id (CodingResult.session_id)."),
    )

    if TYPE_CHECKING:  # mypy without the pydantic plugin: cwd also takes a str
        def __init__(self, *, prompt: str, cwd: str | Path, system_prompt: str | None = None,
                     budget: Budget | None = None, allowed_write_paths: list[str] | None = None,
                     output_type: type[BaseModel] | None = None, require_changes: bool = True,
                     resume: str | Path | None = None) -> None: ...

    @field_validator("resume")
    @classmethod
    def _non_blank_resume(cls, value: str | Path | None) -> str | Path | None:
        if isinstance(value, str) and not value.strip():
            raise ValueError("resume is empty: give a transcript or a session id")
        return value

    @field_validator("prompt")
    @classmethod
    def _non_blank_prompt(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the prompt is empty")
        return value

    @field_validator("cwd", mode="before")
    @classmethod
    def _expand_cwd(cls, value: Any) -> Any:
        if isinstance(value, str | Path):
            return Path(value).expanduser()
        return value


#: Characters per token where agenter estimates tokens nobody reported (a rule of thumb for
#: English text and code).
CHARS_PER_TOKEN = 4


class CodingStatus(str, Enum):
    COMPLETED = "completed"
    COMPLETED_WITH_LIMIT_EXCEEDED = "completed_with_limit_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    REFUSED = "refused"
    FAILED = "failed"
    ERROR = "error"
    #: A call needed approval that nobody could give now (on_ask="pause", or on_permission
    #: returned "defer"): the run stopped before it, kept so that `agent.approve(handle)` (or
    #: `agenter approve HANDLE`) continues it later. Not a failure, and not done: `ok` is False.
    PAUSED = "paused"


class Usage(BaseModel):
    """Token counts and cost. Backends report cumulative usage for their whole session.

    `estimated_input_tokens` and `estimated_output_tokens` say how many of `input_tokens` and
    `output_tokens` agenter estimated (about four characters a token) because nobody reported
    them: a request cancelled after it was sent, a program that reports nothing, a side call a
    program makes without reporting it. 0 means every figure was reported by the API or program.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    estimated_input_tokens: int = 0
    estimated_output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        # Cache reads and writes are input tokens billed at other rates; count them once here.
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def estimated_tokens(self) -> int:
        """How many of `total_tokens` are agenter's estimate."""
        return self.estimated_input_tokens + self.estimated_output_tokens

    @classmethod
    def estimate(cls, *, input_chars: int = 0, output_chars: int = 0) -> Usage:
        """Tokens for text nobody counted: about four characters a token (rounded up), marked as
        an estimate."""
        input_tokens, output_tokens = -(-input_chars // CHARS_PER_TOKEN), -(-output_chars // CHARS_PER_TOKEN)
        return cls(input_tokens=input_tokens, output_tokens=output_tokens,
                   estimated_input_tokens=input_tokens, estimated_output_tokens=output_tokens)

    def as_estimate(self) -> Usage:
        """The same figures, all marked as agenter's estimate."""
        return self.model_copy(update={"estimated_input_tokens": self.input_tokens,
                                       "estimated_output_tokens": self.output_tokens})

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            estimated_input_tokens=self.estimated_input_tokens + other.estimated_input_tokens,
            estimated_output_tokens=self.estimated_output_tokens + other.estimated_output_tokens,
        )

    def minus(self, earlier: Usage) -> Usage:
        """What was added since `earlier` (field by field, never negative)."""
        return Usage(
            input_tokens=max(self.input_tokens - earlier.input_tokens, 0),
            output_tokens=max(self.output_tokens - earlier.output_tokens, 0),
            cache_read_tokens=max(self.cache_read_tokens - earlier.cache_read_tokens, 0),
            cache_write_tokens=max(self.cache_write_tokens - earlier.cache_write_tokens, 0),
            cost_usd=max(self.cost_usd - earlier.cost_usd, 0.0),
            estimated_input_tokens=max(self.estimated_input_tokens - earlier.estimated_input_tokens, 0),
            estimated_output_tokens=max(self.estimated_output_tokens - earlier.estimated_output_tokens, 0),
        )

    def maximum(self, other: Usage) -> Usage:
        """The larger of each figure (streamed copies of one response repeat its usage)."""
        return Usage(
            input_tokens=max(self.input_tokens, other.input_tokens),
            output_tokens=max(self.output_tokens, other.output_tokens),
            cache_read_tokens=max(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=max(self.cache_write_tokens, other.cache_write_tokens),
            cost_usd=max(self.cost_usd, other.cost_usd),
            estimated_input_tokens=max(self.estimated_input_tokens, other.estimated_input_tokens),
            estimated_output_tokens=max(self.estimated_output_tokens, other.estimated_output_tokens),
        )

    def covers(self, other: Usage) -> bool:
        """True when no figure of `other` exceeds this one (a running total that did not reset)."""
        return (self.input_tokens >= other.input_tokens and self.output_tokens >= other.output_tokens
                and self.cache_read_tokens >= other.cache_read_tokens
                and self.cache_write_tokens >= other.cache_write_tokens)


@dataclass
class ModifiedFiles:
    """Paths (relative to cwd, POSIX separators) a turn changed. `created`: the written paths
    known not to have existed before (the workspace was compared; a file a tool reported
    writing is not known to be new), so that agenter may remove one it refuses."""

    written: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    created: set[str] = field(default_factory=set, compare=False)

    def __bool__(self) -> bool:
        return bool(self.written or self.deleted)

    def __or__(self, other: ModifiedFiles) -> ModifiedFiles:
        written = (self.written | other.written) - other.deleted
        deleted = (self.deleted - other.written) | other.deleted
        # New since the earlier changes began: created then and still there, or created now
        # (a file deleted earlier and written again existed before).
        created = ((self.created - other.deleted) | (other.created - self.deleted)) & written
        return ModifiedFiles(written=written, deleted=deleted, created=created)

    @property
    def all(self) -> list[str]:
        return sorted(self.written | self.deleted)


class ValidationResult(BaseModel):
    """The verdict of one validator on one iteration's changed files.

    skipped=True means there was nothing for this validator to check (e.g. no Python file
    changed). A session whose iteration changed no file and whose validators all skipped
    has verified nothing, and must not call that a success.
    """

    validator: str = Field("", description="The validator's name; the chain fills it in when empty.")
    passed: bool
    errors: list[str] = Field(default_factory=list)
    blocking: bool = True
    skipped: bool = False
    details: str | None = None
    duration_seconds: float | None = None

    @property
    def blocks(self) -> bool:
        """True when this result fails the iteration (a blocking validator that failed)."""
        return self.blocking and not self.passed


class PendingCall(BaseModel):
    """A tool call a paused run did not run, as the permission gate saw it when the run paused.

    `needs_approval` is True for the call that asked and for later calls of the same model
    response the gate would ask about too; the others (a read the gate allows, say) are pending
    only because they come after it, and run on resume without a question. `rule` and `stage`
    say what made the gate ask (an ask rule `ask shell:git push*`, a safety check
    `safety:outside-workspace`, the mode `mode:default`), `reason` says it in words, `paths` and
    `command` are what the gate judged.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="The tool call's id: the key of its answer in agent.approve(handle, {id: ...}).")
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    needs_approval: bool = True
    rule: str = ""
    stage: str = ""
    reason: str = ""
    paths: list[str] = Field(default_factory=list)
    command: str | None = None


class CodingResult(BaseModel):
    """The truthful outcome of a session: what status, what changed, what it cost."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    status: CodingStatus
    files: dict[str, str | None] = Field(
        default_factory=dict, description="Path relative to cwd -> new content (None when deleted)."
    )
    summary: str = ""
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    estimated_input_tokens: int = Field(
        0, description="How many of input_tokens agenter estimated (about 4 characters a token) because no API "
                       "or program reported them (a cancelled request, a side call the program does not report).")
    estimated_output_tokens: int = Field(0, description="How many of output_tokens agenter estimated.")
    total_cost_usd: float = 0.0
    duration_seconds: float = 0.0
    output: Any = None
    error: str | None = None
    exceeded_limit: str | None = Field(None, description="tokens, cost, time or iterations")
    error_kind: str | None = Field(
        None, description="For ERROR: the failure class (auth, quota, rate_limit, transient, context_length, "
                          "missing_program, agent_crash, config, unknown).")
    refusal_reason: str | None = None
    validation_errors: list[str] = Field(default_factory=list)
    validation: list[ValidationResult] = Field(
        default_factory=list, description="Every validator's verdict in the last validation, in order: "
                                          "advisory failures and skipped checks included (the chain stops "
                                          "after a blocking failure, so validators after it are absent).")
    diff: str | None = Field(
        default=None, description="The applied change as a unified diff, where the backend knows it "
                                  "(patch mode).")
    attempts: list[dict[str, Any]] = Field(
        default_factory=list, description="A fallback chain's attempts, in order: backend, status, error "
                                          "class, usage, cost, files reverted or kept.")
    permission_denials: list[dict[str, str]] = Field(
        default_factory=list, description="Actions refused during the run: tool, target, reason, rule.")
    backend: str = ""
    model: str | None = None
    session_id: str | None = Field(
        default=None, description="The agent's own session id, to resume (CodingRequest.resume).")
    pending: list[PendingCall] = Field(
        default_factory=list, description="PAUSED: the tool calls not run, in order, the first of them the one "
                                          "that asked (docs/approvals.md).")
    resume_handle: str | None = Field(
        default=None, description="PAUSED: what agent.approve(handle) or `agenter approve HANDLE` continues the "
                                  "run with (single use).")

    @property
    def ok(self) -> bool:
        return self.status is CodingStatus.COMPLETED

    @property
    def estimated_tokens(self) -> int:
        """How many of total_tokens are agenter's estimate (0: every figure was reported)."""
        return self.estimated_input_tokens + self.estimated_output_tokens

    @property
    def total_duration_seconds(self) -> float:
        """The name agenter 0.1.7 used for duration_seconds."""
        return self.duration_seconds

    @property
    def total_input_tokens(self) -> int:
        """agenter 0.1.7's name: every input token, cache reads and writes included, so that
        total_tokens = total_input_tokens + output_tokens as in 0.1.7 (deprecated)."""
        from agenter._compat import deprecated

        deprecated("CodingResult.total_input_tokens",
                   "result.input_tokens + result.cache_read_tokens + result.cache_write_tokens")
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_output_tokens(self) -> int:
        """agenter 0.1.7's name of output_tokens (deprecated)."""
        from agenter._compat import deprecated

        deprecated("CodingResult.total_output_tokens", "result.output_tokens")
        return self.output_tokens

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            if name in _RESULT_FIELDS_017:
                raise AttributeError(f"CodingResult.{name} is agenter 0.1.7's: {_RESULT_FIELDS_017[name]}",
                                     name=name, obj=self)
            return super().__getattr__(name)


#: CodingResult fields of agenter 0.1.7 that have no counterpart of the same shape.
_RESULT_FIELDS_017 = {
    "exceeded_values": "result.exceeded_limit names the limit; with raise_on_budget_exceeded=True the "
                       "BudgetExceededError has limit_value and actual_value",
    "retryable": "result.error_kind classifies the failure (rate_limit, transient, auth, ...)",
    "trace_dir": "AutonomousCodingAgent(log_dir=...) writes a transcript per run (docs/sessions.md)",
    "request_index": "a session's results are AgentSession.results, in order",
    "session_total_tokens": "the session's totals are AgentSession.usage (total_tokens)",
    "session_total_cost_usd": "the session's totals are AgentSession.usage (cost_usd) and .total_cost_usd",
    "session_total_duration_seconds": "time a session yourself; each result has duration_seconds",
}
