"""One kit for every backend's tests, whatever its family.

A backend is described once, as a `Case`: its class, the wire its model speaks on the scripted
model server, and how that model writes a file, runs a command, reads, answers with structured
output and refuses (each a function returning one script item, a model reply). How the backend
is pointed at the server (program, base URL, API key, HOME, environment) is the case's `connect`
function; the agent-CLI family shares one (`cli_connect`). From a case the `Kit` builds servers,
backends and agents, and runs the proofs every backend owes: the conformance suite and the
permission proofs (`Kit.harness()`, run over every case by tests/backends/test_contract.py),
resume, the error classes, the time budget, a 300 KB prompt, the missing program.

A case whose backend cannot be scripted this way (a completion backend that runs in patch mode,
an agent double that needs no model) gives its own `harness`; the contract file runs it alike.

Every backend the kit builds carries the test's token in its environment (TOKEN_ENV); a process
carrying it after the test fails the test and is killed (by pid). Limits: the token reaches only
processes a program starts with the environment it was given; an in-process backend (a library
in this interpreter) is checked by the case's `check_after` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._errors import BackendError, RequirementError
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.host import _pids
from agenter.testing import conformance, hang, http_error, reply, text
from agenter.testing.script import ReplyUsage

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / "node_modules" / ".bin"
#: Set in every environment a test's backends get; leftovers are found by it.
TOKEN_ENV = "AGENTER_TEST_RUN"
API_KEY = "sk-test-SUPERSECRET-kit-0123456789"

ScriptItem = Any


# ---------------------------------------------------------------------- programs and processes
def installed(*candidates: str | Path | None, name: str | None = None) -> str | None:
    """The first candidate that is an executable file, else `name` on PATH."""
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name) if name else None


def need(program: str | None, what: str) -> str:
    """`program`, or skip the test saying what is not installed (fail it on CI)."""
    if program is None:
        message = f"{what} is not installed"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return program


def leftovers(token: str) -> set[int]:
    """Live processes (not zombies) whose environment carries this test's token."""
    return {pid for pid in _pids.with_environment(TOKEN_ENV, token) if _pids.is_alive(pid)}


@contextlib.contextmanager
def no_leftovers(token: str) -> Iterator[None]:
    """Fails when a process carrying `token` outlives the block; kills what it finds."""
    yield
    left = leftovers(token)
    _pids.kill(left)
    assert not left, f"processes left running: {sorted(left)}"


def conformance_checks(*, slow: bool = False) -> list[Any]:
    """The conformance checks to run. For programs that take seconds to start, the checks whose
    code path is all agenter's (idempotent disconnect, a 'REFUSED:' line) are proven on the
    faster programs only."""
    if not slow:
        return list(conformance.CHECKS)
    return [c for c in conformance.CHECKS if c.__name__ not in SLOW_SKIPS]


#: The checks a slow program leaves to the faster ones (see conformance_checks).
SLOW_SKIPS = ("check_disconnect_is_idempotent", "check_refusal")


# ---------------------------------------------------------------------- the case
@dataclass
class Case:
    """One backend as its tests see it: what it is, and how its model plays each scenario.

    `write`, `shell`, `read`, `output` and `refuse` each return one model reply (`read` reads
    the file at the path it is given: the "usage" scenario and the hostile key read use it);
    `done` is the reply that ends a turn. `connect(kit, server, home, cwd)` returns the
    backend's options (also the facade's keyword arguments) pointing it at `server`, with `home`
    as its HOME and the kit's token in its environment (`cwd` is the workspace where the kit
    knows it, else None); without it the agent-CLI family's `cli_connect` applies. `supports`
    names what it plays beyond what its functions imply ("permissions", "ask", "told": see
    agenter.testing.conformance); `expect` maps a permission check's name to the backend's own
    assertions about what the check saw (`expect[name](evidence, server)`).
    """

    backend: Any
    wire: str  # "anthropic", "openai" or "gemini": which base URL of the server it uses
    model: str | None
    write: Callable[[str, str], ScriptItem] | None = None
    shell: Callable[[str], ScriptItem] | None = None
    read: Callable[[str], ScriptItem] | None = None
    output: Callable[[dict[str, Any]], ScriptItem] | None = None
    refuse: Callable[[str], ScriptItem] | None = None
    done: Callable[[], ScriptItem] | None = None
    connect: Callable[[Kit, Any, Path, Path | None], dict[str, Any]] | None = None
    program: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    sandbox: bool = False
    handler: Callable[[Any], Any] | None = None
    #: Seconds a run of the program takes to start; the hung-model budget test waits past it.
    startup: float = 2.0
    #: Usage the replies of the "usage" scenario report (None: the server's own estimate).
    usage: dict[str, int] | None = None
    #: Its file tools want absolute paths: the kit makes relative ones absolute in the workspace.
    absolute_paths: bool = False
    #: How long the model hangs in the "hang" scenario (None: until the server stops).
    hang_seconds: float | None = None
    supports: frozenset[str] = frozenset()
    #: Conformance checks this case leaves to others (by function name).
    skip_checks: tuple[str, ...] = ()
    expect: dict[str, Callable[[Any, Any], None]] = field(default_factory=dict)
    #: The kit's shared proofs test_contract.py runs for this case (None/False: not this one):
    #: check_resume's and check_time_budget's keyword arguments, the error classes, the 300 KB
    #: prompt, and what the error for a missing program must say (its install command).
    resume: dict[str, Any] | None = None
    time_budget: dict[str, Any] | None = None
    error_classes: bool = False
    big_prompt: bool = False
    install: str | None = None
    #: A harness of its own, for a backend the scripted server cannot drive this way.
    harness: Callable[[Kit], Any] | None = None
    #: Called when the test ends (after the kit's leftover check): an in-process backend's check.
    check_after: Callable[[], None] | None = None

    def base_url(self, server: Any) -> str:
        return server.openai_base_url if self.wire == "openai" else server.base_url

    def path(self, path: str, cwd: Path) -> str:
        return str(cwd / path) if self.absolute_paths and not Path(path).is_absolute() else path

    def finish(self) -> ScriptItem:
        return self.done() if self.done is not None else reply(text("Done."))


def cli_connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """How the agent-CLI family is pointed at the server: the program, the key, the base URL,
    a private HOME, no retries, the case's environment and the kit's token."""
    case = kit.case
    return {"program_path": case.program, "api_key": API_KEY, "base_url": case.base_url(server),
            "home": str(home), "max_retries": 0, "env": {**case.env, TOKEN_ENV: kit.token}, **case.options}


# ---------------------------------------------------------------------- the kit
class Kit:
    """What a backend's tests build and run (see the module docstring)."""

    def __init__(self, case: Case, start_server: Any, root: Path):
        self.case = case
        self._start_server = start_server
        self.root = root
        self.token = uuid.uuid4().hex
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)
        self.servers: list[Any] = []

    # ------------------------------------------------------------------ building
    def server(self, script: list[ScriptItem] | None = None, *, default: ScriptItem = None,
               handler: Callable[[Any], Any] | None = None) -> Any:
        """A scripted model server; `handler` answers requests before the script (default: the case's)."""
        made = self._start_server(script or [], default=default, handler=handler or self.case.handler)
        self.servers.append(made)
        return made

    def fresh_dir(self) -> Path:
        """A new empty folder under the kit's root (a HOME, a TMPDIR of one backend)."""
        return Path(tempfile.mkdtemp(dir=self.root))

    def options(self, server: Any, *, home: Path | None = None, cwd: Path | None = None,
                **extra: Any) -> dict[str, Any]:
        connect = self.case.connect or cli_connect
        options = connect(self, server, home or self.home, cwd)
        options.update(extra)
        return options

    def backend(self, server: Any, *, sandbox: bool | None = None, model: str | None = "default",
                permissions: Any = None, on_permission: Any = None, permission_timeout: float | None = 60.0,
                tools: list[Any] | None = None, home: Path | None = None, cwd: Path | None = None,
                **extra: Any) -> Any:
        cls = self.case.backend
        opts = cls.options_model(**self.options(server, home=home, cwd=cwd, **extra))
        settings = BackendSettings(model=self.case.model if model == "default" else model, tools=tools or [],
                                   sandbox=self.case.sandbox if sandbox is None else sandbox, options=opts,
                                   permissions=permissions, on_permission=on_permission,
                                   permission_timeout=permission_timeout)
        cls.check_settings(settings)
        return cls(settings)

    def agent(self, server: Any, **kwargs: Any) -> AutonomousCodingAgent:
        kwargs.setdefault("sandbox", self.case.sandbox)
        kwargs.setdefault("model", self.case.model)
        return AutonomousCodingAgent(backend=self.case.backend, **self.options(server), **kwargs)

    def harness(self, **backend: Any) -> Any:
        """The conformance harness of this case; `backend` overrides settings of the backends it
        builds (e.g. sandbox=True)."""
        if self.case.harness is not None:
            return self.case.harness(self)
        return Harness(self, backend)

    # ------------------------------------------------------------------ running
    @staticmethod
    async def turn(backend: Any, prompt: str) -> list[Any]:
        async with contextlib.aclosing(backend.execute(prompt)) as stream:
            return [message async for message in stream]

    async def run(self, cwd: Path, script: list[ScriptItem], prompt: str = "Do the task.", **extra: Any) -> list[Any]:
        """One turn of a backend on its own server playing `script`; its messages."""
        return await self.one_turn(self.backend(self.server(script), **extra), cwd, prompt)

    async def one_turn(self, backend: Any, cwd: Path, prompt: str = "Do the task.") -> list[Any]:
        """Connect `backend` in `cwd`, run one turn, disconnect; the turn's messages."""
        await backend.connect(SessionSpec(cwd=cwd))
        try:
            return await self.turn(backend, prompt)
        finally:
            await backend.disconnect()

    @staticmethod
    def vocabulary(messages: list[Any]) -> list[tuple[Any, ...]]:
        """Commands (started, finished with their exit codes) and file edits (with their counts)."""
        out: list[tuple[Any, ...]] = []
        for m in messages:
            details = m.details or {}
            if m.type.value == "command_start":
                out.append(("start", details["command"]))
            elif m.type.value == "command_end":
                out.append(("end", details["exit_code"]))
            elif m.type.value == "file_edit":
                out.append(("edit", details["path"], details["lines_added"], details["lines_removed"]))
        return out

    def leftovers(self) -> set[int]:
        return leftovers(self.token)

    # ------------------------------------------------------------------ the shared proofs
    async def check_resume(self, cwd: Path, *, second_turn: bool = True, big_prompt: bool = True) -> None:
        """A second turn continues the same session, and a new backend resumes it by its id. The
        first prompt is over 300 KB: it reaches the model whole (stdin or a file, never argv)."""
        big = "Remember the word PELICAN. " + ("0123456789abcdef" * 19_000 if big_prompt else "") + " END-OF-PROMPT"
        assert len(big) > 300_000 or not big_prompt
        server = self.server([reply(text("First answer.")), reply(text("Second answer.")),
                              reply(text("Third answer."))])
        backend = self.backend(server)
        await backend.connect(SessionSpec(cwd=cwd))
        try:
            await self.turn(backend, big)
            first = backend.session_id
            if second_turn:
                await self.turn(backend, "Which word?")
                assert backend.session_id == first
        finally:
            await backend.disconnect()
        assert first and big in server.model_requests[0].raw_body.decode()
        again = self.backend(server)
        await again.connect(SessionSpec(cwd=cwd, resume_session_id=first))
        try:
            messages = await self.turn(again, "And now?")
        finally:
            await again.disconnect()
        answer = "Third answer." if second_turn else "Second answer."
        assert answer in [m.content for m in messages if m.type.value == "text"]
        later = [server.model_requests[i].raw_body.decode() for i in range(1, len(server.model_requests))]
        for body in later:
            assert "PELICAN" in body and "First answer." in body
        if second_turn:
            assert "Second answer." in later[-1] and "Which word?" in later[-1]

    async def check_error_classes(self, cwd: Path) -> None:
        """HTTP 401, 429 and 500 from the model end in BackendErrors of kind auth, rate_limit, transient."""

        async def failure(status: int) -> BackendError:
            server = self.server(default=http_error(status))
            backend = self.backend(server)
            work = cwd / str(status)
            work.mkdir()
            try:
                await backend.connect(SessionSpec(cwd=work))
                with pytest.raises(BackendError) as caught:
                    await asyncio.wait_for(self.turn(backend, "Do the task."), 90)
            finally:
                await backend.disconnect()
            return caught.value

        errors = await asyncio.gather(*(failure(status) for status in (401, 429, 500)))
        kinds = [(e.kind, e.status_code) for e in errors]
        assert [k for k, _ in kinds] == ["auth", "rate_limit", "transient"], kinds
        assert all(status in (None, expected) for (_, status), expected in zip(kinds, (401, 429, 500), strict=True))
        assert all(API_KEY not in str(e) for e in errors)

    async def check_time_budget(self, cwd: Path, *, session_only: bool = False, budget: float | None = None,
                                within: float = 2.0, counts_sent: bool = False) -> list[set[int]]:
        """A hung model: the run returns within the budget + `within` seconds, and no process it
        started (one seen while the model hung included) outlives it. `session_only`: run the
        session on the backend directly, for a backend the facade does not build in autonomous
        mode (it has no shell). `budget`: the time budget (default: the program's start-up + 2 s).
        `counts_sent`: a request that reached the model before the budget ended counts in the
        result (agenter's estimate at least: the agent CLIs' runs cut short count what was sent).
        Returns the processes carrying the token at each model request (all ended by now)."""
        budget = budget if budget is not None else self.case.startup + 2
        seen: list[set[int]] = []
        server = self.server(default=hang())
        server.handler = _noting(server.handler, lambda: seen.append(self.leftovers()))
        started = time.monotonic()
        if session_only:
            from agenter._types import CodingRequest
            from agenter.session.loop import CodingRun
            from agenter.validators import ValidatorChain

            backend = self.backend(server)
            run = CodingRun(backend, CodingRequest(prompt="Do the task.", cwd=cwd),
                            budget=Budget(max_time_seconds=budget), validators=ValidatorChain([]),
                            backend_name=self.case.backend.name,
                            connect=lambda: backend.connect(SessionSpec(cwd=cwd)), disconnect=backend.disconnect)
            async with contextlib.aclosing(run.run()) as events:
                async for _ in events:
                    pass
            result = run.result
        else:
            agent = self.agent(server, budget=Budget(max_time_seconds=budget))
            result = await agent.execute("Do the task.", cwd=cwd)
        took = time.monotonic() - started
        assert result is not None and result.status is CodingStatus.BUDGET_EXCEEDED, result
        assert result.exceeded_limit == "time", result
        assert took < budget + within, f"took {took:.1f} s with a budget of {budget} s"
        assert not self.leftovers()
        assert not {pid for pids in seen for pid in pids if _pids.is_alive(pid)}, "a process outlived the budget"
        if counts_sent and server.model_requests:
            assert result.total_tokens > 0, result
        return seen

    async def check_big_prompt(self, cwd: Path) -> None:
        """A 300 KB prompt reaches the model whole (for programs whose resume test uses a short one)."""
        big = "Task: " + ("0123456789abcdef" * 19_000) + " END-OF-PROMPT"
        server = self.server([reply(text("Read it."))])
        backend = self.backend(server)
        await backend.connect(SessionSpec(cwd=cwd))
        try:
            await self.turn(backend, big)
        finally:
            await backend.disconnect()
        assert len(big) > 300_000 and big in server.model_requests[0].raw_body.decode()

    def check_missing_program(self, install: str, *, option: str = "program_path") -> None:
        """A program that is not there fails when the agent is built, naming how to install it."""
        with pytest.raises(RequirementError) as caught:
            AutonomousCodingAgent(backend=self.case.backend, base_url="http://127.0.0.1:9", sandbox=False,
                                  model=self.case.model, **{option: "/nonexistent/bin/agent"})
        assert install in str(caught.value)


async def run_agent(agent: AutonomousCodingAgent, cwd: Path, prompt: str = "go",
                    **request: Any) -> tuple[Any, list[dict[str, Any]]]:
    """One run through the facade: its result, and the decision of each permission event (the
    event's `tool_input`: tool, decision, rule, answered_by, ...)."""
    events = [event async for event in agent.stream_execute(prompt, cwd=cwd, **request)]
    decisions = [e.data["tool_input"] for e in events if e.data.get("message_type") == "permission"]
    return events[-1].result, decisions


def _noting(handler: Any, note: Callable[[], None]) -> Callable[[Any], Any]:
    """`handler` (may be None) that first calls `note` (in the server's thread, per request)."""

    def noted(request: Any) -> Any:
        note()
        return handler(request) if handler is not None else None

    return noted


class Harness:
    """The conformance harness of a case: the backend plays each scenario against a server of
    its own (see agenter.testing.conformance for the scenarios and the permission runs)."""

    def __init__(self, kit: Kit, overrides: dict[str, Any] | None = None):
        self.kit = kit
        self.case = kit.case
        self.capabilities = kit.case.backend.capabilities
        self.overrides = overrides or {}

    def supports(self, scenario: str) -> bool:
        case = self.case
        implied = {"write": case.write is not None, "shell": case.shell is not None,
                   "usage": case.read is not None, "output": case.output is not None}
        if scenario in ("permissions", "ask", "told"):
            return scenario in case.supports
        return implied.get(scenario, True)

    def make(self, scenario: str, cwd: Path) -> Any:
        case, default = self.case, None
        script: list[ScriptItem]
        if scenario == "write":
            assert case.write is not None
            script = [case.write(case.path(conformance.WRITE_PATH, cwd), conformance.WRITE_CONTENT), case.finish()]
        elif scenario == "shell":
            assert case.shell is not None
            script = [case.shell(conformance.SHELL_COMMAND), case.finish()]
        elif scenario == "hang":
            script = [hang(case.hang_seconds)]
        elif scenario == "refuse":
            reason = conformance.REFUSAL_REASON
            script = [case.refuse(reason) if case.refuse else reply(text(f"REFUSED: {reason}")), case.finish()]
        elif scenario == "output":
            assert case.output is not None
            script = [case.output(conformance.OUTPUT_VALUE), case.finish()]
        elif scenario == "fail":
            script, default = [], http_error(500)
        elif scenario == "usage":
            assert case.read is not None
            script = [_with_usage(case.read(case.path("notes.txt", cwd)), case.usage),
                      _with_usage(reply(text("It says hello.")), case.usage)]
        else:
            raise ValueError(scenario)
        return self.kit.backend(self.kit.server(script, default=default), cwd=cwd, **self.overrides)

    # ------------------------------------------------------------------ permission runs
    def make_gated(self, run: conformance.GatedRun) -> Any:
        script = [self._step(step, run.cwd) for step in run.steps] + [reply(text("Done; some calls were refused."))]
        settings = {"permissions": run.permissions, "on_permission": run.on_permission,
                    "permission_timeout": run.permission_timeout, "home": run.home, "cwd": run.cwd, **self.overrides}
        return self.kit.backend(self.kit.server(script), **settings)

    def _step(self, step: Any, cwd: Path) -> ScriptItem:
        case = self.case
        if isinstance(step, conformance.Write):
            assert case.write is not None
            return case.write(case.path(step.path, cwd), step.content)
        if isinstance(step, conformance.Shell):
            assert case.shell is not None
            return case.shell(step.command)
        assert case.read is not None
        return case.read(step.path)

    def model_saw(self) -> list[str]:
        server = self.kit.servers[-1]
        return [json.dumps(request.body) for request in server.model_requests]

    def inspect(self, name: str, evidence: Any) -> None:
        expect = self.case.expect.get(name)
        if expect is not None:
            expect(evidence, self.kit.servers[-1])


def _with_usage(item: ScriptItem, usage: dict[str, int] | None) -> ScriptItem:
    """`item` (a reply) reporting `usage`, where a case gives one."""
    return item if usage is None else replace(item, usage=ReplyUsage(**usage))
