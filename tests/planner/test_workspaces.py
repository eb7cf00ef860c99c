"""Task worktrees with the real git program: the user's repository is left as it was, merges
happen in order, a conflict is reported, the result comes back into cwd, nothing is left over."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from agenter.planner.plan import TestSpec
from agenter.planner.workspaces import GitWorkspaces, WorkspaceError, write_test_files


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("hello\n")
    (root / "pkg" / "core.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("build/\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    # Uncommitted work the tasks must see, and an ignored directory they need not.
    (root / "pkg" / "core.py").write_text("x = 2\n")
    (root / "notes.txt").write_text("untracked\n")
    (root / "build").mkdir()
    (root / "build" / "big.bin").write_text("ignored\n")
    return root


async def test_tasks_merge_in_order_and_come_back_without_touching_the_users_git_state(repo: Path):
    head, status = git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")
    spaces = GitWorkspaces(repo)
    await spaces.setup()
    try:
        assert spaces.kind == "worktree"
        one, two = await spaces.acquire("1"), await spaces.acquire("2")
        assert (one / "pkg" / "core.py").read_text() == "x = 2\n"   # uncommitted state
        assert (one / "notes.txt").read_text() == "untracked\n"
        assert not (one / "build").exists()                          # ignored
        (one / "a.py").write_text("a = 1\n")
        (one / "README.md").unlink()
        (two / "pkg" / "b.py").write_text("b = 1\n")
        first = await spaces.commit("1", "task 1")
        second = await spaces.commit("2", "task 2")
        assert (await spaces.merge("1", first, "m1")).merged
        assert (await spaces.merge("2", second, "m2")).merged
        for key in ("1", "2"):
            await spaces.release(key)
        changed, outside = await spaces.apply_back()
    finally:
        await spaces.close()
    assert sorted(changed) == ["README.md", "a.py", "pkg/b.py"] and outside == []
    assert (repo / "a.py").read_text() == "a = 1\n" and (repo / "pkg" / "b.py").read_text() == "b = 1\n"
    assert not (repo / "README.md").exists()
    assert (repo / "pkg" / "core.py").read_text() == "x = 2\n"
    # HEAD and the index are the user's: the new files are untracked, nothing was staged or committed.
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "diff", "--cached", "--name-only") == ""
    after = git(repo, "status", "--porcelain")
    assert set(after.splitlines()) == set(status.splitlines()) | {"?? a.py", "?? pkg/b.py", " D README.md"}
    assert git(repo, "worktree", "list").count("\n") == 1  # only the main working tree is left


async def test_a_clean_working_tree_is_its_head_and_a_new_repository_works_too(repo: Path, tmp_path: Path):
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "all")
    spaces = GitWorkspaces(repo)
    await spaces.setup()
    try:
        assert spaces.base == git(repo, "rev-parse", "HEAD").strip()
        tree = await spaces.acquire("1")
        assert await spaces.commit("1", "nothing") is None
        (tree / "n.txt").write_text("n\n")
        merged = await spaces.merge("1", await spaces.commit("1", "n"), "m")
        assert merged.merged and spaces.head == git(repo, "rev-parse", spaces.head).strip() != spaces.base
    finally:
        await spaces.close()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "f.txt").write_text("f\n")
    spaces = GitWorkspaces(fresh)
    await spaces.setup()
    assert spaces._tmp is not None
    temporary = spaces._tmp
    try:
        assert spaces.kind == "worktree" and ((await spaces.acquire("1")) / "f.txt").read_text() == "f\n"
    finally:
        await spaces.close()  # right after the first acquire: the integration worktree is still being made
    assert git(fresh, "worktree", "list").count("\n") == 1
    assert spaces._tmp is None and not any(Path(tempfile.gettempdir()).glob(f"{temporary.name}*"))


async def test_a_conflict_is_reported_and_aborted(repo: Path):
    spaces = GitWorkspaces(repo)
    await spaces.setup()
    try:
        one, two = await spaces.acquire("1"), await spaces.acquire("2")
        (one / "shared.txt").write_text("one\n")
        (two / "shared.txt").write_text("two\n")
        first, second = await spaces.commit("1", "t1"), await spaces.commit("2", "t2")
        assert (await spaces.merge("1", first, "m1")).merged
        clash = await spaces.merge("2", second, "m2")
        assert not clash.merged and clash.conflicts == ["shared.txt"]
        # The integration tree is clean again: a re-run starts from the merged state.
        again = await spaces.acquire("2#2")
        assert (again / "shared.txt").read_text() == "one\n"
        nothing = await spaces.commit("2#2", "t2 again")
        assert nothing is None and (await spaces.merge("2#2", nothing, "m")).nothing_to_merge
    finally:
        await spaces.close()


async def test_a_subdirectory_of_a_repository_is_the_tasks_cwd(repo: Path):
    spaces = GitWorkspaces(repo / "pkg")
    await spaces.setup()
    try:
        inside = await spaces.acquire("1")
        assert inside.name == "pkg" and (inside / "core.py").is_file()
        (inside / "new.py").write_text("n = 1\n")
        (inside.parent / "outside.txt").write_text("not ours\n")
        assert (await spaces.merge("1", await spaces.commit("1", "t"), "m")).merged
        changed, outside = await spaces.apply_back()
    finally:
        await spaces.close()
    assert changed == ["new.py"] and outside == ["outside.txt"]
    assert (repo / "pkg" / "new.py").is_file() and not (repo / "outside.txt").exists()


async def test_a_plain_directory_gets_a_private_repository_and_nothing_is_written_into_it(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "data.txt").write_text("1\n")
    spaces = GitWorkspaces(plain)
    await spaces.setup()
    try:
        assert spaces.kind == "copy"
        tree = await spaces.acquire("1")
        assert (tree / "data.txt").read_text() == "1\n"
        (tree / "data.txt").write_text("2\n")
        assert (await spaces.merge("1", await spaces.commit("1", "t"), "m")).merged
        assert sorted(p.name for p in plain.iterdir()) == ["data.txt"]
        assert (plain / "data.txt").read_text() == "1\n"  # changed only by apply_back
        await spaces.apply_back()
    finally:
        await spaces.close()
    assert (plain / "data.txt").read_text() == "2\n"
    assert sorted(p.name for p in plain.iterdir()) == ["data.txt"]


def test_test_files_never_leave_the_workspace(tmp_path: Path):
    (tmp_path / "link").symlink_to(tmp_path.parent)
    assert write_test_files(tmp_path, [TestSpec(description="t", path="tests/t.py", code="x = 1\n")]) == ["tests/t.py"]
    with pytest.raises(WorkspaceError, match="leaves the working directory"):
        write_test_files(tmp_path, [TestSpec(description="t", path="link/escape.py", code="x")])
