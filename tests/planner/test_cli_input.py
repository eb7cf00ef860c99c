"""`agenter plan --plan FILE` as a user runs it (a real `python -m agenter` process): a plan file
that is not text, not JSON, or JSON of the wrong shape is one line per problem and exit 2, with
no traceback and none of pydantic's dump."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import plan_dict

AGENTER = [sys.executable, "-m", "agenter"]


def plan_cli(plan: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    return subprocess.run([*AGENTER, "plan", "make a greeter", "--cwd", str(cwd), "--plan", str(plan), "--yes"],
                          capture_output=True, text=True, timeout=60, env=env)


GOOD = plan_dict({"id": "1", "description": "create hello.py"})


@pytest.mark.parametrize(("content", "expected"), [
    (gzip.compress(json.dumps(GOOD).encode()), ["cannot read the plan file {path!r}: it is gzip-compressed, not text; "
                                                "decompress it first"]),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), ["cannot read the plan file {path!r}: not UTF-8 text (byte 0x89 at "
                                               "offset 0); is it a binary file?"]),
    (b'{"tasks": [', ["--plan {path!r}: not JSON (Expecting value at line 1 column 12); a plan is what "
                      "`agenter plan ... --plan-only` prints"]),
    (b"[1, 2]", ["--plan {path!r}: a plan is a JSON object, not a list"]),
    (json.dumps({"tasks": 3}).encode(), ["--plan {path!r}: field 'root_task_description' is missing",
                                         "--plan {path!r}: field 'tasks': Input should be a valid list"]),
    (json.dumps({**GOOD, "tasks": [{"id": "1", "description": "x", "depends_on": ["9"]}]}).encode(),
     ["--plan {path!r}: task '1' depends on unknown task '9'"]),
])
def test_a_bad_plan_file_is_one_line_per_problem_and_exit_2(tmp_path: Path, content: bytes, expected: list[str]):
    plan = tmp_path / "plan.json"
    plan.write_bytes(content)
    repo = tmp_path / "repo"
    repo.mkdir()
    proc = plan_cli(plan, repo)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "errors.pydantic.dev" not in proc.stderr and "input_value" not in proc.stderr
    assert proc.stderr.splitlines() == [f"agenter: {line.format(path=str(plan))}" for line in expected]
    assert list(repo.iterdir()) == []
