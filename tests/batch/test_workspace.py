"""Workspaces: a clone or a copy per task, the source never touched, the diff applies."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agenter.batch import WorkspaceError, create_workspace, tree_diff
from agenter.batch._workspace import is_git_url, public_url

from .conftest import git, make_git_repo


def _state(repo: Path) -> dict[str, bytes]:
    """Every file under repo (the .git folder included), to prove nothing was written there."""
    found = {}
    for folder, _, names in os.walk(repo):
        for name in names:
            path = Path(folder, name)
            found[str(path.relative_to(repo))] = path.read_bytes()
    return found


async def test_git_workspace_at_head_leaves_the_source_alone(git_repo: Path, tmp_path: Path):
    before = _state(git_repo)
    ws = await create_workspace(str(git_repo), None, tmp_path / "ws", "task/1 with spaces")
    assert ws.kind == "git" and ws.cwd == ws.path
    assert ws.commit == git(git_repo, "rev-parse", "HEAD").strip()
    (ws.cwd / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (ws.cwd / "new.py").write_text("Y = 2\n")
    (ws.cwd / "README.md").unlink()
    diff = await ws.diff()
    assert "+    return a + b" in diff and "new file mode 100644" in diff and "deleted file mode" in diff
    await ws.remove()
    assert not ws.path.exists()
    assert _state(git_repo) == before  # no worktree entry, no object, no index change in the source


async def test_git_workspace_at_an_older_commit_and_its_diff_applies(git_repo: Path, tmp_path: Path):
    first = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / "calc.py").write_text("changed later\n")
    git(git_repo, "commit", "-qam", "second")
    ws = await create_workspace(str(git_repo), first[:10], tmp_path / "ws", "t")
    assert ws.commit == first
    assert (ws.cwd / "calc.py").read_text().startswith("def add")
    (ws.cwd / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (ws.cwd / "blob.bin").write_bytes(bytes(range(256)))
    diff = await ws.diff()
    await ws.remove()
    # The patch applies to a fresh checkout of that commit (binary file included).
    check = tmp_path / "check"
    subprocess.run(["git", "clone", "-q", str(git_repo), str(check)], check=True)
    git(check, "checkout", "-q", first)
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=check, check=True)
    assert (check / "calc.py").read_text().endswith("a + b\n")
    assert (check / "blob.bin").read_bytes() == bytes(range(256))


async def test_folder_inside_a_git_repository_works_in_that_folder(git_repo: Path, tmp_path: Path):
    ws = await create_workspace(str(git_repo / "pkg"), None, tmp_path / "ws", "t")
    assert ws.kind == "git" and ws.cwd == ws.path / "pkg"
    (ws.cwd / "util.py").write_text("X = 2\n")
    diff = await ws.diff()
    assert "a/pkg/util.py" in diff  # paths from the repository's root, as SWE-bench wants them
    await ws.remove()


async def test_a_worktree_or_a_shared_clone_as_the_source(git_repo: Path, tmp_path: Path):
    git(git_repo, "worktree", "add", "-q", "--detach", str(tmp_path / "tree"))
    git(tmp_path, "clone", "-q", "--shared", str(git_repo), str(tmp_path / "shared"))
    for source in (tmp_path / "tree", tmp_path / "shared"):
        ws = await create_workspace(str(source), None, tmp_path / "ws", "t")
        (ws.cwd / "calc.py").write_text("changed\n")
        git(ws.path, "add", "-A")
        git(ws.path, "commit", "-qm", "the agent commits")  # its objects go to the workspace, not the source
        diff = await ws.diff()
        assert "+changed" in diff and "a/calc.py" in diff
        await ws.remove()


async def test_ignored_files_are_not_in_the_diff(tmp_path: Path):
    repo = make_git_repo(tmp_path / "r", {".gitignore": "*.log\n", "a.py": "A = 1\n"})
    ws = await create_workspace(str(repo), None, tmp_path / "ws", "t")
    (ws.cwd / "run.log").write_text("noise\n")
    (ws.cwd / "a.py").write_text("A = 2\n")
    diff = await ws.diff()
    assert "a.py" in diff and "run.log" not in diff
    await ws.remove()


async def test_git_url_is_mirrored_once_and_checked_out_at_the_commit(git_repo: Path, tmp_path: Path):
    first = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / "calc.py").write_text("second\n")
    git(git_repo, "commit", "-qam", "second")
    url = f"file://{git_repo}"
    cache = tmp_path / "cache"
    ws1 = await create_workspace(url, first, tmp_path / "ws", "a", git_cache=cache)
    ws2 = await create_workspace(url, None, tmp_path / "ws", "b", git_cache=cache)
    assert (ws1.cwd / "calc.py").read_text().startswith("def add")
    assert (ws2.cwd / "calc.py").read_text() == "second\n"
    assert len(list(cache.glob("*.git"))) == 1
    # A commit made after the mirror was taken is fetched when a task asks for it.
    (git_repo / "calc.py").write_text("third\n")
    git(git_repo, "commit", "-qam", "third")
    third = git(git_repo, "rev-parse", "HEAD").strip()
    ws3 = await create_workspace(url, third, tmp_path / "ws", "c", git_cache=cache)
    assert (ws3.cwd / "calc.py").read_text() == "third\n"
    # The remote's HEAD moved on: a mirror fetched over a minute ago is refreshed for it.
    (git_repo / "calc.py").write_text("fourth\n")
    git(git_repo, "commit", "-qam", "fourth")
    ws4 = await create_workspace(url, None, tmp_path / "ws", "d", git_cache=cache)
    assert (ws4.cwd / "calc.py").read_text() == "third\n"  # fetched moments ago: served as it is
    for stamp in cache.glob("*.fetched"):
        os.utime(stamp, (1, 1))
    ws5 = await create_workspace(url, None, tmp_path / "ws", "e", git_cache=cache)
    assert (ws5.cwd / "calc.py").read_text() == "fourth\n"
    for ws in (ws1, ws2, ws3, ws4, ws5):
        await ws.remove()


async def test_plain_folder_is_copied_and_its_diff_applies_with_patch(plain_folder: Path, tmp_path: Path):
    ws = await create_workspace(str(plain_folder), None, tmp_path / "ws", "t")
    assert ws.kind == "copy" and ws.commit is None
    (ws.cwd / "calc.py").write_text("def add(a, b):\n    return a + b")  # no newline at the end
    (ws.cwd / "sub" / "data.txt").unlink()
    (ws.cwd / "new").mkdir()
    (ws.cwd / "new" / "n.txt").write_text("fresh\n")
    (ws.cwd / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws.cwd / "run.sh", 0o755)
    diff = await ws.diff()
    assert "\\ No newline at end of file" in diff
    assert (plain_folder / "calc.py").read_text().endswith("a - b\n")  # the source is untouched
    target = tmp_path / "target"
    subprocess.run(["cp", "-r", str(plain_folder), str(target)], check=True)
    subprocess.run(["patch", "-s", "-p1"], input=diff.encode(), cwd=target, check=True)
    assert (target / "calc.py").read_text() == "def add(a, b):\n    return a + b"
    assert not (target / "sub" / "data.txt").exists()
    assert (target / "new" / "n.txt").read_text() == "fresh\n"
    target2 = tmp_path / "target2"
    subprocess.run(["cp", "-r", str(plain_folder), str(target2)], check=True)
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=target2, check=True)
    assert os.access(target2 / "run.sh", os.X_OK)
    await ws.remove()


def test_tree_diff_marks_binary_files_and_skips_unchanged(tmp_path: Path):
    before, after = tmp_path / "b", tmp_path / "a"
    before.mkdir()
    after.mkdir()
    (before / "same.txt").write_text("x\n")
    (after / "same.txt").write_text("x\n")  # other mtime, same content: no entry
    (before / "img.bin").write_bytes(b"\x00\x01")
    (after / "img.bin").write_bytes(b"\x00\x02")
    diff = tree_diff(before, after)
    assert "same.txt" not in diff
    assert "Binary files a/img.bin and b/img.bin differ" in diff


async def test_bad_repositories_are_clear_errors(tmp_path: Path, plain_folder: Path, git_repo: Path):
    with pytest.raises(WorkspaceError, match="not a directory"):
        await create_workspace(str(tmp_path / "missing"), None, tmp_path / "ws", "t")
    with pytest.raises(WorkspaceError, match="not a git repository"):
        await create_workspace(str(plain_folder), "abc123", tmp_path / "ws", "t")
    with pytest.raises(WorkspaceError, match="cannot check out 'no-such-branch'"):
        await create_workspace(str(git_repo), "no-such-branch", tmp_path / "ws", "t")
    with pytest.raises(WorkspaceError, match="clone"):
        await create_workspace(f"file://{tmp_path}/nothing-here", None, tmp_path / "ws", "t",
                               git_cache=tmp_path / "cache")
    assert not list((tmp_path / "ws").iterdir())  # nothing half-made is left


def test_url_helpers():
    assert is_git_url("https://github.com/o/r.git") and is_git_url("git@github.com:o/r.git")
    assert is_git_url("file:///tmp/r") and not is_git_url("/tmp/r") and not is_git_url("repo")
    assert public_url("fatal: https://user:ghp_secret@github.com/o/r") == "fatal: https://github.com/o/r"
