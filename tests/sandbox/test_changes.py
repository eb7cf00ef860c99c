"""ChangeDetector: the same answer as a full walk before and after the turn, at the cost of the change.

The property test drives random change sets through real processes and compares the detector's
answer with `WorkspaceSnapshot` diffs of the same turn. Timestamps are pinned an hour in the past
or the future, so which files count as "racy" (content compared) never depends on how fast this
machine runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenter import AutonomousCodingAgent, Budget, CodingStatus
from agenter._types import ModifiedFiles
from agenter.sandbox.changes import ChangeDetector
from agenter.sandbox.workspace import WorkspaceSnapshot
from agenter.testing import FunctionBackend, TurnContext

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux-only")

HOUR_NS = 3600 * 10**9
FILES = ["f0", "f1", "a/f2", "a/f3", "a/b/f4", "c/f5", "d/f6", "node_modules/m.js", "v/f7", "a/.git/HEAD"]
DIRS = ["a", "a/b", "c", "d", "v", "e"]
FREE = ["l1", "a/l2", "c/l3"]  # names no file has at first


def _unwatched(root: Path, rel: str) -> bool:
    """Whether `rel` lies in a folder the detector does not watch (ignored, or a virtual environment)."""
    parts = rel.split("/")[:-1]
    return any(part in ("node_modules", ".git") for part in parts) or any(
        (root.joinpath(*parts[:n]) / "pyvenv.cfg").exists() for n in range(1, len(parts) + 1))


def _pinned(ns_offset: int) -> int:
    return time.time_ns() + ns_offset


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _write(root: Path, rel: str, size: int, future: bool) -> None:
    target = root / rel
    if not target.parent.is_dir() or (target.exists() and target.is_dir()):
        return
    if target.is_symlink():
        target.unlink()
    target.write_bytes(b"x" * size)
    when = _pinned(HOUR_NS if future else -HOUR_NS)
    os.utime(target, ns=(when, when))


def _rewrite_same(root: Path, rel: str) -> None:
    """New content, same size, same timestamps: only a content comparison can tell."""
    target = root / rel
    if target.is_symlink() or not target.is_file():
        return
    info = target.stat()
    data = target.read_bytes()
    target.write_bytes(bytes((b + 1) % 256 for b in data) or b"")
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def _apply(root: Path, op: tuple) -> None:
    kind, *args = op
    try:
        if kind == "write":
            _write(root, *args)
        elif kind == "same":
            _rewrite_same(root, args[0])
        elif kind == "delete":
            _remove(root / args[0])
        elif kind == "rename":
            src, dst = root / args[0], root / args[1]
            if (src.exists() or src.is_symlink()) and dst.parent.is_dir() and not dst.is_dir():
                os.replace(src, dst)
        elif kind == "rename_dir":
            src, dst = root / args[0], root / args[1]
            if src.is_dir() and not src.is_symlink() and not (dst.exists() or dst.is_symlink()) \
                    and dst.parent.is_dir() and not str(dst).startswith(str(src) + os.sep):
                os.rename(src, dst)
        elif kind == "symlink":  # a symlink swap, as `ln -sfn` does it: new link renamed over the old
            link, target = root / args[0], args[1]
            if link.parent.is_dir() and not (link.is_dir() and not link.is_symlink()):
                tmp = link.with_name(link.name + ".tmp-link")
                os.symlink(target, tmp)
                os.replace(tmp, link)
        elif kind == "flash":  # created and deleted within the turn
            target = root / args[0]
            if target.parent.is_dir() and not target.exists() and not target.is_symlink():
                target.write_text("brief")
                target.unlink()
        elif kind == "shell":  # a child process writes (and renames) on its own
            target = root / args[0]
            if target.parent.is_dir() and not target.is_dir():
                subprocess.run(["sh", "-c", 'printf "%s" "$2" > "$1.part" && mv -f "$1.part" "$1"', "sh",
                                str(target), args[1]], check=False, timeout=30)
        elif kind == "mkdir":
            (root / args[0]).mkdir(parents=True, exist_ok=True)
            _write(root, f"{args[0]}/new.txt", 3, False)
        elif kind == "venv":  # a folder becomes (or stops being) a virtual environment
            folder = root / args[0]
            if folder.is_dir() and not folder.is_symlink():
                cfg = folder / "pyvenv.cfg"
                if cfg.exists():
                    cfg.unlink()
                else:
                    cfg.write_text("home = /usr\n")
        elif kind == "link":  # a hard link: a write through one name changes the other
            src, dst = root / args[0], root / args[1]
            if _unwatched(root, args[1]):
                return  # what the detector cannot see (changes.py's docstring): a new link in an unwatched folder
            if src.is_file() and not src.is_symlink() and dst.parent.is_dir() and not dst.exists() \
                    and not dst.is_symlink():
                os.link(src, dst)
        elif kind == "append":  # through whichever name, without touching the timestamp by hand
            target = root / args[0]
            if target.is_file() and not target.is_symlink():
                with open(target, "ab") as handle:
                    handle.write(b"+")
    except OSError:
        pass  # the operation did not apply to the tree as it is now (a dir in the way, ...)


paths = st.sampled_from(FILES + FREE)
dirs = st.sampled_from(DIRS)
operations = st.one_of(
    st.tuples(st.just("write"), paths, st.integers(0, 6), st.booleans()),
    st.tuples(st.just("same"), paths),
    st.tuples(st.just("delete"), st.one_of(paths, dirs)),
    st.tuples(st.just("rename"), paths, paths),
    st.tuples(st.just("rename_dir"), dirs, dirs),
    st.tuples(st.just("symlink"), paths, st.sampled_from(["f0", "a", "missing", "../outside"])),
    st.tuples(st.just("flash"), paths),
    st.tuples(st.just("shell"), paths, st.sampled_from(["abc", "xyz", ""])),
    st.tuples(st.just("mkdir"), st.sampled_from(["e", "e/g", "a/h", "d/i/j"])),
    st.tuples(st.just("venv"), st.sampled_from(["v", "a/b", "e"])),
    st.tuples(st.just("link"), paths, paths),
    st.tuples(st.just("link"), st.sampled_from(FILES), st.sampled_from(FREE)),
    st.tuples(st.just("append"), paths),
)


def _initial_tree(root: Path, futures: list[bool]) -> None:
    for directory in DIRS[:-1]:
        (root / directory).mkdir(parents=True, exist_ok=True)
    (root / "node_modules").mkdir()
    (root / "a" / ".git").mkdir()
    for rel, future in zip(FILES, futures, strict=True):
        _write(root, rel, 4, future)
    (root / "v" / "pyvenv.cfg").write_text("home = /usr\n")
    os.symlink("f0", root / "ln")


async def _run_turns(root: Path, detector: ChangeDetector, phases: list[tuple[list[tuple], list[tuple]]]) -> None:
    await detector.start()
    for between, during in phases:
        for op in between:
            _apply(root, op)
        before = WorkspaceSnapshot.take(root)
        await detector.begin_turn()
        for op in during:
            _apply(root, op)
        expected = before.diff(WorkspaceSnapshot.take(root))
        so_far = await detector.changes_so_far()
        got = await detector.end_turn()
        assert got == expected, (between, during)
        assert so_far == expected


@linux_only
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(futures=st.lists(st.booleans(), min_size=len(FILES), max_size=len(FILES)),
       phases=st.lists(st.tuples(st.lists(operations, max_size=4), st.lists(operations, min_size=1, max_size=8)),
                       min_size=1, max_size=3))
def test_watching_detector_agrees_with_a_full_walk(futures, phases):
    with tempfile.TemporaryDirectory(prefix="agenter-changes-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        _initial_tree(root, futures)
        detector = ChangeDetector(root)
        try:
            asyncio.run(_run_turns(root, detector, phases))
            assert detector.mode == "watching", detector.fallback
        finally:
            detector.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(futures=st.lists(st.booleans(), min_size=len(FILES), max_size=len(FILES)),
       phases=st.lists(st.tuples(st.lists(operations, max_size=3), st.lists(operations, min_size=1, max_size=6)),
                       min_size=1, max_size=2))
def test_walking_detector_agrees_with_a_full_walk(futures, phases):
    with tempfile.TemporaryDirectory(prefix="agenter-changes-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        _initial_tree(root, futures)
        detector = ChangeDetector(root, watch=False)
        try:
            asyncio.run(_run_turns(root, detector, phases))
            assert detector.mode == "walking"
        finally:
            detector.close()


# ---------------------------------------------------------------------------- plain cases
async def test_changes_between_turns_are_not_the_next_turns(tmp_path):
    (tmp_path / "a.py").write_text("a = 1\n")
    detector = ChangeDetector(tmp_path)
    try:
        await detector.start()
        await detector.begin_turn()
        (tmp_path / "a.py").write_text("a = 2\n")
        assert (await detector.end_turn()).written == {"a.py"}
        (tmp_path / "fmt.py").write_text("formatted by a validator\n")  # between turns
        (tmp_path / "a.py").unlink()
        await detector.begin_turn()
        (tmp_path / "b.py").write_text("b = 1\n")
        assert await detector.end_turn() == ModifiedFiles(written={"b.py"})
        assert detector.walks == 1  # the initial walk only
    finally:
        detector.close()


# Change sets the property test once found wrong, kept as they were found.
FOUND = [
    ([False, True] + [False] * 8, [([("link", "f1", "l1")], [("same", "f1")])]),
    ([False, True] + [False] * 8, [([], [("link", "f1", "l1"), ("same", "l1"), ("delete", "l1")])]),
]


@linux_only
@pytest.mark.parametrize(("futures", "phases"), FOUND)
def test_change_sets_once_found_wrong(tmp_path, futures, phases):
    root = tmp_path / "ws"
    root.mkdir()
    _initial_tree(root, futures)
    detector = ChangeDetector(root)
    try:
        asyncio.run(_run_turns(root, detector, phases))
    finally:
        detector.close()


def _age(*paths: Path) -> None:
    """An hour old: not "racy", so only the metadata can tell a change."""
    when = time.time_ns() - HOUR_NS
    for path in paths:
        os.utime(path, ns=(when, when))


async def test_a_write_through_one_hard_link_changes_the_other_name(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    os.link(tmp_path / "a.txt", tmp_path / "b.txt")
    (tmp_path / "d.txt").write_text("d")
    _age(tmp_path / "a.txt", tmp_path / "d.txt")
    detector = ChangeDetector(tmp_path)
    try:
        await detector.start()
        await detector.begin_turn()
        with open(tmp_path / "b.txt", "a") as handle:
            handle.write("+")
        assert (await detector.end_turn()).written == {"a.txt", "b.txt"}
        await detector.begin_turn()
        os.link(tmp_path / "a.txt", tmp_path / "c.txt")  # a link made during the turn
        with open(tmp_path / "c.txt", "a") as handle:
            handle.write("+")
        assert (await detector.end_turn()).written == {"a.txt", "b.txt", "c.txt"}
        await detector.begin_turn()
        os.link(tmp_path / "d.txt", tmp_path / "e.txt")
        await detector.changes_so_far()  # the new link is seen here, before the write below
        with open(tmp_path / "e.txt", "a") as handle:
            handle.write("+")
        assert (await detector.end_turn()).written == {"d.txt", "e.txt"}
        walks = detector.walks
        await detector.begin_turn()
        os.link(tmp_path / "d.txt", tmp_path / "f.txt")  # a link written through and removed unseen
        with open(tmp_path / "f.txt", "a") as handle:
            handle.write("+")
        os.unlink(tmp_path / "f.txt")
        assert (await detector.end_turn()).written == {"d.txt", "e.txt"}  # found by Hypothesis
        assert detector.walks == walks + 1  # no event names d.txt or e.txt: a walk finds them
    finally:
        detector.close()


async def test_a_folder_stops_being_a_virtual_environment(tmp_path):
    (tmp_path / "env2").mkdir()
    (tmp_path / "env2" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "env2" / "lib.py").write_text("x")
    detector = ChangeDetector(tmp_path)
    try:
        await detector.start()
        await detector.begin_turn()
        (tmp_path / "env2" / "pyvenv.cfg").unlink()
        assert (await detector.end_turn()).written == {"env2/lib.py"}
        await detector.begin_turn()
        (tmp_path / "env2" / "pyvenv.cfg").write_text("home = /usr\n")
        assert (await detector.end_turn()).deleted == {"env2/lib.py"}
    finally:
        detector.close()


@linux_only
async def test_ignored_folders_are_not_watched(tmp_path):
    (tmp_path / "node_modules" / "dep").mkdir(parents=True)
    (tmp_path / "node_modules" / "dep" / "x.js").write_text("")
    (tmp_path / "src").mkdir()
    detector = ChangeDetector(tmp_path)
    try:
        await detector.start()
        tree = detector._tree
        assert tree is not None
        assert set(tree.wd_of) == {"", "src"}
        await detector.begin_turn()
        (tmp_path / "node_modules" / "dep" / "y.js").write_text("")
        (tmp_path / "src" / "m.py").write_text("")
        assert await detector.end_turn() == ModifiedFiles(written={"src/m.py"})
    finally:
        detector.close()


@pytest.mark.slow
@linux_only
async def test_queue_overflow_falls_back_to_a_walk(tmp_path):
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    (tmp_path / "gen").mkdir()
    detector = ChangeDetector(tmp_path)
    try:
        await detector.start()
        await detector.begin_turn()
        before = WorkspaceSnapshot.take(tmp_path)
        # Every new file raises CREATE, MODIFY and CLOSE_WRITE: a third of the queue's size of
        # files overflows it for sure.
        for i in range(limit // 3 + 100):
            (tmp_path / "gen" / f"f{i}.txt").write_text("x")
        (tmp_path / "gen" / "f0.txt").unlink()
        expected = before.changes_since()
        got = await detector.end_turn()
        assert detector._tree is not None and detector._tree.overflows >= 1
        assert got == expected and len(got.written) == limit // 3 + 99
        assert detector.mode == "watching"  # an overflow costs one walk, not the watcher
        await detector.begin_turn()
        (tmp_path / "gen" / "f1.txt").write_text("y")
        walks = detector.walks
        assert (await detector.end_turn()).written == {"gen/f1.txt"}
        assert detector.walks == walks
    finally:
        detector.close()


@linux_only
async def test_too_many_folders_for_the_watch_limit_falls_back_to_walking(tmp_path):
    for i in range(6):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "m.py").write_text("x")
    detector = ChangeDetector(tmp_path, max_watches=3)
    try:
        await detector.start()
        assert detector.mode == "walking" and "3 folders" in (detector.fallback or "")
        await detector.begin_turn()
        (tmp_path / "d5" / "m.py").unlink()
        (tmp_path / "d0" / "n.py").write_text("y")
        assert await detector.end_turn() == ModifiedFiles(written={"d0/n.py"}, deleted={"d5/m.py"})
    finally:
        detector.close()


@linux_only
async def test_watch_limit_reached_during_a_turn(tmp_path):
    (tmp_path / "d0").mkdir()
    detector = ChangeDetector(tmp_path, max_watches=3)
    try:
        await detector.start()
        assert detector.mode == "watching"
        await detector.begin_turn()
        for i in range(1, 5):
            (tmp_path / f"d{i}").mkdir()
            (tmp_path / f"d{i}" / "m.py").write_text("x")
        got = await detector.end_turn()
        assert detector.mode == "walking"
        assert got == ModifiedFiles(written={f"d{i}/m.py" for i in range(1, 5)})
    finally:
        detector.close()


@linux_only
async def test_sessions_in_one_folder_share_one_watched_tree(tmp_path):
    (tmp_path / "a.py").write_text("a")
    first, second = ChangeDetector(tmp_path), ChangeDetector(tmp_path)
    try:
        await first.start()
        await second.start()
        assert first._tree is second._tree and first.walks == 1
        await first.begin_turn()
        (tmp_path / "one.py").write_text("1")
        await second.begin_turn()
        (tmp_path / "two.py").write_text("2")
        assert (await first.end_turn()).written == {"one.py", "two.py"}
        assert (await second.end_turn()).written == {"two.py"}
        tree = first._tree
        assert tree is not None
        first.close()
        assert tree.inotify is not None
        second.close()
        assert tree.closed
        for _ in range(200):  # released in a thread, never on the event loop (the watch, then the tables)
            if tree.inotify is None and not tree.files:
                break
            await asyncio.sleep(0.01)
        assert tree.inotify is None and not tree.files
    finally:
        first.close()
        second.close()


async def test_a_missing_root_reports_nothing_and_does_not_raise(tmp_path):
    detector = ChangeDetector(tmp_path / "missing")
    try:
        await detector.start()
        await detector.begin_turn()
        assert not await detector.end_turn()
    finally:
        detector.close()


async def test_close_is_idempotent_and_safe_before_start(tmp_path):
    detector = ChangeDetector(tmp_path)
    detector.close()
    detector.close()
    await detector.start()  # after close: nothing is attached
    assert detector._tree is None


# ---------------------------------------------------------------------------- the event loop
def _tree_of(root: Path, files: int) -> None:
    for i in range(files):
        directory = root / f"pkg{i // 100:04d}"
        if i % 100 == 0:
            directory.mkdir()
        (directory / f"m{i}.py").write_text("x = 1\n")


async def _largest_stall(run: asyncio.Future, period: float = 0.001) -> float:
    worst = 0.0
    while not run.done():
        started = time.perf_counter()
        await asyncio.sleep(period)
        worst = max(worst, time.perf_counter() - started - period)
    return worst


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_many_sessions_never_stall_the_event_loop(tmp_path):
    """The figures are in benchmarks/bench_change_detection.py (50 sessions on 100k files). Here
    the bound is generous and the best of three tries counts, because this machine is shared:
    a walk of the tree on the event loop would stall it for about the whole walk every time.
    One run at a time works in a folder (agenter.sandbox.folder_lock), so one session works in
    the large tree and each of the others in a folder of its own."""
    tree = tmp_path / "tree"
    tree.mkdir()
    _tree_of(tree, 20_000)
    folders = [tree]
    for n in range(1, 20):
        folders.append(tmp_path / f"own{n}")
        folders[-1].mkdir()
        _tree_of(folders[-1], 300)
    started = time.perf_counter()
    WorkspaceSnapshot.take(tree)
    walk = time.perf_counter() - started

    def write(paths: list[Path]) -> None:
        for path in paths:
            path.write_text("y = 2\n")

    async def turn(ctx: TurnContext):
        await asyncio.to_thread(write, [ctx.cwd / f"pkg0001/s{id(ctx)}_{j}.py" for j in range(3)])
        await asyncio.sleep(0.05)
        return "done"

    async def hang(ctx: TurnContext):
        await asyncio.to_thread(write, [ctx.cwd / f"pkg0002/h{id(ctx)}.py"])
        await asyncio.sleep(3600)

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, validators=[])
    hanging = AutonomousCodingAgent(backend=FunctionBackend, turn=hang, validators=[], max_iterations=1)

    async def sessions():
        runs = [agent.execute("go", cwd=folder) for folder in folders[:15]]
        # Cancelled by the time budget mid-turn: the cancellation path detects changes too.
        runs += [hanging.execute("go", cwd=folder, budget=Budget(max_time_seconds=1.0)) for folder in folders[15:]]
        return await asyncio.gather(*runs)

    stalls = []
    for _ in range(3):
        task = asyncio.ensure_future(sessions())
        stalls.append(await _largest_stall(task))
        results = await task
        assert [r.status for r in results] == [CodingStatus.COMPLETED] * 15 + [CodingStatus.BUDGET_EXCEEDED] * 5
        # Each reports its own files, and only those.
        assert all(len(r.files) == 3 and all(p.startswith("pkg0001/s") for p in r.files) for r in results[:15])
        assert all(len(r.files) == 1 and next(iter(r.files)).startswith("pkg0002/h") for r in results[15:])
        if min(stalls) < max(0.1, walk / 2):
            break
    assert min(stalls) < max(0.1, walk / 2), (stalls, walk)
