"""SDK overhead per model turn: agenter against a bare `anthropic` client loop doing the same
job, both against the scripted server (goal: at most 1 ms per turn).

The job: each model response streams a text and a `write_file` tool call; the caller writes the
file, answers with a tool_result and sends the grown history back, until the model says it is
done. The bare loop is what a hand-written agent does at its leanest: the same
`messages.create(stream=True)` call with the same system prompt and tool definitions as agenter
sends (copied from agenter's own first request), the raw stream accumulated into content blocks,
the assistant message and the tool_result appended to one growing `messages` list, the file
written by itself. agenter runs it through the facade (AutonomousCodingAgent, anthropic-sdk
backend): events, budgets, change detection, the file tool's checks, the transcript-free path;
validators off, and once more with the default validators (listed apart).

Per-turn overhead is a slope: each side runs a short and a long conversation, and the difference
of the differences divided by the extra turns is what each further turn costs beyond the bare
loop (each round's own, then the median of the rounds); what a run costs once (connect, the
first walk of the workspace, validators, result) is the intercept, printed apart. Figures come
in wall time, the event loop thread's CPU time and the process's CPU time: on a shared machine
the CPU figures are the steadier.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agenter import AutonomousCodingAgent, CodingRequest
from agenter.testing import ScriptedModelServer, reply, text

SHORT, LONG = 4, 24
ROUNDS = 15
MODEL = "claude-sonnet-4-5"


#: The scripted model, in a process of its own (a real API is not in the client's process, and a
#: server thread would take the GIL from the loop being measured). Stateless: the prompt says
#: how many responses the conversation has ("go 24"), the assistant messages so far which one
#: this is, so one server serves every run.
SERVER = r"""
import re, sys, json
from agenter.testing import ScriptedModelServer, reply, text, tool_call
from agenter.testing import server as _server

_server._RequestHandler.disable_nagle_algorithm = True

def handler(request):
    turns = int(re.search(r"go (\d+)", json.dumps(request.messages[0])).group(1))
    i = sum(1 for m in request.messages if m.get("role") == "assistant")
    if i < turns - 1:
        return reply(text(f"step {i}: writing m{i % 3}.py"),
                     tool_call("write_file", {"path": f"m{i % 3}.py", "content": f"x = {i}\n" * 20}))
    return reply(text("done"))

with ScriptedModelServer(handler=handler) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


class Server:
    """The scripted model server in a subprocess, for as long as the block runs."""

    def __enter__(self) -> str:
        import subprocess

        self.process = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        import subprocess

        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def bare_loop(base_url: str, cwd: Path, params: dict[str, Any], turns: int) -> int:
    """The same job with the anthropic client alone; returns the number of model responses."""
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=base_url, api_key="sk-bench", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": f"go {turns}"}]}]
    responses = 0
    try:
        while True:
            stream: Any = await client.messages.create(**params, messages=messages, stream=True)  # type: ignore[arg-type]
            blocks: list[dict[str, Any]] = []
            partial: dict[int, str] = {}
            async with stream:
                async for event in stream:
                    if event.type == "content_block_start":
                        blocks.append(event.content_block.model_dump(exclude_none=True))
                    elif event.type == "content_block_delta":
                        if event.delta.type == "text_delta":
                            blocks[event.index]["text"] += event.delta.text
                        elif event.delta.type == "input_json_delta":
                            partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
            responses += 1
            for index, raw in partial.items():
                blocks[index]["input"] = json.loads(raw) if raw else {}
            messages.append({"role": "assistant", "content": blocks})
            results = []
            for block in blocks:
                if block["type"] == "tool_use" and block["name"] == "write_file":
                    path = cwd / block["input"]["path"]
                    path.write_text(block["input"]["content"])
                    results.append({"type": "tool_result", "tool_use_id": block["id"],
                                    "content": f"Wrote {block['input']['path']}"})
            if not results:
                return responses
            messages.append({"role": "user", "content": results})
    finally:
        await client.close()


class Clock:
    """Wall time, the event loop thread's CPU time and the process's CPU time of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.loop_cpu, self.cpu = time.perf_counter(), time.thread_time(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.loop_cpu = time.thread_time() - self.loop_cpu
        self.cpu = time.process_time() - self.cpu


async def timed_bare(base_url: str, turns: int, params: dict[str, Any]) -> Clock:
    with tempfile.TemporaryDirectory() as cwd:
        with Clock() as clock:
            responses = await bare_loop(base_url, Path(cwd), params, turns)
        assert responses == turns and (Path(cwd) / "m0.py").is_file()
    return clock


async def timed_agenter(base_url: str, turns: int, validators: list[Any] | None) -> Clock:
    with tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=base_url, api_key="sk-bench",
                                      model=MODEL, validators=validators)
        with Clock() as clock:
            result = await agent.execute(CodingRequest(prompt=f"go {turns}", cwd=Path(cwd)))
        assert result.status.value == "completed", result
        assert "m0.py" in result.files and result.summary == "done"
    return clock


async def agenter_params() -> dict[str, Any]:
    """What agenter sends besides the messages: model, max_tokens, system and tools."""
    with ScriptedModelServer([reply(text("done"))]) as server, tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-bench",
                                      model=MODEL, validators=[])
        await agent.execute(CodingRequest(prompt="go 1", cwd=Path(cwd), require_changes=False))
        body = server.model_requests[0].body
    return {key: body[key] for key in ("model", "max_tokens", "system", "tools") if key in body}


async def main_async(profile: bool = False) -> dict[str, float]:
    params = await agenter_params()
    print(f"both send {len(params.get('tools') or [])} tool definitions and the same system prompt; "
          f"{SHORT} and {LONG} model responses, median of {ROUNDS} rounds; the scripted server in its own process")
    samples: dict[str, list[Clock]] = {k: [] for k in ("bare_s", "bare_l", "ours_s", "ours_l", "val_s", "val_l")}
    with Server() as base_url:
        await timed_bare(base_url, SHORT, params)  # warm-up: imports, first connections
        await timed_agenter(base_url, SHORT, [])
        for _ in range(ROUNDS):
            # Interleaved, so a noisy moment of a shared machine hits every kind alike.
            samples["bare_s"].append(await timed_bare(base_url, SHORT, params))
            samples["ours_s"].append(await timed_agenter(base_url, SHORT, []))
            samples["val_s"].append(await timed_agenter(base_url, SHORT, None))
            samples["bare_l"].append(await timed_bare(base_url, LONG, params))
            samples["ours_l"].append(await timed_agenter(base_url, LONG, []))
            samples["val_l"].append(await timed_agenter(base_url, LONG, None))
        if profile:
            profiler = cProfile.Profile(time.thread_time)  # CPU: waits for the GIL are not agenter's work
            profiler.enable()
            await timed_agenter(base_url, LONG, [])
            profiler.disable()
            stats = pstats.Stats(profiler)
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(r"agenter", 30)

    def per_turn(kind: str, what: str, round_: int) -> float:
        short, long = samples[f"{kind}_s"][round_], samples[f"{kind}_l"][round_]
        return (getattr(long, what) - getattr(short, what)) / (LONG - SHORT)

    figures: dict[str, float] = {}
    for what, label in (("wall", "wall time"), ("loop_cpu", "event loop thread's CPU"),
                        ("cpu", "process CPU, agenter's threads included")):
        # Each round's own difference (its runs were back to back), then the median of the
        # rounds: a shared machine's slow spells hit both sides of one round alike.
        bare = statistics.median(per_turn("bare", what, r) for r in range(ROUNDS))
        ours = statistics.median(per_turn("ours", what, r) for r in range(ROUNDS))
        overhead = statistics.median(per_turn("ours", what, r) - per_turn("bare", what, r) for r in range(ROUNDS))
        with_validators = statistics.median(per_turn("val", what, r) - per_turn("bare", what, r)
                                            for r in range(ROUNDS))
        spread = statistics.quantiles([per_turn("ours", what, r) - per_turn("bare", what, r) for r in range(ROUNDS)],
                                      n=4)
        print(f"per model turn, {label}: bare anthropic loop {bare * 1000:.2f} ms, agenter {ours * 1000:.2f} ms: "
              f"overhead {overhead * 1000:.2f} ms (quartiles {spread[0] * 1000:.2f}..{spread[2] * 1000:.2f}; goal "
              f"<= 1 ms), ratio {ours / bare:.2f}; with the default validators overhead {with_validators * 1000:.2f} ms")
        figures.update({f"overhead_per_turn_{what}_s": overhead, f"ratio_{what}": ours / bare,
                        f"bare_per_turn_{what}_s": bare, f"agenter_per_turn_{what}_s": ours,
                        f"overhead_with_validators_per_turn_{what}_s": with_validators})
    fixed = {k: statistics.median(c.wall for c in samples[f"{k}_s"]) - SHORT * statistics.median(
        per_turn(k, "wall", r) for r in range(ROUNDS)) for k in ("bare", "ours", "val")}
    print(f"once per run, wall: bare {fixed['bare'] * 1000:.1f} ms, agenter {fixed['ours'] * 1000:.1f} ms, with "
          f"validators {fixed['val'] * 1000:.1f} ms (client set-up; connect, first walk of the workspace, "
          f"validation, result)")
    whole = {k: statistics.median(c.wall for c in samples[k]) for k in ("bare_l", "ours_l")}
    print(f"whole {LONG}-turn run, wall: bare {whole['bare_l'] * 1000:.1f} ms, agenter {whole['ours_l'] * 1000:.1f} ms "
          f"(ratio {whole['ours_l'] / whole['bare_l']:.2f})")
    figures["overhead_per_turn_s"] = figures["overhead_per_turn_wall_s"]
    figures["ratio"] = figures["ratio_wall"]
    return figures


def main() -> dict[str, float]:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*deprecated.*")
    return asyncio.run(main_async("--profile" in sys.argv or os.environ.get("PROFILE") == "1"))


if __name__ == "__main__":
    main()
