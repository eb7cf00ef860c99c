"""What the completion backends (openai, litellm) share: a model API that answers text, and the
two modes agenter runs on it.

A completion API has no tool loop, no filesystem and no shell, so these backends never run in
autonomous mode (the facade refuses it when the agent is built). They run:

- analysis mode: the model reads the repository context agenter gives it and answers with text,
  or with structured output (JSON-schema response format where the server takes it; otherwise the
  schema in the prompt, and a reply that does not validate goes back to the model with the errors).
- patch mode: the model proposes a PatchProposal (agenter.tools.patch); agenter checks every path,
  asks the permission gate, applies all files or none, runs the proposed test commands only when
  `allowed_commands` and the gate allow them, and sends any error back for a corrected proposal,
  up to `max_attempts` replies per turn. The session's validators run after the turn, as on every
  backend.

The model sees a compact map of the repository (paths and line counts, within `repo_map_tokens`)
and the files it needs (files the task names, files changed earlier in the session, or the whole
repository when it fits `context_tokens`); when the map lists more than is shown it may first
ask for files in a read step. Small local models need one worked example to make sensible edits
(measured on Qwen2.5-Coder-1.5B: whole-file content edits 0/26 without one, 14/15 with), so the
proposal prompt carries one, and whole-file content is offered beside search/replace and diffs.

A backend subclass writes only its wire: `_open_client`, `_close_client`, `_stream_completion`
(one request, streamed or not, yielding text pieces and then one Completion) and
`_classify_failure` (which exceptions are API failures: a Failure, whose kind and retry the
shared classifier in agenter.backends._failures decides).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from agenter._errors import BackendError, PathSecurityError
from agenter._types import Usage
from agenter.backends._failures import (  # the shared failure classifier
    KIND_ORDER,
    Failure,
    StreamIncomplete,
    classify_failure,
    error_message,
    error_type,
    is_transport_error,
    kind_of_type,
)
from agenter.backends._prompts import parse_structured_output, strict_schema, validation_problems
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.backends.capabilities import check_mode
from agenter.host.retry import retry_delay
from agenter.permissions import ToolCall
from agenter.sandbox.paths import open_regular
from agenter.usage import is_known_model

__all__ = [
    "Completion", "CompletionBackend", "CompletionOptions", "Failure", "OutputFormat", "Piece", "ReadRequest",
    "StreamIncomplete", "command_env", "find_json", "list_files", "openai_failure", "render_repo_map",
    "chat_usage", "retry_delay", "select_named_files",
]

OptionsT = TypeVar("OptionsT", bound="CompletionOptions")

#: Characters per token for estimates (budgets, and usage a server did not report).
CHARS_PER_TOKEN = 4
#: A file larger than this is never read for the model (it is listed in the map only).
MAX_FILE_BYTES = 512 * 1024
#: Output of a test command sent back to the model (the end of it, where failures are).
COMMAND_OUTPUT_CHARS = 4000
EVENT_TEXT_LIMIT = 4000
#: Directories never listed in the repository map when the workspace is not a git repository.
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".hypothesis", ".cache", ".idea", ".vscode",
                       ".eggs", "dist", "build", "target", ".next", ".gradle", ".terraform"})
MAX_LISTED_FILES = 20_000


# ---------------------------------------------------------------------- options


class CompletionOptions(BackendOptions):
    """Options both completion backends take (keyword arguments of AutonomousCodingAgent)."""

    api_key: SecretStr | None = Field(None, description="The API key (see the backend for its default).")
    base_url: str | None = Field(None, description="The API's base URL (an OpenAI-compatible server, a proxy).")
    max_retries: int = Field(4, ge=0, le=20, description="Retries per request on 408/409/429/5xx and dropped "
                                                           "connections, with backoff (retry-after honoured).")
    max_retry_wait: float = Field(60.0, ge=0, description="Cap in seconds on one retry wait.")
    request_timeout: float = Field(600.0, gt=0, description="Seconds per HTTP request.")
    max_tokens: int | None = Field(None, gt=0, description="Output token limit per response (None: the server's).")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Sampling temperature (None: the server's).")
    stream: bool = Field(True, description="Stream responses (budgets see tokens while they arrive).")
    structured_output: Literal["auto", "json_schema", "json_object", "prompt"] = Field(
        "auto", description="How JSON is asked for: a JSON-schema response format, JSON mode, or the prompt "
                            "only. 'auto' starts with json_schema and steps down when the server refuses it. "
                            "Every reply is validated either way; a bad one goes back to the model.")
    allowed_commands: list[str] = Field(
        default_factory=list, description="Command prefixes (permission-rule syntax: word prefixes, * wildcards) "
                                          "of test commands a proposal may run, e.g. ['pytest', 'npm test']. "
                                          "Others are reported, not run. Empty: none run.")
    command_timeout: float = Field(300.0, gt=0, description="Seconds one proposed test command may run.")
    max_attempts: int = Field(3, ge=1, le=20, description="Model replies per turn: a proposal or an answer that "
                                                          "fails its checks goes back with the errors until then.")
    repo_map_tokens: int = Field(2000, ge=0, description="Token budget of the repository map (paths, line counts).")
    context_tokens: int = Field(16000, ge=0, description="Token budget of the file contents shown to the model.")
    read_step: bool = Field(True, description="Let the model ask for files before it answers, when the map "
                                              "lists files that are not shown.")
    max_read_files: int = Field(12, ge=0, le=200, description="Files the model may ask for in the read step.")


# ---------------------------------------------------------------------- what a wire yields


@dataclass(frozen=True)
class OutputFormat:
    """The JSON asked for: `mode` is json_schema, json_object or prompt (nothing on the wire)."""

    mode: str
    name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class Piece:
    """Part of a streamed response: output text or reasoning."""

    text: str
    reasoning: bool = False


@dataclass
class Completion:
    """One finished model response."""

    text: str = ""
    reasoning: str = ""
    refusal: str | None = None
    #: None: the server reported none (the caller estimates it).
    usage: Usage | None = None
    #: What the API said it cost, when it says (LiteLLM); else the ledger prices the usage.
    cost: float | None = None
    #: "stop", "length" (cut off at the output limit), "content_filter", ... or None.
    finish_reason: str | None = None
    model: str | None = None


# ---------------------------------------------------------------------- the read step's schema


class ReadRequest(BaseModel):
    """What the model asks to read before it answers."""

    model_config = ConfigDict(extra="forbid")

    read_files: list[str] = Field(description="Paths from the repository map whose content you need; [] if none.")


# ---------------------------------------------------------------------- prompts

PATCH_GUIDANCE = """\
You are a coding assistant working on the repository at {cwd}. You cannot run tools or edit files \
yourself. You propose the change as one JSON object; agenter checks it, applies it (all files or \
none) and tells you if something must be corrected.

Reply with exactly one JSON object and nothing else. Its fields:
- "summary": what the change does, in one or two sentences.
- "files": one entry per changed file, each with:
  - "path": the file's path relative to the repository root;
  - "operation": "create" (a new file), "modify" (an existing file), "delete", or "rename" (give "new_path");
  - the change, given ONE way (set the other two to null):
    - "content": the whole new text of the file, every unchanged line included. Use it for new \
files and for files under about 300 lines.
    - "search_replace": a list of {{"search": ..., "replace": ...}}; each search text is copied \
exactly from the current file and occurs in it only once. Use it for small edits to large files.
    - "diff": a unified diff of that one file, with @@ hunks whose context lines are copied exactly.
- "test_commands": shell commands that check the change, e.g. ["pytest -q tests/test_calc.py"]; \
they run only if permitted. [] if none.
- "risks": what could go wrong; [] if nothing.

Change only what the task needs, keep the existing style, and never guess the content of a file \
you were not shown.

Example. Task: "Add a function multiply(a, b) to calc.py." The file shown was:
===== calc.py =====
def add(a, b):
    return a + b
===== end of calc.py =====
A correct reply:
{example}"""

_EXAMPLE = {
    "summary": "Add multiply(a, b) to calc.py.",
    "files": [{"path": "calc.py", "operation": "modify", "new_path": None, "diff": None, "search_replace": None,
               "content": "def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n"}],
    "test_commands": [],
    "risks": [],
}

ANALYSIS_GUIDANCE = """\
You are analysing the repository at {cwd} to answer a task. You cannot change files or run \
commands: answer from the repository map and the files shown."""

READ_GUIDANCE = """\
You are about to work on a task in the repository at {cwd}. Some files are shown in full; the \
others are only listed in the repository map. Reply with exactly one JSON object \
{{"read_files": [...]}} naming the files from the map (at most {limit}) whose content you need \
for the task; {{"read_files": []}} if the files shown are enough."""

PROPOSAL_AGAIN = "Reply with the corrected, complete proposal as one JSON object."
CUT_OFF = ("Your reply was cut off at the output token limit before it was complete. Make it shorter: "
           "for large files use search_replace blocks instead of the whole content.")


def json_instructions(schema: dict[str, Any]) -> str:
    return ("Reply with exactly one JSON object and nothing else, matching this JSON schema:\n"
            + json.dumps(schema, separators=(",", ":")))


# ---------------------------------------------------------------------- the backend


class CompletionBackend(BaseBackend[OptionsT]):
    """A backend on a completion API: analysis and patch modes (see the module docstring)."""

    # A model API: no tool loop, no filesystem, no shell. Writes in patch mode go through a
    # PathResolver, so sandbox=True is honoured.
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, sandbox=True)
    #: Reads (files the model asks for), edits (each proposed file) and proposed test commands
    #: are decided by the permission gate.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})
    #: The label of the API in messages ("OpenAI-compatible API", "LiteLLM").
    api_label: ClassVar[str] = "model API"

    def __init__(self, settings: Any):
        super().__init__(settings)
        self.model: str = settings.model or ""
        self._format_mode = "json_schema" if self.options.structured_output == "auto" else self.options.structured_output
        self._resolver: Any = None
        self._command_gate: Any = None
        self._session_changed: list[str] = []
        self._applied_diff = ""
        self._estimated_note = False

    # ------------------------------------------------------------------ for subclasses
    async def _open_client(self) -> None:
        """Create the API client (imports off the event loop)."""

    async def _close_client(self) -> None:
        """Close the API client."""

    def _stream_completion(self, messages: list[dict[str, str]],
                           output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        """One request: text and reasoning pieces as they arrive, then one Completion."""
        raise NotImplementedError

    def _classify_failure(self, exc: BaseException) -> Failure | None:
        """An API failure (status, error type, message; agenter.backends._failures classifies it),
        or None for any other exception (re-raised)."""
        return None

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        from agenter.permissions import PermissionGate, PermissionPolicy, PermissionRule
        from agenter.sandbox.paths import PathResolver

        check_mode(spec.mode, self.capabilities, self.name)
        self._resolver = PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        # allowed_commands, judged like permission rules: each simple command of a line must be
        # covered by a prefix (or be read-only), so "pytest; rm -rf x" is not "pytest".
        rules = tuple(PermissionRule("allow", "shell", prefix.strip())
                      for prefix in self.options.allowed_commands if prefix.strip())
        self._command_gate = PermissionGate(PermissionPolicy(rules=rules, mode="default"), self.cwd) if rules else None
        # The price table's first load takes a while: off the event loop, before any response.
        await asyncio.to_thread(is_known_model, self.ledger.model, self.ledger.provider)
        await self._open_client()
        self._session_id = f"{self.name}-{os.urandom(6).hex()}"

    async def _disconnect(self) -> None:
        try:
            await self._close_client()
        except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
            pass

    @property
    def applied_diff(self) -> str:
        """The unified diff of every proposal applied in this session (patch mode)."""
        return self._applied_diff

    # ------------------------------------------------------------------ one turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self.spec.mode == "patch":
            async for message in self._patch_turn(prompt):
                yield message
        else:
            async for message in self._analysis_turn(prompt):
                yield message

    # ------------------------------------------------------------------ context
    async def _context(self, prompt: str) -> AsyncIterator[BackendMessage | _Context]:
        """The repository map and the files shown, after the read step when there is one."""
        context = await self.in_thread(self._gather_context, prompt)
        yield BackendMessage(MessageType.STATUS, content=(
            f"context: {len(context.files)} file(s) in the map, {len(context.shown)} shown"
            + (f" ({', '.join(list(context.shown)[:8])}{', ...' if len(context.shown) > 8 else ''})"
               if context.shown else "")))
        if self.options.read_step and context.more_to_read and self.options.max_read_files:
            async for item in self._read_step(prompt, context):
                yield item
        yield context

    def _gather_context(self, prompt: str) -> _Context:
        root = self.cwd
        files = list_files(root)
        budget = self.options.context_tokens * CHARS_PER_TOKEN
        readable = self._readable
        wanted = [p for p in self._session_changed if p in set(files)]
        wanted += [p for p in select_named_files(prompt, files) if p not in wanted]
        shown: dict[str, str] = {}
        truncated: set[str] = set()
        total = 0
        if budget:
            everything = self._all_if_fits(files, budget)
            order = wanted + [p for p in (everything or []) if p not in wanted]
            for path in order:
                text = readable(path)
                if text is None:
                    continue
                if total + len(text) > budget:
                    room = budget - total
                    if path in wanted and room > 2000:
                        shown[path] = text[:room]
                        truncated.add(path)
                        total = budget
                    continue
                shown[path] = text
                total += len(text)
        lines = self._line_counts(files, shown)
        repo_map = render_repo_map(lines, self.options.repo_map_tokens * CHARS_PER_TOKEN, first=list(shown))
        # A read step is worth it only for files that could be shown (not too large to read).
        more = any(p not in shown and _size(root / p) <= MAX_FILE_BYTES for p in files)
        return _Context(files=files, repo_map=repo_map, shown=shown, truncated=truncated, more_to_read=more)

    def _all_if_fits(self, files: list[str], budget: int) -> list[str] | None:
        """Every file when those that can be shown fit the budget together (small repositories)."""
        if len(files) > 400:
            return None
        size = 0
        for path in files:
            found = _size(self.cwd / path)
            if found <= MAX_FILE_BYTES:  # larger files are never shown: they do not count
                size += found
            if size > budget:
                return None
        return files

    def _line_counts(self, files: list[str], shown: Mapping[str, str]) -> list[tuple[str, int | None]]:
        counted: list[tuple[str, int | None]] = []
        limit = self.options.repo_map_tokens * CHARS_PER_TOKEN
        for index, path in enumerate(files):
            if path in shown:
                counted.append((path, shown[path].count("\n") + (0 if shown[path].endswith("\n") else 1)))
                continue
            # Counting reads the file: only for as many files as the map can show.
            counted.append((path, _count_lines(self.cwd / path) if index * 20 < limit else None))
        return counted

    def _readable(self, path: str) -> str | None:
        """A file's text for the model, when the policy lets it be read (never credentials)."""
        gate = self.gate
        if gate is not None and gate.evaluate(ToolCall.read(path, name="read_file")).behavior != "allow":
            return None
        return _read_text(self._resolver, path)

    async def _read_step(self, prompt: str, context: _Context) -> AsyncIterator[BackendMessage]:
        limit = self.options.max_read_files
        shown = ", ".join(context.shown) or "(none)"
        messages = [
            {"role": "system", "content": READ_GUIDANCE.format(cwd=self.cwd, limit=limit)},
            {"role": "user", "content": f"{context.map_text()}\nFiles shown in full: {shown}\n\nTask:\n{prompt}"},
        ]
        request: ReadRequest | None = None
        async for item in self._ask_json(messages, ReadRequest, "read_request", attempts=2):
            if isinstance(item, BackendMessage):
                yield item
            else:
                request = item
        if request is None:
            return
        wanted = [p.strip().removeprefix("./") for p in request.read_files if p.strip()]
        wanted = [p for p in dict.fromkeys(wanted) if p not in context.shown][:limit]
        if not wanted:
            return
        yield BackendMessage(MessageType.TOOL_CALL, tool_name="read_files", tool_input={"paths": wanted})
        budget = self.options.context_tokens * CHARS_PER_TOKEN
        used = sum(len(t) for t in context.shown.values())
        notes = []
        for path in wanted:
            decision = await self.permit(ToolCall.read(path, name="read_file"))
            if not decision.allowed:
                context.refused[path] = decision.reason
                notes.append(f"{path}: refused")
                continue
            text = await self.in_thread(_read_text, self._resolver, path)
            if text is None:
                context.refused[path] = "not a readable text file in the repository"
                notes.append(f"{path}: not readable")
                continue
            if used + len(text) > budget + budget // 2:  # the read step may go half over the budget
                context.refused[path] = "too large for the context budget; use search_replace on what you know"
                notes.append(f"{path}: too large")
                continue
            context.shown[path] = text
            used += len(text)
            notes.append(f"{path}: shown")
        yield BackendMessage(MessageType.TOOL_RESULT, tool_name="read_files", content="; ".join(notes))

    # ------------------------------------------------------------------ analysis mode
    async def _analysis_turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        context: _Context | None = None
        async for item in self._context(prompt):
            if isinstance(item, _Context):
                context = item
            else:
                yield item
        assert context is not None
        refusal = self.refusal()
        if refusal is not None:  # declined already in the read step
            yield BackendMessage(MessageType.TEXT, content=refusal.reason)
            return
        output_type = self.spec.output_type
        system = ANALYSIS_GUIDANCE.format(cwd=self.cwd) + "\n\n" + self.instructions(
            refusal_tool=None, output_channel="native", contract=False)
        if output_type is not None:
            system += "\n\n" + json_instructions(_strict(output_type.model_json_schema()))
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": context.prompt_text(prompt)}]
        if output_type is None:
            completion: Completion | None = None
            async for piece in self._ask(messages, None):
                if isinstance(piece, Completion):
                    completion = piece
                else:
                    yield piece
            assert completion is not None
            if self._refused(completion):
                yield BackendMessage(MessageType.TEXT, content=self.refusal().reason)  # type: ignore[union-attr]
                return
            yield BackendMessage(MessageType.TEXT, content=completion.text)
            return
        result: BaseModel | None = None
        async for item in self._ask_json(messages, output_type, _schema_name(output_type),
                                           attempts=self.options.max_attempts):
            if isinstance(item, BackendMessage):
                yield item
            else:
                result = item
        if result is not None:
            self.accept_output(result.model_dump())
            yield BackendMessage(MessageType.TEXT, content=result.model_dump_json())

    # ------------------------------------------------------------------ patch mode
    async def _patch_turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        from agenter.tools.patch import PatchError, PatchProposal, apply_proposal, check_proposal, parse_proposal

        context: _Context | None = None
        async for item in self._context(prompt):
            if isinstance(item, _Context):
                context = item
            else:
                yield item
        assert context is not None
        refusal = self.refusal()
        if refusal is not None:  # declined already in the read step
            yield BackendMessage(MessageType.TEXT, content=refusal.reason)
            return
        example = json.dumps(_EXAMPLE)
        system = PATCH_GUIDANCE.format(cwd=self.cwd, example=example) + "\n\n" + self.instructions(
            refusal_tool=None, output_channel="native", contract=False)
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": context.prompt_text(prompt)}]
        schema = _proposal_schema(PatchProposal)
        applied: list[Any] = []
        summaries: list[str] = []
        last_problem = ""
        attempts = self.options.max_attempts
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                yield BackendMessage(MessageType.STATUS, content=f"asking for proposal {attempt} of at most {attempts}")
            completion: Completion | None = None
            async for piece in self._ask(messages, OutputFormat(self._format_mode, "patch_proposal", schema)):
                if isinstance(piece, Completion):
                    completion = piece
                else:
                    yield piece
            assert completion is not None
            if self._refused(completion):
                yield BackendMessage(MessageType.TEXT, content=self.refusal().reason)  # type: ignore[union-attr]
                return
            messages.append({"role": "assistant", "content": completion.text})
            try:
                if completion.finish_reason == "length":
                    raise _Feedback(CUT_OFF)
                try:
                    proposal = parse_proposal(completion.text)
                except PatchError as exc:
                    # Small models often wrap the JSON in prose: take the object when it is valid.
                    found = find_json(completion.text, PatchProposal)
                    if not isinstance(found, PatchProposal):
                        raise _Feedback(exc.for_model() + "\n" + PROPOSAL_AGAIN) from None
                    proposal = found
                yield _plan_message(proposal)
                if not proposal.files:
                    summaries.append(proposal.summary)
                    last_problem = "the proposal changes no file"
                    break
                yield BackendMessage(MessageType.TOOL_CALL, tool_name="apply_patch",
                                     tool_input={"files": [_change_summary(c) for c in proposal.files]})
                try:
                    await self.in_thread(check_proposal, proposal, self._resolver)
                except PatchError as exc:
                    yield BackendMessage(MessageType.TOOL_RESULT, tool_name="apply_patch",
                                         content=_truncate(exc.for_model(), EVENT_TEXT_LIMIT), is_error=True)
                    raise _Feedback(exc.for_model() + "\n" + PROPOSAL_AGAIN) from None
                refused = await self._permit_changes(proposal)
                if refused:
                    text = ("The patch was not applied; no file was changed. These changes were refused:\n"
                            + "\n".join(f"- {line}" for line in refused)
                            + "\nLeave those files alone (or choose allowed paths). " + PROPOSAL_AGAIN)
                    yield BackendMessage(MessageType.TOOL_RESULT, tool_name="apply_patch", content=text, is_error=True)
                    raise _Feedback(text)
                try:
                    result = await self.in_thread(apply_proposal, proposal, self._resolver)
                except PatchError as exc:
                    if exc.partial:
                        self.track(written=[e.path for e in exc.errors if e.path])
                    yield BackendMessage(MessageType.TOOL_RESULT, tool_name="apply_patch",
                                         content=_truncate(exc.for_model(), EVENT_TEXT_LIMIT), is_error=True)
                    raise _Feedback(exc.for_model() + "\n" + PROPOSAL_AGAIN) from None
                self.track(written=sorted(result.written), deleted=sorted(result.deleted))
                self._remember_changed(result.written, result.deleted)
                self._applied_diff += result.diff
                applied.append(result)
                summaries.append(proposal.summary)
                yield BackendMessage(MessageType.TOOL_RESULT, tool_name="apply_patch",
                                     content=_applied_text(result.written, result.deleted),
                                     tool_input={"written": sorted(result.written), "deleted": sorted(result.deleted)})
                failures: list[str] = []
                async for message in self._run_tests(proposal.test_commands, failures):
                    yield message
                if failures and attempt < attempts:
                    current = await self.in_thread(self._current_text, sorted(result.written))
                    raise _Feedback(
                        "The patch was applied, but a test command failed:\n" + "\n\n".join(failures)
                        + "\n\nThe changed files now read:\n" + current
                        + "\n\nPropose a further change, against the files as they are now, that makes the "
                          "tests pass, as one JSON object.")
                last_problem = ("a test command still failed: " + failures[-1].splitlines()[0]) if failures else ""
                break
            except _Feedback as feedback:
                last_problem = feedback.text
                messages.append({"role": "user", "content": feedback.text})
                if attempt < attempts:
                    yield BackendMessage(MessageType.STATUS, content=_truncate(
                        f"proposal {attempt} was not applied; sending the errors back", EVENT_TEXT_LIMIT))
        yield BackendMessage(MessageType.TEXT, content=self._final_text(applied, summaries, last_problem, attempt))

    async def _permit_changes(self, proposal: Any) -> list[str]:
        refused = []
        for change in proposal.files:
            paths = [change.path] + ([change.new_path] if change.new_path else [])
            decision = await self.permit(ToolCall.edit(*paths, name="apply_patch"))
            if not decision.allowed:
                refused.append(f"{change.path}: {decision.reason}")
        return refused

    async def _run_tests(self, commands: Sequence[str], failures: list[str]) -> AsyncIterator[BackendMessage]:
        from agenter.host.process import run_process

        for command in commands:
            command = command.strip()
            if not command:
                continue
            yield BackendMessage(MessageType.TOOL_CALL, tool_name="run_command", tool_input={"command": command})
            reason = self._command_refusal(command)
            if reason is None:
                decision = await self.permit(ToolCall.shell(command, name="run_command"))
                if not decision.allowed:
                    reason = decision.reason
            else:
                self.deny("run_command", command, reason, rule="allowed_commands")
            if reason is not None:
                yield BackendMessage(MessageType.TOOL_RESULT, tool_name="run_command", is_error=True,
                                     content=_truncate(f"not run: {reason}", EVENT_TEXT_LIMIT))
                continue
            try:
                outcome = await run_process(["/bin/sh", "-c", command], cwd=self.cwd, env=command_env(),
                                            timeout=self.options.command_timeout, merge_stderr=True,
                                            stdout_limit=64 * 1024)
            except OSError as exc:
                failures.append(f"$ {command}\n(could not start: {exc})")
                yield BackendMessage(MessageType.TOOL_RESULT, tool_name="run_command", is_error=True,
                                     content=f"could not start: {exc}")
                continue
            output = self.redact(outcome.stdout)
            status = "timed out" if outcome.timed_out else f"exit code {outcome.returncode}"
            failed = outcome.timed_out or outcome.returncode != 0
            if failed:
                failures.append(f"$ {command}\n({status})\n{_tail(output, COMMAND_OUTPUT_CHARS)}")
            yield BackendMessage(MessageType.TOOL_RESULT, tool_name="run_command", is_error=failed,
                                 content=f"{status}\n{_tail(output, EVENT_TEXT_LIMIT)}".rstrip(),
                                 tool_input={"command": command, "exit_code": outcome.returncode,
                                             "timed_out": outcome.timed_out})

    def _command_refusal(self, command: str) -> str | None:
        gate = self._command_gate
        if gate is None:
            return ("no test commands are allowed on this agent (allowed_commands is empty); the validators "
                    "check the change instead")
        verdict = gate.evaluate(ToolCall.shell(command, name="run_command"))
        if verdict.behavior != "allow":
            allowed = ", ".join(self.options.allowed_commands)
            return f"not covered by allowed_commands ({allowed})"
        return None

    def _remember_changed(self, written: set[str], deleted: set[str]) -> None:
        for path in sorted(written):
            if path not in self._session_changed:
                self._session_changed.append(path)
        self._session_changed = [p for p in self._session_changed if p not in deleted]

    def _current_text(self, paths: list[str]) -> str:
        budget = self.options.context_tokens * CHARS_PER_TOKEN
        parts = []
        for path in paths:
            text = _read_text(self._resolver, path)
            if text is None:
                continue
            if len(text) > budget:
                text = text[:budget]
            budget -= len(text)
            parts.append(_file_block(path, text))
            if budget <= 0:
                break
        return "\n".join(parts)

    def _final_text(self, applied: list[Any], summaries: list[str], problem: str, replies: int) -> str:
        summary = " ".join(s.strip() for s in summaries if s.strip())
        if not applied:
            head = summary or "No change was proposed."
            if problem:
                head += f"\n\nNo change was applied ({replies} proposal(s)); the last problem:\n{problem}"
            return head
        diff = "".join(result.diff for result in applied)
        written = sorted(set().union(*(r.written for r in applied)))
        deleted = sorted(set().union(*(r.deleted for r in applied)))
        text = summary + "\n\n" + _applied_text(set(written), set(deleted))
        if problem:
            text += f"\nNote: {problem}"
        return text + "\n\n```diff\n" + diff + "```"

    # ------------------------------------------------------------------ structured replies
    async def _ask_json(self, messages: list[dict[str, str]], model: type[BaseModel], name: str,
                          attempts: int) -> AsyncIterator[BackendMessage | Any]:
        """A reply validated against `model`; a bad one goes back to the model with the errors.
        Yields messages, then the instance (nothing when every attempt failed or it refused)."""
        messages = list(messages)
        schema = _strict(model.model_json_schema())
        for attempt in range(1, attempts + 1):
            completion: Completion | None = None
            async for piece in self._ask(messages, OutputFormat(self._format_mode, name, schema)):
                if isinstance(piece, Completion):
                    completion = piece
                else:
                    yield piece
            assert completion is not None
            if self._refused(completion):
                return
            problem = CUT_OFF if completion.finish_reason == "length" else None
            if problem is None:
                parsed = find_json(completion.text, model)
                if parsed is not None:
                    yield parsed
                    return
                problem = _why_invalid(completion.text, model)
            yield BackendMessage(MessageType.STATUS, is_error=True, content=_truncate(
                f"reply {attempt} did not match {model.__name__}: {problem}", EVENT_TEXT_LIMIT))
            messages += [{"role": "assistant", "content": completion.text},
                         {"role": "user", "content": f"{problem}\nReply again with one JSON object that matches "
                                                     "the schema."}]

    def _refused(self, completion: Completion) -> bool:
        if completion.refusal:
            self.refuse({"reason": completion.refusal, "category": "refusal"})
            return True
        if completion.finish_reason == "content_filter" and not completion.text.strip():
            self.refuse({"reason": "The model's reply was blocked by the provider's content filter.",
                         "category": "content_filter"})
            return True
        return self.refuse_from_text(_first_lines(completion.text))

    # ------------------------------------------------------------------ one request, with retries
    async def _ask(self, messages: list[dict[str, str]],
                   output: OutputFormat | None) -> AsyncIterator[BackendMessage | Completion]:
        """One model response: retried on transient failures (each retry a STATUS message); the
        JSON-schema response format steps down when the server refuses it ('auto')."""
        attempt = 0
        while True:
            if output is not None and output.mode != self._format_mode:
                output = OutputFormat(self._format_mode, output.name, output.schema)
            try:
                async for item in self._respond(messages, output):
                    yield item
                return
            except Exception as exc:
                failure = self._classify_failure(exc) if not isinstance(exc, StreamIncomplete) else Failure(
                    str(exc), connection=True)
                if failure is None:
                    raise
                if output is not None and self._step_down(failure):
                    yield BackendMessage(MessageType.STATUS, content=(
                        f"the server refused the response format ({_short(self.redact(failure.message))}); "
                        f"asking for JSON by {'JSON mode' if self._format_mode == 'json_object' else 'the prompt'} "
                        "instead"))
                    continue
                delay = self._retry_delay(failure, attempt)
            attempt += 1
            what = "a connection error" if failure.connection else str(failure.status)
            yield BackendMessage(MessageType.STATUS, content=(
                f"retrying after {what} (retry {attempt}/{self.options.max_retries}, waiting {delay:.1f}s)"))
            await asyncio.sleep(delay)

    def _step_down(self, failure: Failure) -> bool:
        if self.options.structured_output != "auto" or failure.status not in (400, 422):
            return False
        text = failure.message.lower()
        if not any(word in text for word in ("response_format", "json_schema", "json_object", "schema",
                                             "text.format", "structured", "grammar")):
            return False
        if self._format_mode == "json_schema":
            self._format_mode = "json_object"
        elif self._format_mode == "json_object":
            self._format_mode = "prompt"
        else:
            return False
        return True

    def _retry_delay(self, failure: Failure, attempt: int) -> float:
        """Seconds before the next attempt; raises BackendError when there is none (the kind and
        whether to retry: the shared classifier, agenter.backends._failures)."""
        verdict = classify_failure(failure)
        delay = verdict.wait(attempt, self.options.max_retries, self.options.max_retry_wait)
        if delay is not None:
            return delay
        status = failure.status
        message = self.redact(failure.message) or "no detail"
        api = self.api_label
        tried = f" after {attempt + 1} attempts" if verdict.retry else ""
        if failure.connection:
            raise BackendError(f"{api} unreachable{tried}: {message}", backend=self.name, kind=verdict.kind)
        if verdict.kind == "auth":
            raise BackendError(f"{api} authentication failed ({status}): {message}. Check api_key.",
                               backend=self.name, status_code=status, kind="auth")
        raise BackendError(f"{api} error {status}{tried}: {message}", backend=self.name, status_code=status,
                           kind=verdict.kind)

    async def _respond(self, messages: list[dict[str, str]],
                       output: OutputFormat | None) -> AsyncIterator[BackendMessage | Completion]:
        """One attempt: running usage while it streams, settled once when it is complete."""
        prompt_chars = sum(len(m["content"]) for m in messages)
        if output is not None and output.mode != "json_schema":
            messages = _with_schema_hint(messages, output)
        text_chars = 0
        settled = False
        reasoning: list[str] = []
        last_update = 0
        try:
            async for item in self._stream_completion(messages, output):
                if isinstance(item, Piece):
                    text_chars += len(item.text)
                    if item.reasoning:
                        reasoning.append(item.text)
                    if text_chars - last_update >= 400:  # budgets see tokens as they stream
                        last_update = text_chars
                        self.ledger.running(_estimate(prompt_chars, text_chars))
                    continue
                completion = item
                if completion.model and not self.ledger.model:
                    self.ledger.model = completion.model
                usage = completion.usage
                if usage is None:
                    usage = _estimate(prompt_chars, len(completion.text) + len(completion.reasoning))
                    if not self._estimated_note:
                        self._estimated_note = True
                        yield BackendMessage(MessageType.STATUS, content=(
                            "the server reported no token usage; counts are estimated at 4 characters per token"))
                self.ledger.settle(usage, cost=completion.cost)
                settled = True
                if completion.reasoning or reasoning:
                    yield BackendMessage(MessageType.THINKING, content=completion.reasoning or "".join(reasoning))
                yield completion
                return
        finally:
            if not settled:
                self.ledger.abandon_running()
        raise StreamIncomplete("the response ended before it was complete")


# ---------------------------------------------------------------------- the context


@dataclass
class _Context:
    files: list[str]
    repo_map: str
    shown: dict[str, str]
    truncated: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)
    more_to_read: bool = False

    def map_text(self) -> str:
        return f"Repository map ({len(self.files)} files; paths relative to the root):\n{self.repo_map}\n"

    def prompt_text(self, prompt: str) -> str:
        parts = [self.map_text()]
        if self.shown:
            parts.append("Files shown in full:")
            for path, text in self.shown.items():
                parts.append(_file_block(path, text, truncated=path in self.truncated))
        else:
            parts.append("No file content is shown.")
        if self.refused:
            parts.append("Files not shown:\n" + "\n".join(f"- {p}: {why}" for p, why in self.refused.items()))
        parts.append(f"\nTask:\n{prompt}")
        return "\n".join(parts)


class _Feedback(Exception):
    """A proposal failed; `text` goes back to the model."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def list_files(root: Path) -> list[str]:
    """The repository's files, relative POSIX paths, sorted: git's view (tracked and untracked,
    ignored files left out) in a git work tree, else a walk that skips SKIP_DIRS."""
    if (root / ".git").exists():
        try:
            result = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                                     "--exclude-standard"], capture_output=True, timeout=15, check=True)
            paths = [p for p in result.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
            found = sorted({p for p in paths if os.path.isfile(root / p) and not os.path.islink(root / p)})
            return found[:MAX_LISTED_FILES]
        except (OSError, subprocess.SubprocessError):
            pass
    found = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        base = Path(directory).relative_to(root)
        for name in names:
            full = os.path.join(directory, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            found.append((base / name).as_posix())
            if len(found) >= MAX_LISTED_FILES:
                return sorted(found)
    return sorted(found)


def render_repo_map(files: Sequence[tuple[str, int | None]], budget_chars: int, first: Sequence[str] = ()) -> str:
    """One line per file ('path (N lines)'), within `budget_chars`: shallow paths (and `first`)
    win; what does not fit is summed up per top-level directory."""
    def line(path: str, lines: int | None) -> str:
        return f"{path} ({lines} lines)" if lines is not None else path

    entries = dict(files)
    if sum(len(line(p, n)) + 1 for p, n in files) <= budget_chars:
        return "\n".join(line(p, n) for p, n in files) or "(empty)"
    priority = [p for p in first if p in entries]
    rest = sorted((p for p in entries if p not in set(priority)), key=lambda p: (p.count("/"), p))
    shown: list[str] = []
    # Room for the summary lines of what does not fit (one per top-level directory at most).
    used = 50 + sum(len(top) + 40 for top in {p.split("/", 1)[0] for p in entries if "/" in p})
    for path in priority + rest:
        cost = len(line(path, entries[path])) + 1
        if used + cost > budget_chars:
            continue
        shown.append(path)
        used += cost
    chosen = set(shown)
    missing: dict[str, int] = {}
    for path in entries:
        if path not in chosen:
            top = path.split("/", 1)[0] + "/" if "/" in path else "."
            missing[top] = missing.get(top, 0) + 1
    lines = [line(p, entries[p]) for p in sorted(shown)]
    lines += [f"{top} ... {count} more file(s) not listed" if top != "." else
              f"... {count} more file(s) at the top level not listed" for top, count in sorted(missing.items())]
    return "\n".join(lines)


_WORD_EDGE = r"(?<![\w/.-]){}(?![\w/-])"


def select_named_files(prompt: str, files: Sequence[str]) -> list[str]:
    """Files the task names: by path, or by a file name that is unique enough (at most 3 files)."""
    named = []
    by_name: dict[str, list[str]] = {}
    for path in files:
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
        if "/" in path and path in prompt:
            named.append(path)
    for name, paths in by_name.items():
        if "." not in name or len(name) < 4 or len(paths) > 3:
            continue
        if name in prompt and re.search(_WORD_EDGE.format(re.escape(name)), prompt):
            named.extend(p for p in paths if p not in named)
    return named


_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)


def command_env() -> dict[str, str]:
    """The environment of a proposed test command: ours without anything that looks secret (a
    model-written command must not reach the API key) nor agenter's own variables."""
    return {name: value for name, value in os.environ.items()
            if not _SECRET_NAME.search(name) and not name.startswith("AGENTER_")}


def _read_text(resolver: Any, path: str) -> str | None:
    """UTF-8 text of a regular file inside the workspace; None for binary, huge or refused files."""
    try:
        with resolver.open_for_read(path) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except (OSError, PathSecurityError, ValueError):
        return None
    if len(data) > MAX_FILE_BYTES or b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return MAX_FILE_BYTES + 1


def _count_lines(path: Path) -> int | None:
    try:
        fd = open_regular(path, os.O_RDONLY)  # never a FIFO or device: it could block
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES:
        return None
    if b"\x00" in data[:8192]:
        return None
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def _file_block(path: str, text: str, truncated: bool = False) -> str:
    note = " (truncated: only its beginning is shown; edit it with search_replace)" if truncated else ""
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"===== {path}{note} =====\n{body}===== end of {path} ====="


# ---------------------------------------------------------------------- small helpers


def _estimate(prompt_chars: int, output_chars: int) -> Usage:
    return Usage(input_tokens=prompt_chars // CHARS_PER_TOKEN, output_tokens=output_chars // CHARS_PER_TOKEN)


def _with_schema_hint(messages: list[dict[str, str]], output: OutputFormat) -> list[dict[str, str]]:
    """Without a JSON-schema response format the schema must be in the prompt (once)."""
    hint = json_instructions(output.schema)
    if any(hint in m["content"] for m in messages):
        return messages
    first = dict(messages[0])
    first["content"] = first["content"] + "\n\n" + hint
    return [first, *messages[1:]]


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema for strict structured outputs: closed objects, all properties required, no
    defaults (strict mode rejects the keyword)."""
    schema = strict_schema(schema)

    def drop(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("default", None)
            for value in node.values():
                drop(value)
        elif isinstance(node, list):
            for value in node:
                drop(value)

    drop(schema)
    return schema


def _proposal_schema(model: type[BaseModel]) -> dict[str, Any]:
    return _strict(copy.deepcopy(model.model_json_schema()))


def _schema_name(model: type[BaseModel]) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", model.__name__)[:64] or "result"


def _why_invalid(text: str, model: type[BaseModel]) -> str:
    stripped = text.strip()
    if not stripped:
        return "The reply was empty."
    candidate = stripped
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", stripped, re.DOTALL)
    if fenced:
        candidate = fenced.group(1)
    elif "{" in stripped:
        candidate = stripped[stripped.find("{"):stripped.rfind("}") + 1]
    try:
        data = json.loads(candidate)
    except ValueError as exc:
        return f"The reply is not valid JSON ({exc})."
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return f"The JSON does not match the schema: {validation_problems(exc)}."
    return "The reply could not be read as one JSON object."


_T = TypeVar("_T", bound=BaseModel)


def find_json(text: str, model: type[_T]) -> _T | None:
    """An instance of `model` from a reply: the whole reply, a fenced block, or the first JSON
    object in it that validates (prose before or after it is ignored)."""
    parsed = parse_structured_output(text, model)
    if parsed is not None:
        return parsed  # type: ignore[return-value]
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            data, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(data, dict):
            try:
                return model.model_validate(data)
            except ValidationError:
                pass
        position = text.find("{", end)
    return None


def _first_lines(text: str) -> str:
    """Where a 'REFUSED:' line counts: a reply that is not JSON."""
    stripped = text.lstrip()
    return "" if stripped.startswith(("{", "```")) else text


def _plan_message(proposal: Any) -> BackendMessage:
    data = {"summary": proposal.summary, "files": [_change_summary(c) for c in proposal.files],
            "test_commands": list(proposal.test_commands), "risks": list(proposal.risks)}
    lines = [proposal.summary] + [f"- {c.operation} {c.path}" + (f" -> {c.new_path}" if c.new_path else "")
                                  for c in proposal.files]
    return BackendMessage(MessageType.PLAN, content="\n".join(lines), tool_name="patch_proposal", tool_input=data)


def _change_summary(change: Any) -> dict[str, Any]:
    how = next((name for name in ("content", "search_replace", "diff") if getattr(change, name) is not None), None)
    data: dict[str, Any] = {"path": change.path, "operation": change.operation}
    if change.new_path:
        data["new_path"] = change.new_path
    if how:
        data["as"] = how
    return data


def _applied_text(written: set[str], deleted: set[str]) -> str:
    parts = []
    if written:
        parts.append(f"written: {', '.join(sorted(written))}")
    if deleted:
        parts.append(f"deleted: {', '.join(sorted(deleted))}")
    return "Applied. " + ("; ".join(parts) if parts else "Nothing changed.")


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} characters before]\n" + text[-limit:]


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------- the openai client's failures


def openai_failure(exc: BaseException) -> Failure | None:
    """Failures of the openai client and of LiteLLM (whose exceptions subclass openai's; their
    class name is LiteLLM's reading of the provider's answer: of it and the body's type, the
    more specific one is the error type, e.g. insufficient_quota before RateLimitError)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        headers = exc.response.headers if exc.response is not None else None
        names = [error_type(exc.body)]
        if type(exc).__module__.startswith("litellm"):
            names.append(type(exc).__name__)
        name = min(names, key=_specificity)
        return Failure(error_message(exc), status=exc.status_code, headers=headers, error_type=name)
    if isinstance(exc, openai.APIConnectionError) or is_transport_error(exc):
        return Failure(str(exc) or type(exc).__name__, connection=True)
    return None


def _specificity(name: str | None) -> int:
    """Where an error type's kind stands in KIND_ORDER (types it does not know: last)."""
    kind = kind_of_type(name)
    return KIND_ORDER.index(kind) if kind is not None else len(KIND_ORDER)


def chat_usage(usage: Any) -> Usage | None:
    """Chat Completions usage as agenter counts it: input without the cached part."""
    if usage is None:
        return None
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(input_tokens=max(prompt - cached, 0), output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                 cache_read_tokens=cached)
