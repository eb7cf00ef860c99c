"""Where tasks run: in cwd itself, or each in a git worktree of its own, merged back in plan order.

With worktrees, the working state of cwd (tracked and untracked files that are not ignored,
uncommitted changes included) is committed once as a base through a temporary index, so the
user's index, HEAD and branches are never touched. Each task gets a detached worktree at the
current merged state; its changes are committed there and merged into an integration worktree
in plan order; a conflict is reported so the caller can re-run the task on the merged tree. At
the end the merged changes are copied into cwd.

When cwd is not inside a git repository, a private repository in a temporary directory holds a
copy of it (work tree cwd, so nothing is written into cwd), and the tasks' worktrees come from
there: the same merging for any directory.

Every git command runs through agenter.host.run_process (own process group, timeout), with
hooks and commit signing off and a fixed identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenter._errors import AgenterError
from agenter.host import ProcessOutcome, find_program, run_process
from agenter.planner.plan import TestSpec, safe_relative_path

__all__ = ["GitWorkspaces", "InPlaceWorkspaces", "MergeOutcome", "WorkspaceError", "write_test_files"]

GIT_TIMEOUT = 120.0
_IDENTITY = {
    "GIT_AUTHOR_NAME": "agenter", "GIT_AUTHOR_EMAIL": "agenter@localhost",
    "GIT_COMMITTER_NAME": "agenter", "GIT_COMMITTER_EMAIL": "agenter@localhost",
    "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
}
# No user hook, signing key or pager may run or block.
_CONFIG = ["-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false",
           "-c", "core.pager=cat", "-c", "advice.detachedHead=false", "-c", "gc.auto=0",
           "-c", "maintenance.auto=false"]


class WorkspaceError(AgenterError):
    """A git step of the workspaces failed (the message has git's output)."""


@dataclass
class MergeOutcome:
    merged: bool
    conflicts: list[str] = field(default_factory=list)
    nothing_to_merge: bool = False


def write_test_files(root: Path, tests: list[TestSpec]) -> list[str]:
    """Write the tests' files under root; returns their paths. A path leaving root is refused."""
    written: list[str] = []
    base = root.resolve()
    for test in tests:
        if test.path is None or test.code is None:
            continue
        problem = safe_relative_path(test.path)
        target = (root / test.path).resolve()
        if problem or not target.is_relative_to(base):
            raise WorkspaceError(f"test file {test.path!r} {problem or 'leaves the working directory'}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(test.code)
        written.append(Path(test.path).as_posix())
    return written


class InPlaceWorkspaces:
    """Every task runs in cwd itself, one after another."""

    kind = "inplace"

    def __init__(self, cwd: Path):
        self.cwd = cwd

    async def setup(self) -> None:
        return None

    async def acquire(self, key: str) -> Path:
        return self.cwd

    async def release(self, key: str) -> None:
        return None

    async def close(self) -> None:
        return None


class GitWorkspaces:
    """A git worktree per task (see the module docstring). Use `setup()` first, `close()` always."""

    def __init__(self, cwd: Path, *, timeout: float = GIT_TIMEOUT, store: Path | None = None):
        self.cwd = cwd
        self.timeout = timeout
        #: Where the private repository of copy mode is kept: a state folder, so that a resumed
        #: run finds the commits of a killed one (None: in the temporary folder).
        self.store = store
        self.kind = "worktree"
        self.git = find_program("git")
        self._tmp: Path | None = None
        self._git_dir: Path | None = None   # set in copy mode: the private repository
        self._admin = cwd                    # where worktree commands run (the repository)
        self._top = cwd                      # the work tree that the worktrees mirror
        self._prefix = Path()                # cwd relative to _top
        self.base = ""                       # commit of cwd's state at setup
        self.head = ""                       # the merged state so far
        self._integration: Path | None = None
        self._integration_start = ""         # the commit the integration worktree starts at
        self._integration_ready: asyncio.Task[Any] | None = None
        self._trees: dict[str, tuple[Path, str]] = {}  # key -> (worktree, commit it started at)
        self._tree_of: dict[str, asyncio.Future[str]] = {}  # commit -> its tree, for "changed nothing"
        self._lock = asyncio.Lock()
        self._add_lock = asyncio.Lock()
        self._adding: set[asyncio.Future[None]] = set()
        self._count = 0

    # ------------------------------------------------------------------ lifecycle
    async def setup(self) -> None:
        if self.git is None:
            raise WorkspaceError("parallel tasks run in git worktrees, but git is not installed")
        self._tmp = Path(tempfile.mkdtemp(prefix="agenter-plan-"))
        # One call: the top of the repository, its index, and HEAD (missing in a new repository).
        probe = await self._run("rev-parse", "--show-toplevel", "--path-format=absolute", "--git-path", "index",
                                "--verify", "-q", "HEAD", cwd=self.cwd, check=False)
        lines = probe.stdout.splitlines()
        if len(lines) >= 2:
            self._top = self._admin = Path(lines[0]).resolve()
            self._prefix = self.cwd.resolve().relative_to(self._top)
            head = lines[2].strip() if len(lines) > 2 else None
            self.base = self.head = await self._clean_head(head) or await self._snapshot(lines[1], head)
        else:
            await self._private_repository(create=True)
            self.base = self.head = await self._snapshot(None, None)
        self._integration = self._tmp / "integration"
        self._integration_start = self.head

    async def resume(self, kind: str, base: str, head: str, scratch: str | None) -> None:
        """Set up again after a killed run: the same repository (cwd's, or the private one kept
        in `store`), its base and merged state; the killed run's folder removed and its worktree
        entries pruned. A recorded commit that is gone is a WorkspaceError."""
        if self.git is None:
            raise WorkspaceError("the plan ran in git worktrees, but git is not installed")
        if scratch:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        self._tmp = Path(tempfile.mkdtemp(prefix="agenter-plan-"))
        if kind == "copy":
            await self._private_repository(create=False)
        else:
            top = await self._run("rev-parse", "--show-toplevel", "--path-format=absolute", cwd=self.cwd)
            self._top = self._admin = Path(top.stdout.strip()).resolve()
            self._prefix = self.cwd.resolve().relative_to(self._top)
        with contextlib.suppress(Exception):
            await self._run("worktree", "prune", cwd=self._admin, check=False)
        for commit in {base, head}:
            found = await self._run("cat-file", "-e", f"{commit}^{{commit}}", cwd=self._admin, check=False)
            if found.returncode != 0:
                raise WorkspaceError(f"the recorded commit {commit[:12]} is gone from the repository (was it "
                                     "garbage-collected?): the run cannot be resumed; start it again")
        self.kind, self.base, self.head = kind, base, head
        self._integration = self._tmp / "integration"
        self._integration_start = head

    @property
    def scratch(self) -> str | None:
        """The temporary folder of this run (the worktrees): recorded so a resume can remove it."""
        return str(self._tmp) if self._tmp is not None else None

    async def _private_repository(self, *, create: bool) -> None:
        """Copy mode: cwd is not in a repository, so a private one (work tree cwd) holds it."""
        assert self._tmp is not None
        self.kind = "copy"
        store = self.store if self.store is not None else self._tmp / "store"
        if create:
            store.mkdir(parents=True, exist_ok=True)
            await self._run("init", "-q", str(store), cwd=store.parent)
        elif not (store / ".git").is_dir():
            raise WorkspaceError(f"the private repository of the killed run ({store}) is gone: the run cannot "
                                 "be resumed; start it again")
        self._git_dir = store / ".git"
        self._admin = store
        self._top = self.cwd.resolve()

    async def close(self) -> None:
        """Remove every worktree and the temporary directory (also after a failure)."""
        if self._tmp is None:
            return
        pending: set[asyncio.Future[Any]] = set(self._adding)
        if self._integration_ready is not None:
            pending.add(self._integration_ready)  # it may not have started its add yet
        if pending:
            await asyncio.wait(pending, timeout=self.timeout)
        if self._integration_ready is not None and self._integration_ready.done():
            with contextlib.suppress(BaseException):
                self._integration_ready.result()  # its failure, if any, was reported where it mattered
        # Deleting the directories and one prune is what `worktree remove` does, in one git call.
        await asyncio.to_thread(shutil.rmtree, self._tmp, True)
        with contextlib.suppress(Exception):
            await self._run("worktree", "prune", cwd=self._admin, check=False)
        self._trees.clear()
        self._tmp = None

    # ------------------------------------------------------------------ per task
    async def acquire(self, key: str) -> Path:
        """A fresh worktree at the merged state; returns the task's cwd inside it."""
        assert self._tmp is not None, "setup() first"
        self._count += 1
        tree = self._tmp / f"task-{self._count}"
        start = self.head  # a commit: later merges do not change what this worktree starts from
        self._trees[key] = (tree, start)
        await self._add_worktree(tree, start)
        if self._integration_ready is None:
            # Needed only at the first merge: checked out now, after the first task's worktree.
            self._start_integration()
        return tree / self._prefix

    def _start_integration(self) -> asyncio.Task[Any]:
        if self._integration_ready is None:
            assert self._integration is not None
            self._integration_ready = asyncio.create_task(
                self._add_worktree(self._integration, self._integration_start))
        return self._integration_ready

    async def _add_worktree(self, path: Path, commit: str) -> None:
        async def add() -> None:
            # One at a time: `worktree add` reads every other entry and fails on a half-made one.
            async with self._add_lock:
                await self._run("worktree", "add", "--detach", "-q", str(path), commit, cwd=self._admin)

        # Never killed half-way (that leaves a locked entry in the repository that prune keeps):
        # a cancelled caller leaves it to finish, and close() waits for it.
        task = asyncio.ensure_future(add())
        self._adding.add(task)
        task.add_done_callback(self._adding.discard)
        await asyncio.shield(task)

    async def commit(self, key: str, message: str) -> str | None:
        """Commit the task's worktree as it is (whatever the agent did with git itself), on top of
        the commit it started at; None when it changed nothing."""
        tree, started = self._trees[key]
        await self._run("add", "-A", cwd=tree)
        written = (await self._run("write-tree", cwd=tree)).stdout.strip()
        if written == await self._tree(started):
            return None
        commit = await self._run("commit-tree", written, "-p", started, "-m", message, cwd=tree)
        return commit.stdout.strip()

    async def merge(self, key: str, commit: str | None, message: str) -> MergeOutcome:
        """Merge a task's commit into the integration tree; a conflict is aborted and reported."""
        if commit is None:
            return MergeOutcome(merged=True, nothing_to_merge=True)
        assert self._integration is not None
        await self._start_integration()
        async with self._lock:
            outcome = await self._run("merge", "--ff", "--no-edit", "--no-verify", "-q", "-m", message, commit,
                                      cwd=self._integration, check=False)
            if outcome.returncode == 0:
                self.head = _detached_head(self._integration) or (
                    await self._run("rev-parse", "HEAD", cwd=self._integration)).stdout.strip()
                return MergeOutcome(merged=True)
            unmerged = await self._run("diff", "--name-only", "--diff-filter=U", cwd=self._integration, check=False)
            conflicts = [line for line in unmerged.stdout.splitlines() if line.strip()]
            await self._run("merge", "--abort", cwd=self._integration, check=False)
            if not conflicts:
                raise WorkspaceError(f"merging task {key} failed: {_tail(outcome.stdout + outcome.stderr)}")
            return MergeOutcome(merged=False, conflicts=[self._relative(path) or path for path in conflicts])

    async def release(self, key: str) -> None:
        """Delete a task's worktree (its git entry is pruned at close)."""
        entry = self._trees.pop(key, None)
        if entry is not None:
            await asyncio.to_thread(shutil.rmtree, entry[0], True)

    async def apply_back(self) -> tuple[list[str], list[str]]:
        """Copy the merged changes into cwd. Returns (paths changed, paths outside cwd left alone),
        relative to cwd."""
        if self.head == self.base:
            return [], []
        assert self._integration is not None
        await self._start_integration()
        listing = await self._run("diff", "--name-status", "--no-renames", "-z", self.base, self.head,
                                  cwd=self._integration)
        fields = listing.stdout.split("\0")
        changed: list[str] = []
        outside: list[str] = []
        for status, path in zip(fields[0::2], fields[1::2], strict=False):
            if not path:
                continue
            rel = self._relative(path)
            if rel is None:
                outside.append(path)
                continue
            await asyncio.to_thread(_copy_entry, self._integration / path, self._top / path, status == "D")
            changed.append(rel)
        return changed, outside

    # ------------------------------------------------------------------ internals
    def _relative(self, top_path: str) -> str | None:
        """A path relative to the top, made relative to cwd (None when outside cwd)."""
        if self._prefix == Path():
            return top_path
        try:
            return Path(top_path).relative_to(self._prefix).as_posix()
        except ValueError:
            return None

    async def _clean_head(self, head: str | None) -> str | None:
        """HEAD, when the working tree is exactly HEAD (nothing to snapshot)."""
        if head is None:
            return None
        # --no-optional-locks: a status must not refresh (write) the user's index.
        status = await self._run("--no-optional-locks", "status", "--porcelain", "-z", "--untracked-files=normal",
                                 cwd=self._top, check=False)
        return head if status.returncode == 0 and not status.stdout.strip("\0") else None

    async def _snapshot(self, user_index: str | None, head: str | None) -> str:
        """Commit the working state of the top directory without touching the user's index."""
        assert self._tmp is not None
        index = self._tmp / "base-index"
        if user_index and os.path.isfile(user_index):
            # Starting from the user's index, only changed files are hashed again.
            await asyncio.to_thread(shutil.copyfile, user_index, index)
        env = {"GIT_INDEX_FILE": str(index)}
        if self._git_dir is not None:
            env.update(GIT_DIR=str(self._git_dir), GIT_WORK_TREE=str(self._top))
        await self._run("add", "-A", cwd=self._top, env=env)
        tree = (await self._run("write-tree", cwd=self._top, env=env)).stdout.strip()
        parent = ["-p", head] if head else []
        commit = (await self._run("commit-tree", tree, *parent, "-m", "agenter: state before the plan",
                                  cwd=self._top, env=env)).stdout.strip()
        self._tree_of[commit] = asyncio.get_running_loop().create_future()
        self._tree_of[commit].set_result(tree)
        return commit

    async def _tree(self, commit: str) -> str:
        """The tree of a commit, asked of git once however many tasks want it at the same time."""
        future = self._tree_of.get(commit)
        if future is None:
            future = self._tree_of[commit] = asyncio.ensure_future(self._ask_tree(commit))
        return await asyncio.shield(future)

    async def _ask_tree(self, commit: str) -> str:
        return (await self._run("rev-parse", f"{commit}^{{tree}}", cwd=self._admin)).stdout.strip()

    async def _run(self, *args: str, cwd: Path, env: dict[str, str] | None = None,
                   check: bool = True) -> ProcessOutcome:
        assert self.git is not None
        outcome = await run_process([self.git, *_CONFIG, *args], cwd=cwd, timeout=self.timeout,
                                    env={**os.environ, **_IDENTITY, **(env or {})})
        if check and (outcome.returncode != 0 or outcome.timed_out):
            what = "timed out" if outcome.timed_out else f"failed with exit code {outcome.returncode}"
            raise WorkspaceError(f"git {' '.join(args[:3])} {what}: {_tail(outcome.stderr or outcome.stdout)}")
        return outcome


def _tail(text: str, limit: int = 800) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _detached_head(worktree: Path) -> str | None:
    """The commit a worktree's detached HEAD names, read from its files (a git call saved on
    each merge); None when it is not that simple (the caller asks git)."""
    try:
        pointer = (worktree / ".git").read_text().strip()
        if not pointer.startswith("gitdir:"):
            return None
        head = (Path(pointer.removeprefix("gitdir:").strip()) / "HEAD").read_text().strip()
    except OSError:
        return None
    return head if len(head) in (40, 64) and all(c in "0123456789abcdef" for c in head) else None


def _copy_entry(source: Path, target: Path, deleted: bool) -> None:
    """Make target what source is (a file, a symlink, or nothing)."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir() and (deleted or source.is_file() or source.is_symlink()):
        shutil.rmtree(target)
    if deleted or not (source.is_symlink() or source.exists()):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    else:
        shutil.copy2(source, target)
