"""aider-cli: Aider, `aider --message-file <prompt>`, with any LiteLLM model, its questions answered by agenter.

Aider edits files through its edit formats (whole, diff, udiff, ...) and prints plain text, not
JSON: its reply, "Applied edit to <file>", "Tokens: ... Cost: ..." and LiteLLM errors are read
from the lines. It has no sandbox and, here, no shell (--no-suggest-shell-commands), so it runs
only with sandbox=False. It never commits, never touches .gitignore, and without aider_git=True
never touches git at all (--no-git). Each session's chat history is a file of its own
(~/.cache/agenter/aider-sessions/<session id>.chat.md, a folder only its owner can read); later
turns restore it, so a retry continues the same conversation, and a later session can resume it by
id. It is kept after the session for that (aider_keep_history=False removes it when the session
ends), and histories untouched for aider_history_days (30) are removed when a session starts.
Install it apart from your project's packages (its pins are strict): `pipx install aider-chat`, or
scripts/install-aider.sh.

Aider is never run with --yes-always: headless, a "yes" to every question let a task's URL make
Aider scrape the page and then install Playwright and its system packages (apt-get, as root).
Aider asks each question on stdin and agenter answers it (`answer`), with or without a policy:
- "Create new file?" and "Allow edits to file that has not been added to the chat?": yes only when
  the file is inside the workspace, matches allowed_write_paths and the permission gate allows the
  edit (its safety checks hold in every mode); a no is recorded as a denial.
- "Add file to the chat?" (a file the task or the reply names): yes only when that file could be
  edited as above, judged without asking anyone (a file in the chat is editable without a question).
- Going on with its own edit ("Attempt to fix lint errors?", "Try to proceed anyway?"): yes.
- Everything else, URLs, installs (pip, Playwright), shell commands, opening a browser: no, and
  recorded as a denial. URL detection is off as well (--no-detect-urls): a task's URLs never
  leave the machine.
A message that begins with "/" or "!" would be an Aider command (`/run`, `/web`): it is sent after
a line of its own so that it is read as text.

A permission policy is enforced through the same answers and through what Aider is given: the
chat's files (aider_files) are judged by the gate before the first run: editable when the policy
allows editing them, read-only (--read) when it allows reading them, left out otherwise. Read
rules and the credentials check also go into an --aiderignore file outside the workspace
(`_policy/aider.py`; it keeps paths out of the repository map with aider_git=True). (Aider 0.86 does not consult its
aiderignore before applying an edit, so the ignore file alone would not stop one.)

Approvals that can wait (on_ask="pause", docs/approvals.md): Aider asks before it edits a file
outside the chat, so an edit the gate defers (an `ask` rule with nobody to answer) is answered
"no" (Aider skips that file's edit and applies the others the gate allows), recorded as a
pending call (`aider`, input {"path": <file>}), and once the run waits Aider's "go on" questions
are answered "no", so its one-message run ends by itself. `hold` keeps the pause record and the
chat history's text in the conversation store (another host with the same store writes it back
before Aider restores it); `continue_paused` resumes the chat with the person's answers
(`answer_paused`), and an approved edit that the model makes again passes once (`RepeatedCalls`),
a denied one is refused each time. Limits: the edits of files already in the chat need no
question, so a policy that asks about them leaves them out of the chat (read-only) to begin with;
with aider_git=True, a reply that names an asked-about file is refused its "Add file to the
chat?" (recorded as a denial) before the edit question pauses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from agenter._errors import ConfigurationError, PathSecurityError
from agenter._types import Usage
from agenter.backends._edits import text_counts
from agenter.backends._pauses import (
    PauseStoreOption,
    RepeatedCalls,
    answer_paused,
    backend_store,
    defer_as_seen,
    hold_paused,
    no_pause_without_store,
    resume_paused,
    store_for_pauses,
)
from agenter.backends._prompts import REPLY_CONTRACT, OutputChannel
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, MessageType
from agenter.backends.cli._aider_usage import (
    MAX_HISTORY_TOKENS,
    SUMMARY_PREFIX,
    MainCall,
    Message,
    exchanges,
    history_messages,
    history_threshold,
    main_calls,
    summarized,
    summary_in,
    summary_request_chars,
)
from agenter.backends.cli._base import CliBackend, CliOptions, TurnState
from agenter.backends.cli._failures import classify
from agenter.backends.cli._policy.aider import aider_ignore
from agenter.backends.cli._runner import Invocation, Line
from agenter.host.redact import Redactor
from agenter.host.requirements import MODEL_PROVIDER_KEYS, Credentials
from agenter.permissions import PermissionPolicy, ToolCall
from agenter.sandbox.paths import PathResolver
from agenter.usage import context_window, estimate_cost

__all__ = ["AiderCliBackend", "AiderCliOptions"]

log = logging.getLogger(__name__)

_TOKENS = re.compile(r"^Tokens: (?P<sent>[\d.]+k?) sent(?:, (?P<write>[\d.]+k?) cache write)?"
                     r"(?:, (?P<hit>[\d.]+k?) cache hit)?, (?P<received>[\d.]+k?) received\."
                     r"(?: Cost: \$(?P<cost>[\d.]+) message)?")
_APPLIED = re.compile(r"^Applied edit to (.+)$")
_ADDED = re.compile(r"^Added (.+) to the chat")
_ERROR = re.compile(r"^litellm\.(\w+):")
_RETRY = re.compile(r"^Retrying in [\d.]+ seconds")
#: Aider's own lines around the model's reply (banner, notices), never part of the reply.
_CHATTER = re.compile(
    r"^(Aider v\d|Main model:|Weak model:|Editor model:|Git repo:|Repo-map:|Analytics have been|"
    r"HTTPSConnectionPool|https://aider\.chat|Use /help|Added .* to the chat|Warning:|Cost estimates|"
    r"Model .* has hit a token limit|Restored previous conversation history|"
    r"The LLM did not conform to the edit format)")
#: The end of a question Aider asks (io.confirm_ask): "<question> (Y)es/(N)o[/...] [Yes]: ".
_QUESTION = re.compile(r"\(Y\)es/\(N\)o[^\n]*\[[^\]\n]*\]: ?\Z")
#: Questions about a file Aider is about to write (its path is the line before the question).
_EDIT_QUESTIONS = frozenset({"Create new file?", "Allow edits to file that has not been added to the chat?"})
#: A file named in the task or the reply, offered to the chat (where Aider may edit it unasked).
_ADD_QUESTION = "Add file to the chat?"
#: Questions that only let Aider go on with work it was allowed: one more model call.
_GO_ON = frozenset({"Attempt to fix lint errors?", "Attempt to fix test errors?", "Try to proceed anyway?"})
#: Questions whose subject (a URL, a command) is printed on the line before them.
_WITH_SUBJECT = frozenset({"Add URL to the chat?", "Run shell command?", "Run shell commands?", "Run pip install?",
                           "Open URL for more info?", "Open documentation URL for more info?"})
#: The tool name of an edit Aider asked about (denials, pending calls: input {"path": <file>}).
EDIT_TOOL = "aider"
#: The `kind` of a chat history kept in the conversation store while a run waits (_stored_files).
HISTORY_KIND = "aider-chat-history"
#: Added to what the model is told when a paused run goes on: in Aider a "call" is a file's edit.
MAKE_AGAIN = ("(Here each call is an edit of the named file in your reply: to make an approved one again, "
              "write that file's edit again in full.)")

class AiderCliOptions(CliOptions, PauseStoreOption):
    """Options of the aider-cli backend (`conversation_store`: where a paused run is kept)."""

    aider_edit_format: str | None = Field(
        None, description="Aider's edit format (whole, diff, diff-fenced, udiff, ...); None: the model's default.")
    aider_weak_model: str | None = Field(None, description="The model for commit messages and summaries.")
    aider_git: bool = Field(
        False, description="Let Aider use the git repository (repo map; it may `git add` new files). Never commits.")
    aider_files: list[str] = Field(
        default_factory=list, description="Files added to the chat from the start (paths relative to cwd).")
    aider_keep_history: bool = Field(
        True, description="Keep the session's chat history after the session, so a later one can resume it "
                          "(CodingRequest.resume); False removes it when the session ends.")
    aider_history_days: float | None = Field(
        30.0, gt=0, description="Chat histories of earlier sessions untouched for this many days are removed "
                                "when a session starts (None: never).")
    aider_max_chat_history_tokens: int | None = Field(
        None, gt=0, description="Chat history (tokens) past which Aider summarizes it with the weak model; None: "
                                "Aider's rule (1/16 of the model's context window, between 1k and 8k).")


class AiderCliBackend(CliBackend[AiderCliOptions]):
    name: ClassVar[str] = "aider-cli"
    credentials: ClassVar[Credentials | None] = Credentials(env=MODEL_PROVIDER_KEYS)
    auto_rank: ClassVar[int | None] = 70
    program: ClassVar[str] = "aider"
    install: ClassVar[str] = "pipx install aider-chat (or: python -m venv ~/.aider-venv && ~/.aider-venv/bin/pip install aider-chat)"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        filesystem_read=True, filesystem_edit=True, resume=True, pause=True)
    options_model: ClassVar[type[AiderCliOptions]] = AiderCliOptions
    output_channel: ClassVar[OutputChannel] = "text"
    # Aider's model changes files by writing them in its reply (edit blocks, file listings).
    contract: ClassVar[bool | str] = REPLY_CONTRACT
    internal_paths: ClassVar[tuple[str, ...]] = (".aider",)
    #: Aider has no shell, and with a policy edits only the chat's files, each judged by the gate.
    permission_kinds: ClassVar[frozenset[str]] = frozenset({"read", "edit", "shell"})

    def __init__(self, settings: BackendSettings[AiderCliOptions]):
        super().__init__(settings)
        self._reply: list[str] = []
        self._error_lines: list[str] | None = None
        self._retries = 0
        self._editable: list[str] = list(settings.options.aider_files)
        self._readable: list[str] = []
        self._ignore_file: Path | None = None
        self._root: Path | None = None
        self._resolver: PathResolver | None = None
        #: The last non-empty output line: the subject of a question that follows it.
        self._last_line = ""
        # The text of each file Aider may edit as it was before its edit (None: it did not exist).
        self._before: dict[str, str | None] = {}
        # What Aider does not report (_aider_usage): its history threshold, the run's LLM log and
        # chat history as it was before the run, and the size of the last summary seen.
        self._threshold = MAX_HISTORY_TOKENS
        self._llm_log: Path | None = None
        self._history_before = ""
        self._restored = False
        self._summary_chars: int | None = None
        self._unseen_summaries = 0
        #: Approvals that can wait: the turn's deferred edits (file -> pending), a continued run's answers.
        self._waiting: set[str] = set()
        self._repeated = RepeatedCalls()

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        super().validate_settings(settings)
        no_pause_without_store(settings.on_ask, cls._options_of(settings).conversation_store)

    @classmethod
    def pause_store(cls, settings: BackendSettings[Any], log_dir: Path | None) -> Any:
        """The conversation_store option's store (by default beside log_dir's transcripts, else in
        the user's cache): where this backend keeps its paused runs and their chat histories."""
        options = cls._options_of(settings)
        return store_for_pauses(options.conversation_store, log_dir, Redactor(options.env, extra=options.secrets()))

    @classmethod
    def _options_of(cls, settings: BackendSettings[Any]) -> AiderCliOptions:
        options = settings.options
        return options if isinstance(options, AiderCliOptions) else AiderCliOptions()

    async def prepare(self) -> None:
        # Aider names files relative to its root: the repository's top with aider_git, else cwd.
        self._root = self.cwd
        if self.options.aider_git:
            self._root = await self.in_thread(_git_top, self.cwd)
        self._threshold = self.options.aider_max_chat_history_tokens or MAX_HISTORY_TOKENS
        if self.options.aider_max_chat_history_tokens is None and self.settings.model:
            # Aider's own rule, with the context window genai-prices knows: passed to Aider, so
            # that agenter knows when it summarizes. (Without a model Aider picks one of its
            # defaults, all with large context windows: 8k.)
            self._threshold = history_threshold(await self.in_thread(context_window, self.settings.model))
        self._resolver = PathResolver(self.cwd, self.spec.allowed_write_paths, sandbox=True)
        await self._restore_history()
        await self.in_thread(self._tidy_histories)
        self._editable = []
        for name in self.options.aider_files:
            if await self._may_edit(name, ask=True):
                self._editable.append(name)
            elif (await self.permit(ToolCall.read(name, name="aider"))).allowed:
                self._readable.append(name)
        self._ignore_file = self.scratch_file("aiderignore", aider_ignore(self.settings.permissions
                                                                          or PermissionPolicy()))

    # ------------------------------------------------------------------ Aider's questions
    async def answer(self, question: str, turn: TurnState) -> str:
        asked = question.split(" (Y)es/(N)o", 1)[0].strip()
        subject, self._last_line = self._last_line, ""
        if subject and self._reply and self._reply[-1].strip() == subject:
            self._reply.pop()  # the question's subject is Aider's line, not the model's reply
        while self._reply and not self._reply[-1].strip():
            self._reply.pop()
        if asked in _GO_ON:
            return "n" if self._waiting else "y"  # once an edit waits for a person, the run ends
        if asked in _EDIT_QUESTIONS:
            allowed = await self._may_edit(subject, ask=True, defer=True)
            if allowed and subject not in self._before:
                self._before[subject] = self.read_text(subject)  # its line counts, once Aider applies it
            return "y" if allowed else "n"
        if asked == _ADD_QUESTION:
            return "y" if await self._may_edit(subject, ask=False) else "n"
        target = f"{asked} {subject}" if asked in _WITH_SUBJECT and subject else asked
        self.deny("aider", target, "agenter answers no to Aider's questions when it runs headless: only edits "
                  "the permission gate allows are accepted (no URL, install, shell command or browser)",
                  rule="aider:headless")
        return "n"

    async def _may_edit(self, name: str, *, ask: bool, defer: bool = False) -> bool:
        """Whether Aider may write `name` (relative to its root): inside the workspace, within
        allowed_write_paths, and allowed by the gate (`ask`: through permit(), which may ask
        on_permission; else the policy's answer alone, as adding a file to the chat only makes
        an edit possible). A no is recorded as a denial either way, except an edit the gate
        defers (`defer`: a question during a turn, on_ask="pause"), which waits for a person."""
        if not name:
            return False
        path = os.path.join(self._root or self.cwd, name)
        if self._resolver is None:
            self._resolver = PathResolver(self.cwd, self.spec.allowed_write_paths, sandbox=True)
        try:
            self._resolver.resolve_write(path)
        except (PathSecurityError, OSError, ValueError) as exc:
            self.deny("aider", name, str(exc), rule="allowed_write_paths"
                      if self.spec.allowed_write_paths is not None else "workspace")
            return False
        call = ToolCall.edit(path, name=EDIT_TOOL)
        if ask:
            tool_input = {"path": name}
            decision = await self.permit(call, answer=self._repeated.take(EDIT_TOOL, tool_input), defer=defer)
            if decision.deferred and name not in self._waiting:
                self._waiting.add(name)
                defer_as_seen(self, f"edit-{uuid.uuid4().hex[:12]}", EDIT_TOOL, tool_input, call, asked=True)
            return decision.allowed
        gate = self.gate
        verdict = gate.evaluate(call) if gate is not None else None
        if verdict is not None and verdict.behavior == "allow":
            return True
        self.deny("aider", name, "Aider asked to add it to the chat, which would make it editable, and the policy "
                  "does not let it be edited" + (f": {verdict.reason}" if verdict is not None else ""),
                  rule=verdict.rule if verdict is not None else "gate")
        return False

    # ------------------------------------------------------------------ command
    def command(self, prompt: str) -> Invocation:
        opts = self.options
        restore = self.resume_id() is not None
        self._waiting = set()
        self._session_id = self.resume_id() or uuid.uuid4().hex
        history = self.history_file(self._session_id)
        self._restored, self._history_before = restore, self.read_history(history) if restore else ""
        self._llm_log = self.scratch / f"llm-{self.turns}.log"
        if prompt.lstrip()[:1] in ("/", "!"):
            prompt = "Task:\n" + prompt  # Aider would run it as a command (/run, /web, !cmd)
        message = self.scratch_file(f"message-{self.turns}.md", prompt)
        # Never --yes-always: agenter answers each question (answer()), and URLs are never fetched.
        argv = [str(self.executable), "--message-file", str(message), "--no-detect-urls", "--no-pretty",
                "--no-fancy-input", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore",
                "--no-suggest-shell-commands", "--analytics-disable", "--no-check-update",
                "--no-show-model-warnings", "--no-show-release-notes", "--encoding", "utf-8",
                "--chat-history-file", str(history), "--input-history-file", str(self.scratch / "input.history"),
                "--llm-history-file", str(self._llm_log), "--max-chat-history-tokens", str(self._threshold)]
        if restore:
            argv.append("--restore-chat-history")
        if self._ignore_file is not None:
            argv += ["--aiderignore", str(self._ignore_file)]
        for name in self._readable:
            argv += ["--read", name]
        if not opts.aider_git:
            argv.append("--no-git")
        model = self.settings.model
        if model:
            argv += ["--model", model]
        if opts.aider_weak_model:
            argv += ["--weak-model", opts.aider_weak_model]
        if opts.aider_edit_format:
            argv += ["--edit-format", opts.aider_edit_format]
        provider = (model or "openai/").split("/", 1)[0] if model and "/" in model else "openai"
        # The key goes through the environment: an argument would show in the process list.
        variables: dict[str, str | None] = {"LITELLM_LOCAL_MODEL_COST_MAP": "True",
                                            f"{provider.upper()}_API_KEY": self.api_key()}
        if opts.base_url:
            variables[f"{provider.upper()}_API_BASE"] = opts.base_url
        argv += [*opts.program_args, *self._editable]
        # Aider reports an edit by the file's name only; its line counts come from the file's text
        # before and after. The chat's files are read before the program starts.
        self._before = {name: self.read_text(name) for name in self._editable}
        return Invocation(argv=argv, env=self.environment(**variables), files=[message], question=_QUESTION)

    def task(self, prompt: str) -> str:
        """The task as written, the way bare Aider gets it: measured with Qwen2.5-Coder-1.5B on
        the real-model benchmark's pagination task, agenter's instructions before the task (or
        after it) made the model repeat the message instead of answering it, where bare Aider
        and aider-cli without them both fixed the file at once. What the instructions said is
        enforced without the model: agenter answers Aider's questions (headless), and the chat
        holds as editable only the files the policy lets it change (allowed_write_paths). A
        'REFUSED:' line is still read as a refusal. The user's system_prompt goes first, and
        with an output_type the instructions and the schema do."""
        if self.turns > 1:
            return prompt
        if self.spec.output_type is None:
            system_prompt = self.spec.system_prompt
            return f"{system_prompt}\n\n---\n\n{prompt}" if system_prompt else prompt
        # Aider reads a fenced block without a file name as a malformed edit, so the object
        # comes bare (parse_output finds the last JSON object of the reply).
        schema = json.dumps(self.spec.output_type.model_json_schema())
        instructions = self.instructions(refusal_tool=None, output_channel="native", contract=self.contract)
        return (f"{instructions}\n\nWhen you are done, end your final message with one JSON object, not in a "
                f"code block, matching this JSON schema: {schema}\n\n---\n\n{prompt}")

    def history_file(self, session: str) -> Path:
        """Where a session's chat lives: Aider's history file, kept after the session so that a
        later one can resume it (the session id is its name; a path is taken as it is)."""
        if os.sep in session:
            return Path(session)
        folder = self.histories()
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)  # the chats hold the tasks, the code and the replies: yours alone
        return folder / f"{session}.chat.md"

    def histories(self) -> Path:
        """agenter's folder of aider-cli chat histories (in the program's home)."""
        return (self.home_dir or Path.home()) / ".cache" / "agenter" / "aider-sessions"

    def _tidy_histories(self) -> None:
        """At connect: remove the histories of earlier sessions older than aider_history_days
        (none of them is the one this session resumes), and check that a resumed one exists."""
        days, resumed = self.options.aider_history_days, self.spec.resume_session_id
        keep = self.history_file(resumed) if resumed else None
        if days is not None:
            cutoff = time.time() - days * 86400
            with contextlib.suppress(OSError):
                for path in self.histories().glob("*.chat.md"):
                    with contextlib.suppress(OSError):
                        if path != keep and path.stat().st_mtime < cutoff:
                            path.unlink()
        if keep is not None and not keep.is_file():
            raise ConfigurationError(
                f"no aider-cli session {resumed!r} to resume: its chat history {keep} does not exist (a session "
                "run with aider_keep_history=False, one older than aider_history_days, or another home)",
                parameter="resume")

    # ------------------------------------------------------------------ approvals that can wait
    async def hold(self, record: dict[str, Any]) -> str:
        """Keep the paused run in the pause store: the session's record, the chat's session id,
        the gate's "always" answers, and the chat history's text (so that another host with the
        same store can approve). StoreError when the record cannot be kept."""
        store = await backend_store(self)
        handle = await hold_paused(self, record, "aider", {}, store=store)
        await self._keep_history(store)
        return handle

    async def _continue_paused(self, held: dict[str, Any], answers: dict[str, str]) -> AsyncIterator[BackendMessage]:
        """The paused turn, continued in the restored chat: the model is told the answers (an
        approved edit is to be made again, a denied one not) and Aider's run goes on."""
        _, pending = resume_paused(self, held, "aider")
        told = await answer_paused(self, pending, answers, self._edit_call, self._repeated)
        async for message in self._turn(f"{told}\n{MAKE_AGAIN}"):
            yield message

    def _edit_call(self, tool: str, tool_input: dict[str, Any]) -> ToolCall | None:
        """The gate's call for a pending edit (answer_paused)."""
        name = tool_input.get("path")
        if tool != EDIT_TOOL or not isinstance(name, str) or not name:
            return None
        return ToolCall.edit(os.path.join(self._root or self.cwd, name), name=EDIT_TOOL)

    async def _keep_history(self, store: Any) -> None:
        """The chat history's text beside the pause record, under the session id. A failure is
        logged: this host (the same home) can still approve."""
        from agenter.backends._stored_files import keep_text
        from agenter.store import StoreError

        session = self._session_id
        if store is None or not session or os.sep in session:  # a path given to resume stays the user's file
            return
        text = await asyncio.to_thread(self.read_history, self.history_file(session))
        try:
            await asyncio.to_thread(keep_text, store, session, HISTORY_KIND, text)
        except (StoreError, ConfigurationError, OSError) as exc:
            log.warning("aider-cli: the paused chat could not be kept in the store (only this host can approve "
                        "it): %s", self.redact(str(exc)))

    async def _restore_history(self) -> None:
        """Write back the chat history of a paused session the pause store keeps, when this host
        has none (another host paused it, or another home); a history that is here stays."""
        from agenter.backends._stored_files import restore_text
        from agenter.store import StoreError

        session = self.spec.resume_session_id
        if not session or os.sep in session or self.history_file(session).is_file():
            return
        try:
            store = await backend_store(self)
            if store is not None:
                await asyncio.to_thread(restore_text, store, session, HISTORY_KIND, self.history_file(session))
        except (StoreError, ConfigurationError, OSError) as exc:
            log.warning("aider-cli: the paused chat kept in the store could not be restored: %s",
                        self.redact(str(exc)))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        session = self._session_id
        if not self.options.aider_keep_history and session and os.sep not in session:
            # Only agenter's own file (a path given to resume is the user's).
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self.history_file(session).unlink, missing_ok=True)

    @staticmethod
    def read_history(path: Path | None) -> str:
        """The text of a chat-history file ("" when there is none)."""
        try:
            return path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
        except OSError:
            return ""

    # ------------------------------------------------------------------ usage Aider does not report
    def unreported(self, turn: TurnState, *, ended: bool, reported: bool) -> Usage:
        """The main call a cut-short run was waiting for, and Aider's chat-history summaries
        (see _aider_usage), estimated."""
        calls = main_calls(self.read_history(self._llm_log))
        main = Usage()
        if calls and calls[-1].reply is None:  # logged, never answered: the run was cut short
            streamed = len("\n".join(self._reply).strip())
            main = Usage.estimate(input_chars=calls[-1].prompt_chars, output_chars=streamed)
        side = self._summaries(calls, ended)
        weak = self.options.aider_weak_model
        cost = _price(weak, side) if weak and side.total_tokens else None
        total = main + side
        return total if cost is None else total.model_copy(update={"cost_usd": self.ledger.price(main) + cost})

    def _summaries(self, calls: list[MainCall], ended: bool) -> Usage:
        """The summaries Aider made in this run: the one at its start (seen in the first main
        call's prompt, or predicted when there was none), and after its exchange (predicted,
        when the run ended by itself; its reply counted at the size of the last summary seen,
        or once a later one shows it)."""
        history = history_messages(self._history_before) if self._restored else []
        usage = Usage()
        seen = summary_in(calls[0]) if calls else None
        if seen is not None or (not calls and ended):
            cut = summarized(history, self._threshold)
            if cut is not None:
                usage = usage + self._summary(cut[0], seen)
                history = [("user", seen or ""), ("assistant", "Ok."), *cut[1]]
        if ended:
            cut = summarized(history + exchanges(calls), self._threshold)
            if cut is not None:
                usage = usage + self._summary(cut[0], None)
        return usage

    def _summary(self, head: list[Message], seen: str | None) -> Usage:
        """One summary request: what it sends, and its reply (seen, or as large as the last one)."""
        sent = summary_request_chars(head)
        if seen is None:
            if self._summary_chars is None:
                self._unseen_summaries += 1  # its reply is counted when a summary shows its size
            return Usage.estimate(input_chars=sent, output_chars=self._summary_chars or 0)
        size = max(len(seen) - len(SUMMARY_PREFIX) - 1, 0)  # Aider put its prefix before the reply
        pending, self._unseen_summaries, self._summary_chars = self._unseen_summaries, 0, size
        return Usage.estimate(input_chars=sent, output_chars=size * (1 + pending))

    # ------------------------------------------------------------------ output lines
    def parse_event(self, line: Line, turn: TurnState) -> Iterable[BackendMessage]:
        text = line.text
        if text.strip():
            self._last_line = text.strip()
        tokens = _TOKENS.match(text)
        if tokens:
            self._error_lines = None  # a call that answered after retries
            cost = tokens.group("cost")
            self.settle(_usage(tokens), cost=float(cost) if cost else None)
            return self._close_reply(turn)
        applied = _APPLIED.match(text)
        if applied:
            path = applied.group(1).strip()
            while self._reply and self._reply[-1].strip() in ("", path):
                self._reply.pop()  # Aider names the file before it applies the edit
            after = self.read_text(path)
            added, removed = text_counts(self._before.get(path), after)
            self._before[path] = after
            return [self.edit_message(path, "edit", added=added, removed=removed, raw={"line": text})]
        added_file = _ADDED.match(text)
        if added_file and added_file.group(1).strip() not in self._before:
            # A file Aider adds to the chat itself (agenter said yes): read before the model's
            # next answer can edit it.
            name = added_file.group(1).strip()
            self._before[name] = self.read_text(name)
        error = _ERROR.match(text)
        if error:
            self._error_lines = [text]
            return self._close_reply(turn)
        if _RETRY.match(text):
            self._retries += 1
            problem, self._error_lines = " ".join(self._error_lines or [text]), None
            if self.options.max_retries is not None and self._retries > self.options.max_retries:
                self._fail(turn, problem)
                raise self.failure(turn, None, "")
            return [BackendMessage(MessageType.STATUS, self.redact(f"{problem} ({text})"))]
        if self._error_lines is not None:
            if text.strip():
                self._error_lines.append(text.strip())
            return []
        if _CHATTER.match(text):
            return []
        self._reply.append(text)
        return []

    def read_text(self, name: str) -> str | None:
        """A workspace file's text (None when it does not exist or cannot be read)."""
        try:
            return ((self._root or self.cwd) / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def last_messages(self, turn: TurnState) -> list[BackendMessage]:
        # After the last usage line come Aider's notes on applying the edits; without any usage
        # line, the reply was cut short and still counts as text.
        if turn.texts:
            notes, self._reply = "\n".join(self._reply).strip(), []
            return [BackendMessage(MessageType.STATUS, self.redact(notes))] if notes else []
        return self._close_reply(turn)

    def conclude(self, turn: TurnState, returncode: int | None, stderr: str) -> None:
        turn.finished = True
        if self._error_lines:
            self._fail(turn, " ".join(self._error_lines))
        self._error_lines, self._retries = None, 0
        super().conclude(turn, returncode, stderr)

    def _close_reply(self, turn: TurnState) -> list[BackendMessage]:
        reply, self._reply = "\n".join(self._reply).strip(), []
        return [self.text_message(reply, turn)] if reply else []

    def _fail(self, turn: TurnState, problem: str) -> None:
        kind, status = classify(problem)  # LiteLLM's exception names are in the shared table
        turn.fail(self.redact(problem), status_code=status, kind=kind)


def _price(model: str, usage: Usage) -> float | None:
    """What `usage` costs on `model` (the weak model Aider summarizes with), None when unknown."""
    try:
        return estimate_cost(model, usage)
    except Exception:  # noqa: BLE001 - a pricing data problem must not stop a run
        return None


def _git_top(cwd: Path) -> Path:
    """The top of the git repository holding `cwd` (cwd when there is none): Aider's root with git."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return cwd
    top = done.stdout.strip()
    return Path(os.path.realpath(top)) if done.returncode == 0 and top else cwd


def _count(figure: str | None) -> int:
    """Aider's rounded token figures: "602", "1.8k", "12k"."""
    if not figure:
        return 0
    if figure.endswith("k"):
        return round(float(figure[:-1]) * 1000)
    return int(float(figure))


def _usage(match: re.Match[str]) -> Usage:
    """Aider prints rounded figures; "sent" includes cache writes."""
    write = _count(match.group("write"))
    return Usage(input_tokens=max(_count(match.group("sent")) - write, 0), output_tokens=_count(match.group("received")),
                 cache_read_tokens=_count(match.group("hit")), cache_write_tokens=write)
