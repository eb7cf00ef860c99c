"""One run at a time in a folder (agenter.sandbox.folder_lock): a second run there is refused
with a one-line error, whether it is another coroutine of the same process or another
`agenter run`; analysis runs share the folder; the lock goes with a crashed holder; nothing is
written into the folder."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agenter import AutonomousCodingAgent, ConfigurationError
from agenter.sandbox.folder_lock import FolderBusyError, FolderLock, _key, _lock_directory, claim_folder
from agenter.testing import FunctionBackend, ModelRequest, ScriptedModelServer, TurnContext, reply, text, tool_call

AGENTER = [sys.executable, "-m", "agenter"]
HINT = "`agenter batch` (a workspace per task), `git worktree add`, or `agenter plan --parallel N`"


def _lock_file(folder: Path) -> Path:
    directory = _lock_directory()
    assert directory is not None
    return directory / f"{_key(os.path.realpath(folder))}.lock"


# ------------------------------------------------------------------------------ the lock itself


def test_exclusive_and_shared_holds(tmp_path: Path):
    alias = tmp_path / "alias"
    alias.symlink_to(tmp_path / "repo", target_is_directory=True)
    (tmp_path / "repo").mkdir()
    with FolderLock(tmp_path / "repo") as first:
        assert first.held and _lock_file(tmp_path / "repo").read_text() == f"{os.getpid()}\n"
        # The same folder by another name, shared or not: refused, naming this process.
        for shared in (False, True):
            with pytest.raises(FolderBusyError) as refused, FolderLock(alias, shared=shared):
                pass
            assert "in this process" in str(refused.value) and HINT in str(refused.value)
            assert isinstance(refused.value, ConfigurationError) and refused.value.parameter == "cwd"
        with FolderLock(tmp_path):  # another folder (even the one above it) is free
            pass
    assert not _lock_file(tmp_path / "repo").exists()  # the last holder removed its file
    # Readers share; a writer waits for none of them, it is refused.
    readers = [claim_folder(tmp_path / "repo", "analysis") for _ in range(3)]
    for reader in readers:
        reader.acquire()
    with pytest.raises(FolderBusyError, match="another agenter run is working"):
        claim_folder(tmp_path / "repo", "autonomous").acquire()
    readers[0].release()
    readers[1].release()
    assert _lock_file(tmp_path / "repo").exists()  # one reader is still in
    readers[2].release()
    readers[2].release()  # idempotent
    assert not _lock_file(tmp_path / "repo").exists()
    with claim_folder(tmp_path / "repo", "patch"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias", "repo"] and not any((tmp_path / "repo").iterdir())


def test_a_lock_nobody_released_goes_with_its_object(tmp_path: Path):
    lock = FolderLock(tmp_path)
    lock.acquire()
    del lock
    with FolderLock(tmp_path):
        pass


# ------------------------------------------------------------------------------ two coroutines


def _writer(name: str, content: str, started: asyncio.Event | None = None, go: asyncio.Event | None = None):
    async def turn(ctx: TurnContext):
        (ctx.cwd / name).write_text(content)
        if started is not None and go is not None:
            started.set()
            await go.wait()
        return f"wrote {name}"

    return AutonomousCodingAgent(backend=FunctionBackend, turn=turn, validators=["syntax"], max_iterations=2)


async def test_a_second_run_in_the_folder_is_refused_and_the_first_keeps_its_own_result(tmp_path: Path):
    started, go = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(_writer("a.py", "A = 1\n", started, go).execute("write a.py", cwd=tmp_path))
    await started.wait()
    broken = _writer("b.py", "print(\n")
    with pytest.raises(FolderBusyError, match="in this process is working in"):
        await broken.execute("write b.py", cwd=tmp_path)
    events = broken.stream_execute("write b.py", cwd=tmp_path)
    with pytest.raises(FolderBusyError):
        await anext(events)  # refused before its first event
    go.set()
    result = await first
    assert result.status.value == "completed" and set(result.files) == {"a.py"} and not result.validation_errors
    assert not (tmp_path / "b.py").exists()
    # Once the first has ended, the second runs (and its own syntax error is its own).
    second = await broken.execute("write b.py", cwd=tmp_path)
    assert set(second.files) == {"b.py"} and second.status.value == "failed"
    assert any("b.py" in error for error in second.validation_errors)


async def test_gathered_runs_in_one_folder_one_runs_one_is_refused(tmp_path: Path):
    results = await asyncio.gather(_writer("a.py", "A = 1\n").execute("a", cwd=tmp_path),
                                   _writer("b.py", "B = 1\n").execute("b", cwd=tmp_path), return_exceptions=True)
    refused = [r for r in results if isinstance(r, FolderBusyError)]
    done = [r for r in results if not isinstance(r, BaseException)]
    assert len(refused) == 1 and len(done) == 1 and len(done[0].files) == 1


async def test_a_session_holds_its_folder_from_open_to_close(tmp_path: Path):
    agent = _writer("a.py", "A = 1\n")
    other = _writer("b.py", "B = 1\n")
    async with agent.session(cwd=tmp_path) as session:
        await session.execute("one")
        with pytest.raises(FolderBusyError):
            await other.execute("between the session's requests", cwd=tmp_path)
        with pytest.raises(FolderBusyError):
            await other.session(cwd=tmp_path).open()
        assert set((await session.execute("two")).files) == {"a.py"}
    assert set((await other.execute("after", cwd=tmp_path)).files) == {"b.py"}


async def test_analysis_runs_share_the_folder_but_not_with_a_writer(tmp_path: Path):
    started, go = asyncio.Event(), asyncio.Event()

    async def look(ctx: TurnContext):
        started.set()
        await go.wait()
        return "read it"

    reader = AutonomousCodingAgent(backend=FunctionBackend, turn=look, mode="analysis", validators=[])
    quick = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: "read it too", mode="analysis",
                                  validators=[])
    running = asyncio.create_task(reader.execute("look", cwd=tmp_path))
    await started.wait()
    assert (await quick.execute("look as well", cwd=tmp_path)).status.value == "completed"
    with pytest.raises(FolderBusyError):
        await _writer("a.py", "A = 1\n").execute("write while they read", cwd=tmp_path)
    go.set()
    assert (await running).status.value == "completed"


# ------------------------------------------------------------------------------ two processes


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}


def _blocking_writer(release: threading.Event):
    """Writes the file the prompt names; the first answer waits for `release`."""

    def handler(request: ModelRequest):
        if request.tool_results:
            return reply(text("Done."))
        release.wait(60)
        name = "a.py" if "a.py" in str(request.messages[0]) else "b.py"
        return reply(tool_call("write_file", {"path": name, "content": f"NAME = {name!r}\n"}))

    return handler


def _run(server: ScriptedModelServer, prompt: str, cwd: Path) -> list[str]:
    return [*AGENTER, "run", prompt, "--cwd", str(cwd), "--json", "--option", f"base_url={server.base_url}",
            "--option", "api_key=sk-test"]


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def test_two_agenter_runs_in_one_folder_the_second_is_refused(tmp_path: Path):
    release = threading.Event()
    with ScriptedModelServer(handler=_blocking_writer(release)) as server:
        first = subprocess.Popen(_run(server, "Write a.py", tmp_path), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=_env())
        try:
            server.wait_for_requests(1, timeout=60)  # the first run is in its turn
            second = subprocess.run(_run(server, "Write b.py", tmp_path), capture_output=True, text=True,
                                    timeout=60, env=_env())
            release.set()
            out, err = first.communicate(timeout=60)
        finally:
            release.set()
            _stop(first)
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"agenter: another agenter run (pid {first.pid}) is working in ")
    assert HINT in lines[0] and second.stdout == ""
    assert first.returncode == 0, err
    end = json.loads(out.splitlines()[-1])["data"]
    assert end["status"] == "completed" and sorted(end["result"]["files"]) == ["a.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]
    assert not _lock_file(tmp_path).exists()


def test_a_killed_run_leaves_the_folder_free(tmp_path: Path):
    release = threading.Event()
    with ScriptedModelServer(handler=_blocking_writer(release)) as server:
        crashed = subprocess.Popen(_run(server, "Write a.py", tmp_path), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=_env())
        try:
            server.wait_for_requests(1, timeout=60)
            os.kill(crashed.pid, signal.SIGKILL)
            crashed.wait(timeout=30)
        finally:
            if crashed.poll() is None:
                crashed.kill()
                crashed.wait(timeout=30)
        release.set()
        after = subprocess.run(_run(server, "Write b.py", tmp_path), capture_output=True, text=True, timeout=90,
                               env=_env())
    assert after.returncode == 0, after.stderr
    assert (tmp_path / "b.py").is_file() and not _lock_file(tmp_path).exists()  # the stale file is gone too
