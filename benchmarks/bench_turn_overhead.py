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
loop; what a run costs once (connect, the first walk of the workspace, validators, result) is
the intercept, printed apart.
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
from agenter.testing import ScriptedModelServer, reply, text, tool_call

SHORT, LONG = 4, 24
ROUNDS = 9
MODEL = "claude-sonnet-4-5"


def script(turns: int) -> list[Any]:
    items = [reply(text(f"step {i}: writing m{i % 3}.py"),
                   tool_call("write_file", {"path": f"m{i % 3}.py", "content": f"x = {i}\n" * 20}))
             for i in range(turns - 1)]
    return items + [reply(text("done"))]


async def bare_loop(base_url: str, cwd: Path, params: dict[str, Any]) -> int:
    """The same job with the anthropic client alone; returns the number of model responses."""
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=base_url, api_key="sk-bench", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
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
    """Wall time, the event loop thread's CPU time and the process's CPU time of a block (the
    scripted server's thread included in the last: the same work on both sides)."""

    def __enter__(self) -> Clock:
        self.wall, self.loop_cpu, self.cpu = time.perf_counter(), time.thread_time(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.loop_cpu = time.thread_time() - self.loop_cpu
        self.cpu = time.process_time() - self.cpu


async def timed_bare(turns: int, params: dict[str, Any]) -> Clock:
    with ScriptedModelServer(script(turns)) as server, tempfile.TemporaryDirectory() as cwd:
        with Clock() as clock:
            responses = await bare_loop(server.base_url, Path(cwd), params)
        assert responses == turns and (Path(cwd) / "m0.py").is_file()
    return clock


async def timed_agenter(turns: int, validators: list[Any] | None) -> Clock:
    with ScriptedModelServer(script(turns)) as server, tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-bench",
                                      model=MODEL, validators=validators)
        with Clock() as clock:
            result = await agent.execute(CodingRequest(prompt="go", cwd=Path(cwd)))
        assert result.status.value == "completed", result
        assert len(server.model_requests) == turns and "m0.py" in result.files
    return clock


async def agenter_params() -> dict[str, Any]:
    """What agenter sends besides the messages: model, max_tokens, system and tools."""
    with ScriptedModelServer(script(2)) as server, tempfile.TemporaryDirectory() as cwd:
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-bench",
                                      model=MODEL, validators=[])
        await agent.execute(CodingRequest(prompt="go", cwd=Path(cwd)))
        body = server.model_requests[0].body
    return {key: body[key] for key in ("model", "max_tokens", "system", "tools") if key in body}


def slope(short: list[float], long: list[float]) -> tuple[float, float]:
    """Per extra turn and the intercept (the run's fixed cost), from the fastest of the rounds:
    on a shared machine noise only ever adds time."""
    s, l_ = min(short), min(long)
    per_turn = (l_ - s) / (LONG - SHORT)
    return per_turn, s - per_turn * SHORT


def without_nagle() -> None:
    """The scripted server writes each SSE event as its own small chunk; with Nagle's algorithm
    on, a response then waits for the client's delayed ACK (about 40 ms a turn, on both sides
    alike), which would bury a 1 ms difference in noise. A real API sends with TCP_NODELAY."""
    from agenter.testing import server

    server._RequestHandler.disable_nagle_algorithm = True


async def main_async(profile: bool = False) -> dict[str, float]:
    without_nagle()
    params = await agenter_params()
    print(f"both send {len(params.get('tools') or [])} tool definitions and the same system prompt; "
          f"{SHORT} and {LONG} model responses, fastest of {ROUNDS} rounds")
    samples: dict[str, list[Clock]] = {k: [] for k in ("bare_s", "bare_l", "ours_s", "ours_l", "val_s", "val_l")}
    await timed_bare(SHORT, params)  # warm-up: imports, first connections
    await timed_agenter(SHORT, [])
    for _ in range(ROUNDS):
        # Interleaved, so a noisy moment of a shared machine hits every kind alike.
        samples["bare_s"].append(await timed_bare(SHORT, params))
        samples["ours_s"].append(await timed_agenter(SHORT, []))
        samples["val_s"].append(await timed_agenter(SHORT, None))
        samples["bare_l"].append(await timed_bare(LONG, params))
        samples["ours_l"].append(await timed_agenter(LONG, []))
        samples["val_l"].append(await timed_agenter(LONG, None))

    def fit(kind: str, what: str) -> tuple[float, float]:
        return slope([getattr(c, what) for c in samples[f"{kind}_s"]], [getattr(c, what) for c in samples[f"{kind}_l"]])

    figures: dict[str, float] = {}
    for what, label in (("wall", "wall time"), ("loop_cpu", "event loop thread's CPU"),
                        ("cpu", "process CPU, server thread included")):
        (bare, bare_fixed), (ours, ours_fixed), (val, val_fixed) = fit("bare", what), fit("ours", what), fit("val", what)
        print(f"per model turn, {label}: bare anthropic loop {bare * 1000:.2f} ms, agenter {ours * 1000:.2f} ms: "
              f"overhead {(ours - bare) * 1000:.2f} ms (goal <= 1 ms), ratio {ours / bare:.2f}; with the default "
              f"validators {val * 1000:.2f} ms (overhead {(val - bare) * 1000:.2f} ms)")
        print(f"  once per run: bare {bare_fixed * 1000:.1f} ms, agenter {ours_fixed * 1000:.1f} ms, with validators "
              f"{val_fixed * 1000:.1f} ms (connect, first walk of the workspace, validation, result)")
        figures.update({f"overhead_per_turn_{what}_s": ours - bare, f"ratio_{what}": ours / bare,
                        f"bare_per_turn_{what}_s": bare, f"agenter_per_turn_{what}_s": ours,
                        f"agenter_with_validators_per_turn_{what}_s": val})
    whole = {k: statistics.median(c.wall for c in samples[k]) for k in ("bare_l", "ours_l")}
    print(f"whole {LONG}-turn run, wall: bare {whole['bare_l'] * 1000:.1f} ms, agenter {whole['ours_l'] * 1000:.1f} ms "
          f"(ratio {whole['ours_l'] / whole['bare_l']:.2f})")
    figures["overhead_per_turn_s"] = figures["overhead_per_turn_wall_s"]
    figures["ratio"] = figures["ratio_wall"]
    if profile:
        profiler = cProfile.Profile(time.thread_time)  # CPU: waits for the GIL are not agenter's work
        profiler.enable()
        await timed_agenter(LONG, [])
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(r"agenter", 30)
    return figures


def main() -> dict[str, float]:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*deprecated.*")
    return asyncio.run(main_async("--profile" in sys.argv or os.environ.get("PROFILE") == "1"))


if __name__ == "__main__":
    main()
