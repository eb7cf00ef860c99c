"""README's Install list and its "first run in two minutes, no API key", as a new user meets them:
every extra pyproject.toml defines is in the list, and the first run works as written (the
scripted model server started with `python -m agenter.testing --script hello.json`, its
`export` lines pasted into the shell that runs `agenter run`), each as a real process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    return README[start:README.index("\n## ", start + 1)]


def test_every_extra_is_in_the_install_list():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = _section("Install")
    for extra in extras:
        assert f"[{extra}]" in install, f"README's Install list does not name the {extra!r} extra"


@pytest.mark.agent
def test_the_first_run_works_as_written(tmp_path: Path):
    section = _section("First run in two minutes, no API key")
    script = re.search(r"cat > hello.json <<'EOF'\n(.*?)\nEOF\n", section, re.DOTALL)
    assert script, "the section no longer writes hello.json"
    assert "python -m agenter.testing --script hello.json" in section
    run = 'agenter run "Write hello.py" --cwd /tmp/try'
    assert run in section
    (tmp_path / "hello.json").write_text(script.group(1))
    workspace = tmp_path / "try"
    workspace.mkdir()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "AGENTER_"))}
    env["PYTHONPATH"] = str(REPO)
    env["HOME"] = str(tmp_path)
    server = subprocess.Popen([sys.executable, "-m", "agenter.testing", "--script", "hello.json"], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        exports: dict[str, str] = {}
        assert server.stdout is not None
        deadline = time.monotonic() + 60
        for line in server.stdout:  # the lines a user reads and pastes
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exports[name] = value
            if line.startswith("# serving") or time.monotonic() > deadline:
                break
        assert {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"} <= set(exports), exports
        done = subprocess.run([sys.executable, "-m", "agenter", "run", "Write hello.py", "--cwd", str(workspace)],
                              env={**env, **exports}, capture_output=True, text=True, timeout=300)
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C, as the section says
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (workspace / "hello.py").read_text() == "print('hi')\n"
    assert "completed" in (done.stdout + done.stderr).lower()  # the live display is on stderr
