"""A task's diff and its SWE-bench patch hold what the agent changed, not what its validators
wrote: a real batch on the scripted model, with `pytest -q` as the test command and bytecode
writing on, for a plain folder and for a git repository without a .gitignore."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agenter import Budget
from agenter.batch import TaskDefaults, Workspace, export_swebench, read_rows, run_batch, tree_diff

from .conftest import make_git_repo
from .scripted import PROMPT, task_model

KEY = "sk-batch-test-secret-key-0123456789"
TEST = "import calc\n\n\ndef test_value():\n    assert calc.VALUE == {value}\n"


def _files(value: int) -> dict[str, str]:
    return {"calc.py": "VALUE = 0\n", "test_calc.py": TEST.format(value=value)}


def _plain(path: Path, value: int) -> Path:
    path.mkdir(parents=True)
    for name, content in _files(value).items():
        (path / name).write_text(content)
    return path


@pytest.mark.slow
async def test_diff_and_model_patch_hold_the_agents_file_only(tmp_path: Path, scripted_model_server, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    server = scripted_model_server(handler=task_model())
    plain = _plain(tmp_path / "plain", 1)
    repo = make_git_repo(tmp_path / "repo", _files(2))
    assert not (repo / ".gitignore").exists()
    tasks = [{"id": "plain", "repository": str(plain), "prompt": PROMPT.format(path="calc.py", value=1)},
             {"id": "git", "repository": str(repo), "prompt": PROMPT.format(path="calc.py", value=2)}]
    out = tmp_path / "results.jsonl"
    defaults = TaskDefaults(backend="anthropic-sdk", options={"base_url": server.base_url, "api_key": KEY},
                            test_command=f"{sys.executable} -m pytest -q", budget=Budget(max_time_seconds=120))
    summary = await run_batch(tasks, out, defaults=defaults, concurrency=2, keep_workspaces=True,
                              workspace_root=tmp_path / "ws")
    assert summary.passed == 2, read_rows(out)[0]
    rows, _ = read_rows(out)
    for row in rows.values():
        kept = Path(row.workspace or "")
        # The validator really wrote its cache into the workspace (its bytecode goes to a cache
        # of its own, docs/validators.md) ...
        assert (kept / ".pytest_cache").is_dir() and not any(kept.glob("__pycache__/*.pyc")), row.id
        # ... and neither the row's diff nor its files name them.
        assert row.files == ["calc.py"]
        assert [line for line in row.diff.splitlines() if line.startswith("diff --git")] == [
            "diff --git a/calc.py b/calc.py"], row.diff
        assert "Binary" not in row.diff and "GIT binary patch" not in row.diff
    predictions = tmp_path / "preds.jsonl"
    export_swebench(out, predictions)
    patches = {p["instance_id"]: p["model_patch"] for p in map(json.loads, predictions.read_text().splitlines())}
    assert patches == {row.id: row.diff for row in rows.values()}
    # The patch applies to the untouched source and makes its test pass.
    subprocess.run(["git", "apply", "-"], input=patches["git"], cwd=repo, check=True, text=True)
    assert (repo / "calc.py").read_text() == "VALUE = 2\n"


async def test_a_path_list_limits_the_copy_and_git_diffs(tmp_path: Path, git_repo: Path):
    from agenter.batch import create_workspace

    workspace: Workspace = await create_workspace(str(git_repo), None, tmp_path / "ws", "t")
    (workspace.cwd / "calc.py").write_text("changed\n")
    (workspace.cwd / "README.md").unlink()
    (workspace.cwd / "__pycache__").mkdir()
    (workspace.cwd / "__pycache__" / "calc.pyc").write_bytes(b"\0\1\2")
    everything = await workspace.diff()
    assert "__pycache__/calc.pyc" in everything
    chosen = await workspace.diff(["calc.py", "README.md", "../outside.py", "/etc/passwd"])
    assert "a/calc.py" in chosen and "deleted file mode" in chosen and "pyc" not in chosen
    assert await workspace.diff([]) == ""

    before, after = tmp_path / "before", tmp_path / "after"
    for folder in (before, after):
        (folder / "__pycache__").mkdir(parents=True)
        (folder / "a.py").write_text("a = 1\n")
    (after / "a.py").write_text("a = 2\n")
    (after / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert "a.pyc" in tree_diff(before, after)
    assert tree_diff(before, after, ["a.py"]).startswith("diff --git a/a.py b/a.py\n")
    assert "pyc" not in tree_diff(before, after, ["a.py"])


@pytest.mark.parametrize("count", [1, 1500])
async def test_many_paths_are_diffed_in_runs(tmp_path: Path, count: int):
    names = [f"{'d' * 80}/f{i:05d}.py" for i in range(count)]  # 1500 x 90 bytes: two runs of pathspecs
    repo = make_git_repo(tmp_path / "repo", {name: "x = 1\n" for name in names})
    from agenter.batch import create_workspace

    workspace = await create_workspace(str(repo), None, tmp_path / "ws", "t")
    for name in names:
        (workspace.cwd / name).write_text("x = 2\n")
    diff = await workspace.diff(names)
    assert diff.count("diff --git") == count and diff.count("+x = 2") == count
