"""Shared kit for the agent-CLI backends: each program's test file describes its program (a
`case` fixture: the backend class, the program, how its model writes a file or runs a command),
and the kit runs the same proofs on every program, the real program against the scripted model
server: the conformance suite, resume, the error classes, the time budget, a 300 KB prompt, the
missing program. Every backend a test builds carries the test's token in its environment; a
process carrying it after the test fails the test (and is killed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._errors import BackendError, RequirementError
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.host import _pids
from agenter.testing import conformance, hang, http_error, reply, text

REPO = Path(__file__).resolve().parents[3]
TOKEN_ENV = "AGENTER_TEST_RUN"
API_KEY = "sk-test-SUPERSECRET-cli-0123456789"

ScriptItem = Any


def conformance_checks(*, slow: bool = False) -> list[Any]:
    """The conformance checks to run. For programs that take seconds to start, the checks whose
    code path is all agenter's (idempotent disconnect, a 'REFUSED:' line) are proven on the
    faster programs only."""
    if not slow:
        return list(conformance.CHECKS)
    return [c for c in conformance.CHECKS if c.__name__ not in ("check_disconnect_is_idempotent", "check_refusal")]


def installed(*candidates: str | Path | None, name: str | None = None) -> str | None:
    """The first candidate that is an executable file, else `name` on PATH."""
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name) if name else None


def need(program: str | None, what: str) -> str:
    if program is None:
        message = f"{what} is not installed"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return program


@dataclass
class CliCase:
    """One program: its backend, where it is, and how its model plays each scenario."""

    backend: Any
    program: str
    wire: str  # "anthropic", "openai" or "gemini": which base URL of the server it uses
    model: str | None
    write: Callable[[str, str], ScriptItem]
    shell: Callable[[str], ScriptItem] | None = None
    read: Callable[[str], ScriptItem] | None = None
    output: Callable[[dict[str, Any]], ScriptItem] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    sandbox: bool = False
    handler: Callable[[Any], Any] | None = None
    #: Seconds a run of the program takes to start; the hung-model budget test waits past it.
    startup: float = 2.0

    def base_url(self, server: Any) -> str:
        return server.openai_base_url if self.wire == "openai" else server.base_url


class Kit:
    """What a program's tests build and run (see the module docstring)."""

    def __init__(self, case: CliCase, start_server: Any, root: Path):
        self.case = case
        self._start_server = start_server
        self.token = uuid.uuid4().hex
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)

    # ------------------------------------------------------------------ building
    def server(self, script: list[ScriptItem] | None = None, *, default: ScriptItem = None) -> Any:
        return self._start_server(script or [], default=default, handler=self.case.handler)

    def options(self, server: Any, **extra: Any) -> dict[str, Any]:
        options = {"program_path": self.case.program, "api_key": API_KEY, "base_url": self.case.base_url(server),
                   "home": str(self.home), "max_retries": 0, "env": {**self.case.env, TOKEN_ENV: self.token},
                   **self.case.options}
        options.update(extra)
        return options

    def backend(self, server: Any, *, sandbox: bool | None = None, model: str | None = "default",
                permissions: Any = None, **extra: Any) -> Any:
        cls = self.case.backend
        opts = cls.options_model(**self.options(server, **extra))
        settings = BackendSettings(model=self.case.model if model == "default" else model, tools=[],
                                   sandbox=self.case.sandbox if sandbox is None else sandbox, options=opts,
                                   permissions=permissions)
        cls.check_settings(settings)
        return cls(settings)

    def agent(self, server: Any, **kwargs: Any) -> AutonomousCodingAgent:
        kwargs.setdefault("sandbox", self.case.sandbox)
        kwargs.setdefault("model", self.case.model)
        return AutonomousCodingAgent(backend=self.case.backend, **self.options(server), **kwargs)

    def harness(self) -> Harness:
        return Harness(self)

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
        return {pid for pid in _pids.with_environment(TOKEN_ENV, self.token) if _pids.is_alive(pid)}

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

    async def check_time_budget(self, cwd: Path, *, session_only: bool = False) -> None:
        """A hung model: the run returns within the budget + 2 s and leaves no process.
        `session_only`: run the session on the backend directly, for a backend the facade does
        not build in autonomous mode (it has no shell)."""
        budget = self.case.startup + 2
        server = self.server(default=hang())
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
        assert took < budget + 2, f"took {took:.1f} s with a budget of {budget} s"
        assert not self.leftovers()

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

    def check_missing_program(self, install: str) -> None:
        server_url = "http://127.0.0.1:9"
        with pytest.raises(RequirementError) as caught:
            AutonomousCodingAgent(backend=self.case.backend, program_path="/nonexistent/bin/agent",
                                  base_url=server_url, sandbox=False, model=self.case.model)
        assert install in str(caught.value)


class Harness:
    """The conformance suite's harness: the program plays each scenario against its own server."""

    def __init__(self, kit: Kit):
        self.kit = kit
        self.capabilities = kit.case.backend.capabilities

    def supports(self, scenario: str) -> bool:
        case = self.kit.case
        return {"shell": case.shell is not None, "usage": case.read is not None}.get(scenario, True)

    def make(self, scenario: str, cwd: Path) -> Any:
        case, default = self.kit.case, None
        script: list[ScriptItem]
        if scenario == "write":
            script = [case.write(conformance.WRITE_PATH, conformance.WRITE_CONTENT), reply(text("Written."))]
        elif scenario == "shell":
            assert case.shell is not None
            script = [case.shell(conformance.SHELL_COMMAND), reply(text("Ran it."))]
        elif scenario == "hang":
            script = [hang()]
        elif scenario == "refuse":
            script = [reply(text(f"REFUSED: {conformance.REFUSAL_REASON}"))]
        elif scenario == "output":
            assert case.output is not None
            script = [case.output(conformance.OUTPUT_VALUE), reply(text("Done."))]
        elif scenario == "fail":
            script, default = [], http_error(500)
        elif scenario == "usage":
            assert case.read is not None
            script = [case.read("notes.txt"), reply(text("It says hello."))]
        else:
            raise ValueError(scenario)
        return self.kit.backend(self.kit.server(script, default=default))


@pytest.fixture
def kit(case: CliCase, scripted_model_server: Any, tmp_path_factory: pytest.TempPathFactory):
    made = Kit(case, scripted_model_server, tmp_path_factory.mktemp("cli-kit"))
    yield made
    left = made.leftovers()
    _pids.kill(left)
    assert not left, f"processes left running: {sorted(left)}"
