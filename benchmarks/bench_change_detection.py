"""Change detection on a 20k-file tree (goal <= 0.2 s): two snapshots and a diff."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agenter.sandbox.workspace import WorkspaceSnapshot

FILES = 20_000
PER_DIR = 100


def build_tree(root: Path) -> None:
    for i in range(FILES):
        directory = root / f"pkg{i // PER_DIR:03d}"
        if i % PER_DIR == 0:
            directory.mkdir()
        (directory / f"mod{i}.py").write_text("x = 1\n")
    # Noise that must be ignored.
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "node_modules" / "dep").mkdir(parents=True)
    for i in range(2000):
        (root / "node_modules" / "dep" / f"f{i}.js").write_text("")


def raw_walk(root: Path) -> int:
    """The floor: a bare os.walk + lstat of every file, no bookkeeping."""
    count = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "node_modules")]
        for name in files:
            os.lstat(os.path.join(directory, name))
            count += 1
    return count


def main() -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="agenter-bench-"))
    try:
        build_tree(root)
        timings, detect_timings = [], []
        for round_ in range(5):
            target = root / f"pkg{round_:03d}" / f"mod{round_ * PER_DIR}.py"
            started = time.perf_counter()
            before = WorkspaceSnapshot.take(root)
            target.write_text("x = 2  # changed\n")
            os.utime(target, ns=(time.time_ns(), time.time_ns() + 1_000_000))
            detect_started = time.perf_counter()
            changes = before.diff(WorkspaceSnapshot.take(root))
            done = time.perf_counter()
            timings.append(done - started)
            detect_timings.append(done - detect_started)
            assert changes.written == {target.relative_to(root).as_posix()}, changes
        median = statistics.median(timings)
        detect = statistics.median(detect_timings)
        floor = []
        for _ in range(5):
            started = time.perf_counter()
            raw_walk(root)
            floor.append(time.perf_counter() - started)
        floor_median = statistics.median(floor)
        print(f"one snapshot vs a bare os.walk+lstat of the same tree: ratio "
              f"{median / 2 / floor_median:.2f} ({median / 2 * 1000:.1f} ms vs {floor_median * 1000:.1f} ms)")
        print(f"change detection after a turn, {FILES} files (+2000 ignored): {detect * 1000:7.1f} ms "
              f"(snapshot + diff; goal <= 200 ms; ratio to goal {detect / 0.2:.2f})")
        print(f"whole cost per turn, snapshot before + snapshot after + diff: {median * 1000:7.1f} ms "
              f"(ratio to goal {median / 0.2:.2f})")
        return {"change_detection_s": detect, "snapshot_before_after_s": median}
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
