"""`import agenter` time (goal <= 20 ms), measured in fresh interpreters against a bare start-up."""

from __future__ import annotations

import statistics
import subprocess
import sys

RUNS = 7
SNIPPET = "import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"


def measure(stmt: str) -> float:
    times = []
    for _ in range(RUNS):
        out = subprocess.run([sys.executable, "-c", SNIPPET.format(stmt=stmt)],
                             capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def main() -> dict[str, float]:
    agenter = measure("import agenter")
    facade = measure("import agenter; agenter.AutonomousCodingAgent")
    print(f"import agenter:                         {agenter * 1000:7.1f} ms (goal <= 20 ms)")
    print(f"import agenter + AutonomousCodingAgent: {facade * 1000:7.1f} ms (pydantic, validators)")
    heavy = subprocess.run([sys.executable, "-c",
                            "import sys, agenter; agenter.AutonomousCodingAgent; "
                            "print(sorted(m for m in ('anthropic','claude_agent_sdk','acp','openhands','langgraph','pydantic_ai','mcp','rich') if m in sys.modules))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"heavy packages loaded by the facade:    {heavy}")
    return {"import_agenter_s": agenter, "import_facade_s": facade}


if __name__ == "__main__":
    main()
