"""Cold start: a fresh `python script.py` running one task through agenter ÷ the bare agent
program on the same task (goal <= 1.3 for codex and claude-code).

One scripted model server (in this process) answers every run the same way: write hello.txt,
then say "Done.". For each installed backend, rounds alternate (a) the bare program (`codex exec`
with the config.toml agenter would write; `claude -p` from claude-agent-sdk's bundled CLI with the
environment the claude-code tests use) and (b) a fresh interpreter running a small script that
imports agenter and runs the task through AutonomousCodingAgent (no validators). Wall time of the
whole process each, so interpreter start-up and imports count. The figure is the ratio of the
medians (and of the best runs). A last run under `python -X importtime` names the biggest imports.

Child interpreters get a private PYTHONPYCACHEPREFIX (and no PYTHONDONTWRITEBYTECODE), so imports
load bytecode as in a normal install, even where the environment forbids writing .pyc files.
BENCH_COLD_RUNS (default 5) sets the rounds, BENCH_COLD (names) narrows the backends.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("BENCH_COLD_RUNS", "5"))
KEY = "sk-bench-0123456789abcdef"
PROMPT = "Write hello.txt containing hello."
GOAL = 1.3

#: The script a user would write: one task, no validators. argv[1] is a JSON of its settings.
SCRIPT = '''\
import asyncio, json, os, sys

from agenter import AutonomousCodingAgent

settings = json.loads(sys.argv[1])


async def main():
    agent = AutonomousCodingAgent(validators=[], **settings["agent"])
    result = await agent.execute(settings["prompt"], cwd=settings["cwd"])
    if result.status.value != "completed" or not os.path.exists(os.path.join(settings["cwd"], "hello.txt")):
        sys.exit(f"run failed: {result.status} {result.error}")


asyncio.run(main())
'''


def _handler(request: Any) -> Any:
    from agenter.testing import reply, text, tool_call

    if not request.tools:  # Claude Code's title request
        return reply(text("ok"))
    if request.tool_results:
        return reply(text("Done."))
    if request.wire == "anthropic":
        return reply(tool_call("Write", {"file_path": "hello.txt", "content": "hello\n"}))
    return reply(tool_call("apply_patch", "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"))


@dataclass
class Case:
    """One backend: how to run the task bare, and the facade's settings for the same task."""

    name: str
    bare_argv: list[str]
    bare_env: dict[str, str]
    agent: dict[str, Any]
    scratch: list[str] = field(default_factory=list)


def _codex_program() -> str | None:
    local = REPO / "node_modules" / ".bin" / "codex"
    return str(local) if local.exists() else shutil.which("codex")


def _claude_program() -> str | None:
    spec = importlib.util.find_spec("claude_agent_sdk")  # the extra, without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    cli = Path(next(iter(spec.submodule_search_locations))) / "_bundled" / "claude"
    return str(cli) if os.access(cli, os.X_OK) else None


def codex_case(url: str, sandbox: bool) -> Case | None:
    program = _codex_program()
    if program is None:
        return None
    from agenter.backends._programs import codex as codex_program
    from agenter.backends.agents.codex import CodexOptions, _setup

    scratch = tempfile.mkdtemp(prefix="bench-cold-codex-")
    home, codex_home, tmp, bin_dir = (Path(scratch) / part for part in ("home", "codex-home", "tmp", "bin"))
    for directory in (home, codex_home, tmp):
        directory.mkdir()
    options = CodexOptions(base_url=url + "/v1", api_key=KEY, max_retries=0)
    config = _setup.codex_config(options, model="gpt-5.5", sandbox=sandbox, tools_url=None)
    (codex_home / "config.toml").write_text(_setup.render_toml(config))
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(codex_home), "TMPDIR": str(tmp),
           codex_program.API_KEY_ENV_VAR: KEY}
    if sandbox:  # what agenter does for Codex's Linux sandbox: the codex-linux-sandbox link
        if codex_program.sandbox_bin(program, bin_dir, env, backend="codex") is not None:
            env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    argv = [program, "exec", "--skip-git-repo-check", PROMPT]
    agent = {"backend": "codex", "model": "gpt-5.5", "sandbox": sandbox, "program_path": program,
             "base_url": url + "/v1", "api_key": KEY, "max_retries": 0, "env": {"HOME": str(home)}}
    return Case(f"codex{'' if sandbox else ' (sandbox=False)'}", argv, env, agent, [scratch])


def claude_case(url: str) -> Case | None:
    program = _claude_program()
    if program is None:
        return None
    scratch = tempfile.mkdtemp(prefix="bench-cold-claude-")
    home, tmp = Path(scratch) / "home", Path(scratch) / "tmp"
    home.mkdir()
    tmp.mkdir()
    # The environment of tests/backends/test_claude_code.py.
    cli_env = {"HOME": str(home), "TMPDIR": str(tmp), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_MAX_RETRIES": "0"}
    env = {**os.environ, **cli_env, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    argv = [program, "-p", PROMPT, "--model", "claude-sonnet-4-5", "--allowedTools", "Write,Edit,Read,Bash",
            "--output-format", "json"]
    agent = {"backend": "claude-code", "model": "claude-sonnet-4-5", "sandbox": False, "api_key": KEY,
             "base_url": url, "env": cli_env}
    return Case("claude-code", argv, env, agent, [scratch])


CASES: dict[str, Callable[[str], Case | None]] = {
    "codex": lambda url: codex_case(url, sandbox=True),
    "codex-nosandbox": lambda url: codex_case(url, sandbox=False),
    "claude-code": claude_case,
}


def python_env(pycache: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300)
    return time.perf_counter() - started, done


def run_bare(case: Case) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as cwd:
        elapsed, done = _timed(case.bare_argv, case.bare_env, cwd)
        if not (Path(cwd) / "hello.txt").is_file():
            raise RuntimeError(f"{case.name}: the bare run wrote nothing (exit {done.returncode}): "
                               f"{(done.stderr or done.stdout)[-800:]}")
    return elapsed


def run_agenter(case: Case, script: str, env: dict[str, str], *flags: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as cwd:
        settings = json.dumps({"agent": case.agent, "prompt": PROMPT, "cwd": cwd})
        elapsed, done = _timed([sys.executable, *flags, script, settings], env, cwd)
        if done.returncode != 0:
            raise RuntimeError(f"{case.name}: the agenter run failed: {done.stderr[-1500:]}")
    return elapsed, done.stderr


def biggest_imports(importtime: str, count: int = 6) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(agenter modules, third-party packages first imported) with the largest cumulative ms."""
    ours: list[tuple[str, float]] = []
    theirs: list[tuple[str, float]] = []
    rows: list[tuple[int, str, float]] = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if not cumulative.strip().isdigit():
            continue
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((depth, name.strip(), int(cumulative) / 1000))
    # importtime prints children before their parent: a row's parent is the next row one level up.
    for index, (depth, name, ms) in enumerate(rows):
        parent = next((n for d, n, _ in rows[index + 1:] if d < depth), "")
        top, parent_top = name.split(".")[0], parent.split(".")[0]
        if top == "agenter":
            if name != "agenter":
                ours.append((name, ms))
        elif top not in sys.stdlib_module_names and top != parent_top and not top.startswith("_"):
            theirs.append((name, ms))
    ours.sort(key=lambda row: -row[1])
    theirs.sort(key=lambda row: -row[1])
    largest: dict[str, tuple[str, float]] = {}  # one row per package: its largest
    for row in theirs:
        largest.setdefault(row[0].split(".")[0], row)
    theirs = list(largest.values())
    return ours[:count], theirs[:count]


#: The least any Python SDK with pydantic request and result types adds to a run: an
#: interpreter that imports pydantic, builds one model, and exits.
FLOOR = "import pydantic\n\nclass Request(pydantic.BaseModel):\n    prompt: str\n\nRequest(prompt='x')\n"


def run_floor(env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as cwd:
        elapsed, done = _timed([sys.executable, "-c", FLOOR], env, cwd)
        if done.returncode != 0:
            raise RuntimeError(f"the floor run failed: {done.stderr[-800:]}")
    return elapsed


def measure(case: Case, script: str, env: dict[str, str]) -> tuple[float, float]:
    run_bare(case)  # warm-up: first-run set-up, page cache, bytecode
    run_agenter(case, script, env)
    run_floor(env)
    bare, ours, floor = [], [], []
    for _ in range(RUNS):
        bare.append(run_bare(case))
        ours.append(run_agenter(case, script, env)[0])
        floor.append(run_floor(env))
    median = statistics.median(ours) / statistics.median(bare)
    best = min(ours) / min(bare)
    print(f"{case.name:24} fresh python ÷ bare: median {median:.2f}, best {best:.2f} "
          f"({statistics.median(ours):.2f} s vs {statistics.median(bare):.2f} s, "
          f"{(statistics.median(ours) - statistics.median(bare)) * 1000:+.0f} ms; goal <= {GOAL})", flush=True)
    least = statistics.median(floor)
    print(f"{'':24} floor: python + pydantic (import, one model, exit) {least * 1000:.0f} ms, so at least "
          f"{(statistics.median(bare) + least) / statistics.median(bare):.2f}x before any SDK code; agenter's own "
          f"{(statistics.median(ours) - statistics.median(bare) - least) * 1000:+.0f} ms", flush=True)
    _, stderr = run_agenter(case, script, env, "-X", "importtime")
    ours_top, theirs_top = biggest_imports(stderr)
    print(f"{'':24} imports, agenter: " + ", ".join(f"{n} {ms:.0f}" for n, ms in ours_top) + " ms")
    print(f"{'':24} imports, third-party: " + ", ".join(f"{n} {ms:.0f}" for n, ms in theirs_top) + " ms",
          flush=True)
    return median, best


def main() -> dict[str, tuple[float, float]]:
    from agenter.testing import ScriptedModelServer

    wanted = [n for n in os.environ.get("BENCH_COLD", "").split(",") if n]
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cold-pyc-") as pycache, \
            tempfile.TemporaryDirectory(prefix="bench-cold-script-") as scripts, \
            ScriptedModelServer(handler=_handler) as server:
        script = str(Path(scripts) / "script.py")
        Path(script).write_text(SCRIPT)
        env = python_env(pycache)
        for name, make in CASES.items():
            if wanted and name not in wanted:
                continue
            case = make(server.base_url)
            if case is None:
                extra = "claude-agent-sdk's bundled CLI" if name == "claude-code" else "the codex program"
                print(f"{name:24} skipped: {extra} is not installed", flush=True)
                continue
            try:
                figures[case.name] = measure(case, script, env)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{case.name:24} failed: {exc}", flush=True)
            finally:
                for path in case.scratch:
                    shutil.rmtree(path, ignore_errors=True)
    return figures


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
