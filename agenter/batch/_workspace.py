"""A workspace per task: a clone or a copy of the repository that the task may change freely.

The source is never written to. A local git repository is cloned with `--shared` (objects are
borrowed, not copied, and nothing is added to the source's .git, as `git worktree add` would)
and checked out at the commit; a git URL is fetched once per machine into a bare mirror under
the git cache (guarded by a file lock, so worker processes on one node share it) and cloned
from there; a plain folder is copied. The diff is `git diff` against the commit (untracked
files included, ignored ones not) or, for a copy, a comparison with the source folder.
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
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenter._errors import AgenterError
from agenter.host.process import run_process
from agenter.host.redact import Redactor

#: Local git commands (clone --shared, checkout, add, diff) and network ones (clone, fetch).
LOCAL_TIMEOUT = 300.0
NETWORK_TIMEOUT = 1800.0

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:")  # git@github.com:owner/repo.git
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


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
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # git's messages in English: a few are recognised by their words
    env["GIT_TERMINAL_PROMPT"] = "0"  # a private URL fails at once instead of waiting for a password
    env.setdefault("GIT_ASKPASS", "/bin/true")
    return env


async def _git(*args: str, cwd: Path, timeout: float = LOCAL_TIMEOUT, step: str) -> str:
    """Run git; a failure is a WorkspaceError naming the step, with git's own words."""
    try:
        outcome = await run_process(["git", *args], cwd=cwd, timeout=timeout, env=_git_env(),
                                    stdout_limit=None)
    except FileNotFoundError:
        raise WorkspaceError(f"{step}: git is not installed (needed for git repositories)") from None
    if outcome.timed_out:
        raise WorkspaceError(f"{step}: git {args[0]} took longer than {timeout:.0f} s")
    if outcome.returncode != 0:
        words = Redactor()(public_url(outcome.stderr.strip() or outcome.stdout.strip()))
        raise WorkspaceError(f"{step}: git {args[0]} failed (exit {outcome.returncode}): {words[-2000:]}")
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

    async def diff(self) -> str:
        """The task's changes as a unified diff (git's, with binary patches, for git workspaces)."""
        if self.kind == "git":
            assert self.commit is not None
            await _git("add", "--all", cwd=self.path, step="diff")
            return await _git("-c", "core.quotepath=off", "-c", "diff.noprefix=false",
                              "-c", "diff.mnemonicPrefix=false", "-c", "diff.relative=false",
                              "diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames",
                              "--no-textconv", self.commit, "--", cwd=self.path, step="diff")
        assert self.source is not None
        return await asyncio.to_thread(tree_diff, self.source, self.path)

    async def remove(self) -> None:
        await asyncio.to_thread(remove_tree, self.path)


async def create_workspace(repository: str, commit: str | None, root: Path, name: str, *,
                           git_cache: Path | None = None) -> Workspace:
    """Make the task's workspace under `root` (see the module docstring)."""
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
        found = await _git_top(source, commit)
        if found is None:
            await asyncio.to_thread(shutil.copytree, source, target, symlinks=True)
            return Workspace(path=target, cwd=target, kind="copy", source=source.resolve())
        top, prefix, sha = found
        return await _clone_local(top, prefix, sha, target)
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(remove_tree, target))
        raise


async def _git_top(source: Path, commit: str | None) -> tuple[Path, str, str] | None:
    """(top level, the folder's prefix inside it, the commit's sha), or None for a plain folder
    (one in no git repository, or where git is missing). One git process."""
    revision = commit or "HEAD"
    try:
        outcome = await run_process(["git", "rev-parse", "--show-toplevel", "--show-prefix", f"{revision}^{{commit}}"],
                                    cwd=source, timeout=LOCAL_TIMEOUT, env=_git_env())
    except FileNotFoundError:
        outcome = None
    if outcome is None or (outcome.returncode != 0 and "not a git repository" in outcome.stderr):
        if commit is not None:
            raise WorkspaceError(f"repository {str(source)!r} is not a git repository, so commit {commit!r} "
                                 "cannot be checked out")
        return None
    lines = outcome.stdout.splitlines()
    if outcome.returncode != 0 or len(lines) != 3:
        words = outcome.stderr.strip().splitlines()
        raise WorkspaceError(f"cannot check out {revision!r} of {str(source)!r}"
                             + (f": {words[-1]}" if words else ""))
    return Path(lines[0]), lines[1], lines[2].strip()


async def _clone_local(source: Path, prefix: str, sha: str, target: Path) -> Workspace:
    """A clone of `source` sharing its objects, checked out at `sha` (a full commit id)."""
    await _git("clone", "--shared", "--no-checkout", "--quiet", str(source), str(target), cwd=source.parent,
               step="clone")
    await _git("-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", sha, cwd=target,
               step=f"check out {sha[:12]}")
    cwd = target / prefix if prefix else target
    if not cwd.is_dir():
        raise WorkspaceError(f"the folder {prefix.rstrip('/')!r} is not in commit {sha[:12]} of "
                             f"{str(source)!r} (untracked?)")
    return Workspace(path=target, cwd=cwd, kind="git", commit=sha)


async def _mirror(url: str, commit: str | None, cache: Path) -> Path:
    """A bare mirror of `url` in the cache that has `commit` (fetched when missing)."""
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(url.encode()).hexdigest()[:24]
    mirror = cache / f"{key}.git"
    async with _file_lock(cache / f"{key}.lock"):
        if not (mirror / "HEAD").is_file():
            partial = cache / f"{key}.partial-{uuid.uuid4().hex[:6]}"
            try:
                await _git("clone", "--bare", "--quiet", url, str(partial), cwd=cache, timeout=NETWORK_TIMEOUT,
                           step=f"clone {public_url(url)}")
                partial.rename(mirror)
            finally:
                remove_tree(partial)
        elif commit is not None and not await _has_commit(mirror, commit):
            await _git("fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/heads/*", cwd=mirror,
                       timeout=NETWORK_TIMEOUT, step=f"fetch {public_url(url)}")
        if commit is not None and not await _has_commit(mirror, commit):
            # A commit no branch or tag reaches: ask for it by name (GitHub and others allow it).
            await _git("fetch", "--quiet", "origin", commit, cwd=mirror, timeout=NETWORK_TIMEOUT,
                       step=f"fetch commit {commit!r} from {public_url(url)}")
    return mirror


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


def tree_diff(before: Path, after: Path) -> str:
    """A git-style unified diff from folder `before` to folder `after` (applies with git apply
    and patch -p1). Files whose size and modification time are unchanged are not read."""
    old_files, new_files = _files(before), _files(after)
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
