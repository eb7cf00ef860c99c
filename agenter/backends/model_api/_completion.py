"""The context path: a model API that answers text, and the two modes agenter runs on it — the
analysis and patch mode of openai and litellm with openai_context / litellm_context="prompt"
(both keep it beside agenter's own agent, over the same wire: `_two_paths.py`).

On this path there is no tool loop, no filesystem and no shell, so a pure completion backend
never runs in autonomous mode (the facade refuses it when the agent is built). It runs:

- analysis mode: the model reads the repository context agenter gives it and answers with text,
  or with structured output (JSON-schema response format where the server takes it; otherwise the
  schema in the prompt, and a reply that does not validate goes back to the model with the errors).
- patch mode: a turn like analysis mode's, whose structured output is the session's proposal
  (agenter.session.modes.PatchMode asks for it, applies it through the gate, validates it and
  sends problems back: the same on every backend).

The model sees a compact map of the repository (paths and line counts, within `repo_map_tokens`)
and the files it needs (files the task names, or the whole repository when it fits `context_tokens`);
when the map lists more than is shown it may first ask for files in a read step. The model sees
paths relative to the repository, never where it lies on this machine.

A backend subclass writes only its wire: `_open_client`, `_close_client`, `_stream_completion`
(one request, streamed or not, yielding text pieces and then one Completion) and
`_classify_failure` (which exceptions are API failures: a Failure, whose kind and retry the
shared classifier in agenter.backends._failures decides).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from agenter._errors import BackendError
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
from agenter.backends._workspace import (
    MAX_FILE_BYTES,
    list_files,
    read_text,
    select_named_files,
)
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.backends.capabilities import check_mode
from agenter.backends.model_api._harness.repetition import RepetitionWatch, repeating_tail
from agenter.host.retry import retry_delay
from agenter.permissions import ToolCall
from agenter.sandbox.paths import open_regular
from agenter.tools.shown import as_fenced, file_block
from agenter.usage import is_known_model

__all__ = [
    "Completion", "CompletionBackend", "CompletionOptions", "Failure", "OutputFormat", "Piece", "ReadRequest",
    "StreamIncomplete", "find_json", "list_files", "openai_failure", "render_repo_map",
    "chat_usage", "read_text", "retry_delay", "select_named_files",
]

OptionsT = TypeVar("OptionsT", bound="CompletionOptions")

#: Characters per token for estimates (budgets, and usage a server did not report).
CHARS_PER_TOKEN = 4
#: Output of a test command sent back to the model (the end of it, where failures are).
COMMAND_OUTPUT_CHARS = 4000
EVENT_TEXT_LIMIT = 4000


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
        default_factory=list, description="Removed: proposals carry no test commands any more; pass "
                                          "validators=['command:pytest -q'] (a non-empty list is refused).")
    proposal_format: Literal["json", "files"] = Field(
        "json", description="How patch mode's model writes its proposal: 'json', one JSON object (any change: "
                            "whole content, search/replace, diff, delete, rename), or 'files', each changed file's "
                            "path on a line and its whole new text in a ``` block, which agenter reads into the "
                            "proposal (what small local models write best: no JSON escaping).")
    max_attempts: int = Field(3, ge=1, le=20, description="Model replies per turn for structured output: a reply "
                                                          "that does not match the schema goes back with the errors "
                                                          "until then.")
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

ANALYSIS_GUIDANCE = """\
You are working on a task in a repository. You cannot change files or run commands yourself: \
answer from the repository map and the files shown."""
#: Patch mode's files format: the model writes the files and agenter applies them. Measured: told
#: it "cannot change files", Qwen2.5-Coder-1.5B declined a bug fix with "REFUSED: the task
#: requires modifying averages.py, which is not allowed" (a JSON schema had kept it from it).
FILES_SYSTEM = """\
You are working on a task in a repository, from the repository map and the files shown. You \
cannot run commands; agenter writes the files you give."""

READ_GUIDANCE = """\
You are about to work on a task in a repository. Some files are shown in full; the \
others are only listed in the repository map. Reply with exactly one JSON object \
{{"read_files": [...]}} naming the files from the map (at most {limit}) whose content you need \
for the task; {{"read_files": []}} if the files shown are enough."""

CUT_OFF = ("Your reply was cut off at the output token limit before it was complete. Make it shorter "
           "(in a proposal: search_replace blocks instead of a large file's whole content).")

#: Patch mode's files format (`_ask_files`): why a reply gave no file to write.
_FILES_HOW = "each file you change as its path on a line of its own, then its whole new text in a ``` block"
NO_FILES = f"Your reply gave no changed file. Give {_FILES_HOW}."
#: A reply whose blocks are the files as they are (measured: a retry's reply, the failed file again).
UNCHANGED = (f"Your reply gave the files as they already are, so nothing would change. Change what the task "
             f"needs, and give {_FILES_HOW}.")
CUT_OFF_FILES = (f"Your reply was cut off at the output token limit before it was complete. Give {_FILES_HOW}, "
                 "once, and nothing else.")
#: A reply stopped because it looped (repetition.py): not the output limit, so not CUT_OFF's advice.
_REPEATED = ("Your reply kept repeating the same lines, so it was cut off; the repetition is left out "
             "above. Do not continue it")
REPEATED = f"{_REPEATED}: give {_FILES_HOW}, once."
REPEATED_JSON = f"{_REPEATED}."


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
        self._estimated_note = False
        #: The prompt of the request in flight, as an estimate: counted once the wire says it was sent.
        self._in_flight: Usage | None = None

    @classmethod
    def validate_settings(cls, settings: Any) -> None:
        if settings.options.allowed_commands:
            from agenter._errors import ConfigurationError

            raise ConfigurationError(
                "allowed_commands was removed: a patch proposal no longer carries test commands (models filled "
                "them with guesses). Pass validators=['command:pytest -q'] instead: the validators run after "
                "every applied proposal and their failures go back to the model.", parameter="allowed_commands")

    # ------------------------------------------------------------------ for subclasses
    def request_sent(self) -> None:
        """The wire's word that the request has reached the server (its body was written): from
        then on its prompt counts, as an estimate until the response reports usage, so a request
        cancelled while the model works still counts what the API bills for it."""
        if self._in_flight is not None:
            self.ledger.running(self._in_flight)

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
        from agenter.sandbox.paths import PathResolver

        check_mode(spec.mode, self.capabilities, self.name)
        self._resolver = PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        # The price table's first load takes a while: off the event loop, before any response.
        await asyncio.to_thread(is_known_model, self.ledger.model, self.ledger.provider)
        await self._open_client()
        self._session_id = f"{self.name}-{os.urandom(6).hex()}"

    async def _disconnect(self) -> None:
        try:
            await self._close_client()
        except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
            pass

    # ------------------------------------------------------------------ one turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        # Analysis and patch mode alike: the repository as context, one answer (patch mode's is
        # the session's proposal, asked for as structured output).
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
        wanted = select_named_files(prompt, files)
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
        return read_text(self._resolver, path)

    async def _read_step(self, prompt: str, context: _Context) -> AsyncIterator[BackendMessage]:
        limit = self.options.max_read_files
        shown = ", ".join(context.shown) or "(none)"
        messages = [
            {"role": "system", "content": READ_GUIDANCE.format(limit=limit)},
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
            text = await self.in_thread(read_text, self._resolver, path)
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
        files = self.spec.mode == "patch" and self.capabilities.patch_files
        system = (FILES_SYSTEM if files else ANALYSIS_GUIDANCE) + "\n\n" + self.instructions(
            refusal_tool=None, output_channel="native", contract=False)
        if output_type is not None and not files and not (self.spec.mode == "patch"
                                                          and self._format_mode == "json_schema"):
            # Patch mode's message explains every field with an example, and a JSON-schema response
            # format holds the reply to the schema: the schema's text again in the prompt was 2,600
            # characters a request (measured: a third of a small task's prompt). Another output
            # type's field descriptions reach the model only here. A format stepped down later
            # gets the schema then (_with_schema_hint).
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
        asked = (self._ask_files(messages, output_type, list(context.shown)) if files else
                 self._ask_json(messages, output_type, _schema_name(output_type), attempts=self.options.max_attempts))
        async for item in asked:
            if isinstance(item, BackendMessage):
                yield item
            else:
                result = item
        if result is not None:
            self.accept_output(result.model_dump())
            yield BackendMessage(MessageType.TEXT, content=result.model_dump_json())

    # ------------------------------------------------------------------ structured replies
    async def _ask_json(self, messages: list[dict[str, str]], model: type[BaseModel], name: str,
                          attempts: int) -> AsyncIterator[BackendMessage | Any]:
        """A reply validated against `model`; a bad one goes back to the model with the errors.
        Yields messages, then the instance (nothing when every attempt failed or it refused)."""
        async def read(completion: Completion) -> BaseModel | _Unread:
            text = completion.text
            if completion.finish_reason == "length":
                text, repeated = _without_repetition(text, escaped=True)
                problem = REPEATED_JSON if repeated else CUT_OFF
            else:
                parsed = find_json(text, model)
                if parsed is not None:
                    return parsed
                problem = _why_invalid(text, model)
            return _Unread(f"did not match {model.__name__}: {problem}", text,
                           f"{problem}\nReply again with one JSON object that matches the schema.")

        output = OutputFormat(self._format_mode, name, _strict(model.model_json_schema()))
        async for item in self._ask_until_read(messages, output, read, attempts):
            yield item

    async def _ask_files(self, messages: list[dict[str, str]], model: type[BaseModel],
                         shown: list[str]) -> AsyncIterator[BackendMessage | Any]:
        """Patch mode with the files format (capability `patch_files`): a reply whose code blocks
        are files (the harness's text-mode rules, codeedits.py: a path on the line before each
        block), read into an instance of `model` (the session's proposal: summary and files). A
        reply with no file, or blocks that are not one, goes back to the model with why, as a
        reply that is not JSON does. Yields messages, then the instance (nothing when every
        attempt failed or the model refused)."""
        from agenter.backends.model_api._harness.codeedits import code_edits

        texts: dict[str, str | None] = {}  # each file read once: for the edits, then create or modify

        def read_once(path: str) -> str | None:
            if path not in texts:
                texts[path] = self._readable(path)
            return texts[path]

        async def read(completion: Completion) -> BaseModel | _Unread:
            text = completion.text
            if completion.finish_reason == "length":
                text, repeated = _without_repetition(text)
                problem = REPEATED if repeated else CUT_OFF_FILES
            else:
                readable = as_fenced(text)
                found = await self.in_thread(code_edits, readable, read=read_once, candidates=shown)
                if found.edits:
                    # The sentence after the files (or before them, as some models write it).
                    after = readable[max(edit.end for edit in found.edits):]
                    before = readable[:min(edit.start for edit in found.edits)]
                    # A path given twice (a draft, then the file again): its last block is the answer.
                    last = list({edit.path: edit for edit in found.edits}.values())
                    summary = " ".join((after if after.strip() else before).split())[:500] or (
                        "Changed " + ", ".join(edit.path for edit in last) + ".")
                    return model.model_validate({"summary": summary, "files": [
                        {"path": edit.path, "content": edit.content,
                         "operation": "modify" if read_once(edit.path) is not None else "create"}
                        for edit in last]})
                problem = (f"No file was written: {'; '.join(found.problems)}. Give {_FILES_HOW}."
                           if found.problems else UNCHANGED if found.quotes else NO_FILES)
            return _Unread(f"gave no file to write: {problem}", text, problem)

        async for item in self._ask_until_read(messages, None, read, self.options.max_attempts):
            yield item

    async def _ask_until_read(self, messages: list[dict[str, str]], output: OutputFormat | None,
                              read: Callable[[Completion], Awaitable[BaseModel | _Unread]],
                              attempts: int) -> AsyncIterator[BackendMessage | Any]:
        """Replies until `read` makes a result of one (yielded last), at most `attempts`; one it
        cannot read goes back to the model with why. Nothing is yielded after the messages when
        the model refused, no reply could be read, or a reply repeated the one before it."""
        messages = list(messages)
        previous = None
        for attempt in range(1, attempts + 1):
            completion: Completion | None = None
            async for piece in self._ask(messages, output):
                if isinstance(piece, Completion):
                    completion = piece
                else:
                    yield piece
            assert completion is not None
            if self._refused(completion):
                return
            result = await read(completion)
            if not isinstance(result, _Unread):
                yield result
                return
            yield BackendMessage(MessageType.STATUS, is_error=True, content=_truncate(
                f"reply {attempt} {result.why}", EVENT_TEXT_LIMIT))
            if result.kept == previous:
                # The correction changed nothing (at temperature 0 a model repeats itself word for
                # word): asking again would spend a request on the same reply.
                yield BackendMessage(MessageType.STATUS, is_error=True, content=(
                    f"reply {attempt} repeated the previous one word for word: not asking again"))
                return
            previous = result.kept
            messages += [{"role": "assistant", "content": result.kept}, {"role": "user", "content": result.again}]

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
                async for item in self._respond_once(messages, output):
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

    async def _respond_once(self, messages: list[dict[str, str]],
                       output: OutputFormat | None) -> AsyncIterator[BackendMessage | Completion]:
        """One attempt: running usage while it streams, settled once when it is complete."""
        prompt_chars = sum(len(m["content"]) for m in messages)
        if output is not None and output.mode != "json_schema":
            messages = _with_schema_hint(messages, output)
        text_chars = 0
        settled = False
        reasoning: list[str] = []
        last_update = 0
        self._in_flight = _estimate(prompt_chars, 0)
        watch = RepetitionWatch(escaped=output is not None)  # JSON: a file's lines are escapes
        stream = self._stream_completion(messages, output)
        try:
            async for item in stream:
                if isinstance(item, Piece):
                    text_chars += len(item.text)
                    if item.reasoning:
                        reasoning.append(item.text)
                    elif watch.feed(item.text):
                        # A loop (repetition.py): stopped here, as if cut off at the output limit,
                        # rather than run to it. Closing the stream stops the server; the tokens
                        # so far are estimated (no usage comes for them).
                        await _close(stream)
                        self.ledger.settle(_estimate(prompt_chars, text_chars))
                        settled = True
                        yield Completion(text=watch.text, reasoning="".join(reasoning), finish_reason="length")
                        return
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
        except Exception as exc:
            failure = None if text_chars else self._classify_failure(exc)
            if failure is not None and failure.status is not None:
                self.ledger.running(Usage())  # the server answered with an error: no tokens billed
            raise
        finally:
            self._in_flight = None
            if not settled:  # cancelled, or cut off: what was sent and what streamed are spent
                self.ledger.abandon_running()
            await _close(stream)
        raise StreamIncomplete("the response ended before it was complete")


async def _close(stream: AsyncIterator[Any]) -> None:
    """Close a response stream (an async generator) now, not when it is collected."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


@dataclass(frozen=True)
class _Unread:
    """A reply that could not be read (`_ask_until_read`): why (for the status message), the
    reply as the conversation keeps it, and what goes back to the model."""

    why: str
    kept: str
    again: str


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


def _without_repetition(text: str, escaped: bool = False) -> tuple[str, bool]:
    """A cut-off reply as the conversation keeps it: without the repetition it ends in, if it
    does (one round kept), and whether it did."""
    tail = repeating_tail(text, escaped=escaped)
    return (text, False) if tail is None else (text[:tail], True)


def _file_block(path: str, text: str, truncated: bool = False) -> str:
    note = " (truncated: only its beginning is shown; edit it with search_replace)" if truncated else ""
    return file_block(path, text, note)


# ---------------------------------------------------------------------- small helpers


def _estimate(prompt_chars: int, output_chars: int) -> Usage:
    return Usage(input_tokens=prompt_chars // CHARS_PER_TOKEN,
                 output_tokens=output_chars // CHARS_PER_TOKEN).as_estimate()


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


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


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
    """Chat Completions usage as agenter counts it: input without the cached part, nor the part
    written to the cache (`cache_creation_input_tokens`: what LiteLLM reports for providers that
    bill cache writes, Anthropic's; both are inside prompt_tokens there)."""
    if usage is None:
        return None
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    written = getattr(usage, "cache_creation_input_tokens", None)
    written = int(written) if isinstance(written, int) and written > 0 else 0
    return Usage(input_tokens=max(prompt - cached - written, 0),
                 output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                 cache_read_tokens=cached, cache_write_tokens=written)
