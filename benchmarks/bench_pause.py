"""Pause-to-resume latency (docs/approvals.md): from `agent.approve(handle)` to the continued
run's first model request, for the file store and SQLite.

A run of the real anthropic-sdk backend against the scripted model server (in this process)
writes a file the policy asks about, with `on_ask="pause"` and nobody to ask: it pauses. A
fresh agent (what another process builds; its imports are warm here, see bench_cold_start for a
new process's) then approves the handle, and the time from that call to the scripted server
receiving the continued run's request is the latency: finding and claiming the pause record in
the store, building the session, connecting the backend (loading the conversation from the same
store, opening the client), running the approved call, and sending the request. Beside it, the
store's own part: loading and claiming a record of the same size in the same store.

Median, min and max of ROUNDS rounds per store; the store's folder is a temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 7
POLICY = {"rules": ["ask edit:secret.txt"], "mode": "bypass"}


def _script() -> list[Any]:
    from agenter.testing import reply, text, tool_call

    return [reply(tool_call("write_file", {"path": "secret.txt", "content": "s\n"})), reply(text("Done."))]


async def _round(server: Any, store: str, repo: Path) -> tuple[float, float]:
    """(pause-to-resume latency, the store's part) of one paused run approved."""
    from agenter import AutonomousCodingAgent, CodingStatus
    from agenter.store import claim_pause, load_pause, open_store

    def agent() -> AutonomousCodingAgent:
        return AutonomousCodingAgent("anthropic-sdk", base_url=server.base_url, api_key="sk-bench",
                                     permissions=POLICY, on_ask="pause", conversation_store=store, validators=[])

    server.add(*_script())
    (repo / "secret.txt").unlink(missing_ok=True)
    paused = await agent().execute("Write secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle, paused.error
    seen = len(server.model_requests)
    began = time.time()
    resumed = await agent().approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    latency = server.model_requests[seen].time - began
    # The store's part, on a record of the same size: load it, claim it (a second pause's record).
    server.add(*_script())
    again = await agent().execute("Write secret.txt again", cwd=repo)
    assert again.resume_handle is not None
    kept = open_store(store)
    started = time.perf_counter()
    claim_pause(kept, load_pause(kept, again.resume_handle))
    return latency, time.perf_counter() - started


async def main_async() -> dict[str, float]:
    from agenter.testing import ScriptedModelServer

    figures: dict[str, float] = {}
    print(f"pause-to-resume latency: approve() until the continued run's first model request; anthropic-sdk "
          f"against the scripted server in this process; median (min-max) of {ROUNDS} rounds")
    with tempfile.TemporaryDirectory(prefix="agenter-bench-pause-") as folder, ScriptedModelServer([]) as server:
        root = Path(folder)
        os.environ["XDG_CACHE_HOME"] = str(root / "cache")
        for label, store in (("file store", str(root / "conversations")),
                             ("SQLite", f"sqlite:///{root / 'runs.db'}")):
            repo = root / f"repo-{label.split()[0]}"
            repo.mkdir()
            await _round(server, store, repo)  # warm-up: imports, the price table, first connections
            samples = [await _round(server, store, repo) for _ in range(ROUNDS)]
            latencies = sorted(sample[0] * 1000 for sample in samples)
            own = sorted(sample[1] * 1000 for sample in samples)
            median = statistics.median(latencies)
            print(f"  {label:<10} {median:7.1f} ms ({latencies[0]:.1f}-{latencies[-1]:.1f}); the store's part "
                  f"(load and claim the record) {statistics.median(own):.2f} ms")
            figures[f"{label}_ms"] = median
    return figures


def main() -> dict[str, float]:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
