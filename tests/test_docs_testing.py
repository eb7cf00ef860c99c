"""docs/testing.md's examples run as written (the README sends readers there).

Every ```python block runs, in order, in one namespace (a later block may use an earlier one's
names, as a reader would): a block with top-level `await` / `async with` runs as a coroutine; a
block that defines `test_` functions is a pytest module and runs in a pytest subprocess. Blocks
fenced as ```py are fragments (they name things the page does not define) and are not run.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "testing.md"


def _blocks() -> list[tuple[int, str]]:
    text = DOC.read_text()
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)]


def _is_pytest_module(code: str) -> bool:
    return bool(re.search(r"^(async )?def test_", code, re.MULTILINE))


def test_the_page_has_runnable_examples_of_each_part():
    code = "\n".join(block for _, block in _blocks())
    for needed in ("ScriptedModelServer(", "FunctionBackend", "conformance.CHECKS"):
        assert needed in code, f"docs/testing.md has no runnable example using {needed}"


def test_the_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_testing"}
    ran = 0
    for line, code in _blocks():
        if _is_pytest_module(code):
            continue  # test_the_pytest_blocks_run
        compiled = compile(code, f"{DOC}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            if compiled.co_flags & 0x80:  # CO_COROUTINE: top-level await
                asyncio.run(eval(compiled, namespace))
            else:
                exec(compiled, namespace)
        except BaseException as exc:
            raise AssertionError(f"the block at docs/testing.md:{line} failed: {exc!r}") from exc
        ran += 1
    assert ran >= 8


@pytest.mark.agent
@pytest.mark.parametrize("line", [line for line, code in _blocks() if _is_pytest_module(code)])
def test_the_pytest_blocks_run(line: int, tmp_path: Path):
    code = dict(_blocks())[line]
    module = tmp_path / f"test_doc_block_{line}.py"
    module.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "AGENTER_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:langsmith",
                           "-o", "asyncio_mode=strict", str(module)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"docs/testing.md:{line}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert "passed" in done.stdout and "failed" not in done.stdout
