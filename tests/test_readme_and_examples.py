"""What a new user runs first runs: README's first example (against the scripted model server,
through the environment variables the anthropic client reads), and every script in examples/
(`make demo` is examples/demo.py), each as a fresh Python process from the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenter.testing import ScriptedModelServer, reply, text, tool_call

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "AGENTER_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _first_python_block(markdown: str) -> str:
    match = re.search(r"```python\n(.*?)```", markdown, re.DOTALL)
    assert match, "no python block"
    return match.group(1)


def test_the_readme_first_example_runs_as_written(tmp_path):
    block = _first_python_block((REPO / "README.md").read_text())
    assert "await agent.execute" in block  # the example as a user reads it, top-level await included
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    script = tmp_path / "first.py"
    script.write_text("import asyncio\n\n\nasync def main():\n" + textwrap.indent(block, "    ")
                      + "\n\nasyncio.run(main())\n")
    fix = tool_call("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})
    with ScriptedModelServer([reply(fix), reply(text("Fixed add."))]) as server:
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env=_env(ANTHROPIC_BASE_URL=server.base_url,
                                                    ANTHROPIC_API_KEY="sk-ant-example-0000"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("CodingStatus.COMPLETED") or "completed" in done.stdout.lower(), done.stdout
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_runs_offline(example, tmp_path):
    done = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=_env(HOME=str(tmp_path)))
    assert done.returncode == 0, f"{example.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
