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
from pathlib import Path

_PROC = Path("/proc")


def parent_map() -> dict[int, int]:
    """pid -> parent pid for every process we can see (empty where /proc is missing)."""
    parents: dict[int, int] = {}
    if not _PROC.is_dir():
        return parents
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..." — comm may contain spaces and parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2:
            with contextlib.suppress(ValueError):
                parents[int(entry.name)] = int(fields[1])
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
    members: set[int] = set()
    if not _PROC.is_dir():
        return members
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        # fields: state ppid pgrp session ...
        if len(fields) >= 4 and fields[3] == str(session_id) and fields[0] not in ("Z", "X"):
            members.add(int(entry.name))
    return members


def with_environment(name: str, value: str) -> set[int]:
    """Live processes whose environment holds `name=value`: a mark set on an agent program
    finds everything it started, even after it died and its children were reparented."""
    needle = f"{name}={value}".encode()
    found: set[int] = set()
    if not _PROC.is_dir():
        return found
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and is_alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def is_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
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
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def kill(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
