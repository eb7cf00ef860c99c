"""The google-adk backend's cost: what choosing it adds to the imports, and its overhead per model
turn against Google ADK run bare on the same job, both against the scripted server (Gemini wire).

Imports, in fresh interpreters (private bytecode cache, warmed once, median of IMPORT_RUNS):
`import agenter` (it must not load the backend, ADK, google-genai or mcp), importing the
backend's module once the facade is loaded (what choosing `backend="google-adk"` adds), building
the agent (options, requirements, the sandbox probe), and importing what the backend imports at
connect, in a thread (its ADK runtime module: google.adk's agents, runners, sessions, models and
environment tools, google-genai).

The job: each model response streams a text and a `WriteFile` call; the tool writes the file,
and ADK sends the grown history back, until the model says it is done. The bare run is what an
ADK user writes at its leanest: `LlmAgent` (ADK's `Gemini` model on a google-genai client) with
ADK's `EnvironmentToolset` over its own `LocalEnvironment` in the same folder, a tool declared
like agenter's refusal tool, the same instruction as agenter sends (copied from agenter's first
request), `Runner.run_async` with SSE streaming and `InMemorySessionService`, the events
consumed. agenter runs it through the facade (validators off): the permission gate on every
call, the path checks, the events, change detection, and ADK's session kept in SQLite (the
default; a durable append per event); once more with `adk_session_db=":memory:"` (ADK's
in-memory service, as the bare run), to show what the database costs.

Per-turn overhead is a slope: each side runs a short and a long conversation; the difference of
the differences divided by the extra turns is what each further turn costs beyond the bare run
(each round's own, then the median of the rounds); what agenter costs once per run is the short
run's difference less the short run's turns at that slope. Figures in wall time and in the
process's CPU time (agenter's worker threads included; the scripted server is another process).
BENCH_ADK_ROUNDS sets the rounds.
"""

from __future__ import annotations

import asyncio
import os
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
#: Rounds of the six runs (bare, agenter, agenter in memory; short and long).
ROUNDS = int(os.environ.get("BENCH_ADK_ROUNDS", "11"))
#: Fresh interpreters per import figure (ADK's import, seconds each, gets fewer).
IMPORT_RUNS = 9
ADK_IMPORT_RUNS = 3
MODEL = "gemini-2.5-pro"
KEY = "AIza-bench-0123456789"
REPO = Path(__file__).resolve().parents[1]
#: Modules choosing the backend must not load (the backend imports them at connect).
HEAVY = ("google.adk", "google.genai", "mcp", "agenter.backends.agents.google_adk._runtime")

#: The scripted model in a process of its own (a server thread would take the GIL from the loop
#: being measured). Stateless: the prompt says how many responses the run has ("go 8"), the
#: function calls in the history which one this is.
SERVER = r"""
import json, re, sys
from agenter.testing import ScriptedModelServer, reply, text, tool_call
def handler(request):
    history = json.dumps(request.messages)
    turns = int(re.search(r"go (\d+)", history).group(1))
    i = history.count('"functionCall"')
    if i < turns - 1:
        return reply(text(f"step {i}: writing m{i % 3}.py"),
                     tool_call("WriteFile", {"path": f"m{i % 3}.py", "content": f"x = {i}\n" * 20}))
    return reply(text("done"))

with ScriptedModelServer(handler=handler) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


# ---------------------------------------------------------------------------------------------
# Imports


#: Run in a fresh interpreter: `setup` untimed, then `stmt` timed; prints its wall and CPU
#: seconds and which of HEAVY are loaded afterwards.


def import_costs() -> dict[str, float]:
    facade = "import agenter; agenter.AutonomousCodingAgent"
    build = (f"agenter.AutonomousCodingAgent(backend='google-adk', base_url='http://127.0.0.1:9', api_key={KEY!r}, "
             "validators=[])")
    with tempfile.TemporaryDirectory() as pycache:
        env = python_env(pycache, REPO)
        rows = [("import agenter", *measure_import("import agenter", "", env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("the facade (AutonomousCodingAgent)", *measure_import(facade, "", env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("+ the backend's module (choosing it)",
                 *measure_import("import agenter.backends.agents.google_adk", facade, env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("+ building the agent (that module, options, requirements)", *measure_import(build, facade, env, runs=IMPORT_RUNS, heavy=HEAVY)),
                ("+ the ADK runtime (at connect, in a thread)",
                 *measure_import("import agenter.backends.agents.google_adk._runtime", facade, env, runs=ADK_IMPORT_RUNS, heavy=HEAVY))]
    print(f"imports, fresh interpreters, median of {IMPORT_RUNS} ({ADK_IMPORT_RUNS} for ADK), wall / CPU:")
    for label, wall, cpu, loaded in rows:
        print(f"  {label:<58} {wall * 1000:8.1f} / {cpu * 1000:7.1f} ms   loaded afterwards: "
              f"{loaded or 'none of ' + ', '.join(HEAVY)}")
    for label, _, _, loaded in rows:
        assert label.startswith("+ the ADK") or not loaded, f"{label} loaded {loaded}"
    keys = ("import_agenter", "import_facade", "import_backend_module", "build_agent", "import_adk_runtime")
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
    """What agenter sends besides the contents: its instruction and tool definitions."""
    with ScriptedModelServer([reply(text("done"))]) as server, tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="google-adk", base_url=server.base_url, api_key=KEY, model=MODEL,
                                      validators=[], adk_session_db=":memory:")
        await agent.execute(CodingRequest(prompt="go 1", cwd=Path(cwd), require_changes=False))
        return server.model_requests[0].body


def instruction_of(body: dict[str, Any]) -> str:
    """agenter's static instruction: the system instruction up to ADK's environment instruction
    (which ADK appends in the bare run too)."""
    whole = "".join(part.get("text", "") for part in body["systemInstruction"]["parts"])
    return whole.partition("Your environment is at")[0].rstrip()


async def bare_run(base_url: str, cwd: Path, body: dict[str, Any], turns: int) -> int:
    """The same job with ADK alone; returns the number of model responses."""
    import httpx
    from google import genai
    from google.adk.agents import LlmAgent
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.environment import LocalEnvironment
    from google.adk.models import Gemini
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.environment import EnvironmentToolset
    from google.genai import types

    (refusal,) = [d for t in body["tools"] for d in t["functionDeclarations"] if d["name"] == "refuse_task"]

    class Refuse(BaseTool):
        def _get_declaration(self) -> types.FunctionDeclaration:
            return types.FunctionDeclaration(name=self.name, description=self.description,
                                             parameters_json_schema=refusal["parameters_json_schema"])

        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            return {"output": "refused"}

    http = httpx.AsyncClient()
    client = genai.Client(vertexai=False, api_key=KEY, http_options=types.HttpOptions(
        base_url=base_url, retry_options=types.HttpRetryOptions(attempts=1), httpx_async_client=http))
    agent = LlmAgent(name="bare", model=Gemini(model=MODEL, client=client), static_instruction=instruction_of(body),
                     tools=[EnvironmentToolset(environment=LocalEnvironment(working_dir=cwd)),
                            Refuse(name="refuse_task", description=refusal["description"])])
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name="bare", session_service=sessions)
    session = await sessions.create_session(app_name="bare", user_id="u")
    responses = 0
    message = types.Content(role="user", parts=[types.Part(text=f"go {turns}")])
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message,
                                        run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
        responses += bool(not event.partial and event.author == "bare" and event.finish_reason is not None)
    await runner.close()
    await http.aclose()
    return responses


async def timed_bare(base_url: str, turns: int, body: dict[str, Any]) -> Clock:
    with tempfile.TemporaryDirectory() as cwd:
        with Clock() as clock:
            responses = await bare_run(base_url, Path(cwd), body, turns)
        assert responses == turns and (Path(cwd) / "m0.py").is_file(), responses
    return clock


async def timed_agenter(base_url: str, turns: int, database: str) -> Clock:
    with tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="google-adk", base_url=base_url, api_key=KEY, model=MODEL,
                                      validators=[], adk_session_db=database)
        with Clock() as clock:
            result = await agent.execute(CodingRequest(prompt=f"go {turns}", cwd=Path(cwd)))
        assert result.status.value == "completed", result
        assert "m0.py" in result.files and result.summary == "done", result
    return clock


async def turn_costs() -> dict[str, float]:
    samples: dict[str, list[Clock]] = {k: [] for k in ("bare_s", "bare_l", "ours_s", "ours_l", "mem_s", "mem_l")}
    body = await agenter_request()
    with Server() as base_url, tempfile.TemporaryDirectory() as cache:
        database = str(Path(cache) / "sessions.db")
        print(f"both declare the same {sum(len(t['functionDeclarations']) for t in body['tools'])} tools and send the "
              f"same instruction; {SHORT} and {LONG} model responses, median of {ROUNDS} rounds; the scripted server "
              "in its own process")
        await timed_bare(base_url, SHORT, body)  # warm-up: imports, first connections
        await timed_agenter(base_url, SHORT, database)
        await timed_agenter(base_url, SHORT, ":memory:")
        for _ in range(ROUNDS):
            # Interleaved, so a noisy moment of a shared machine hits every kind alike.
            samples["bare_s"].append(await timed_bare(base_url, SHORT, body))
            samples["ours_s"].append(await timed_agenter(base_url, SHORT, database))
            samples["mem_s"].append(await timed_agenter(base_url, SHORT, ":memory:"))
            samples["bare_l"].append(await timed_bare(base_url, LONG, body))
            samples["ours_l"].append(await timed_agenter(base_url, LONG, database))
            samples["mem_l"].append(await timed_agenter(base_url, LONG, ":memory:"))

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
        best_bare = min(per_turn("bare", what, r) for r in rounds)
        best_ours = min(per_turn("ours", what, r) for r in rounds)
        print(f"per model turn, {label}: ADK bare {bare * 1000:.1f} ms, through agenter {ours * 1000:.1f} ms, "
              f"ratio {ours / bare:.2f}; agenter's overhead {overhead * 1000:.2f} ms (quartiles {low * 1000:.2f}.."
              f"{high * 1000:.2f}); best rounds: bare {best_bare * 1000:.1f} ms, agenter {best_ours * 1000:.1f} ms, "
              f"ratio {best_ours / best_bare:.2f}; with ADK's in-memory session service instead of SQLite "
              f"{in_memory * 1000:.2f} ms")
        print(f"once per run, {label}: agenter {fixed * 1000:.1f} ms beyond the bare run (connect: the gate's "
              "parser, the sandbox probe, the client; the workspace's snapshots; the result)")
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
