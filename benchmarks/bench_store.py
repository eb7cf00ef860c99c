"""The conversation store's cost per turn (goal: <= 2 % of a 20-turn session).

A 20-turn session of a realistic size is written the way the harness writes it: the task first
(a save), then before each model call the turn's new messages appended (the assistant's text
and tool call with ~1.5 KB of code, the tool result of ~4 KB), the last user message written
again each time as if merged into (the harness's worst case). The conversation reaches ~120 KB.
Each append's wall time is measured (scrubbing secrets, JSON, the lock, the write, fdatasync),
and the session's total divided by its turns is the cost per turn. Beside it: the same with
`durable=False` (no syncs), and a store that saves the whole conversation every turn (what
`append` avoids), plus the one load a resume does.

The share is of a model turn taken as a conservative 1 s (a real model answering a tool turn
with a growing context takes seconds; the figure is what the goal means). For scale, the share
of a scripted turn is printed too: the 20-turn anthropic-sdk session of bench_transcript against
the scripted server, no model at all, agenter's whole turn only — a floor no real run reaches.

The store's folder is a temporary directory (on this machine /tmp is on the same disk as ~/.cache,
where the store goes by default): fsync costs what that disk costs.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agenter.host.redact import Redactor
from agenter.store import FileConversationStore

TURNS = 20
SESSIONS = 12
#: The conservative model turn the share is taken of.
MODEL_TURN_SECONDS = 1.0

CODE = "".join(f"def helper_{i}(value):\n    # normalise the input (é, ü)\n    return value * {i} + 1\n\n"
               for i in range(40))


def _assistant(turn: int) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "text", "text": f"Turn {turn}: I will update the module and run the tests. " * 5},
        {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": "write_file",
         "input": {"path": f"src/module_{turn}.py", "content": CODE[: 1500 + turn]}}]}


def _results(turn: int) -> dict[str, Any]:
    output = (f"===== test session starts =====\ncollected {turn + 3} items\n" + CODE)[: 4000 + turn * 10]
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{turn:04d}", "content": output}]}


def _task() -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "Refactor the helpers and keep the tests green. " * 30}]}


METADATA = {"backend": "anthropic-sdk", "model": "claude-sonnet-4-5", "system_sha256": "ab" * 32,
            "tools": ["read_file", "write_file", "edit_file", "bash", "glob", "grep"]}


def one_session(store: FileConversationStore, session_id: str, whole: bool) -> tuple[float, list[float], int]:
    """(seconds the store took in all, each turn's seconds, bytes of the conversation)."""
    conversation = [_task()]
    started = time.perf_counter()
    revision = store.save(session_id, conversation, METADATA)
    first = time.perf_counter() - started
    turns = []
    for turn in range(1, TURNS + 1):
        start = len(conversation) - 1  # the last user message written again: the worst case
        conversation += [_assistant(turn), _results(turn)]
        began = time.perf_counter()
        if whole:
            revision = store.save(session_id, conversation, METADATA, revision=revision)
        else:
            revision = store.append(session_id, conversation[start:], at=start, revision=revision)
        turns.append(time.perf_counter() - began)
    return first + sum(turns), turns, len(json.dumps(conversation, ensure_ascii=False).encode())


def measure(label: str, durable: bool, whole: bool, folder: Path) -> dict[str, float]:
    store = FileConversationStore(folder / label, redact=Redactor(extra=["sk-bench-not-a-real-key-1234"]),
                                  durable=durable)
    one_session(store, "warm-up", whole)
    totals, turns = [], []
    for index in range(SESSIONS):
        total, each, size = one_session(store, f"s{index}", whole)
        totals.append(total)
        turns += each
    per_turn = statistics.median(totals) / TURNS
    file_kb = (store.path("s0").stat().st_size) / 1024
    began = time.perf_counter()
    loaded = store.load("s0")
    load_ms = (time.perf_counter() - began) * 1000
    assert loaded is not None and len(loaded.messages) == 1 + 2 * TURNS
    turns.sort()
    print(f"{label:<28} {per_turn * 1000:6.2f} ms per turn (one turn's median {statistics.median(turns) * 1000:.2f}, "
          f"p90 {turns[int(len(turns) * 0.9)] * 1000:.2f} ms) = {per_turn / MODEL_TURN_SECONDS * 100:.2f} % of a "
          f"{MODEL_TURN_SECONDS:.0f} s model turn; file {file_kb:.0f} KB, load {load_ms:.1f} ms")
    return {"per_turn": per_turn, "load": load_ms / 1000, "size": size}


def scripted_turn_seconds() -> float | None:
    """The median time of one turn of bench_transcript's scripted 20-turn session (no model)."""
    try:
        from bench_transcript import TURNS as SCRIPTED_TURNS
        from bench_transcript import one_run
    except ImportError:
        return None

    async def runs() -> list[float]:
        await one_run(None)  # warm up
        return [(await one_run(None))[0] for _ in range(3)]

    return statistics.median(asyncio.run(runs())) / SCRIPTED_TURNS


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="agenter-bench-store-") as tmp:
        folder = Path(tmp)
        print(f"{TURNS}-turn session, {SESSIONS} sessions each, store in {folder}")
        durable = measure("append, durable (default)", True, False, folder)
        fast = measure("append, durable=False", False, False, folder)
        whole = measure("save whole every turn", True, True, folder)
    print(f"conversation after {TURNS} turns: {durable['size'] / 1024:.0f} KB; a resume loads it once "
          f"({durable['load'] * 1000:.1f} ms)")
    scripted = scripted_turn_seconds()
    if scripted is not None:
        print(f"for scale, a scripted turn (agenter's own work, no model; bench_transcript's session): "
              f"{scripted * 1000:.1f} ms; the default store is {durable['per_turn'] / scripted * 100:.0f} % of it, "
              f"durable=False {fast['per_turn'] / scripted * 100:.1f} %")
    share = durable["per_turn"] / MODEL_TURN_SECONDS
    print(f"store share of a 20-turn session: {share * 100:.2f} % with {MODEL_TURN_SECONDS:.0f} s model turns "
          "(goal <= 2 %)")
    figures = {"store_per_turn_s": durable["per_turn"], "store_share": share,
               "store_per_turn_not_durable_s": fast["per_turn"], "store_per_turn_whole_save_s": whole["per_turn"]}
    if scripted is not None:
        figures["scripted_turn_s"] = scripted
    return figures


if __name__ == "__main__":
    main()
