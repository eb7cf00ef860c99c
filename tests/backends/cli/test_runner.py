"""The one runner every CLI backend uses: real child processes (small Python programs), checked
by their output, their pids and their exit codes. Line splitting has plain unit tests."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from agenter._errors import BackendError
from agenter.backends.cli._runner import Invocation, LineSplitter, parse_line, start_program
from agenter.host import _pids

PYTHON = sys.executable


def program(code: str, *, stdin: bytes | None = None) -> Invocation:
    return Invocation(argv=[PYTHON, "-c", code], env=dict(os.environ), stdin=stdin)


async def collect(invocation: Invocation, cwd: Path, **kwargs) -> tuple[list, int | None, str]:
    async with start_program(invocation, cwd) as run:
        lines = [line async for line in run.lines(**kwargs)]
        code = await run.wait()
        return lines, code, run.stderr_tail()


# ------------------------------------------------------------------------------- line splitting
def test_lines_are_split_across_chunks_and_the_last_one_needs_no_newline():
    splitter = LineSplitter()
    assert splitter.feed(b'{"a"') == []
    assert splitter.feed(b': 1}\n{"b": 2}\npart') == [b'{"a": 1}', b'{"b": 2}']
    assert splitter.feed(b"ial") == []
    assert splitter.flush() == b"partial"
    assert splitter.flush() is None


def test_a_line_of_five_megabytes_in_small_chunks_is_one_line():
    splitter = LineSplitter()
    payload = json.dumps({"text": "x" * 5_000_000}).encode() + b"\n"
    lines = []
    for start in range(0, len(payload), 65536):
        lines += splitter.feed(payload[start:start + 65536])
    (line,) = lines
    data = parse_line(line).data
    assert data is not None and len(data["text"]) == 5_000_000


def test_parse_line_decodes_json_objects_only():
    assert parse_line(b'{"type": "x"}\r').data == {"type": "x"}
    assert parse_line(b"[1, 2]").data is None and parse_line(b"[1, 2]").text == "[1, 2]"
    assert parse_line(b"{not json").data is None
    assert parse_line(b"plain text").text == "plain text"
    assert parse_line(b"   ").data is None
    assert parse_line("caf\u00e9 \xff".encode("latin-1")).text  # undecodable bytes never raise


# ------------------------------------------------------------------------------- real processes
async def test_a_300_kb_prompt_goes_through_stdin_and_a_5_mb_line_comes_back(tmp_path):
    prompt = ("y" * 300_000).encode()
    code = ("import sys, json; data = sys.stdin.read(); "
            "print(json.dumps({'got': len(data), 'echo': data * 17})); print('done')")
    lines, exit_code, _ = await collect(program(code, stdin=prompt), tmp_path)
    assert exit_code == 0
    assert lines[0].data["got"] == 300_000 and len(lines[0].data["echo"]) == 5_100_000
    assert lines[1].text == "done"


async def test_stderr_is_read_while_stdout_waits_and_its_tail_is_kept(tmp_path):
    # 2 MB of stderr before any stdout: a runner that read stderr only at the end would hang here.
    code = ("import sys\nfor i in range(20000): sys.stderr.write(f'err line {i} ' + 'e' * 90 + '\\n')\n"
            "sys.stderr.write('the key is sk-abcdefghijklmnop1234\\n'); sys.stderr.flush(); print('{\"ok\": true}')")
    lines, exit_code, tail = await asyncio.wait_for(collect(program(code), tmp_path), 30)
    assert exit_code == 0 and lines[0].data == {"ok": True}
    assert "err line 19999" in tail and "err line 0 " not in tail
    assert "sk-abcdefghijklmnop1234" not in tail  # redacted


async def test_a_program_that_ignores_stdin_does_not_block_the_run(tmp_path):
    lines, exit_code, _ = await collect(program("print('{}')", stdin=b"z" * 2_000_000), tmp_path)
    assert exit_code == 0 and lines[0].data == {}


async def test_cancelling_the_reader_kills_the_group_and_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time\n"
            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "print('{\"started\": true}', flush=True); time.sleep(600)")
    seen: list[int] = []

    async def consume() -> None:
        async with start_program(program(code), tmp_path) as run:
            seen.append(run.pid)
            async for _ in run.lines():
                pass

    task = asyncio.create_task(consume())
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    child = int(pid_file.read_text())
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 3
    assert not _pids.is_alive(seen[0]) and not _pids.is_alive(child)


async def test_a_program_that_ignores_sigterm_is_killed(tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('{}', flush=True); time.sleep(600)")
    async with start_program(program(code), tmp_path, grace=0.3) as run:
        pid = run.pid
        async for _ in run.lines():
            break
    assert not _pids.is_alive(pid)


async def test_output_ends_when_the_program_exits_although_a_grandchild_holds_stdout(tmp_path):
    code = ("import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
            "print('{\"last\": 1}', flush=True)")
    started = time.monotonic()
    lines, exit_code, _ = await asyncio.wait_for(collect(program(code), tmp_path), 15)
    assert exit_code == 0 and lines[-1].data == {"last": 1}
    assert time.monotonic() - started < 6


async def test_an_idle_program_fails_with_a_transient_backend_error(tmp_path):
    code = "import time; print('{}', flush=True); time.sleep(600)"
    with pytest.raises(BackendError) as caught:
        await asyncio.wait_for(collect(program(code), tmp_path, idle_timeout=0.8, backend="fake-cli"), 15)
    assert caught.value.kind == "transient" and "idle_timeout" in str(caught.value)


async def test_a_missing_program_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        async with start_program(Invocation(argv=[str(tmp_path / "nope")], env=dict(os.environ)), tmp_path):
            pass


async def test_temporary_files_of_an_invocation_are_removed(tmp_path):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("hi")
    invocation = program("print('{}')")
    invocation.files.append(prompt)
    await collect(invocation, tmp_path)
    assert not prompt.exists()
