"""Agent CLI backends: wall time through agenter ÷ the bare program (goal <= 1.10).

For each installed CLI, the same scripted task runs twice against the scripted model server: once
through agenter (facade → session → the CLI backend: the program started by the runner, its
output parsed, workspace snapshots, no validators), once bare (the same command line, environment
and stdin, started with subprocess and read to the end). Three model turns (write a file, run a
command, answer) for every program but Aider, which makes one model call per message (its edit).
Rounds alternate the two; the figure is the ratio of the medians, and of the best runs.
Programs that take seconds to start make the ratio close to 1 by themselves: the absolute
difference is printed too. Set BENCH_CLI_ROUNDS (default 3) and BENCH_CLI (names) to narrow it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenter import AutonomousCodingAgent
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.backends.capabilities import CapabilityError
from agenter.testing import ScriptedModelServer, reply, text, tool_call

REPO = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("BENCH_CLI_ROUNDS", "3"))
KEY = "sk-bench-0123456789abcdef"


def _bundled_claude() -> str | None:
    from agenter.backends._programs.claude import bundled_cli

    return bundled_cli()


def _program(*candidates: Any) -> str | None:
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _patch(path: str, content: str) -> Any:
    return tool_call("apply_patch", f"*** Begin Patch\n*** Add File: {path}\n+{content}\n*** End Patch\n")


#: name → (program, wire, model, options, script factory)
CASES: dict[str, tuple[Callable[[], str | None], str, str, dict[str, Any], Callable[[], list[Any]]]] = {
    "claude-cli": (_bundled_claude, "anthropic", "claude-sonnet-4-5", {}, lambda: [
        reply(tool_call("Write", {"file_path": "a.txt", "content": "one\n"})),
        reply(tool_call("Bash", {"command": "echo two > b.txt", "description": "write b"})),
        reply(text("Done."))]),
    "codex-cli": (lambda: _program(REPO / "node_modules" / ".bin" / "codex"), "openai", "gpt-5.5", {}, lambda: [
        reply(_patch("a.txt", "one")),
        reply(tool_call("exec_command", {"cmd": "echo two > b.txt", "yield_time_ms": 30_000})),
        reply(text("Done."))]),
    "gemini-cli": (lambda: _program(REPO / "node_modules" / ".bin" / "gemini"), "gemini", "gemini-2.5-flash", {},
                   lambda: [reply(tool_call("write_file", {"file_path": "a.txt", "content": "one\n"})),
                            reply(tool_call("run_shell_command", {"command": "echo two > b.txt"})),
                            reply(text("Done."))]),
    "opencode-cli": (lambda: _program(REPO / "node_modules" / ".bin" / "opencode"), "openai", "openai/gpt-4.1",
                     {"env": {"OPENCODE_DISABLE_MODELS_FETCH": "1"}}, lambda: [
                         reply(tool_call("write", {"filePath": "a.txt", "content": "one\n"})),
                         reply(tool_call("bash", {"command": "echo two > b.txt", "description": "write b"})),
                         reply(text("Done."))]),
    "aider-cli": (lambda: _program(REPO / ".venv-aider" / "bin" / "aider"), "openai", "openai/gpt-4.1",
                  {"aider_edit_format": "whole"}, lambda: [reply(text("Here.\n\na.txt\n```\none\n```\n"))]),
}


def _options(name: str, server: ScriptedModelServer, program: str, home: str) -> dict[str, Any]:
    _, wire, _, extra, _ = CASES[name]
    url = server.openai_base_url if wire == "openai" else server.base_url
    return {"program_path": program, "api_key": KEY, "base_url": url, "home": home, "max_retries": 0, **extra}


def _handler(request: Any) -> Any:
    # Claude Code may ask for a title without tools; Aider's requests never carry tools.
    return reply(text("ok")) if request.wire == "anthropic" and not request.tools else None


async def through_agenter(name: str, program: str, home: str) -> float:
    _, _, model, _, script = CASES[name]
    with ScriptedModelServer(script(), handler=_handler) as server, tempfile.TemporaryDirectory() as cwd:
        options = _options(name, server, program, home)
        try:
            agent = AutonomousCodingAgent(backend=name, model=model, sandbox=False, validators=[], **options)
        except CapabilityError:  # a backend autonomous mode does not take (aider-cli: no shell)
            started = time.perf_counter()
            result = await _session(name, model, options, cwd)
        else:
            started = time.perf_counter()
            result = await agent.execute("Write a.txt and b.txt.", cwd=cwd)
        elapsed = time.perf_counter() - started
    assert result.status.value == "completed", (name, result.status, result.error)
    return elapsed


async def _session(name: str, model: str, options: dict[str, Any], cwd: str) -> Any:
    """The session on the backend, without the facade's mode check."""
    from agenter import Budget, CodingRequest
    from agenter.backends import load_backend
    from agenter.session.loop import CodingRun
    from agenter.validators import ValidatorChain

    cls = load_backend(name)
    backend = cls(BackendSettings(model=model, tools=[], sandbox=False, options=cls.options_model(**options)))
    run = CodingRun(backend, CodingRequest(prompt="Write a.txt and b.txt.", cwd=cwd), budget=Budget(),
                    validators=ValidatorChain([]), backend_name=name, model=model,
                    connect=lambda: backend.connect(SessionSpec(cwd=Path(cwd))), disconnect=backend.disconnect)
    async for _ in run.run():
        pass
    return run.result


async def bare(name: str, program: str, home: str) -> float:
    """The command line agenter would run, started and read without agenter."""
    from agenter.backends import load_backend

    _, _, model, _, script = CASES[name]
    cls = load_backend(name)
    with ScriptedModelServer(script(), handler=_handler) as server, tempfile.TemporaryDirectory() as cwd:
        options = cls.options_model(**_options(name, server, program, home))
        backend = cls(BackendSettings(model=model, tools=[], sandbox=False, options=options))
        await backend.connect(SessionSpec(cwd=Path(cwd)))  # its scratch files (prompt, settings)
        try:
            backend.turns = 1
            invocation = backend.command(backend.task("Write a.txt and b.txt."))
            started = time.perf_counter()
            process = subprocess.Popen(invocation.argv, cwd=cwd, env=dict(invocation.env), stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL,
                                       stdin=subprocess.PIPE if invocation.stdin is not None else subprocess.DEVNULL,
                                       start_new_session=True)
            if invocation.stdin is not None:
                assert process.stdin is not None
                process.stdin.write(invocation.stdin)
                process.stdin.close()
            assert process.stdout is not None
            for _ in process.stdout:
                pass
            process.wait()
            elapsed = time.perf_counter() - started
        finally:
            await backend.disconnect()
        assert (Path(cwd) / "a.txt").exists(), f"{name}: the bare run wrote nothing"
    return elapsed


async def main_async(names: list[str]) -> dict[str, tuple[float, float, float]]:
    figures = {}
    for name in names:
        program = CASES[name][0]()
        if program is None:
            print(f"{name:13} not installed, skipped")
            continue
        with tempfile.TemporaryDirectory() as home:
            await bare(name, program, home)  # warm-up: first-run set-up in the home, page cache
            ours, theirs = [], []
            for _ in range(ROUNDS):
                theirs.append(await bare(name, program, home))
                ours.append(await through_agenter(name, program, home))
        median = statistics.median(ours) / statistics.median(theirs)
        best = min(ours) / min(theirs)
        added = statistics.median(ours) - statistics.median(theirs)
        figures[name] = (median, best, added)
        print(f"{name:13} agenter/bare: median {median:.3f}, best {best:.3f} "
              f"(median {statistics.median(ours):.2f} s vs {statistics.median(theirs):.2f} s, "
              f"{added * 1000:+.0f} ms; goal <= 1.10)", flush=True)
    return figures


def main() -> None:
    wanted = os.environ.get("BENCH_CLI", "").split(",")
    names = [n for n in CASES if not wanted or wanted == [""] or n in wanted]
    asyncio.run(main_async(names))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
