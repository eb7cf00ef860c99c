"""Process bookkeeping from /proc, for agent processes that agenter does not spawn itself.

claude-agent-sdk starts `claude` in our process group and only waits for that one process;
OpenHands' terminal is an interactive shell whose jobs get process groups of their own. Either
way, commands the agent started could outlive it: these helpers find them (descendants, or
members of a session) so the backend can end them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

_PROC = Path("/proc")
_DEAD = (b"Z", b"X")  # zombie, dead: gone for our purposes


def _proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, content of /proc/<pid>/<name>) for every process we may read; none without /proc."""
    if not _PROC.is_dir():
        return
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / name).read_bytes()
            except OSError:
                continue


def _stat_fields(stat: bytes) -> list[bytes]:
    """The fields after "pid (comm)": state ppid pgrp session ... (comm may hold spaces and ")")."""
    return stat.rsplit(b")", 1)[-1].split()


def parent_map() -> dict[int, int]:
    """pid -> parent pid for every process we can see (empty where /proc is missing)."""
    parents: dict[int, int] = {}
    for pid, stat in _proc_files("stat"):
        fields = _stat_fields(stat)
        if len(fields) >= 2:
            with contextlib.suppress(ValueError):
                parents[pid] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for child, parent in parent_map().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def children_running(executable: str) -> set[int]:
    """Our own child processes whose executable is `executable` (a fallback pid lookup)."""
    me = os.getpid()
    target = os.path.realpath(executable)
    found = set()
    for pid, parent in parent_map().items():
        if parent != me:
            continue
        with contextlib.suppress(OSError):
            if os.path.realpath(os.readlink(f"/proc/{pid}/exe")) == target:
                found.add(pid)
    return found


def session_members(session_id: int) -> set[int]:
    """Every live process in session `session_id` (a setsid() leader's pid), whatever its group."""
    wanted = str(session_id).encode()
    return {pid for pid, stat in _proc_files("stat")
            if len(fields := _stat_fields(stat)) >= 4 and fields[3] == wanted
            and fields[0] not in _DEAD}


def with_environment(name: str, value: str) -> set[int]:
    """Live processes whose environment holds `name=value`: a mark set on an agent program
    finds everything it started, even after it died and its children were reparented."""
    needle = f"{name}={value}".encode()
    return {pid for pid, environ in _proc_files("environ")
            if needle in environ.split(b"\0") and is_alive(pid)}


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


def kill(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
