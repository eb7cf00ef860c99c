"""A workspace per task: a checkout or a copy of the repository that the task may change freely.

The source is never written to. For a local git repository the workspace is a repository of its
own that borrows the source's objects through its alternates file (what `clone --shared` does;
nothing is added to the source's .git, as `git worktree add` would), with HEAD detached at the
commit; what the agent commits goes to the workspace's own object store. A git URL is fetched
once per machine into a bare mirror under the git cache (guarded by a file lock, so worker
processes on one node share it) and cloned from there; a plain folder is copied. The diff is
`git diff` against the commit (untracked files included, ignored ones not) or, for a copy, a
comparison with the source folder.

A task's diff holds the files its session changed (the result's `files`), not everything that
differs: a test command run as a validator writes `.pytest_cache/` and `__pycache__/*.pyc`
into the workspace, and those are no part of the agent's work (nor of a SWE-bench patch).
"""
from __future__ import annotations

import asyncio
import contextlib
import difflib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Collection, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from agenter._errors import AgenterError
from agenter.host.process import run_process
from agenter.host.redact import Redactor

#: Local git commands (checkout, add, diff) and network ones (clone, fetch).
LOCAL_TIMEOUT = 300.0
NETWORK_TIMEOUT = 1800.0
#: A mirror fetched this recently serves branch and tag names as they are.
MIRROR_FRESH_SECONDS = 60.0

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:")  # git@github.com:owner/repo.git
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
T = TypeVar("T")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_FULL_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
#: Bytes of pathspecs given to one git command (far below the kernel's limit on arguments).
_PATHSPEC_BYTES = 100_000
_GIT_LOCATION = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                           "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES"})


class WorkspaceError(AgenterError):
    """The task's workspace could not be made (or its diff taken): names the step and the cause."""


def is_git_url(repository: str) -> bool:
    return bool(_URL.match(repository) or _SCP_LIKE.match(repository))


def public_url(text: str) -> str:
    """Text with credentials in URLs (https://user:token@host) left out."""
    return _USERINFO.sub("", text)


def default_git_cache() -> Path:
    """Where bare mirrors of git URLs live on this machine (shared by every batch and worker)."""
    return Path(tempfile.gettempdir()) / "agenter-git-cache"


def _git_env() -> dict[str, str]:
    # Variables that point git at another repository (a batch started from a git hook has them).
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION}
    env["LC_ALL"] = "C"  # git's messages in English: a few are recognised by their words
    env["GIT_TERMINAL_PROMPT"] = "0"  # a private URL fails at once instead of waiting for a password
    env.setdefault("GIT_ASKPASS", "/bin/true")
    return env


async def _git(*args: str, cwd: Path, timeout: float = LOCAL_TIMEOUT, step: str) -> str:
    """Run git; a failure is a WorkspaceError naming the step, with git's own words."""
    return await _run(["git", *args], cwd=cwd, timeout=timeout, step=step, what=f"git {args[0]}")


async def _git_script(script: str, *args: str, cwd: Path, step: str) -> str:
    """Several git commands in one shell (arguments as $1, $2, ...): one process to start and
    reap instead of several, which is most of a workspace's cost."""
    return await _run(["/bin/sh", "-c", f"set -e; {script}", "sh", *args], cwd=cwd, timeout=LOCAL_TIMEOUT,
                      step=step, what="git")


async def _run(argv: list[str], *, cwd: Path, timeout: float, step: str, what: str) -> str:
    try:
        outcome = await run_process(argv, cwd=cwd, timeout=timeout, env=_git_env(), stdout_limit=None)
    except FileNotFoundError:
        raise WorkspaceError(f"{step}: git is not installed (needed for git repositories)") from None
    if outcome.timed_out:
        raise WorkspaceError(f"{step}: {what} took longer than {timeout:.0f} s")
    if outcome.returncode == 127 and "not found" in outcome.stderr:
        raise WorkspaceError(f"{step}: git is not installed (needed for git repositories)")
    if outcome.returncode != 0:
        words = Redactor()(public_url(outcome.stderr.strip() or outcome.stdout.strip()))
        raise WorkspaceError(f"{step}: {what} failed (exit {outcome.returncode}): {words[-2000:]}")
    return outcome.stdout


@dataclass
class Workspace:
    """A task's own checkout or copy; `cwd` is where the agent works (a subfolder for a task
    whose repository is a folder inside a git repository)."""

    path: Path
    cwd: Path
    kind: str  # "git" or "copy"
    commit: str | None = None
    source: Path | None = None

    async def diff(self, paths: Collection[str] | None = None) -> str:
        """The task's changes as a unified diff (git's, with binary patches, for git workspaces).

        `paths` (relative to `cwd`, as a result's `files` are) limits it to those files, so what
        validators wrote (test caches, bytecode) stays out; a path outside `cwd` is left out.
        None: every difference in the workspace. An empty collection: no diff.
        """
        selected = None if paths is None else self._selected(paths)
        if selected is not None and not selected:
            return ""
        if self.kind == "git":
            return await _on_git_loop(self._git_diff(selected))
        assert self.source is not None
        return await asyncio.to_thread(tree_diff, self.source, self.path, selected)

    def _selected(self, paths: Iterable[str]) -> list[str]:
        """The paths relative to the workspace's top, those that would leave `cwd` dropped."""
        prefix = PurePosixPath(self.cwd.relative_to(self.path).as_posix())  # "." when they are the same
        chosen = set()
        for path in paths:
            relative = PurePosixPath(path)
            if relative.parts and not relative.is_absolute() and ".." not in relative.parts:
                chosen.add((prefix / relative).as_posix())
        return sorted(chosen)

    async def _git_diff(self, paths: list[str] | None) -> str:
        assert self.commit is not None
        parts = []
        for chunk in _chunks(paths) if paths is not None else [[]]:
            parts.append(await _git_script(
                'git add --all && commit=$1 && shift && git --literal-pathspecs -c core.quotepath=off '
                "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.relative=false diff --cached "
                '--binary --no-color --no-ext-diff --no-renames --no-textconv "$commit" -- "$@"',
                self.commit, *chunk, cwd=self.path, step="diff"))
        return "".join(parts)

    async def remove(self) -> None:
        await asyncio.to_thread(remove_tree, self.path)


async def create_workspace(repository: str, commit: str | None, root: Path, name: str, *,
                           git_cache: Path | None = None) -> Workspace:
    """Make the task's workspace under `root` (see the module docstring)."""
    return await _on_git_loop(_create(repository, commit, root, name, git_cache))


# Starting a process from a large Python process holds up its thread for milliseconds (longer
# on a busy machine); with many agents streaming on the caller's loop, the workspaces' git
# commands are started from a loop of their own in a helper thread instead.
_git_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_git_loop_lock = threading.Lock()


def _helper_loop() -> asyncio.AbstractEventLoop:
    global _git_loop
    with _git_loop_lock:
        # A forked child has the variable but not the thread: it starts its own.
        if _git_loop is None or _git_loop[0] != os.getpid() or _git_loop[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agenter-batch-git", daemon=True).start()
            _git_loop = (os.getpid(), loop)
        return _git_loop[1]


async def _on_git_loop(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` on the helper loop; cancelling the caller cancels it there too."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, _helper_loop()))


async def _create(repository: str, commit: str | None, root: Path, name: str, git_cache: Path | None) -> Workspace:
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{_SAFE_NAME.sub('_', name)[:60]}-{uuid.uuid4().hex[:8]}"
    try:
        if is_git_url(repository):
            mirror = await _mirror(repository, commit, git_cache or default_git_cache())
            revision = commit or "HEAD"
            sha = (await _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", cwd=mirror,
                              step=f"find commit {revision!r}")).strip()
            return await _clone_local(mirror, "", sha, target)
        source = Path(repository).expanduser()
        if not source.is_dir():
            raise WorkspaceError(f"repository {repository!r} is not a directory (nor a git URL)")
        if commit is not None or _in_git(source):
            workspace = await _checkout_local(source, commit, target)
            if workspace is not None:
                return workspace
        await asyncio.to_thread(shutil.copytree, source, target, symlinks=True)
        return Workspace(path=target, cwd=target, kind="copy", source=source.resolve())
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(remove_tree, target))
        raise


def _in_git(folder: Path) -> bool:
    """Whether git could see a repository here (a .git in the folder or above it); a plain
    folder is then copied without starting git at all."""
    folder = folder.resolve()
    return any((parent / ".git").exists() for parent in (folder, *folder.parents))


# Find the repository's top, the folder's place in it, its object store and the commit; make a
# repository whose objects are the source's (the alternates file, as `clone --shared` does, but
# without clone's transport: two processes fewer) and check the commit out, detached; print what
# was found. One process for us to start and reap instead of five, which is most of a workspace's
# cost on a busy machine.
_CHECKOUT = """
where=$(git rev-parse --show-toplevel --show-prefix --path-format=absolute --git-common-dir "$1^{commit}") || exit 64
{ IFS= read -r top; IFS= read -r prefix; IFS= read -r common; IFS= read -r sha; } <<WHERE
$where
WHERE
git init --quiet --template= "$2"
printf '%s\\n' "$common/objects" > "$2/.git/objects/info/alternates"
cd "$2"
git -c advice.detachedHead=false checkout --quiet --detach "$sha"
printf '%s\\n' "$where"
"""


async def _checkout_local(source: Path, commit: str | None, target: Path) -> Workspace | None:
    """A clone of the repository `source` is in, at `commit` (default HEAD), working in the
    same folder of it; None when `source` is in no git repository (a plain folder)."""
    revision = commit or "HEAD"
    try:
        outcome = await run_process(["/bin/sh", "-c", f"set -e; {_CHECKOUT}", "sh", revision, str(target)],
                                    cwd=source, timeout=LOCAL_TIMEOUT, env=_git_env())
    except FileNotFoundError:
        outcome = None
    if outcome is None or outcome.returncode == 127 or (  # 127: the shell found no git
            outcome.returncode == 64 and "not a git repository" in outcome.stderr):
        if commit is not None:
            raise WorkspaceError(f"repository {str(source)!r} is not a git repository (or git is missing), so "
                                 f"commit {commit!r} cannot be checked out")
        return None
    words = Redactor()(outcome.stderr.strip()).splitlines()
    if outcome.returncode == 64:
        raise WorkspaceError(f"cannot check out {revision!r} of {str(source)!r}" + (f": {words[-1]}" if words else ""))
    lines = outcome.stdout.splitlines()
    if outcome.returncode != 0 or len(lines) != 4:
        raise WorkspaceError(f"checkout of {str(source)!r} at {revision!r} failed (exit {outcome.returncode})"
                             + (f": {words[-1]}" if words else ""))
    prefix, sha = lines[1], lines[3].strip()
    return _workspace_in(target, prefix, sha, source)


async def _clone_local(source: Path, prefix: str, sha: str, target: Path) -> Workspace:
    """A clone of `source` sharing its objects, checked out at `sha` (a full commit id)."""
    await _git_script('git clone --shared --no-checkout --quiet --template= "$1" "$2" && cd "$2" && '
                      'git -c advice.detachedHead=false checkout --quiet --detach "$3"',
                      str(source), str(target), sha, cwd=source.parent, step=f"clone and check out {sha[:12]}")
    return _workspace_in(target, prefix, sha, source)


def _workspace_in(target: Path, prefix: str, sha: str, source: Path) -> Workspace:
    cwd = target / prefix if prefix else target
    if not cwd.is_dir():
        raise WorkspaceError(f"the folder {prefix.rstrip('/')!r} is not in commit {sha[:12]} of "
                             f"{str(source)!r} (untracked?)")
    return Workspace(path=target, cwd=cwd, kind="git", commit=sha)


async def _mirror(url: str, commit: str | None, cache: Path) -> Path:
    """A bare mirror of `url` in the cache that has `commit`. A commit id missing from it is
    fetched; a name (a branch, a tag, or none: the remote's HEAD) refreshes the mirror when its
    last fetch is older than MIRROR_FRESH_SECONDS, so a long-lived cache does not serve old heads."""
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(url.encode()).hexdigest()[:24]
    mirror, stamp = cache / f"{key}.git", cache / f"{key}.fetched"
    async with _file_lock(cache / f"{key}.lock"):
        if not (mirror / "HEAD").is_file():
            partial = cache / f"{key}.partial-{uuid.uuid4().hex[:6]}"
            try:
                await _git("clone", "--bare", "--quiet", url, str(partial), cwd=cache, timeout=NETWORK_TIMEOUT,
                           step=f"clone {public_url(url)}")
                partial.rename(mirror)
            finally:
                remove_tree(partial)
            stamp.touch()
        elif (commit is None or not _FULL_SHA.match(commit)) and _age(stamp) > MIRROR_FRESH_SECONDS \
                or commit is not None and not await _has_commit(mirror, commit):
            await _git("fetch", "--quiet", "--prune", "--tags", "origin", "+refs/heads/*:refs/heads/*",
                       cwd=mirror, timeout=NETWORK_TIMEOUT, step=f"fetch {public_url(url)}")
            stamp.touch()
        if commit is not None and not await _has_commit(mirror, commit):
            # A commit no branch or tag reaches: ask for it by name (GitHub and others allow it).
            await _git("fetch", "--quiet", "origin", commit, cwd=mirror, timeout=NETWORK_TIMEOUT,
                       step=f"fetch commit {commit!r} from {public_url(url)}")
    return mirror


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


async def _has_commit(repo: Path, commit: str) -> bool:
    outcome = await run_process(["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                                cwd=repo, timeout=LOCAL_TIMEOUT, env=_git_env())
    return outcome.returncode == 0


@contextlib.asynccontextmanager
async def _file_lock(path: Path, poll: float = 0.05) -> AsyncIterator[None]:
    """An exclusive lock across processes, polled so that waiting for it can be cancelled."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                await asyncio.sleep(poll)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _chunks(paths: list[str]) -> Iterator[list[str]]:
    """Sorted paths in runs small enough for one command line (a diff per run, joined, is the
    same diff: git orders files by path)."""
    chunk: list[str] = []
    size = 0
    for path in paths:
        length = len(os.fsencode(path)) + 1
        if chunk and size + length > _PATHSPEC_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(path)
        size += length
    if chunk:
        yield chunk


def remove_tree(path: Path) -> None:
    """Remove a folder, also the read-only files and folders an agent may have left."""
    if not os.path.lexists(path):
        return

    def retry_writable(function: Any, name: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), stat.S_IRWXU)
            if not os.path.islink(name):
                os.chmod(name, stat.S_IRWXU)
            function(name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry_writable)
    else:
        shutil.rmtree(path, onerror=retry_writable)


# ---------------------------------------------------------------------- diff of a copied folder
def _files(root: Path) -> dict[str, os.stat_result]:
    found: dict[str, os.stat_result] = {}
    for folder, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            full = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                info = os.lstat(full)
                if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                    found[os.path.relpath(full, root).replace(os.sep, "/")] = info
    return found


def _content(path: Path, info: os.stat_result) -> bytes:
    if stat.S_ISLNK(info.st_mode):
        return os.readlink(path).encode()
    return path.read_bytes()


def _mode(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return "120000"
    return "100755" if info.st_mode & stat.S_IXUSR else "100644"


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _hunks(old: list[str], new: list[str], a: str, b: str) -> Iterator[str]:
    for line in difflib.unified_diff(old, new, a, b):
        if line.endswith("\n"):
            yield line
        else:  # the file's last line has no newline: say so, as diff and git do
            yield line + "\n\\ No newline at end of file\n"


def _listed(root: Path, paths: Iterable[str]) -> dict[str, os.stat_result]:
    """What `_files` would say of these paths alone."""
    found: dict[str, os.stat_result] = {}
    for rel in paths:
        with contextlib.suppress(OSError):
            info = os.lstat(root / rel)
            if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                found[rel] = info
    return found


def tree_diff(before: Path, after: Path, paths: Iterable[str] | None = None) -> str:
    """A git-style unified diff from folder `before` to folder `after` (applies with git apply
    and patch -p1), of every file or of `paths` only (relative to both folders). Files whose
    size and modification time are unchanged are not read."""
    if paths is None:
        old_files, new_files = _files(before), _files(after)
    else:
        chosen = list(paths)
        old_files, new_files = _listed(before, chosen), _listed(after, chosen)
    parts: list[str] = []
    for rel in sorted(old_files.keys() | new_files.keys()):
        old_info, new_info = old_files.get(rel), new_files.get(rel)
        if (old_info and new_info and old_info.st_size == new_info.st_size
                and old_info.st_mtime_ns == new_info.st_mtime_ns and _mode(old_info) == _mode(new_info)):
            continue
        old = _content(before / rel, old_info) if old_info else b""
        new = _content(after / rel, new_info) if new_info else b""
        if old_info and new_info and old == new and _mode(old_info) == _mode(new_info):
            continue
        header = [f"diff --git a/{rel} b/{rel}\n"]
        if old_info is None:
            assert new_info is not None
            header.append(f"new file mode {_mode(new_info)}\n")
        elif new_info is None:
            header.append(f"deleted file mode {_mode(old_info)}\n")
        elif _mode(old_info) != _mode(new_info):
            header += [f"old mode {_mode(old_info)}\n", f"new mode {_mode(new_info)}\n"]
        a = f"a/{rel}" if old_info else "/dev/null"
        b = f"b/{rel}" if new_info else "/dev/null"
        if old == new:  # a mode change alone
            parts.append("".join(header))
            continue
        old_lines, new_lines = _text(old), _text(new)
        if old_lines is None or new_lines is None:
            parts.append("".join(header) + f"Binary files {a} and {b} differ\n")
            continue
        parts.append("".join(header) + "".join(_hunks(old_lines, new_lines, a, b)))
    return "".join(parts)
