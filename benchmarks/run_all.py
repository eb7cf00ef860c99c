"""Print every benchmark figure (`make bench`). Figures, not pass/fail: machines are noisy."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

for name in ("bench_import", "bench_turn_overhead", "bench_change_detection", "bench_cache_share"):
    print(f"== {name}")
    importlib.import_module(name).main()
