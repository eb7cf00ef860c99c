"""The adapters are optional: `import agenter` never loads them, and a missing framework is an
ImportError that says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)


def test_import_agenter_does_not_import_frameworks():
    proc = run_python(
        "import agenter, sys\n"
        "agenter.AutonomousCodingAgent\n"
        "assert 'langgraph' not in sys.modules and 'pydantic_ai' not in sys.modules\n"
        "import agenter.adapters\n"
        "assert 'langgraph' not in sys.modules and 'pydantic_ai' not in sys.modules\n")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("module", "package", "extra"), [
    ("agenter.adapters.langgraph", "langgraph", "langgraph"),
    ("agenter.adapters.pydantic_ai", "pydantic_ai", "pydantic-ai"),
])
def test_missing_framework_gives_an_install_hint(module: str, package: str, extra: str):
    # sys.modules[name] = None makes Python treat the package as not installed
    proc = run_python(
        f"import sys\nsys.modules[{package!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ImportError as exc:\n    print(exc)\nelse:\n    raise SystemExit('imported')\n")
    assert proc.returncode == 0, proc.stderr
    assert f"pip install 'agenter-sdk[{extra}]'" in proc.stdout
