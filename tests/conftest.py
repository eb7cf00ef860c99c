"""What tests across the tree share: the scripted model server (the plugin), a workspace, a
diverged git repository, a script server for `curl | sh` attempts, a run token whose
processes must not outlive the test, and a user's cache private to the test run."""

from __future__ import annotations

import os
import signal
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenter.testing._scene import ScriptServer, diverged_repo

pytest_plugins = ["agenter.testing.pytest_plugin"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """`tmp_path/repo`, a workspace holding app.py (not a git repository)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """`tmp_path/repo` as a git repository whose main has diverged from its remote
    `tmp_path/remote.git` (only a force push would rewrite the remote)."""
    return diverged_repo(tmp_path)


@pytest.fixture
def script_server(tmp_path: Path) -> Iterator[ScriptServer]:
    """A web server whose script, piped to a shell, would create `tmp_path/pwned`."""
    server = ScriptServer(tmp_path / "pwned")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def run_token() -> Iterator[str]:
    """A token for the environment of the programs a test starts (under `TOKEN_ENV` of
    tests/backends/kit.py); afterwards no process may carry it. Leftovers are killed by pid, so
    a failing test never leaves processes behind."""
    from backends.kit import no_leftovers

    token = uuid.uuid4().hex
    with no_leftovers(token):
        yield token


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user's cache for the whole run (XDG_CACHE_HOME, also for child processes): agenter's
    own agent keeps every conversation there when a run has no log_dir (agenter.store), and a
    test run must leave nothing in the developer's ~/.cache."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = saved


# A shell without job control starts a background command (`make test &`, nohup, setsid from a
# script) with SIGINT ignored, Python keeps it so, and every child the suite starts inherits it:
# the Ctrl-C tests then fail. Seen in a clean-clone run started that way: the first test of each
# pytest process was named by the guard below. Children of a process whose SIGINT has a handler
# start with the default action, so pytest gets Python's usual handler before any test.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _sigint_left_as_python_sets_it(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test (or a library it runs in this process) that leaves SIGINT ignored or blocked makes
    every later child process deaf to Ctrl-C (children inherit both): the suite's Ctrl-C tests
    then fail though they pass alone. Put back after each test, and name the test that did it."""
    yield
    handler = signal.getsignal(signal.SIGINT)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if handler is not signal.default_int_handler or blocked:
        warnings.warn(f"{request.node.nodeid} left SIGINT {'blocked' if blocked else repr(handler)}; restored",
                      stacklevel=1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
