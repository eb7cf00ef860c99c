"""Change detection whose cost follows the change, not the size of the workspace.

A `ChangeDetector` answers what a turn changed: the answer a `WorkspaceSnapshot` taken when the
turn began would give when diffed against one taken when it ended. The tree is walked once, when
the detector starts; from then on an inotify watch on each directory (never inside IGNORED_DIRS)
names the paths to look at again, so a turn that changed ten files costs about ten lstat calls
however large the tree is. Files with other hard links are looked at on every sync, because a
write through another name reaches no watch of theirs.

When the watcher cannot vouch for what happened (its event queue overflowed, the watch limit was
reached, a directory could not be watched, inotify is missing on this platform) the detector
walks the whole tree instead, as a snapshot does: slower, never less exact.

Sessions in the same directory share one watched tree (one walk, one set of watches, one inotify
instance). Everything runs in threads; the event loop only awaits them.

What no inotify-based tool sees, and so neither does this one: a file changed through a memory
map and never closed, or through a hard link made after the detector started outside the
workspace or in a folder it does not watch (IGNORED_DIRS: `node_modules/m.js` linked to `f1`,
then written): the file had one link when it was last looked at, and the kernel reports a new
link to a watch on the file's own inode, not to its folder's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agenter._types import ModifiedFiles
from agenter.sandbox.workspace import IGNORED_DIRS, RACY_WINDOW_NS, _digest

__all__ = ["ChangeDetector", "in_paced_thread", "pace"]

log = logging.getLogger("agenter.sandbox")

# inotify(7) event bits (kernel ABI).
_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_ISDIR = 0x40000000

#: CLOSE_WRITE as well as MODIFY: a write through a memory map raises no MODIFY, its close does.
_WATCH_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
               | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)
#: A virtual environment is ignored, but it stops being one when its pyvenv.cfg goes: its top
#: folder is watched for that name alone.
_VENV_MASK = (_IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE_SELF | _IN_MOVE_SELF
              | _IN_ONLYDIR | _IN_DONT_FOLLOW)
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_DIR_MOVES = _IN_CREATE | _IN_MOVED_TO | _IN_DELETE | _IN_MOVED_FROM
_INO_MASK = (1 << 64) - 1
#: Rounds of reading events in one sync: a process still writing cannot keep a sync going.
_SYNC_ROUNDS = 4
#: A walk makes a syscall per entry, releasing the GIL and taking it back at once: a thread
#: waiting for the GIL (the event loop's) rarely gets it in that gap and can starve for hundreds
#: of milliseconds (CPython's convoy effect). So long loops stop this often until the event loop
#: has run (a sleep would not do on a busy machine: the loop's thread may not be scheduled
#: within it); at most _YIELD_WAIT_S, and a plain sleep when there is no loop to wait for.
_YIELD_EVERY_S = 0.002
_YIELD_WAIT_S = 0.02
_YIELD_FOR_S = 0.0005
#: Threads for all detectors: each one more competing for the GIL is one more the event loop may
#: wait behind, and the work on one tree is serialised by its lock anyway.
_WORKERS = 4
_T = TypeVar("_T")
_pacing = threading.local()


def _pace() -> None:
    """Called by long loops in threads: let the event loop run once _YIELD_EVERY_S of work has passed."""
    now = time.perf_counter()
    if now - getattr(_pacing, "resumed", now) >= _YIELD_EVERY_S:
        loop: asyncio.AbstractEventLoop | None = getattr(_pacing, "loop", None)
        ran = threading.Event()
        try:
            if loop is None:
                raise RuntimeError("no event loop")
            loop.call_soon_threadsafe(ran.set)
        except RuntimeError:  # none, or closed since
            time.sleep(_YIELD_FOR_S)
        else:
            ran.wait(_YIELD_WAIT_S)
        now = time.perf_counter()
    _pacing.resumed = now


#: For other long loops in threads (a session reading every changed file): call it between items.
pace = _pace


def _paced(fn: Callable[[], _T], loop: asyncio.AbstractEventLoop | None = None) -> Callable[[], _T]:
    def run() -> _T:
        _pacing.loop = loop
        _pacing.resumed = time.perf_counter()  # the thread was idle until now
        try:
            return fn()
        finally:
            _pacing.loop = None
    return run


def _key(st: os.stat_result) -> int:
    """(mtime_ns, size, inode), what a snapshot compares, packed into one int: a dict of str to
    int is never visited by the garbage collector, a dict of tuples is."""
    return (st.st_mtime_ns << 128) + (st.st_size << 64) + st.st_ino


def _is_venv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg"))


def _depth(path: str) -> int:
    return path.count("/") if path else -1


class _Tree:
    """What a full walk of one root would list, kept current from inotify events and shared by
    the detectors of that root. Every method runs with `lock` held, in a thread."""

    def __init__(self, root: str, watch: bool, max_watches: int | None):
        self.root = root
        self.lock = threading.Lock()
        self.files: dict[str, int] = {}  # every non-directory entry -> _key
        # Every listed directory ("" is root) -> its names, as dict keys: a dict of str to None
        # is never visited by the garbage collector, a set is (at 100k files, the sets made each
        # full collection, on whichever thread it falls, 8 ms longer).
        self.children: dict[str, dict[str, None]] = {}
        self.unreadable: set[str] = set()
        self.wd_of: dict[str, int] = {}
        self.dir_of: dict[int, str] = {}
        self.venv_wd: dict[int, str] = {}
        self.venv_of: dict[str, int] = {}
        self.recent: dict[str, int] = {}  # regular files modified near or after a look: -> mtime_ns
        self.linked: dict[str, int] = {}  # regular files with more than one link -> inode
        self.new_links: set[int] = set()
        self.digests: dict[str, tuple[int, str | None]] = {}  # path -> (ctime_ns, content digest)
        self.recording: tuple[ChangeDetector, ...] = ()
        self.racy_after = 0
        self.refs = 0
        self.ready = False
        self.closed = False
        self.walks = 0
        self.overflows = 0
        self.max_watches = max_watches
        self.inotify: Any = None
        self.fallback: str | None = None
        if not watch:
            self.fallback = "watching is turned off"
        elif not sys.platform.startswith("linux"):
            self.fallback = "inotify is Linux-only"
        else:
            try:
                from inotify_simple import INotify

                self.inotify = INotify(nonblocking=True)
            except ImportError:
                self.fallback = "inotify_simple is not installed"
            except OSError as exc:  # EMFILE: the per-user limit of inotify instances
                self.fallback = f"inotify is unavailable ({exc.strerror})"

    # ------------------------------------------------------------------ keeping current
    def sync(self) -> None:
        """Bring the picture in line with the disk: read the events, look again at what they name."""
        if self.recording and any(d.closed for d in self.recording):
            self.recording = tuple(d for d in self.recording if not d.closed)
        if self.inotify is None:
            self.walk_all()
            return
        self.racy_after = time.time_ns() - RACY_WINDOW_NS
        for _ in range(_SYNC_ROUNDS):
            if self.inotify is None:
                break
            try:
                events = self.inotify.read(timeout=0)
            except OSError as exc:
                self._stop_watching(f"reading inotify events failed ({exc.strerror})")
                break
            if not events:
                break
            if any(event.mask & _IN_Q_OVERFLOW for event in events):
                # Events were lost: only a walk can say what happened. The events after the
                # overflow are read again next round (harmless: every look is at the disk now).
                self.overflows += 1
                self.walk_all()
                continue
            self._apply(events)
        if self.inotify is None:  # watching stopped on the way: events may be lost
            self.walk_all()
            return
        for path in list(self.linked):
            _pace()
            self._refresh(path)
        self._find_links()

    def walk_all(self) -> None:
        """The full walk, as a snapshot does it (and the watches re-added on the way)."""
        self.walks += 1
        self.racy_after = time.time_ns() - RACY_WINDOW_NS
        self.digests.clear()
        self._scan("", find_links=False)
        self.new_links.clear()

    def racy_digests(self) -> dict[str, str | None]:
        """Digests of the regular files modified within RACY_WINDOW_NS of now (or later): a
        rewrite of one of those may keep its size and timestamp."""
        threshold = time.time_ns() - RACY_WINDOW_NS
        racy: dict[str, str | None] = {}
        for path, mtime in list(self.recent.items()):
            _pace()
            if mtime < threshold:
                del self.recent[path]
                continue
            racy[path] = self.digest_now(path)
        return racy

    def digest_now(self, path: str) -> str | None:
        """The content digest, cached while the file's ctime stays: every write, through any of
        its names, moves the ctime (and a rewrite that keeps size and mtime sets the mtime back
        by hand, which moves it too)."""
        full = self._full(path)
        try:
            ctime = os.lstat(full).st_ctime_ns
        except OSError:
            return None
        cached = self.digests.get(path)
        if cached is not None and cached[0] == ctime:
            return cached[1]
        digest = _digest(Path(full))
        self.digests[path] = (ctime, digest)
        return digest

    def close(self) -> None:
        """Let go of everything, in a thread: freeing a big dict in one call holds the GIL for as
        long as it takes, so the big ones go a chunk at a time."""
        self.closed = True
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None
        for table in (self.files, self.children):
            while table:
                _pace()
                for _ in range(min(len(table), 4096)):
                    table.popitem()
        self.recent, self.digests, self.linked, self.unreadable = {}, {}, {}, set()
        self.wd_of, self.dir_of, self.venv_wd, self.venv_of = {}, {}, {}, {}

    # ------------------------------------------------------------------ events
    def _apply(self, events: list[Any]) -> None:
        deep: set[str] = set()  # folders to list again with all below them
        check: set[str] = set()  # folders whose permissions may have changed
        paths: set[str] = set()
        made: set[str] = set()  # files given a new name in this batch
        written: set[str] = set()  # files written (or their times set) in this batch
        for event in events:
            _pace()
            mask, name = event.mask, event.name
            directory = self.dir_of.get(event.wd)
            if directory is None:
                venv = self.venv_wd.get(event.wd)
                if venv is not None:
                    if mask & _IN_IGNORED:
                        self._unwatch_venv(venv, removed=True)
                    if name == "pyvenv.cfg" or mask & _GONE:
                        deep.add(venv)
                continue  # a watch already dropped: what it saw was read from the disk since
            if mask & _GONE:
                if mask & _IN_IGNORED:  # the kernel dropped the watch: the folder is gone
                    del self.dir_of[event.wd]
                    if self.wd_of.get(directory) == event.wd:
                        del self.wd_of[directory]
                deep.add(directory)
                continue
            if not name:  # the watched folder itself: its mode or times
                check.add(directory)
                continue
            path = f"{directory}/{name}" if directory else name
            if mask & _IN_ISDIR:
                (deep if mask & _DIR_MOVES else check).add(path)
            else:
                paths.add(path)
                if mask & (_IN_CREATE | _IN_MOVED_TO):
                    made.add(path)
                if mask & (_IN_MODIFY | _IN_ATTRIB):
                    written.add(path)
                if name == "pyvenv.cfg":
                    deep.add(directory)
        for path in paths:
            self.digests.pop(path, None)
        for path in sorted(deep, key=_depth):
            self._refresh(path, deep=True)
        for path in sorted(check, key=_depth):
            self._refresh(path)
        for path in sorted(paths, key=_depth):
            _pace()
            self._refresh(path)
        if any(path not in self.files for path in made & written):
            # A name made, written through and removed before this look may have been a second
            # link of another file, which the write changed with no event naming it (the kernel
            # tells the folder of the name written through only): only a walk sees that file.
            self.walk_all()

    def _refresh(self, path: str, deep: bool = False) -> None:
        """Look again at one path (and below it, for a folder that is new or was replaced)."""
        if not path:
            if deep or not self._readable_as_before(""):
                self.walk_all()
            return
        parent, _, name = path.rpartition("/")
        siblings = self.children.get(parent)
        if siblings is None:
            return  # under an ignored folder, or one not listed yet (its own listing covers it)
        full = self._full(path)
        try:
            st: os.stat_result | None = os.lstat(full)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            if name in IGNORED_DIRS or _is_venv(full):
                self._drop(path)
                siblings.pop(name, None)
                if name not in IGNORED_DIRS:
                    self._watch_venv(path, full)
                return
            self._unwatch_venv(path)
            if path in self.files:
                self._forget(path)
            siblings[name] = None
            if deep or path not in self.children or not self._readable_as_before(path):
                self._scan(path, find_links=True)
            return
        self._unwatch_venv(path)
        if path in self.children:  # a folder replaced by a file, or gone
            self._drop(path)
        if st is None:
            if path in self.files:
                self._forget(path)
            siblings.pop(name, None)
        else:
            siblings[name] = None
            self._record(path, st, find_links=True)

    def _readable_as_before(self, directory: str) -> bool:
        try:
            with os.scandir(self._full(directory)):
                readable = True
        except OSError:
            readable = False
        return readable == (directory not in self.unreadable)

    # ------------------------------------------------------------------ listing
    def _scan(self, top: str, find_links: bool) -> None:
        """List `top` and every folder below it, as a snapshot's walk does. `find_links`: look for
        the other names of files with several links (a walk of the whole tree sees them all)."""
        venvs: set[str] = set()
        stack = [top]
        count = 0
        while stack:
            _pace()
            directory = stack.pop()
            full = self._full(directory)
            self._watch(directory, full)  # before listing: nothing after the listing goes unseen
            seen: dict[str, None] = {}
            try:
                scanner = os.scandir(full)
            except OSError:
                self.unreadable.add(directory)
                scanner = None
            if scanner is not None:
                self.unreadable.discard(directory)
                prefix = f"{directory}/" if directory else ""
                with scanner:
                    for entry in scanner:
                        count += 1
                        if not count & 255:
                            _pace()
                        name = entry.name
                        path = prefix + name
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                if name in IGNORED_DIRS:
                                    continue
                                if _is_venv(entry.path):
                                    venvs.add(path)
                                    self._drop(path)
                                    self._watch_venv(path, entry.path)
                                    continue
                                if path in self.files:
                                    self._forget(path)
                                seen[name] = None
                                stack.append(path)
                            else:
                                st = entry.stat(follow_symlinks=False)
                                seen[name] = None
                                if path in self.children:
                                    self._drop(path)
                                self._record(path, st, find_links=find_links)
                        except OSError:
                            continue
            old = self.children.get(directory)
            self.children[directory] = seen
            if old:
                for name in [n for n in old if n not in seen]:
                    self._drop(f"{directory}/{name}" if directory else name)
        below = f"{top}/" if top else ""
        for path in [p for p in self.venv_of if p.startswith(below) and p not in venvs]:
            self._unwatch_venv(path)

    def _record(self, path: str, st: os.stat_result, find_links: bool) -> None:
        key = _key(st)
        regular = stat.S_ISREG(st.st_mode)
        if self.files.get(path) != key:
            self._change(path, key)
            if regular and st.st_mtime_ns >= self.racy_after:
                self.recent[path] = st.st_mtime_ns
            else:
                self.recent.pop(path, None)
        if regular and st.st_nlink > 1:
            if path not in self.linked:
                self.linked[path] = st.st_ino
                if find_links:
                    self.new_links.add(st.st_ino)
        elif path in self.linked:
            del self.linked[path]

    def _find_links(self) -> None:
        """A file newly linked under another name: a write through either changes both, and only
        one of them gets the event. Find the other names (one pass, only when links appear)."""
        if not self.new_links:
            return
        inodes, self.new_links = self.new_links, set()
        found = []
        for count, (path, key) in enumerate(self.files.items()):
            if not count & 1023:
                _pace()
            if key & _INO_MASK in inodes and path not in self.linked:
                found.append(path)
        for path in found:
            self.linked[path] = self.files[path] & _INO_MASK
            self._refresh(path)

    def _change(self, path: str, key: int | None) -> None:
        old = self.files.get(path)
        for detector in self.recording:
            if path not in detector.undo:
                detector.undo[path] = old
        if key is None:
            self.files.pop(path, None)
        else:
            self.files[path] = key
        self.digests.pop(path, None)

    def _forget(self, path: str) -> None:
        self._change(path, None)
        self.recent.pop(path, None)
        self.linked.pop(path, None)

    def _drop(self, path: str) -> None:
        """Forget a path: a file, or a folder with everything listed below it."""
        if path in self.files:
            self._forget(path)
        if path not in self.children:
            return
        stack = [path]
        while stack:
            directory = stack.pop()
            names = self.children.pop(directory, {})
            self.unreadable.discard(directory)
            self._unwatch(directory)
            _pace()
            for name in names:
                child = f"{directory}/{name}"
                if child in self.children:
                    stack.append(child)
                elif child in self.files:
                    self._forget(child)
        below = path + "/"
        for venv in [p for p in self.venv_of if p.startswith(below)]:
            self._unwatch_venv(venv)

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path) if path else self.root

    # ------------------------------------------------------------------ watches
    def _watch(self, directory: str, full: str) -> None:
        if self.inotify is None:
            return
        if self.max_watches is not None and directory not in self.wd_of and len(self.wd_of) >= self.max_watches:
            self._stop_watching(f"more than {self.max_watches} folders to watch")
            return
        try:
            wd = self.inotify.add_watch(full, _WATCH_MASK)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR) and directory:
                return  # gone already; the event in its parent says so
            if exc.errno == errno.ENOSPC:
                self._stop_watching("the inotify watch limit is reached (fs.inotify.max_user_watches)")
            else:
                self._stop_watching(f"cannot watch {directory or '.'} ({exc.strerror})")
            return
        venv = self.venv_wd.pop(wd, None)  # the same folder, no longer a virtual environment
        if venv is not None:
            self.venv_of.pop(venv, None)
        previous = self.wd_of.get(directory)
        if previous is not None and previous != wd and self.dir_of.get(previous) == directory:
            self._remove_watch(previous)  # another folder had this path before
            del self.dir_of[previous]
        moved_from = self.dir_of.get(wd)
        if moved_from is not None and moved_from != directory and self.wd_of.get(moved_from) == wd:
            del self.wd_of[moved_from]  # this folder was listed under its old path
        self.wd_of[directory] = wd
        self.dir_of[wd] = directory

    def _unwatch(self, directory: str) -> None:
        wd = self.wd_of.pop(directory, None)
        if wd is not None and self.dir_of.get(wd) == directory:
            del self.dir_of[wd]
            self._remove_watch(wd)

    def _watch_venv(self, path: str, full: str) -> None:
        if self.inotify is None or path in self.venv_of:
            return
        try:
            wd = self.inotify.add_watch(full, _VENV_MASK)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                self._stop_watching(f"cannot watch {path} ({exc.strerror})")
            return
        self.venv_wd[wd] = path
        self.venv_of[path] = wd

    def _unwatch_venv(self, path: str, removed: bool = False) -> None:
        wd = self.venv_of.pop(path, None)
        if wd is not None and self.venv_wd.get(wd) == path:
            del self.venv_wd[wd]
            if not removed:
                self._remove_watch(wd)

    def _remove_watch(self, wd: int) -> None:
        if self.inotify is not None:
            try:
                self.inotify.rm_watch(wd)
            except OSError:  # EINVAL: the kernel dropped it already (folder deleted)
                pass

    def _stop_watching(self, reason: str) -> None:
        log.info("change detection in %s walks the tree from now on: %s", self.root, reason)
        self.fallback = reason
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None
        self.wd_of, self.dir_of, self.venv_wd, self.venv_of = {}, {}, {}, {}


def _close_when_free(tree: _Tree) -> None:
    with tree.lock:
        if tree.inotify is not None or tree.files:
            tree.close()


_trees: dict[tuple[str, bool, int | None], _Tree] = {}
_trees_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="agenter-changes")
        return _pool


async def _in_thread(fn: Callable[[], _T]) -> _T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), _paced(fn, loop))


_readers: concurrent.futures.ThreadPoolExecutor | None = None
#: Two, not one: a session reading many files, or a file on a stalled network mount, must not
#: hold up every other session's result.
_READERS = 2


def _forget_pools() -> None:
    """A forked child has the executors but not their threads: it starts its own."""
    global _pool, _readers
    _pool = _readers = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


async def in_paced_thread(fn: Callable[[], _T]) -> _T:
    """`fn` in agenter's reading threads, where `pace()` lets the loop run every few milliseconds
    of its work (see _YIELD_EVERY_S). Few threads for every session (_READERS): reading is system
    calls, each giving up the GIL and taking it back, and with many such threads the event loop
    rarely wins it back between them (50 sessions ending at once: their reading cost 0.6-1.1 s of
    CPU in the default executor's threads, 0.2-0.3 s in one thread, 0.3-0.5 s in two)."""
    global _readers
    loop = asyncio.get_running_loop()
    with _pool_lock:
        if _readers is None:
            _readers = concurrent.futures.ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="agenter-read")
        readers = _readers
    return await loop.run_in_executor(readers, _paced(fn, loop))


class ChangeDetector:
    """What changed in one session's workspace during each turn (see the module docstring).

    `start()` takes the first picture (`begin_turn` does, if it was not called); `begin_turn()`
    folds whatever changed since the last turn into the baseline, so the work of validators or
    of the user between turns is never the next turn's; `end_turn()` returns what changed since
    `begin_turn()`; `changes_so_far()` the same while the turn runs. `close()` never blocks.

    `watch=False` walks the tree at every sync instead of watching it; `max_watches` caps the
    folders one tree may watch before it falls back to walking.
    """

    def __init__(self, root: str | os.PathLike[str], *, watch: bool = True, max_watches: int | None = None):
        self.root = os.path.realpath(root)
        self._key = (self.root, watch, max_watches)
        self._tree: _Tree | None = None
        self.closed = False
        self.in_turn = False
        self.undo: dict[str, int | None] = {}  # path -> its key when the turn began (None: absent)
        self._racy: dict[str, str | None] = {}

    # ------------------------------------------------------------------ the API
    async def start(self) -> None:
        await _in_thread(self._attach)

    async def begin_turn(self) -> None:
        await _in_thread(self._begin)

    async def end_turn(self) -> ModifiedFiles:
        return await _in_thread(self._end)

    async def changes_so_far(self) -> ModifiedFiles:
        return await _in_thread(self._so_far)

    def close(self) -> None:
        """Let go of the tree; the last detector of a tree closes its inotify instance (now, or
        when the thread working on it finishes)."""
        with _trees_lock:
            if self.closed:
                return
            self.closed = True
            self.in_turn = False
            tree, self._tree = self._tree, None
            if tree is None:
                return
            tree.refs -= 1
            if tree.refs > 0:
                return
            if _trees.get(self._key) is tree:
                del _trees[self._key]
            tree.closed = True
        # Never here: closing an inotify instance with thousands of watches and freeing the
        # picture take milliseconds. (A thread still working on the tree closes it too.)
        try:
            _executor().submit(_paced(functools.partial(_close_when_free, tree)))
        except RuntimeError:  # the interpreter is shutting down: no new threads
            _close_when_free(tree)

    @property
    def mode(self) -> str:
        """"watching" or "walking" (then `fallback` says why)."""
        tree = self._tree
        return "watching" if tree is not None and tree.inotify is not None else "walking"

    @property
    def fallback(self) -> str | None:
        tree = self._tree
        return tree.fallback if tree is not None else None

    @property
    def walks(self) -> int:
        """Full walks of the tree so far (shared with the other detectors of the same root)."""
        tree = self._tree
        return tree.walks if tree is not None else 0

    # ------------------------------------------------------------------ in threads
    def _attach(self) -> _Tree | None:
        if self._key[1] and sys.platform.startswith("linux"):
            with contextlib.suppress(ImportError):
                import inotify_simple  # noqa: F401  (its first import takes a while: not under the lock)
        with _trees_lock:
            if self.closed:
                return None
            if self._tree is None:
                tree = _trees.get(self._key)
                if tree is None:
                    tree = _trees[self._key] = _Tree(*self._key)
                tree.refs += 1
                self._tree = tree
            tree = self._tree
        with tree.lock:
            if not tree.closed:
                if tree.ready:
                    tree.sync()
                else:
                    tree.walk_all()
                    tree.ready = True
            self._close_if_released(tree)
        return tree

    def _begin(self) -> None:
        tree = self._tree or self._attach()
        if tree is None:
            return
        with tree.lock:
            if not tree.closed and not self.closed:
                tree.sync()
                self.undo = {}
                tree.recording = tuple(d for d in tree.recording if d is not self) + (self,)
                self._racy = tree.racy_digests()
                self.in_turn = True
            self._close_if_released(tree)

    def _end(self) -> ModifiedFiles:
        tree = self._tree
        if tree is None or not self.in_turn:
            return ModifiedFiles()
        with tree.lock:
            changes = ModifiedFiles()
            if not tree.closed:
                tree.sync()
                changes = self._diff(tree)
                tree.recording = tuple(d for d in tree.recording if d is not self)
            self.in_turn = False
            self.undo, self._racy = {}, {}
            self._close_if_released(tree)
        return changes

    def _so_far(self) -> ModifiedFiles:
        tree = self._tree
        if tree is None or not self.in_turn:
            return ModifiedFiles()
        with tree.lock:
            changes = ModifiedFiles()
            if not tree.closed:
                tree.sync()
                changes = self._diff(tree)
            self._close_if_released(tree)
        return changes

    def _diff(self, tree: _Tree) -> ModifiedFiles:
        files = tree.files
        written: set[str] = set()
        deleted: set[str] = set()
        created: set[str] = set()
        for path, old in self.undo.items():
            new = files.get(path)
            if new == old:
                continue  # created and deleted within the turn, or put back as it was
            (deleted if new is None else written).add(path)
            if old is None and new is not None:
                created.add(path)
        for path, digest in self._racy.items():
            # Same size, same timestamp: only the content can tell (an lstat unless the ctime moved).
            if path not in written and path in files and tree.digest_now(path) != digest:
                written.add(path)
        return ModifiedFiles(written=written, deleted=deleted, created=created)

    @staticmethod
    def _close_if_released(tree: _Tree) -> None:
        if tree.closed and (tree.inotify is not None or tree.files):  # closed while this thread worked
            tree.close()
