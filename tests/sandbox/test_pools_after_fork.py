"""agenter's thread pools (tool work, change detection, reading changed files) in a forked child:
the child has the executors but not their threads, so it must start its own instead of queueing
work no thread will run."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from agenter.backends import base
from agenter.sandbox.changes import in_paced_thread


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_a_forked_child_runs_work_on_pools_the_parent_started() -> None:
    async def read() -> int:
        return await in_paced_thread(lambda: 1)

    assert asyncio.run(read()) == 1
    assert base._tool_executor().submit(lambda: 1).result(timeout=5) == 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 1
        try:
            import signal

            signal.alarm(10)  # a hang ends the child, and the test fails on its status
            if asyncio.run(read()) == 1 and base._tool_executor().submit(lambda: 2).result(timeout=5) == 2:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
