"""Export results to the SWE-bench predictions format, for users who score with that harness.

One prediction per row: `instance_id` (the task id), `model_name_or_path` and `model_patch`
(the row's diff, empty when the task changed nothing). A `.jsonl` path gets one prediction a
line, any other path a JSON list; the harness reads both (`--predictions_path`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agenter.batch._models import BatchRow
from agenter.batch._results import read_rows


def predictions(rows: Iterable[BatchRow], *, model_name: str | None = None,
                only_passed: bool = False) -> list[dict[str, Any]]:
    """SWE-bench predictions of these rows. `model_name` defaults to each row's model (or its
    backend when the model is unknown); `only_passed` leaves out rows whose validators failed."""
    return [{"instance_id": row.id,
             "model_name_or_path": model_name or row.model or row.backend or "agenter",
             "model_patch": row.diff or ""}
            for row in rows if row.passed or not only_passed]


def export_swebench(results: str | Path, out: str | Path, *, model_name: str | None = None,
                    only_passed: bool = False) -> int:
    """Write the predictions of a results file to `out`; returns how many were written."""
    rows, _ = read_rows(results)
    items = predictions(rows.values(), model_name=model_name, only_passed=only_passed)
    target = Path(out).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".jsonl":
        target.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
    else:
        target.write_text(json.dumps(items, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return len(items)
