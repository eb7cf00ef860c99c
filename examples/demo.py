"""`make demo`: the main job, offline.

A sample repository with a failing test; the real anthropic-sdk backend (the real `anthropic`
client over real HTTP) works on it against agenter's scripted model server. The scripted model
first writes a fix with a syntax error, the validators catch it, the retry prompt carries the
error back, and the second attempt passes the syntax check and the repository's own tests.
Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

from agenter import cli
from agenter.testing import ModelRequest, ScriptedModelServer, reply, text, tool_call

BUGGY = textwrap.dedent('''\
    def add(a, b):
        """Return the sum of a and b."""
        return a - b
''')

TEST = textwrap.dedent('''\
    from calc import add


    def test_add():
        assert add(2, 3) == 5
''')


def make_repo(root: Path) -> Path:
    repo = root / "sample-repo"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    (repo / "test_calc.py").write_text(TEST)
    return repo


def last_tool_called(messages: list) -> str | None:
    """The tool the model called in its previous turn, if the newest message answers it."""
    if len(messages) < 2 or not isinstance(messages[-1]["content"], list):
        return None
    if not any(block.get("type") == "tool_result" for block in messages[-1]["content"]):
        return None
    calls = [b for b in messages[-2]["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    return calls[-1]["name"] if calls else None


def scripted_model(request: ModelRequest):
    """Plays the model: decides each turn from the conversation it is sent, as a real one would."""
    messages = request.body["messages"]
    previous = last_tool_called(messages)
    retrying = "did not pass validation" in str(messages)
    if previous is None and not retrying:
        return reply(text("Let me look at the failing code."),
                     tool_call("read_file", {"path": "calc.py"}))
    if previous == "read_file":
        # First attempt: the right idea, but the colon goes missing.
        broken = BUGGY.replace("def add(a, b):", "def add(a, b)").replace("a - b", "a + b")
        return reply(text("`add` subtracts instead of adding. Rewriting it."),
                     tool_call("write_file", {"path": "calc.py", "content": broken}))
    if previous is None and retrying:
        # The retry prompt carried the syntax error back to us.
        return reply(text("The validator found a syntax error in my edit; fixing it."),
                     tool_call("edit_file", {"path": "calc.py", "old_string": "def add(a, b)\n",
                                             "new_string": "def add(a, b):\n"}))
    return reply(text("Done: `add` now returns a + b."))


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="agenter-demo-"))
    try:
        repo = make_repo(workdir)
        print(f"Sample repository: {repo}  (calc.add subtracts; test_calc.py fails)\n")
        with ScriptedModelServer(handler=scripted_model) as server:
            code = cli.main([
                "run", "Fix the failing test in test_calc.py", "--cwd", str(repo),
                "--backend", "anthropic-sdk", "--model", "claude-sonnet-5-5",
                "--option", f"base_url={server.base_url}", "--option", "api_key=sk-demo-not-a-real-key",
                "--validator", "syntax", "--validator", f"command:{sys.executable} -m pytest -q",
                "--max-cost", "1.0", "--max-time", "120",
            ])
            print(f"\nThe scripted model answered {len(server.model_requests)} model requests.")
        print("\ncalc.py now reads:\n" + (repo / "calc.py").read_text())
        print(f"agenter exit code: {code} (0 = COMPLETED)")
        return code
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
