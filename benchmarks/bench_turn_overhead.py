"""SDK overhead per model turn against the scripted server (goal <= 5 ms).

The same N streamed model turns are made twice: once by the bare `anthropic` client, once by
agenter (facade → session → anthropic-sdk backend, with its file tool running, change detection
and the syntax validator). The difference divided by N is what agenter adds per turn.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agenter import AutonomousCodingAgent, CodingRequest
from agenter.testing import ScriptedModelServer, reply, text, tool_call

TURNS = 20
ROUNDS = 3


def script() -> list:
    items = [reply(text(f"step {i}"), tool_call("write_file", {"path": f"m{i % 3}.py", "content": f"x = {i}\n"}))
             for i in range(TURNS - 1)]
    return items + [reply(text("done"))]


async def bare_client(base_url: str) -> float:
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=base_url, api_key="sk-bench", max_retries=0)
    messages = [{"role": "user", "content": "go"}]
    started = time.perf_counter()
    for _ in range(TURNS):
        async with client.messages.stream(model="claude-sonnet-5-5", max_tokens=1024,
                                          messages=messages) as stream:
            await stream.get_final_message()
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


async def agenter_run(base_url: str) -> float:
    agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=base_url, api_key="sk-bench")
    with tempfile.TemporaryDirectory() as cwd:
        started = time.perf_counter()
        result = await agent.execute(CodingRequest(prompt="go", cwd=Path(cwd)))
        elapsed = time.perf_counter() - started
    assert result.status.value == "completed", result
    return elapsed


async def main_async() -> dict[str, float]:
    bare, ours = [], []
    for _ in range(ROUNDS):
        with ScriptedModelServer(script()) as server:
            bare.append(await bare_client(server.base_url))
        with ScriptedModelServer(script()) as server:
            ours.append(await agenter_run(server.base_url))
            assert len(server.model_requests) == TURNS
    b, o = statistics.median(bare), statistics.median(ours)
    per_turn = (o - b) / TURNS
    print(f"{TURNS} streamed turns: bare anthropic client {b * 1000:.1f} ms, agenter {o * 1000:.1f} ms "
          f"(ratio {o / b:.2f})")
    print(f"agenter overhead per turn, session set-up and validation included: "
          f"{per_turn * 1000:.2f} ms (goal <= 5 ms)")
    return {"overhead_per_turn_s": per_turn, "ratio": o / b}


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
