"""CliBackend: the half of an agent-CLI backend that every program shares.

An agent CLI runs one prompt per process (`claude -p`, `codex exec`, `gemini -p`, `opencode run`,
`aider --message`) and continues a conversation by resuming its session id. So a turn is: build
the command (`command()`, the program's module), run it through the one runner (`_runner`), turn
each output line into messages (`parse_event()`), and conclude: an error the program reported
becomes a BackendError of the right kind, a 'REFUSED:' line a refusal, the final text or the
program's own structured output the turn's output.

The user's own installation, login and configuration are used unless `home` says otherwise.
Files a program needs for a session (prompt files, schemas, a private home) live in a scratch
directory that disconnect() removes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import Field, SecretStr

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter.backends._prompts import OutputChannel
from agenter.backends.base import (
    BackendMessage,
    BackendOptions,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
)
from agenter.backends.cli._failures import classify
from agenter.backends.cli._runner import Invocation, Line, ProgramRun, start_program
from agenter.host import Program, Requirement, find_program

__all__ = ["CliBackend", "CliOptions", "TurnState", "search_path", "table"]

log = logging.getLogger("agenter.backends.cli")


class CliOptions(BackendOptions):
    """Options every agent-CLI backend takes (keyword arguments of AutonomousCodingAgent)."""

    api_key: SecretStr | None = Field(
        None, description="API key handed to the program through its own variable; default: its own login.")
    base_url: str | None = Field(None, description="Model API endpoint for the program; default: its own.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the program.")
    program_path: str | None = Field(None, description="Path (or name on PATH) of the program.")
    program_args: list[str] = Field(default_factory=list, description="Extra command-line arguments, added last.")
    home: str | None = Field(
        None, description=("The program's home (configuration, login, sessions): None uses yours; 'private' "
                           "a fresh directory per session, removed after it; or a directory."))
    max_retries: int | None = Field(None, ge=0, description="Retries of a failed model call; default: the program's.")
    idle_timeout: float | None = Field(
        None, gt=0, description="Seconds the program may print nothing before the turn fails (kind transient).")


OptionsT = TypeVar("OptionsT", bound=CliOptions)


@dataclass
class TurnState:
    """What one run of the program said, as its module parses it."""

    #: Complete assistant messages, in order.
    texts: list[str] = field(default_factory=list)
    #: The program's own final answer, when it reports one apart from its messages.
    result_text: str | None = None
    #: Structured output from the program's native channel (a dict or JSON text).
    output: Any = None
    #: A failure the program reported (already redacted by the module), with what it knows of it.
    error: str | None = None
    status_code: int | None = None
    kind: str | None = None
    #: The program reported the end of its turn (success or failure).
    finished: bool = False
    #: Text deltas of the assistant message being streamed (programs that stream text).
    _pending: list[str] = field(default_factory=list)

    @property
    def final_text(self) -> str:
        if self.result_text is not None:
            return self.result_text
        return self.texts[-1] if self.texts else ""

    def add_delta(self, text: str) -> None:
        self._pending.append(text)

    def close_text(self) -> str | None:
        """Ends the streamed message; returns its text (None when there was none)."""
        if not self._pending:
            return None
        text, self._pending = "".join(self._pending), []
        if text.strip():
            self.texts.append(text)
        return text

    def fail(self, message: str, *, status_code: int | None = None, kind: str | None = None) -> None:
        if self.error is None:
            self.error, self.status_code, self.kind = message, status_code, kind


def table(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (wire data is never trusted)."""
    return value if isinstance(value, dict) else {}


def search_path(extra: Sequence[str | os.PathLike[str]] = ()) -> str:
    """Where programs are looked for: `extra` first, then node_modules/.bin of the current
    directory and its parents (a project's pinned npm programs), then PATH."""
    here = Path.cwd()
    dirs = [os.fspath(p) for p in extra]
    dirs += [str(d / "node_modules" / ".bin") for d in (here, *here.parents)]
    return os.pathsep.join([*dirs, os.environ.get("PATH", "")])


class CliBackend(BaseBackend[OptionsT]):
    """Base of the agent-CLI backends: one process per turn, resumed by session id."""

    #: The program's name on PATH, and how to install it (named in RequirementError).
    program: ClassVar[str] = ""
    install: ClassVar[str] = ""
    #: How the model returns structured output with this program.
    output_channel: ClassVar[OutputChannel] = "text"
    #: Whether the instructions go first in the first prompt (programs without a system prompt
    #: option of their own).
    instructions_in_prompt: ClassVar[bool] = True
    #: The contract the instructions open with (`_prompts.compose_instructions`): the autonomous
    #: one, or the words for a program whose model changes files by what it replies.
    contract: ClassVar[bool | str] = True
    #: Seconds the program gets after SIGTERM before it is killed.
    stop_grace: ClassVar[float] = 1.0
    #: Whether the program reports usage per model response. Programs that report it only when
    #: their run ends get a running estimate meanwhile (about four characters a token), so token
    #: and cost budgets can stop a turn mid-way; the program's figures replace it at the end.
    live_usage: ClassVar[bool] = True
    #: The program's shell tool(s): their calls are COMMAND_START/COMMAND_END messages.
    shell_tools: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, settings: BackendSettings[OptionsT]):
        super().__init__(settings)
        self.executable: str | None = None
        self._scratch: Path | None = None
        self.home_dir: Path | None = None
        self.turns = 0
        self._run: ProgramRun | None = None
        self._estimate = Usage()
        self._settled: list[BackendMessage] = []
        #: Characters of the prompt agenter sent in the running turn.
        self._sent_chars = 0

    # ------------------------------------------------------------------ configuration
    @classmethod
    def locate(cls, options: CliOptions) -> str | None:
        """The program's path, or None when it is not installed."""
        return find_program(cls.program, options.program_path, search_path())

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        options = settings.options
        return [Program(name=cls.program, install=cls.install, path=options.program_path,
                        env_path=search_path())]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        if settings.sandbox and not cls.capabilities.sandbox:
            raise ConfigurationError(
                f"the {cls.name} backend cannot honour sandbox=True: {cls.program} has no sandbox of its "
                f"own, so its edits and commands would reach the whole machine. Pass sandbox=False to run "
                "it unconfined (in a container or VM of your own), or choose a backend with a sandbox.",
                parameter="sandbox")
        home = settings.options.home
        if home not in (None, "private") and not Path(home).expanduser().is_dir():
            raise ConfigurationError(f"home {home!r} is not a directory (use None, 'private' or a directory)",
                                     parameter="home")

    # ------------------------------------------------------------------ what a program module writes
    def command(self, prompt: str) -> Invocation:
        """The invocation for one turn (`prompt` already carries the instructions on turn 1)."""
        raise NotImplementedError

    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        """Messages for one output line; record what the turn learnt in `turn`."""
        raise NotImplementedError

    async def prepare(self) -> None:
        """Per-session set-up after the program was found (config files in the scratch dir, ...)."""

    async def answer(self, question: str, turn: TurnState) -> str:
        """The answer to a question the program asks on stdin (programs whose invocation sets
        `question`). Headless, the safe answer is "n"."""
        return "n"

    def unreported(self, turn: TurnState, *, ended: bool, reported: bool) -> Usage:
        """Usage the program did not report for this run, counted as agenter's estimate. `ended`:
        the program ran to its end (else it was cut short: a budget, a stop, a failure);
        `reported`: it reported some usage during the run. A `cost_usd` in it is taken as the
        cost (else it is priced at the model's rates). By default a run cut short before it
        reported anything counts the prompt agenter sent and the text that came back, about four
        characters a token (the program's own instructions and context are not seen: a lower
        bound); programs without live usage have their running estimate kept instead."""
        if ended or reported or not self.live_usage:
            return Usage()
        back = sum(len(text) for text in turn.texts) + sum(len(text) for text in turn._pending)
        return Usage.estimate(input_chars=self._sent_chars, output_chars=back)

    def last_messages(self, turn: TurnState) -> list[BackendMessage]:
        """Messages still pending when the output ended (a streamed message not yet closed)."""
        text = turn.close_text()
        return [] if text is None else [BackendMessage(MessageType.TEXT, self.redact(text))]

    def conclude(self, turn: TurnState, returncode: int | None, stderr: str) -> None:
        """After the run: raise for a failure, else take refusal and structured output."""
        if turn.error is not None or not (returncode == 0 or (returncode is None and turn.finished)):
            raise self.failure(turn, returncode, stderr)
        self.refuse_from_text(turn.final_text)
        if self.spec.output_type is not None:
            # The final message first; an earlier one when the program had the last word.
            self.parse_output(turn.output, turn.final_text, *reversed(turn.texts))

    # ------------------------------------------------------------------ services for modules
    def failure(self, turn: TurnState, returncode: int | None, stderr: str) -> BackendError:
        """A BackendError of the right kind for a failed run."""
        if turn.error is not None:
            message = f"{self.program} failed: {turn.error}"
            kind, status = classify(turn.error, turn.status_code)
            kind = turn.kind or kind
        else:
            message = (f"{self.program} was killed by signal {-returncode}" if returncode is not None
                       and returncode < 0 else f"{self.program} exited with code {returncode}")
            kind, status = classify(stderr)
        if kind == "unknown" and turn.error is None:
            kind = "agent_crash"
        return BackendError(self.redact(message), backend=self.name, stderr_tail=stderr or None,
                            status_code=status, kind=kind)

    def environment(self, **variables: str | None) -> dict[str, str]:
        """The program's environment: ours, the private home, `variables` (None leaves a variable
        as it is), then the user's `env` option."""
        env = {**os.environ, **self.trace_env()}
        if self.home_dir is not None:
            env["HOME"] = str(self.home_dir)
        env.update({key: value for key, value in variables.items() if value is not None})
        env.update(self.options.env)
        return env

    def api_key(self) -> str | None:
        key = self.options.api_key
        return key.get_secret_value() if key is not None else None

    @property
    def scratch(self) -> Path:
        """The session's scratch directory (prompt files, settings; removed at disconnect)."""
        if self._scratch is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        return self._scratch

    def scratch_file(self, name: str, content: str | bytes) -> Path:
        """A file in the session's scratch directory (removed at disconnect)."""
        path = self.scratch / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def resume_id(self) -> str | None:
        """The session to continue: ours after the first turn, else the one the request names."""
        return self._session_id or self.spec.resume_session_id

    def task(self, prompt: str) -> str:
        """The prompt as sent: on the first turn, after the instructions (when they go there)."""
        if self.turns > 1 or not self.instructions_in_prompt:
            return prompt
        instructions = self.instructions(refusal_tool=None, output_channel=self.output_channel, contract=self.contract)
        return f"{instructions}\n\n---\n\n{prompt}"

    def settle(self, usage: Usage, cost: float | None = None) -> None:
        """One finished model response, or a whole run's figures: replaces the running estimate.
        A USAGE message follows the line's messages, so budgets are checked at once."""
        self._estimate = Usage()
        priced = self.ledger.settle(usage, cost=cost)
        self._settled.append(BackendMessage(MessageType.USAGE, details={"usage": priced.model_dump()}))

    def _count(self, message: BackendMessage | None = None, *, sent: str = "") -> None:
        """Adds a message (or text sent to the model) to the running estimate."""
        if self.live_usage:
            return
        if message is not None and message.type is not MessageType.TEXT_DELTA:  # counted whole
            size = len(message.content) + (len(json.dumps(message.tool_input)) if message.tool_input else 0)
            # A tool's result goes to the model as input; everything else came out of it.
            if message.type in (MessageType.TOOL_RESULT, MessageType.COMMAND_END):
                sent = "x" * size
            else:
                self._estimate = self._estimate + Usage(output_tokens=size // 4)
        if sent:
            self._estimate = self._estimate + Usage(input_tokens=len(sent) // 4)
        self.ledger.running(self._estimate.as_estimate())

    def call_message(self, name: str, arguments: dict[str, Any], call_id: str | None, *,
                     raw: Any = None) -> BackendMessage:
        """A tool call; a call of the program's shell tool is a COMMAND_START. `raw`: the
        program's own payload of it."""
        if name in self.shell_tools:
            command = arguments.get("command", arguments.get("cmd", ""))
            return BackendMessage(MessageType.COMMAND_START, tool_name=name, tool_input=arguments,
                                  tool_call_id=call_id, details={"command": self.redact(str(command))}, raw=raw)
        return BackendMessage(MessageType.TOOL_CALL, tool_name=name, tool_input=arguments, tool_call_id=call_id,
                              raw=raw)

    def result_message(self, name: str | None, output: str, call_id: str | None, *, failed: bool,
                       exit_code: int | None = None, raw: Any = None) -> BackendMessage:
        """A tool's result; the shell tool's is a COMMAND_END, whose exit_code is None when the
        program does not report one."""
        if name in self.shell_tools:
            return BackendMessage(MessageType.COMMAND_END, self.redact(output), tool_name=name, tool_call_id=call_id,
                                  is_error=failed, details={"exit_code": exit_code}, raw=raw)
        return BackendMessage(MessageType.TOOL_RESULT, self.redact(output), tool_name=name or None,
                              tool_call_id=call_id, is_error=failed, raw=raw)

    def edit_message(self, path: str, tool: str | None = None, *, added: int, removed: int,
                     call_id: str | None = None, deleted: bool = False, raw: Any = None) -> BackendMessage:
        """A file the agent's edit tool changed (or `deleted`), with the lines it added and removed
        (also tracked for modified_files)."""
        if deleted:
            self.track(deleted=[path])
        else:
            self.track(written=[path])
        shown = self.relative(path) or path
        return BackendMessage(MessageType.FILE_EDIT, shown, tool_name=tool, tool_call_id=call_id, raw=raw,
                              details={"path": shown, "lines_added": added, "lines_removed": removed})

    def text_message(self, text: str, turn: TurnState) -> BackendMessage:
        """A complete assistant message (recorded as the turn's latest text)."""
        if text.strip():
            turn.texts.append(text)
        return BackendMessage(MessageType.TEXT, self.redact(text))

    # ------------------------------------------------------------------ the template
    async def _connect(self, spec: SessionSpec) -> None:
        self.executable = self.locate(self.options)
        if self.executable is None:
            raise BackendError(f"{self.program} was not found: {self.install}", backend=self.name,
                               kind="missing_program")
        self._scratch = Path(tempfile.mkdtemp(prefix=f"agenter-{self.name}-"))
        home = self.options.home
        if home == "private":
            self.home_dir = self.scratch / "home"
            self.home_dir.mkdir()
        elif home is not None:
            self.home_dir = Path(home).expanduser().resolve()
        if self.api_key():
            self.redact.add(self.api_key())
        await self.prepare()

    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        self.turns += 1
        task = self.task(prompt)
        invocation = self.command(task)
        turn = TurnState()
        self._sent_chars = len(task)
        self._count(sent=task)
        before, started, ended = self.ledger.total, False, False
        try:
            async with start_program(invocation, self.cwd, grace=self.stop_grace) as run:
                self._run, started = run, True
                async with contextlib.aclosing(run.lines(idle_timeout=self.options.idle_timeout,
                                                         backend=self.name)) as lines:
                    async for line in lines:
                        if line.question:
                            # The program waits for this answer: nothing else is read before it.
                            await run.answer(await self.answer(line.text, turn))
                            continue
                        for message in self.parse_event(line, turn):
                            self._count(message)
                            yield message
                        while self._settled:
                            yield self._settled.pop(0)
                returncode = await run.wait()
                stderr = run.stderr_tail()
                ended = True
        except FileNotFoundError as exc:
            raise BackendError(f"{self.program} could not be started ({exc}): {self.install}",
                               backend=self.name, kind="missing_program") from None
        finally:
            self._run = None
            self._estimate = Usage()
            self.ledger.abandon_running()
            if started:  # also when cancelled: budgets and the result see it
                self._settle_unreported(turn, ended=ended, reported=self.ledger.total != before)
        while self._settled:
            yield self._settled.pop(0)
        for message in self.last_messages(turn):
            yield message
        self.conclude(turn, returncode, stderr)

    def _settle_unreported(self, turn: TurnState, *, ended: bool, reported: bool) -> None:
        try:
            extra = self.unreported(turn, ended=ended, reported=reported)
        except Exception:  # an estimate must never hide how the turn ended
            log.warning("%s: could not estimate the usage it did not report", self.name, exc_info=True)
            return
        if extra.total_tokens:  # a cost the module worked out (another model's price), else priced here
            self.settle(extra.as_estimate(), cost=extra.cost_usd or None)

    async def _disconnect(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            await run.stop(self.stop_grace)
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
