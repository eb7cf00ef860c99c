"""mypy --strict accepts the calls README.md and docs/ show a user.

Every ```python block of README.md and docs/**/*.md becomes the body of an async function (top-level
`await` is fine there) in one module, which `mypy --strict` must pass. The blocks are fragments:
they use names the prose defines (`agent`, `request`, `tracker`) and small callbacks without
annotations, so only the checks that fragments cannot satisfy are off (undefined names, untyped
defs and calls, unannotated variables, Any returned where an undefined name is returned).
Everything else holds: each call of agenter's API is checked against its signature. A second,
hand-written script pins the calls issue 25 named (PermissionPolicy with rule strings, the types
of result.files and result.validation), and a deliberate mistake proves mypy really checked.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Blocks that are not Python on purpose (a protocol written as signatures), by file and index.
NOT_PYTHON = {("docs/sessions.md", 3)}
#: Checks a fragment cannot satisfy (see the module docstring).
FRAGMENT_CODES = ("name-defined", "no-untyped-def", "no-untyped-call", "var-annotated", "no-any-return")
#: Names the docs use as if defined, typed here so that calls on them are checked too.
PRELUDE = '''
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agenter import AutonomousCodingAgent, CodingRequest, CodingResult

agent: AutonomousCodingAgent
request: CodingRequest
result: CodingResult
'''

USER_SCRIPT = '''
from agenter import AutonomousCodingAgent, CodingResult, ValidationResult
from agenter.permissions import PermissionPolicy, PermissionRule


async def main() -> CodingResult:
    policy = PermissionPolicy(rules=["deny shell:git push*"], mode="default")
    PermissionPolicy(rules="ask shell:npm publish*", mode="accept_edits", extra_roots=["/tmp/build"])
    PermissionPolicy(rules=[PermissionRule.parse("allow edit:src/**"), "deny network"], mode="bypass")
    PermissionPolicy(rules=(), mode="plan", allowed_mcp_servers=("files",), protected_paths=["*.lock"])
    agent = AutonomousCodingAgent(permissions=policy)
    result = await agent.execute("Fix the parser", cwd=".")
    for path, content in result.files.items():
        if content is None:
            print("deleted", path)
        else:
            print(path, len(content))
    checks: list[ValidationResult] = result.validation
    advisory = [c.errors for c in checks if not c.passed and not c.blocking]
    print(advisory, [c.duration_seconds for c in checks], [c.skipped for c in checks])
    PermissionPolicy(rules=[1])  # type: ignore[list-item]
    return result
'''


def documented_blocks() -> tuple[str, list[tuple[str, int]]]:
    """The module of every block, and the blocks that are not Python."""
    parts, not_python = [PRELUDE], []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        name = doc.relative_to(ROOT).as_posix()
        for index, block in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)):
            source = (f"async def _block_{len(parts)}() -> None:  # {name} block {index}\n"
                      f"{textwrap.indent(block, '    ')}\n    return None\n")
            try:
                ast.parse(source)
            except SyntaxError:
                not_python.append((name, index))
                continue
            parts.append(source)
    return "\n\n".join(parts), not_python


# Both tests on one worker under xdist: they share the cache below.
pytestmark = pytest.mark.xdist_group("mypy-docs")


@pytest.fixture(scope="module")
def cache() -> Path:
    """One mypy cache kept between runs, beside the project's own (.mypy_cache): pydantic,
    langgraph and agenter are analysed once, and the next `make check` rechecks only what
    changed (about 50 s on two cores from nothing, seconds after)."""
    return ROOT / ".mypy_cache" / "docs-strict"


def mypy_strict(script: Path, cache: Path, *disabled: str) -> subprocess.CompletedProcess[str]:
    config = script.with_name("mypy.ini")
    # An optional exporter the observability docs import, not installed with the test extras.
    config.write_text("[mypy]\n\n[mypy-opentelemetry.exporter.*]\nignore_missing_imports = True\n")
    codes = [arg for code in disabled for arg in ("--disable-error-code", code)]
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "--config-file",
                           str(config), *codes, str(script)], capture_output=True, text=True, timeout=600,
                          cwd=script.parent, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.timeout(900)
def test_every_documented_python_block_passes_mypy_strict(tmp_path, cache):
    module, not_python = documented_blocks()
    assert set(not_python) == NOT_PYTHON, "a docs block does not parse; fix it or list it in NOT_PYTHON"
    assert module.count("async def _block_") > 50
    script = tmp_path / "docs_blocks.py"
    script.write_text(module)
    done = mypy_strict(script, cache, *FRAGMENT_CODES)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(900)
def test_the_calls_issue_25_named_pass_mypy_strict(tmp_path, cache):
    # The `# type: ignore[list-item]` line must be needed (--strict warns of an unused ignore):
    # mypy really checked PermissionPolicy's arguments.
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(USER_SCRIPT))
    done = mypy_strict(script, cache)
    assert done.returncode == 0, done.stdout + done.stderr
    script.write_text(textwrap.dedent(USER_SCRIPT).replace("  # type: ignore[list-item]", ""))
    done = mypy_strict(script, cache)
    assert done.returncode == 1 and "user.py:21: error: List item 0" in done.stdout, done.stdout
