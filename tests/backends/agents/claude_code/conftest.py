"""claude-code's fixtures: its case (cases.py) for the kit, the CLI's environment with the run
token, and the leftover check that also knows the CLI's own children."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agenter.host import _pids

from ...kit import TOKEN_ENV, Case, leftovers
from . import cases


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return cases.claude_code(tmp_path)


@pytest.fixture
def cli_env(tmp_path_factory: pytest.TempPathFactory, run_token: str) -> dict[str, str]:
    """The CLI's own HOME and TMPDIR (outside the workspace), no retries of 5xx, no deferred tool
    loading, and this test's run token (see `run_token` in tests/conftest.py)."""
    root = tmp_path_factory.mktemp("claude-cli")
    home, tmp = root / "home", root / "tmp"
    home.mkdir()
    tmp.mkdir()
    return {"HOME": str(home), "TMPDIR": str(tmp), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_MAX_RETRIES": "0", TOKEN_ENV: run_token}


@pytest.fixture
def no_leftover_cli(cli_env: dict[str, str]) -> Iterator[None]:
    """Fails the test if a `claude` child of this process, or anything a CLI of this test started
    (it carries the run token), outlives it; kills what it finds."""
    cli = cases.bundled_cli() or "claude"
    token = cli_env[TOKEN_ENV]

    def describe(pid: int) -> str:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[:2]
        except OSError:
            return "(gone)"
        return f"{command} (state {state[0]}, parent {state[1]})"

    before = _pids.children_running(cli) | leftovers(token)
    yield
    alive = {pid for pid in (_pids.children_running(cli) | leftovers(token)) - before if _pids.is_alive(pid)}
    described = {pid: describe(pid) for pid in alive}
    _pids.kill(alive)
    assert not alive, f"processes left running: {described}"
