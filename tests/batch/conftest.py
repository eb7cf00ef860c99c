"""Fixtures of the batch tests: small git repositories and plain folders."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True,
                          text=True).stdout


def make_git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for rel, content in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    return make_git_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n",
                                             "pkg/util.py": "X = 1\n", "README.md": "hello\n"})


@pytest.fixture
def plain_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "plain"
    (folder / "sub").mkdir(parents=True)
    (folder / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (folder / "sub" / "data.txt").write_text("one\ntwo\n")
    return folder
