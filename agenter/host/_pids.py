"""Process bookkeeping from /proc: one pass over the process table finds everything a run left.

An agent program may start children that leave its process group (setsid), or outlive it and be
reparented to init. Every process agenter starts carries a mark in its environment
(MARK_ENV=<random>), inherited by everything below it, so one scan finds them all: members of
the program's group or session, its descendants while it lives, and anything with the mark.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_DEAD = (b"Z", b"X")  # zombie, dead: gone for our purposes


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgrp: int
    session: int
    marked: bool


def _stat_fields(stat: bytes) -> list[bytes]:
    """The fields after "pid (comm)": state ppid pgrp session ... (comm may hold spaces and ")")."""
    return stat.rsplit(b")", 1)[-1].split()


def _pid_dirs() -> Iterator[Path]:
    if not _PROC.is_dir():
        return
    with contextlib.suppress(OSError):
        for entry in _PROC.iterdir():
            if entry.name.isdigit():
                yield entry


def scan(mark: tuple[str, str] | None = None) -> dict[int, ProcInfo]:
    """Every live process we can see; `marked` is set where its environment holds name=value."""
    needle = f"{mark[0]}={mark[1]}".encode() if mark else None
    found: dict[int, ProcInfo] = {}
    for entry in _pid_dirs():
        try:
            fields = _stat_fields((entry / "stat").read_bytes())
        except OSError:
            continue
        if len(fields) < 4 or fields[0] in _DEAD:
            continue
        marked = False
        if needle is not None:
            with contextlib.suppress(OSError):
                marked = needle in (entry / "environ").read_bytes().split(b"\0")
        with contextlib.suppress(ValueError):
            pid = int(entry.name)
            found[pid] = ProcInfo(pid, int(fields[1]), int(fields[2]), int(fields[3]), marked)
    return found


def family(table: dict[int, ProcInfo], *, roots: Iterable[int] = (), groups: Iterable[int] = (),
           sessions: Iterable[int] = ()) -> set[int]:
    """Processes of `table` that are marked, below a root, or in one of the groups or sessions."""
    groups, sessions = set(groups), set(sessions)
    chosen = {p.pid for p in table.values() if p.marked or p.pgrp in groups or p.session in sessions}
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    stack = [r for r in roots if r in table]
    chosen.update(stack)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in chosen:
                chosen.add(child)
                stack.append(child)
    chosen.discard(os.getpid())
    return chosen


def parent_map() -> dict[int, int]:
    """pid -> parent pid for every process we can see (empty where /proc is missing)."""
    return {pid: info.ppid for pid, info in scan().items()}


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (children, grandchildren, ...)."""
    return family(scan(), roots=[pid]) - {pid}


def children_running(executable: str) -> set[int]:
    """Our own child processes whose executable is `executable` (a fallback pid lookup)."""
    me = os.getpid()
    target = os.path.realpath(executable)
    found = set()
    for pid, info in scan().items():
        if info.ppid != me:
            continue
        with contextlib.suppress(OSError):
            if os.path.realpath(os.readlink(f"/proc/{pid}/exe")) == target:
                found.add(pid)
    return found


def session_members(session_id: int) -> set[int]:
    """Every live process in session `session_id` (a setsid() leader's pid), whatever its group."""
    return family(scan(), sessions=[session_id])


def with_environment(name: str, value: str) -> set[int]:
    """Live processes whose environment holds `name=value`."""
    return {pid for pid, info in scan((name, value)).items() if info.marked}


def is_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        if _PROC.is_dir():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _stat_fields(stat)[0] not in _DEAD


def kill(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
