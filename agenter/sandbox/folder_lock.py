"""One run at a time in a folder: the lock a run holds on the folder it works in.

A run learns what its agent changed by watching the whole folder, and its validators check the
whole folder. Two runs in one folder at once would each claim what the other wrote, and one
would fail on the other's half-done work. So a run that may change files holds its folder's
lock exclusively, and a second run there is refused at once with `FolderBusyError`, which
names the holder's process and the ways to run agents in parallel (a folder each). Runs in
analysis mode change nothing: they share the lock with each other, never with a run that writes.

The lock is flock(2) on a file outside the folder, named by a hash of the folder's real path,
in a folder of this user's (`/run/user/UID/agenter/folders` when that exists, else
`$TMPDIR/agenter-UID/folders`). So two processes, and two runs of one process, meet on the same
file; nothing is written into the workspace; the kernel drops the lock when the holder's process
ends, so a crashed run leaves no stale lock. The last holder removes the file (a killed
holder's file stays, unlocked and a few bytes long, until the next run in that folder removes it).

Limits: the folder itself, not the folders in it (a run in `repo/` and one in `repo/sub/` are
not refused, though the first sees what the second writes); runs of another user, or on another
machine sharing the folder over the network, are not seen. When the lock file cannot be made
(no writable temporary folder), the run goes ahead unguarded and a warning is logged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

from agenter._errors import ConfigurationError

__all__ = ["FolderBusyError", "FolderLock", "claim_folder"]

log = logging.getLogger("agenter.sandbox")

#: A reader that releases last briefly holds the lock alone (to remove its file); a reader
#: arriving at that moment looks again this many times, a millisecond apart, before refusing.
_SHARED_RETRIES = 3
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class FolderBusyError(ConfigurationError):
    """Another agenter run is working in the folder (see the module docstring). `holder` is its
    process id when known."""

    def __init__(self, folder: str, holder: int | None):
        who = "another agenter run" if holder is None else (
            "another agenter run in this process" if holder == os.getpid() else f"another agenter run (pid {holder})")
        super().__init__(
            f"{who} is working in {folder!r}, and two runs in one folder would mix up their changes; run one "
            "after the other, or give each run a folder of its own: `agenter batch` (a workspace per task), "
            "`git worktree add`, or `agenter plan --parallel N`", parameter="cwd")
        self.folder = folder
        self.holder = holder


def claim_folder(folder: str | os.PathLike[str], mode: str = "autonomous") -> FolderLock:
    """The lock a run in `mode` takes on `folder` (not taken yet): shared in analysis mode,
    exclusive otherwise. Use it as `with` or `async with` around the run."""
    return FolderLock(folder, shared=mode == "analysis")


class FolderLock:
    """A run's hold on its folder (see the module docstring). `acquire()` raises FolderBusyError
    when the folder is taken; `release()` is idempotent. Not re-entrant: one run, one lock."""

    def __init__(self, folder: str | os.PathLike[str], *, shared: bool = False):
        self.folder = os.path.realpath(folder)
        self.shared = shared
        self._fd: int | None = None
        self._path: Path | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError(f"the lock on {self.folder!r} is already held")
        directory = _lock_directory()
        if directory is None:
            return
        path = directory / f"{_key(self.folder)}.lock"
        retries = _SHARED_RETRIES if self.shared else 0
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError as exc:
                log.warning("cannot lock %s (%s): the run goes ahead without the one-run-per-folder guard",
                            self.folder, exc)
                return
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _holder(fd)
                replaced = not _same_file(fd, path)
                os.close(fd)
                if exc.errno not in _BUSY:
                    log.warning("cannot lock %s (%s): the run goes ahead without the guard", self.folder, exc)
                    return
                if replaced:
                    continue  # its last holder removed it meanwhile: the folder is free, try the new file
                if retries > 0:
                    retries -= 1
                    time.sleep(0.001)
                    continue
                raise FolderBusyError(self.folder, holder) from None
            if _same_file(fd, path):
                break
            os.close(fd)  # removed between our open and our lock: that file is no one's any more
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            if not self.shared:
                os.write(fd, f"{os.getpid()}\n".encode())
        self._fd, self._path = fd, path

    def release(self) -> None:
        fd, path = self._fd, self._path
        if fd is None or path is None:
            return
        self._fd = self._path = None
        try:
            # The last holder removes the file: alone on it (a reader asks to be), it unlinks it
            # while still holding it, so a newcomer that opened it sees it replaced and retries.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, path):
                path.unlink()
        except OSError:
            pass  # other readers hold it still: the last of them removes it
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)  # also for a copy of the descriptor a fork made
            os.close(fd)

    def __del__(self) -> None:
        # A lock nobody released (a session never closed) must not hold the folder for the
        # rest of the process.
        with contextlib.suppress(Exception):
            self.release()

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    async def __aenter__(self) -> FolderLock:
        self.acquire()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"FolderLock({self.folder!r}, shared={self.shared}, {state})"


def _key(folder: str) -> str:
    import hashlib

    return hashlib.sha256(os.fsencode(folder)).hexdigest()[:32]


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


def _holder(fd: int) -> int | None:
    """The process id an exclusive holder wrote into the file (None for readers, or unknown)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _lock_directory() -> Path | None:
    """This user's folder of lock files, made if missing; None (logged) when there is none."""
    import tempfile

    uid = os.getuid()
    runtime = Path(f"/run/user/{uid}")
    if runtime.is_dir() and os.access(runtime, os.W_OK | os.X_OK):
        base = runtime / "agenter"
    else:
        base = Path(tempfile.gettempdir()) / f"agenter-{uid}"
    folder = base / "folders"
    try:
        for part in (base, folder):
            with contextlib.suppress(FileExistsError):
                part.mkdir(mode=0o700)
            info = os.lstat(part)
            # In a shared temporary folder another user could have made it first: use only ours.
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o022:
                raise PermissionError(f"{part} is not a private folder of this user")
    except OSError as exc:
        log.warning("no folder for run locks (%s): runs go ahead without the one-run-per-folder guard", exc)
        return None
    return folder
