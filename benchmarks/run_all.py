"""Print every benchmark figure (`make bench`). Figures, not pass/fail: machines are noisy."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

BENCHMARKS = ("bench_import", "bench_turn_overhead", "bench_change_detection", "bench_cache_share",
              "bench_patch", "bench_transcript", "bench_store", "bench_pause", "bench_planner", "bench_batch", "bench_batch_pause", "bench_cli_backends", "bench_cold_start",
              "bench_loop_stall", "bench_event_path", "bench_shell_sandbox", "bench_openai_agents",
              "bench_google_adk")

# `make bench NAMES=bench_patch,bench_import` runs a subset.
only = [n for n in sys.argv[1:] if n]
for name in BENCHMARKS:
    if only and name not in only:
        continue
    if not (Path(__file__).parent / f"{name}.py").is_file():
        continue
    print(f"== {name}", flush=True)
    importlib.import_module(name).main()
