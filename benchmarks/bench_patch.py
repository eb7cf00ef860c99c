"""Patch-proposal apply on a 100-file, 1000-hunk proposal (goal <= 50 ms): parse + check + write."""

from __future__ import annotations

import difflib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agenter.sandbox.paths import PathResolver
from agenter.tools.patch import apply_proposal, check_proposal, parse_proposal

FILES = 100
HUNKS_PER_FILE = 10
LINES_PER_FILE = 300
ROUNDS = 9


def path_of(index: int) -> str:
    return f"pkg{index // 10}/mod{index}.py"


def file_pair(index: int) -> tuple[str, str]:
    """A source file and its edit: one changed line every LINES_PER_FILE / HUNKS_PER_FILE lines."""
    old = [f"    value_{index}_{line} = compute({line}, {index})  # line {line}\n" for line in range(LINES_PER_FILE)]
    new = list(old)
    step = LINES_PER_FILE // HUNKS_PER_FILE
    for hunk in range(HUNKS_PER_FILE):
        at = hunk * step + step // 2
        new[at] = f"    value_{index}_{at} = compute_faster({at}, {index})  # edited\n"
    return "".join(old), "".join(new)


def proposal_json(pairs: list[tuple[str, str]]) -> str:
    import json

    files = []
    for index, (old, new) in enumerate(pairs):
        path = path_of(index)
        diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                            f"a/{path}", f"b/{path}"))
        files.append({"path": path, "operation": "modify", "diff": diff})
    return json.dumps({"summary": "speed up compute", "files": files, "test_commands": ["pytest"], "risks": []})


def reset(root: Path, pairs: list[tuple[str, str]]) -> None:
    """Put the old files back, on disk: a workspace's files are rarely seconds old and unflushed."""
    for index, (old, _new) in enumerate(pairs):
        target = root / path_of(index)
        target.parent.mkdir(exist_ok=True)
        with open(target, "w") as handle:
            handle.write(old)
            handle.flush()
            os.fsync(handle.fileno())


def floor(root: Path, raw: str, pairs: list[tuple[str, str]]) -> float:
    """The unavoidable part: unidiff parsing every diff plus a bare temp-file + os.replace per file."""
    import json

    from unidiff import PatchSet

    diffs = [change["diff"] for change in json.loads(raw)["files"]]
    reset(root, pairs)
    started = time.perf_counter()
    for diff in diffs:
        PatchSet(diff)
    for index, (_old, new) in enumerate(pairs):
        target = root / path_of(index)
        temp = target.with_name(f".{target.name}.tmp")
        with open(temp, "wb") as handle:
            handle.write(new.encode())
        os.replace(temp, target)
    return time.perf_counter() - started


def measure(base: str | None) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="agenter-bench-", dir=base))
    try:
        pairs = [file_pair(i) for i in range(FILES)]
        raw = proposal_json(pairs)
        hunks = raw.count("@@ -")
        assert hunks == FILES * HUNKS_PER_FILE, hunks
        resolver = PathResolver(root)
        applies, cpu, checks, diffs, floors = [], [], [], [], []
        for _ in range(ROUNDS):
            reset(root, pairs)
            started, cpu_started = time.perf_counter(), time.process_time()
            result = apply_proposal(parse_proposal(raw), resolver)
            applies.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            started = time.perf_counter()
            text = result.diff
            diffs.append(time.perf_counter() - started)
            assert len(result.written) == FILES and text.count("@@ -") == hunks
            assert all((root / path_of(i)).read_text() == new for i, (_old, new) in enumerate(pairs))
            reset(root, pairs)
            started = time.perf_counter()
            check_proposal(parse_proposal(raw), resolver)
            checks.append(time.perf_counter() - started)
            floors.append(floor(root, raw, pairs))
        median = statistics.median(applies)
        bare = statistics.median(floors)
        print(f"apply {FILES} files / {hunks} hunks ({len(raw) // 1024} KiB of JSON) in {root.parent}: "
              f"{median * 1000:6.1f} ms median of {ROUNDS}, best {min(applies) * 1000:.1f} ms "
              f"(parse JSON + unidiff + check + atomic writes; goal <= 50 ms; ratio to goal {median / 0.05:.2f})")
        print(f"  CPU time of this process during apply: {statistics.median(cpu) * 1000:6.1f} ms median "
              "(user + system; the rest of the wall time is waiting for a CPU or the disk)")
        print(f"  floor, unidiff parse + bare temp file and os.replace per file: {bare * 1000:6.1f} ms median, "
              f"best {min(floors) * 1000:.1f} ms (apply / floor {median / bare:.2f})")
        print(f"  check only (no writes): {statistics.median(checks) * 1000:6.1f} ms median")
        print(f"  AppliedPatch.diff of the result (difflib, made on first use): "
              f"{statistics.median(diffs) * 1000:6.1f} ms median")
        return {"patch_apply_s": median, "patch_floor_s": bare}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> dict[str, float]:
    """On the usual temporary directory (a disk), then in RAM (tmpfs) to show what the disk costs."""
    figures = measure(None)
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        in_ram = measure("/dev/shm")
        figures["patch_apply_tmpfs_s"] = in_ram["patch_apply_s"]
    return figures


if __name__ == "__main__":
    main()
