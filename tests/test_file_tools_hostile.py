"""anthropic-sdk file tools against hostile input: every call ends in a ToolOutcome (never an
exception, a hang or an unbounded read), checked against real files, FIFOs, sockets and trees."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenter import AutonomousCodingAgent, CodingStatus
from agenter.backends.model_api._harness.files import (
    COUNT_LINES_BYTES,
    MAX_EDIT_BYTES,
    MAX_LINE_CHARS,
    MAX_READ_LINES,
    FileToolbox,
    ToolOutcome,
    _LineReader,
)
from agenter.sandbox.paths import PathResolver
from agenter.testing import reply, text, tool_call

# A regression in any of these blocks in open() or recurses: fail fast instead of hanging.
guarded = pytest.mark.timeout(20, method="signal")

DEEP = "a/" * 1500 + "x.py"
LONG_NAME = "b" * 5000
LONG_COMPONENT = "src/" + "c" * 300 + ".py"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    return root


@pytest.fixture
def toolbox(repo: Path) -> FileToolbox:
    return FileToolbox(PathResolver(repo))


@pytest.fixture
def deep_tree(repo: Path) -> Iterator[Path]:
    """repo/deep/a/a/.../a/x.py, 1500 levels: made and removed without recursion, because
    shutil.rmtree (pytest's tmp_path cleanup) recurses once per level on Python 3.11."""
    folders = [repo / "deep"]
    for _ in range(1500):
        folders.append(folders[-1] / "a")
    for folder in folders:
        folder.mkdir()
    (folders[-1] / "x.py").write_text("x = 1\n")
    try:
        yield folders[0]
    finally:
        (folders[-1] / "x.py").unlink()
        for folder in reversed(folders):
            folder.rmdir()


@pytest.fixture
def pipe(repo: Path) -> Iterator[Path]:
    """repo/pipe, a FIFO, removed by remove_fifo after the test."""
    fifo = repo / "pipe"
    os.mkfifo(fifo)
    try:
        yield fifo
    finally:
        remove_fifo(fifo)


def remove_fifo(fifo: Path) -> None:
    """Free any thread a regression left blocked in opening `fifo` (an O_RDWR open is the
    partner every blocked open waits for; closing it gives a blocked read end-of-file), then
    remove it so that no later open blocks again."""
    if fifo.exists():
        partner = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        fifo.unlink()
        os.close(partner)


def editor(command: str, path: str, **extra: object) -> dict[str, object]:
    return {"command": command, "path": path, **extra}


def every_call(path: str) -> list[tuple[str, dict[str, object]]]:
    """Each file tool and editor command, aimed at `path`."""
    return [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
        ("edit_file", {"path": path, "old_string": "a", "new_string": "b"}),
        ("delete_file", {"path": path}),
        ("list_directory", {"path": path}),
        ("glob", {"pattern": "*.py", "path": path}),
        ("grep", {"pattern": "x", "path": path}),
        ("editor", editor("view", path)),
        ("editor", editor("create", path, file_text="x")),
        ("editor", editor("str_replace", path, old_str="a", new_str="b")),
        ("editor", editor("insert", path, insert_line=0, insert_text="x")),
    ]


def call(toolbox: FileToolbox, name: str, arguments: dict[str, object]) -> ToolOutcome:
    if name == "editor":
        return toolbox.run_text_editor(arguments)
    return toolbox.run(name, arguments)


def peak_memory(action) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------- paths too deep or too long


@guarded
@pytest.mark.parametrize("path", [DEEP, LONG_NAME, LONG_COMPONENT], ids=["deep", "long-name", "long-component"])
def test_deep_and_long_paths_are_tool_errors_for_every_tool(toolbox, repo, path):
    for name, arguments in every_call(path):
        outcome = call(toolbox, name, arguments)
        assert outcome.is_error, (name, outcome.content[:200])
        assert outcome.content.startswith("Refused:"), (name, outcome.content[:200])
        assert len(outcome.content) < 400, (name, len(outcome.content))  # the path is shortened
        assert not outcome.written and not outcome.deleted
    assert sorted(p.name for p in repo.iterdir()) == ["src"]


@guarded
def test_an_existing_deep_tree_is_walked_without_recursion(toolbox, deep_tree):
    found = toolbox.run("glob", {"pattern": "**/*.py"})
    assert not found.is_error
    assert [len(p.split("/")) for p in found.content.splitlines()] == [1502, 2]  # deep/a/.../x.py, src/a.py
    searched = toolbox.run("grep", {"pattern": "x = 1"})
    assert not searched.is_error and searched.content == "src/a.py:1: x = 1"  # too deep to open
    listing = toolbox.run("list_directory", {"path": "deep", "depth": 5000})
    assert not listing.is_error and len(listing.content.splitlines()) == 20  # depth capped
    assert toolbox.run_text_editor(editor("view", "deep")).content.splitlines() == ["a/", "a/a/"]


def test_a_symlink_chain_past_the_recursion_limit_is_a_tool_error(toolbox, repo):
    for i in range(1200):
        (repo / f"l{i}").symlink_to(f"l{i + 1}")
    (repo / "l1200").write_text("end")
    for name, arguments in [("read_file", {"path": "l0"}), ("write_file", {"path": "l0", "content": "x"}),
                            ("editor", editor("view", "l0"))]:
        outcome = call(toolbox, name, arguments)
        assert outcome.is_error and "symbolic links" in outcome.content


# ---------------------------------------------------------------- FIFOs, sockets, devices


@guarded
def test_a_fifo_is_refused_by_every_tool_and_never_opened(toolbox, repo, pipe):
    for name, arguments in every_call("pipe"):
        if name in {"delete_file", "list_directory", "glob"}:
            continue  # checked below: they do not open the file
        outcome = call(toolbox, name, arguments)
        assert outcome.is_error, (name, outcome.content)
        assert "'pipe' is a named pipe (FIFO), not a regular file" in outcome.content, (name, outcome.content)
    # Searching or listing the folder skips or names it without opening it.
    assert toolbox.run("grep", {"pattern": "x"}).content == "src/a.py:1: x = 1"
    assert toolbox.run("glob", {"pattern": "*"}).content == "pipe"
    assert "pipe" in toolbox.run("list_directory", {}).content.splitlines()
    deleted = toolbox.run("delete_file", {"path": "pipe"})
    assert not deleted.is_error and deleted.deleted == {"pipe"} and not (repo / "pipe").exists()


@guarded
def test_a_fifo_with_a_writer_is_still_refused(toolbox, pipe):
    writer_side = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)  # a writer is present
    try:
        os.write(writer_side, b"data\n")
        outcome = toolbox.run("read_file", {"path": "pipe"})
        assert outcome.is_error and "not a regular file" in outcome.content
    finally:
        os.close(writer_side)


def test_sockets_and_devices_are_refused(repo, monkeypatch):
    monkeypatch.chdir(repo)  # AF_UNIX paths are short: bind by a relative name
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        box = FileToolbox(PathResolver(repo))
        for name in ("read_file", "write_file"):
            outcome = box.run(name, {"path": "sock", "content": "x"} if name == "write_file" else {"path": "sock"})
            assert outcome.is_error and "is a socket, not a regular file" in outcome.content
    unconfined = FileToolbox(PathResolver(repo, sandbox=False))
    for name, arguments in [("read_file", {"path": "/dev/null"}), ("grep", {"pattern": "x", "path": "/dev/null"}),
                            ("write_file", {"path": "/dev/null", "content": "x"})]:
        outcome = unconfined.run(name, arguments)
        assert outcome.is_error and "character device" in outcome.content, (name, outcome.content)


# ---------------------------------------------------------------- size: bounded reads


def test_a_large_binary_file_is_reported_from_its_first_bytes(toolbox, repo):
    with open(repo / "disk.img", "wb") as handle:
        handle.truncate(128 * 1024 * 1024)  # sparse: no disk used
    outcome, peak = peak_memory(lambda: toolbox.run("read_file", {"path": "disk.img"}))
    assert outcome.is_error and outcome.content == "'disk.img' is a binary file (134217728 bytes); not shown"
    assert peak < 1024 * 1024, peak


def test_a_large_text_file_is_read_only_as_far_as_it_is_shown(toolbox, repo):
    line = "0123456789" * 2 + "\n"
    with open(repo / "big.log", "w") as handle:
        for _ in range(16):
            handle.write(line * 25_000)  # 8.4 MB, 400,000 lines
    outcome, peak = peak_memory(lambda: toolbox.run("read_file", {"path": "big.log"}))
    lines = outcome.content.splitlines()
    assert not outcome.is_error and len(lines) == MAX_READ_LINES + 1
    assert lines[-1] == (f"[shown lines 1-{MAX_READ_LINES}; the file is too large (8.4 MB) to count its "
                         f"lines; read on with start_line={MAX_READ_LINES + 1}]")
    assert peak < 2 * 1024 * 1024, peak
    far, peak = peak_memory(lambda: toolbox.run("read_file", {"path": "big.log", "start_line": 350_000,
                                                              "end_line": 350_002}))
    assert far.content.splitlines() == [f"{n:6d}\t{line.rstrip()}" for n in (350_000, 350_001, 350_002)]
    assert peak < 2 * 1024 * 1024, peak
    past = toolbox.run("read_file", {"path": "big.log", "start_line": 500_000})
    assert past.is_error and "past the end" in past.content and "400000 lines" in past.content


def test_a_file_of_one_huge_line_is_cut_while_reading(toolbox, repo):
    (repo / "min.js").write_text("x" * 8_000_000 + "\r\nsecond\n")
    outcome, peak = peak_memory(lambda: toolbox.run("read_file", {"path": "min.js"}))
    assert outcome.content.splitlines() == [f"     1\t{'x' * MAX_LINE_CHARS} [line truncated]", "     2\tsecond"]
    assert peak < 2 * 1024 * 1024, peak


def test_small_files_keep_exact_counts_and_splitlines_numbering(toolbox, repo):
    # \f, \r and \x1c are line breaks for str.splitlines(), which the editor's insert uses too.
    content = "one\r\ntwo\fthree\rfour\x1cfive\n" * 1000
    (repo / "odd.txt").write_text(content, newline="")
    outcome = toolbox.run("read_file", {"path": "odd.txt"})
    expected = content.splitlines()
    shown = outcome.content.splitlines()
    assert shown[:5] == [f"{n:6d}\t{expected[n - 1]}" for n in range(1, 6)]
    assert shown[-1] == f"[shown lines 1-{MAX_READ_LINES} of {len(expected)}; read on with start_line=2001]"
    assert os.path.getsize(repo / "odd.txt") < COUNT_LINES_BYTES
    (repo / "latin1.txt").write_bytes(b"ok\n" * 10 + b"caf\xe9\n")
    assert toolbox.run("read_file", {"path": "latin1.txt"}).content == "'latin1.txt' is not a UTF-8 text file"


@settings(max_examples=200, deadline=None, database=None)
@given(content=st.text(alphabet="ab\r\n\f\x1c\u2028é€", max_size=300), chunk=st.integers(1, 9))
def test_line_reader_numbers_lines_as_splitlines_does(content, chunk):
    data = content.encode()
    reader = _LineReader(io.BytesIO(data[3:]), data[:3], chunk_size=chunk)
    assert [line for batch in reader.batches() for line in batch] == content.splitlines(keepends=True)
    assert reader.bytes_read == len(data)


def test_editing_a_file_larger_than_the_edit_limit_is_refused(toolbox, repo):
    big = repo / "data.csv"
    big.write_text("a,b\n" * (MAX_EDIT_BYTES // 4 + 10))
    before = big.stat().st_mtime_ns
    for name, arguments in [("edit_file", {"path": "data.csv", "old_string": "a,b", "new_string": "c,d"}),
                            ("editor", editor("insert", "data.csv", insert_line=1, insert_text="x"))]:
        outcome = call(toolbox, name, arguments)
        assert outcome.is_error and "too large to edit" in outcome.content and not outcome.written
    assert big.stat().st_mtime_ns == before


# ---------------------------------------------------------------- bad arguments and content


def test_content_that_is_not_valid_text_leaves_the_file_alone(toolbox, repo):
    outcome = toolbox.run("write_file", {"path": "src/a.py", "content": "bad \ud800"})
    assert outcome.is_error and "nothing was written" in outcome.content and not outcome.written
    assert (repo / "src" / "a.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(("name", "arguments"), [
    ("read_file", {"path": "src/a.py", "start_line": "abc"}),
    ("read_file", {"path": "src/a.py", "start_line": float("inf")}),
    ("glob", {"pattern": "[z-a]"}),
    ("grep", {"pattern": "x", "glob": "[z-a]"}),
    ("list_directory", {"path": ".", "depth": "deep"}),
    ("editor", editor("view", "src/a.py", view_range=["one", "two"])),
    ("editor", editor("insert", "src/a.py", insert_line=10**30, insert_text="x")),
    ("read_file", {"path": ["src", "a.py"]}),
    ("write_file", {"path": "x.py", "content": "x", "mode": "a"}),
])
def test_bad_arguments_are_tool_errors(toolbox, name, arguments):
    outcome = call(toolbox, name, arguments)
    assert outcome.is_error and outcome.content


_PATHS = st.one_of(
    st.sampled_from([".", "src", "src/a.py", "..", "/", "out", DEEP, LONG_NAME, "a/" * 300 + "b", "\ud800",
                     "x" * 256]),
    st.text(alphabet="ab./\\~\x00é\ud800", max_size=40),
    st.integers(), st.none(),
)
_NUMBERS = st.one_of(st.integers(), st.text(max_size=3), st.floats(), st.none())
_TEXT = st.text(max_size=20)


def _call(name: str, required: dict, optional: dict | None = None) -> st.SearchStrategy:
    return st.tuples(st.just(name), st.fixed_dictionaries(required, optional=optional or {}))


# Arguments shaped like each tool's own (so they reach the tool body), with hostile values.
_CALLS = st.one_of(
    _call("read_file", {"path": _PATHS}, {"start_line": _NUMBERS, "end_line": _NUMBERS}),
    _call("write_file", {"path": _PATHS, "content": _TEXT}),
    _call("edit_file", {"path": _PATHS, "old_string": _TEXT, "new_string": _TEXT}, {"replace_all": st.booleans()}),
    _call("insert_lines", {"path": _PATHS, "insert_line": _NUMBERS, "text": _TEXT}),
    _call("delete_file", {"path": _PATHS}),
    _call("list_directory", {}, {"path": _PATHS, "depth": _NUMBERS}),
    _call("glob", {"pattern": _TEXT}, {"path": _PATHS}),
    _call("grep", {"pattern": _TEXT}, {"path": _PATHS, "glob": _TEXT, "case_insensitive": st.booleans()}),
)


@pytest.mark.timeout(90, method="signal")
@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool=_CALLS)
def test_no_input_makes_a_tool_raise(tool):
    name, arguments = tool
    with tempfile.TemporaryDirectory() as root:
        Path(root, "src").mkdir()
        Path(root, "src", "a.py").write_text("x = 1\n")
        Path(root, "out").symlink_to("/")  # FIFOs have their own tests: a hang here would repeat
        outcome = FileToolbox(PathResolver(root)).run(name, arguments)
        assert isinstance(outcome, ToolOutcome) and isinstance(outcome.content, str)


# ---------------------------------------------------------------- a whole session


@pytest.mark.agent
async def test_a_session_survives_hostile_tool_calls(scripted_model_server, repo, pipe):
    now = time.time_ns()
    os.utime(pipe, ns=(now, now + 10**10))  # "just modified": the snapshot's racy check sees it
    hostile = [
        ("write_file", {"path": DEEP, "content": "x"}),
        ("read_file", {"path": LONG_NAME}),
        ("read_file", {"path": "pipe"}),
        ("write_file", {"path": "pipe", "content": "x"}),
        ("grep", {"pattern": "x"}),
    ]
    server = scripted_model_server([
        reply(*[tool_call(name, arguments) for name, arguments in hostile]),
        reply(tool_call("write_file", {"path": "ok.py", "content": "ok = True\n"})),
        reply(text("done")),
    ])
    agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-test-hostile")
    try:
        # The bound turns a regression (a worker thread blocked on the FIFO) into a failure;
        # the thread must be freed here, before the event loop closes and waits for it.
        result = await asyncio.wait_for(agent.execute("Try hostile paths", cwd=repo), timeout=15)
    finally:
        remove_fifo(pipe)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"ok.py": "ok = True\n"}
    results = [block for block in server.model_requests[1].body["messages"][-1]["content"]
               if block.get("type") == "tool_result"]
    assert [bool(block.get("is_error")) for block in results] == [True, True, True, True, False]
