"""Share of input tokens marked cacheable in a 10-turn anthropic-sdk session (goal >= 80 %).

For every model request the server logged, the part of the prompt up to the last
`cache_control` breakpoint (tools → system → messages, the order the API caches in) is
cacheable; the share is cacheable characters over all prompt characters, summed over turns.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from agenter import AutonomousCodingAgent, CodingRequest
from agenter.testing import ScriptedModelServer, reply, text, tool_call

TURNS = 10


def blocks(body: dict) -> list:
    """The prompt as an ordered list of blocks, in cache-prefix order."""
    out = list(body.get("tools") or [])
    system = body.get("system")
    out += [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    for message in body.get("messages", []):
        content = message["content"]
        out += [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return out


def cacheable_share(bodies: list[dict]) -> float:
    cacheable = total = 0
    for body in bodies:
        sizes = [len(json.dumps(b)) for b in blocks(body)]
        marks = [i for i, b in enumerate(blocks(body)) if isinstance(b, dict) and b.get("cache_control")]
        total += sum(sizes)
        if marks:
            cacheable += sum(sizes[: marks[-1] + 1])
    return cacheable / total if total else 0.0


async def main_async() -> dict[str, float]:
    script = [reply(text(f"step {i}"), tool_call("read_file", {"path": "README.md"}))
              for i in range(TURNS - 1)] + [reply(text("done"))]
    with tempfile.TemporaryDirectory() as cwd, ScriptedModelServer(script) as server:
        (Path(cwd) / "README.md").write_text("# project\n" + "Some documentation line.\n" * 40)
        agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-bench")
        result = await agent.execute(CodingRequest(prompt="Summarise the README", cwd=Path(cwd),
                                                   require_changes=False))
        bodies = [r.body for r in server.model_requests]
    share = cacheable_share(bodies)
    print(f"{len(bodies)} model requests; input marked cacheable: {share * 100:.1f} % (goal >= 80 %)")
    if result.cache_read_tokens or result.cache_write_tokens:
        reported = (result.cache_read_tokens + result.cache_write_tokens) / max(
            1, result.input_tokens + result.cache_read_tokens + result.cache_write_tokens)
        print(f"server-reported cache reads+writes over all input tokens: {reported * 100:.1f} %")
    return {"cacheable_share": share}


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
