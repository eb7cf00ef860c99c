"""The cost of one backend message on its way to the caller: the session's hand-off from the
backend's task, the event (vocabulary, redaction, the pydantic model), the budget check, and
the stream to the caller. Measured with FunctionBackend, so no HTTP or model is in the figure:
this is the part of the per-turn overhead (bench_turn_overhead) that grows with the number of
messages a model response makes (six for a response with a text and one file write: a text
delta, the permission decision, the tool call, the usage update, the tool result, the edit).

Prints the event loop thread's CPU per message, median of rounds, for execute() (no consumer)
and stream_execute() (every event taken by the caller).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MESSAGES = 3000
ROUNDS = 9


def _messages() -> list[Any]:
    from agenter.backends.base import BackendMessage, MessageType

    one_response = [
        BackendMessage(MessageType.TEXT_DELTA, "step 1: writing m1.py"),
        BackendMessage(MessageType.PERMISSION, "allowed in bypass mode", tool_name="write_file",
                       details={"behavior": "allow", "reason": "mode"}),
        BackendMessage(MessageType.TOOL_CALL, tool_name="write_file", tool_call_id="toolu_1",
                       tool_input={"path": "m1.py", "content": "x = 1\n" * 20}),
        BackendMessage(MessageType.USAGE),
        BackendMessage(MessageType.TOOL_RESULT, "Wrote 120 characters to m1.py", tool_name="write_file",
                       tool_call_id="toolu_1"),
        BackendMessage(MessageType.FILE_EDIT, tool_name="write_file", details={"path": "m1.py", "lines": 20}),
    ]
    return one_response * (MESSAGES // len(one_response))


async def _run(stream: bool, messages: list[Any]) -> float:
    from agenter import AutonomousCodingAgent, CodingRequest
    from agenter.testing import FunctionBackend, TurnContext

    async def turn(ctx: TurnContext) -> Any:
        for message in messages:
            yield message
        yield ctx.write("done.py", "x = 1\n")
        yield "done"

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, validators=[])
    with tempfile.TemporaryDirectory() as cwd:
        request = CodingRequest(prompt="go", cwd=Path(cwd))
        started = time.thread_time()
        if stream:
            async for _ in agent.stream_execute(request):
                pass
        else:
            result = await agent.execute(request)
            assert result.status.value == "completed", result
        return (time.thread_time() - started) / len(messages)


async def main_async() -> dict[str, float]:
    messages = _messages()
    await _run(False, messages[:60])  # warm-up: imports, first models
    figures: dict[str, float] = {}
    for stream in (False, True):
        samples = [await _run(stream, messages) for _ in range(ROUNDS)]
        name = "stream_execute" if stream else "execute"
        figures[f"per_message_{name}_s"] = statistics.median(samples)
        print(f"{name}: {statistics.median(samples) * 1e6:.1f} us of the event loop's CPU per backend message "
              f"(median of {ROUNDS} runs of {len(messages)} messages; quartiles "
              f"{statistics.quantiles(samples, n=4)[0] * 1e6:.1f}..{statistics.quantiles(samples, n=4)[2] * 1e6:.1f})")
    return figures


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
    sys.exit(0)
