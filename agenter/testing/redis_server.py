"""A redis-server of its own for tests and benchmarks: a free port on 127.0.0.1, a temporary
folder, no persistence unless asked, ended by its pid.

    from agenter.testing.redis_server import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        ...  # skip: scripts/install-system-deps.sh installs Debian's redis-server
    with RedisServer() as server:
        store = RedisConversationStore(server.url)

The server is the distribution's `redis-server` program, started in the foreground with its
settings on the command line (no configuration file is read). It is ended by its pid (SIGTERM,
then SIGKILL after `STOP_SECONDS`) on `stop()`, on leaving the `with` block, also when what ran
inside failed; on Linux it is also sent SIGTERM by the kernel when the thread that started it
ends (a test runner killed outright leaves no server behind), so start it from a thread that
lives as long as the server is needed.

Needs only the standard library (readiness is a PING over a plain socket).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "RedisServerError", "free_port", "redis_server_binary"]

#: Seconds a server may take to answer PING after it was started.
START_SECONDS = 15.0
#: Seconds a server may take to end after SIGTERM before it is killed.
STOP_SECONDS = 10.0
#: Ports tried when the free port found was taken before the server bound it.
_PORT_TRIES = 3
#: Settings every server gets: loopback only, no snapshots, no append-only file.
_BASE_SETTINGS = ("--bind", "127.0.0.1", "--protected-mode", "yes", "--save", "", "--appendonly", "no",
                  "--daemonize", "no")


class RedisServerError(RuntimeError):
    """The server did not start (the message has the end of its log)."""


def redis_server_binary() -> str | None:
    """The path of `redis-server` on PATH (or in /usr/sbin, /usr/bin), None when absent."""
    return shutil.which("redis-server") or shutil.which("redis-server", path="/usr/sbin:/usr/bin")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """One redis-server process (see the module docstring).

    `settings` are more command-line settings (e.g. "--appendonly", "yes"); they come after the
    defaults, so they override them. `start()` can be called again after `kill()` to restart the
    server on the same port and folder (what it persisted there is read back).
    """

    def __init__(self, *settings: str, binary: str | None = None):
        self.settings = settings
        self.binary = binary or redis_server_binary()
        self.port: int | None = None
        self.folder: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis://127.0.0.1:<port>/0 (after start)."""
        if self.port is None:
            raise RedisServerError("the server was not started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING; RedisServerError when it does not."""
        if self.binary is None:
            raise RedisServerError("redis-server is not installed (Debian's package redis-server; "
                                   "scripts/install-system-deps.sh installs it)")
        if self.process is not None and self.process.poll() is None:
            return self
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="agenter-redis-"))
        fixed = self.port is not None
        for attempt in range(1 if fixed else _PORT_TRIES):
            if not fixed:
                self.port = free_port()
            self._launch()
            try:
                self._wait_ready()
                return self
            except RedisServerError:
                log = self._log_tail()
                self._end()
                if "Address already in use" not in log or attempt == _PORT_TRIES - 1 or fixed:
                    self.stop()
                    raise RedisServerError(f"redis-server did not start on port {self.port}: {log}") from None
        raise AssertionError("unreachable")

    def kill(self) -> None:
        """SIGKILL the server (a crash); its folder stays, for `start()` to restart it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """End the server by its pid and remove its folder. Safe to call more than once."""
        self._end()
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    # ------------------------------------------------------------------ internals
    def _launch(self) -> None:
        assert self.binary is not None and self.folder is not None and self.port is not None
        argv = [self.binary, "--port", str(self.port), "--dir", str(self.folder),
                "--logfile", str(self.folder / "redis.log"), *_BASE_SETTINGS, *self.settings]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, cwd=self.folder, close_fds=True,
                                        preexec_fn=_end_with_parent if sys.platform == "linux" else None)

    def _wait_ready(self) -> None:
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisServerError(f"exited with {self.process.returncode}")
            with contextlib.suppress(OSError):
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith((b"+PONG", b"-NOAUTH")):  # -NOAUTH: ready, with a password
                        return
            time.sleep(0.02)
        raise RedisServerError(f"no answer to PING within {START_SECONDS:.0f} s")

    def _end(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _log_tail(self) -> str:
        if self.folder is None:
            return ""
        try:
            lines = (self.folder / "redis.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(line.strip() for line in lines[-5:])


def _end_with_parent() -> None:
    """In the child before exec: SIGTERM when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG), so a killed test runner leaves no server behind."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        # Arguments 2-5 are unsigned longs: the kernel reads whole registers.
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
