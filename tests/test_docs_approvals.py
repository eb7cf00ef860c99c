"""docs/approvals.md's example runs as written: a run pauses at an ask rule with nobody to ask,
and a fresh agent approves it (the real anthropic-sdk backend against the scripted model server).

Its ```python blocks run in order in one namespace, top-level `await` allowed (as
tests/test_docs_testing.py runs docs/testing.md's)."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "approvals.md"


@pytest.mark.timeout(300)
def test_the_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    text = DOC.read_text()
    blocks = [(text[:m.start()].count("\n") + 1, m.group(1))
              for m in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)]
    assert blocks, "docs/approvals.md has no python example"
    namespace: dict[str, Any] = {"__name__": "docs_approvals"}
    for line, code in blocks:
        compiled = compile(code, f"{DOC}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        if compiled.co_flags & 0x80:  # CO_COROUTINE: top-level await
            asyncio.run(eval(compiled, namespace))
        else:
            exec(compiled, namespace)
    result = namespace["result"]
    assert result.ok and namespace["paused"].resume_handle == namespace["handle"]
