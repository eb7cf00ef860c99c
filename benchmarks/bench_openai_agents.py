"""The openai-agents backend's cost: what choosing it adds to the imports, and its overhead per
model turn against the OpenAI Agents SDK run bare on the same job, both against the scripted
server (Responses wire).

Imports, in fresh interpreters (private bytecode cache, warmed once, median of IMPORT_RUNS):
`import agenter` (it must not load the backend, the SDK, openai or mcp), importing the backend's
module once the facade is loaded (what choosing `backend="openai-agents"` adds), building the
agent (options, requirements, the sandbox probe), and `import agents`, which the backend does at
connect in a thread; with BENCH_OA_BASELINE=<another checkout>, that checkout's `import agenter`
beside this one's.

The job: each model response streams a text and a `write_file` call; the tool writes the file,
and the SDK sends the grown history back, until the model says it is done. The bare run is what
an SDK user writes at its leanest: `Agent` + `Runner.run_streamed` with the same instructions
and the same function tool definitions as agenter sends (copied from agenter's first request),
`write_file` writing the file itself, the stream consumed, no session (the run keeps its history
in memory). agenter runs it through the facade (validators off): the permission gate on every
call, the file tool's path checks and atomic write, the stream mapped to events, change
detection, and the conversation kept in agenter's store (a durable append per step); once more
with an in-memory SDK session instead of the store, to show what the store costs.

Per-turn overhead is a slope: each side runs a short and a long conversation, and the difference
of the differences divided by the extra turns is what each further turn costs beyond the bare
run (each round's own, then the median of the rounds); what agenter costs once per run is the
short run's difference less the short run's turns at that slope. The SDK's own cost per turn
grows with the history (the openai client walks the whole input of every request through its
type transform), so the conversations are kept short: the noise of a shared machine grows with
what both sides do, the signal only with the turns. Figures in wall time and in the process's
CPU time (agenter's worker threads included; the scripted server is another process): the CPU
figures are the steadier on a shared machine. BENCH_OA_ROUNDS sets the rounds.

A last pair of agenter runs (short, long) under cProfile with the loop thread's CPU clock says
how much of the loop's work is agenter's own code (functions in agenter/, the scripted server
aside): a figure free of the machine's noise, though it leaves out what agenter does in worker
threads (file writes, the store's appends) and in C code it calls (pydantic, re, json).
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _imports import measure_import, python_env

from agenter import AutonomousCodingAgent, CodingRequest
from agenter.testing import ScriptedModelServer, reply, text

#: Model responses of the short and the long conversation.
SHORT, LONG = 2, 8
#: Rounds of the six runs (bare, agenter, agenter with an in-memory session; short and long).
ROUNDS = int(os.environ.get("BENCH_OA_ROUNDS", "21"))
#: Fresh interpreters per import figure (the SDK's import, seconds each, gets fewer).
IMPORT_RUNS = 9
SDK_IMPORT_RUNS = 5
MODEL = "gpt-4.1"
#: Another checkout (BENCH_OA_BASELINE, e.g. one of main) whose `import agenter` is measured beside
#: this one's: the backend must leave it unchanged.
BASELINE = os.environ.get("BENCH_OA_BASELINE", "")
REPO = Path(__file__).resolve().parents[1]
#: Modules choosing the backend must not load (the backend imports them at connect).
HEAVY = ("agents", "openai", "mcp", "agenter.backends.agents.openai_agents")

#: The scripted model in a process of its own (a server thread would take the GIL from the loop
#: being measured). Stateless: the prompt says how many responses the run has ("go 8"), the
#: function calls in the history which one this is.
SERVER = r"""
import json, re, sys
from agenter.testing import ScriptedModelServer, reply, text, tool_call
def handler(request):
    turns = int(re.search(r"go (\d+)", json.dumps(request.messages)).group(1))
    i = sum(1 for m in request.messages if isinstance(m, dict) and m.get("type") == "function_call")
    if i < turns - 1:
        return reply(text(f"step {i}: writing m{i % 3}.py"),
                     tool_call("write_file", {"path": f"m{i % 3}.py", "content": f"x = {i}\n" * 20}))
    return reply(text("done"))

with ScriptedModelServer(handler=handler) as server:
    print(server.openai_base_url, flush=True)
    sys.stdin.read()
"""


# ---------------------------------------------------------------------------------------------
# Imports


#: Run in a fresh interpreter: `setup` untimed, then `stmt` timed; prints its wall and CPU
#: seconds and which of HEAVY are loaded afterwards.


def import_costs() -> dict[str, float]:
    facade = "import agenter; agenter.AutonomousCodingAgent"
    build = ("agenter.AutonomousCodingAgent(backend='openai-agents', base_url='http://127.0.0.1:9/v1', "
             "api_key='sk-bench', validators=[])")
    with tempfile.TemporaryDirectory() as pycache:
        env = python_env(pycache, REPO, drop=["OPENAI_API_KEY"])
        rows = [("import agenter", *measure_import("import agenter", "", env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("the facade (AutonomousCodingAgent)", *measure_import(facade, "", env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("+ the backend's module (choosing it)",
                 *measure_import("import agenter.backends.agents.openai_agents", facade, env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("+ building the agent (that module, options, requirements)", *measure_import(build, facade, env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("import agents (the SDK; at connect, in a thread)",
                 *measure_import("import agents", facade, env, runs=SDK_IMPORT_RUNS, heavy=HEAVY))]
        if BASELINE:
            rows.insert(1, (f"import agenter from {BASELINE}",
                            *measure_import("import agenter", "", python_env(pycache, Path(BASELINE), drop=["OPENAI_API_KEY"]),
                                           runs=IMPORT_RUNS, heavy=HEAVY)))
    print(f"imports, fresh interpreters, median of {IMPORT_RUNS} ({SDK_IMPORT_RUNS} for the SDK), wall / CPU:")
    for label, wall, cpu, loaded in rows:
        print(f"  {label:<58} {wall * 1000:7.1f} / {cpu * 1000:6.1f} ms   loaded afterwards: "
              f"{loaded or 'none of ' + ', '.join(HEAVY)}")
    for label, _, _, loaded in rows:
        assert label.startswith(("+", "import agents")) or not loaded, f"{label} loaded {loaded}"
    keys = ("import_agenter", *(("import_agenter_baseline",) if BASELINE else ()), "import_facade",
            "import_backend_module", "build_agent", "import_sdk")
    figures = {}
    for key, (_, wall, cpu, _) in zip(keys, rows, strict=True):
        figures.update({f"{key}_s": wall, f"{key}_cpu_s": cpu})
    return figures


# ---------------------------------------------------------------------------------------------
# Per model turn


class Server:
    """The scripted model server in a subprocess, for as long as the block runs."""

    def __enter__(self) -> str:
        self.process = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Clock:
    """Wall time and the process's CPU time of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


async def agenter_request() -> dict[str, Any]:
    """What agenter sends besides the input: its instructions and tool definitions."""
    with ScriptedModelServer([reply(text("done"))]) as server, tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="openai-agents", base_url=server.openai_base_url, api_key="sk-bench",
                                      model=MODEL, validators=[])
        await agent.execute(CodingRequest(prompt="go 1", cwd=Path(cwd), require_changes=False))
        return server.model_requests[0].body


async def bare_run(base_url: str, cwd: Path, body: dict[str, Any], turns: int) -> int:
    """The same job with the SDK alone; returns the number of model responses."""
    from agents import Agent, FunctionTool, OpenAIResponsesModel, RunConfig, Runner
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)

    async def invoke(context: Any, arguments: str) -> str:
        data = json.loads(arguments)
        if context.tool_name == "write_file":
            (cwd / data["path"]).write_text(data["content"])
            return f"Wrote {data['path']}"
        return "not used"

    tools: list[Any] = [FunctionTool(name=t["name"], description=t["description"], params_json_schema=t["parameters"],
                                   on_invoke_tool=invoke, strict_json_schema=False) for t in body["tools"]]
    agent = Agent(name="bare", instructions=body["instructions"], tools=tools,
                  model=OpenAIResponsesModel(MODEL, client))
    result = Runner.run_streamed(agent, f"go {turns}", max_turns=100, run_config=RunConfig(tracing_disabled=True))
    async for _ in result.stream_events():
        pass
    await client.close()
    return len(result.raw_responses)


async def timed_bare(base_url: str, turns: int, body: dict[str, Any]) -> Clock:
    with tempfile.TemporaryDirectory() as cwd:
        with Clock() as clock:
            responses = await bare_run(base_url, Path(cwd), body, turns)
        assert responses == turns and (Path(cwd) / "m0.py").is_file(), responses
    return clock


async def timed_agenter(base_url: str, turns: int, store: Path | None) -> Clock:
    with tempfile.TemporaryDirectory() as cwd:
        options: dict[str, Any] = {}
        if store is None:
            from agents import SQLiteSession

            options["openai_agents_session"] = SQLiteSession("bench")  # in memory
        else:
            options["openai_agents_store_dir"] = str(store)
        agent = AutonomousCodingAgent(backend="openai-agents", base_url=base_url, api_key="sk-bench", model=MODEL,
                                      validators=[], **options)
        with Clock() as clock:
            result = await agent.execute(CodingRequest(prompt=f"go {turns}", cwd=Path(cwd)))
        assert result.status.value == "completed", result
        assert "m0.py" in result.files and result.summary == "done", result
    return clock


async def profiled_agenter(base_url: str, turns: int, store: Path) -> tuple[float, float]:
    """One agenter run under cProfile (the loop thread's CPU clock): the loop's CPU seconds, and
    those spent in agenter's own functions (the scripted server's module aside)."""
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    try:
        await timed_agenter(base_url, turns, store)
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    package = str(REPO / "agenter")
    total = sum(row[2] for row in stats.values())
    ours = sum(row[2] for (path, _, _), row in stats.items()
               if path.startswith(package) and not path.startswith(str(REPO / "agenter" / "testing")))
    return total, ours


async def turn_costs() -> dict[str, float]:
    samples: dict[str, list[Clock]] = {k: [] for k in ("bare_s", "bare_l", "ours_s", "ours_l", "mem_s", "mem_l")}
    body = await agenter_request()
    with Server() as base_url, tempfile.TemporaryDirectory() as store_dir:
        store = Path(store_dir)
        print(f"both send {len(body['tools'])} tool definitions and the same instructions; {SHORT} and {LONG} model "
              f"responses, median of {ROUNDS} rounds; the scripted server in its own process")
        await timed_bare(base_url, SHORT, body)  # warm-up: imports, first connections
        await timed_agenter(base_url, SHORT, store)
        await timed_agenter(base_url, SHORT, None)
        for _ in range(ROUNDS):
            # Interleaved, so a noisy moment of a shared machine hits every kind alike.
            samples["bare_s"].append(await timed_bare(base_url, SHORT, body))
            samples["ours_s"].append(await timed_agenter(base_url, SHORT, store))
            samples["mem_s"].append(await timed_agenter(base_url, SHORT, None))
            samples["bare_l"].append(await timed_bare(base_url, LONG, body))
            samples["ours_l"].append(await timed_agenter(base_url, LONG, store))
            samples["mem_l"].append(await timed_agenter(base_url, LONG, None))

        profiled = {turns: await profiled_agenter(base_url, turns, store) for turns in (SHORT, LONG)}
    (short_total, short_ours), (long_total, long_ours) = profiled[SHORT], profiled[LONG]
    ours_per_turn = (long_ours - short_ours) / (LONG - SHORT)
    share = ours_per_turn / ((long_total - short_total) / (LONG - SHORT))
    print(f"under cProfile (loop thread CPU, inflated alike): agenter's own code {ours_per_turn * 1000:.2f} ms per "
          f"model turn, {share:.1%} of the loop's work per turn; {long_ours / long_total:.1%} of a {LONG}-response "
          "run's")

    def per_turn(kind: str, what: str, round_: int) -> float:
        short, long = samples[f"{kind}_s"][round_], samples[f"{kind}_l"][round_]
        return float(getattr(long, what) - getattr(short, what)) / (LONG - SHORT)

    def once(kind: str, what: str, round_: int) -> float:
        """What `kind` costs once per run beyond the bare run: the short run's difference less
        its turns at this round's slope."""
        extra = per_turn(kind, what, round_) - per_turn("bare", what, round_)
        return float(getattr(samples[f"{kind}_s"][round_], what) - getattr(samples["bare_s"][round_], what)) - \
            SHORT * extra

    figures: dict[str, float] = {}
    rounds = range(ROUNDS)
    for what, label in (("wall", "wall time"), ("cpu", "process CPU")):
        bare = statistics.median(per_turn("bare", what, r) for r in rounds)
        ours = statistics.median(per_turn("ours", what, r) for r in rounds)
        differences = [per_turn("ours", what, r) - per_turn("bare", what, r) for r in rounds]
        overhead = statistics.median(differences)
        low, _, high = statistics.quantiles(differences, n=4)
        in_memory = statistics.median(per_turn("mem", what, r) - per_turn("bare", what, r) for r in rounds)
        fixed = statistics.median(once("ours", what, r) for r in rounds)
        # The least disturbed rounds: each kind's lowest slope (as timeit's best of).
        best_bare = min(per_turn("bare", what, r) for r in rounds)
        best_ours = min(per_turn("ours", what, r) for r in rounds)
        print(f"per model turn, {label}: the SDK bare {bare * 1000:.1f} ms, through agenter {ours * 1000:.1f} ms, "
              f"ratio {ours / bare:.2f}; agenter's overhead {overhead * 1000:.2f} ms (quartiles {low * 1000:.2f}.."
              f"{high * 1000:.2f}); best rounds: bare {best_bare * 1000:.1f} ms, agenter {best_ours * 1000:.1f} ms, "
              f"ratio {best_ours / best_bare:.2f}; with an in-memory SDK session instead of agenter's store "
              f"{in_memory * 1000:.2f} ms")
        print(f"once per run, {label}: agenter {fixed * 1000:.1f} ms beyond the bare run (connect: the sandbox "
              f"probe, the client's warm-up; the workspace's snapshots; the result)")
        figures.update({f"bare_per_turn_{what}_s": bare, f"agenter_per_turn_{what}_s": ours,
                        f"ratio_{what}": ours / bare, f"overhead_per_turn_{what}_s": overhead,
                        f"best_ratio_{what}": best_ours / best_bare,
                        f"overhead_in_memory_session_{what}_s": in_memory, f"once_per_run_{what}_s": fixed})
    return figures


def main() -> dict[str, float]:
    figures = import_costs()
    figures.update(asyncio.run(turn_costs()))
    return figures


if __name__ == "__main__":
    main()
