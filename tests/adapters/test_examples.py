"""The adapter examples documented in docs/adapters.md run offline and succeed.

They are loaded in-process (not as subprocesses) so the heavy framework imports are paid once.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(script: str):
    spec = importlib.util.spec_from_file_location(f"agenter_example_{Path(script).stem}", EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.agent
@pytest.mark.parametrize(("script", "package", "expected"), [
    ("langgraph_example.py", "langgraph", "report: completed by anthropic-sdk (claude-haiku-4-5): slug.py"),
    ("pydantic_ai_example.py", "pydantic_ai", "changed VERSION, version.py"),
])
def test_example_runs(script: str, package: str, expected: str, capsys: pytest.CaptureFixture[str]):
    pytest.importorskip(package)
    main = load_example(script).main
    code = asyncio.run(main()) if inspect.iscoroutinefunction(main) else main()
    out = capsys.readouterr().out
    assert code == 0, out
    assert expected in out
