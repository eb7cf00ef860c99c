"""A permission policy compiled to the agent programs' own allow/deny mechanisms, proven with the
real programs against the scripted model server: a denied `git push --force` and a denied write
to .git/hooks/pre-commit do not happen, and the run goes on."""

from __future__ import annotations

import contextlib
import http.server
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenter._errors import ConfigurationError
from agenter.backends._programs.claude import bundled_cli
from agenter.backends.base import BackendSettings, MessageType
from agenter.backends.cli._policy.claude import claude_permissions
from agenter.backends.cli._policy.opencode import opencode_permissions
from agenter.backends.cli.claude import ClaudeCliBackend
from agenter.backends.cli.opencode import OpenCodeCliBackend
from agenter.permissions import PermissionPolicy
from agenter.testing import reply, text, tool_call

from .conftest import REPO, CliCase, installed, need

CLAUDE = installed(shutil.which("claude"), bundled_cli())
OPENCODE = installed(REPO / "node_modules" / ".bin" / "opencode", name="opencode")
POLICY = PermissionPolicy.parse("mode accept_edits\nallow shell\ndeny shell:git push --force*\n")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def repository(root: Path) -> tuple[Path, Path, str]:
    """A work tree whose last commit is pushed to a bare remote, then rewritten locally: only a
    force push would move the remote."""
    remote, work = root / "remote.git", root / "work"
    git(root, "init", "-q", "--bare", str(remote))
    git(root, "init", "-q", "-b", "main", str(work))
    for key, value in (("user.email", "t@example.com"), ("user.name", "t"), ("commit.gpgsign", "false")):
        git(work, "config", key, value)
    (work / "a.txt").write_text("one\n")
    git(work, "add", "a.txt")
    git(work, "commit", "-q", "-m", "one")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    pushed = git(remote, "rev-parse", "main")
    git(work, "commit", "-q", "--amend", "-m", "rewritten")
    return work, remote, pushed


@contextlib.contextmanager
def script_server(body: str) -> Iterator[str]:
    """A URL on 127.0.0.1 that serves `body` (the script a `curl ... | sh` would run); it stops
    when the block ends."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/install.sh"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# ---------------------------------------------------------------------------------- pure logic


def test_claude_flags_from_a_policy():
    policy = PermissionPolicy.parse("mode accept_edits\ndeny shell:git push --force*\nask shell:npm publish\n"
                                    "deny edit:/etc/**\ndeny read:secrets/**\nallow shell:pytest\n")
    mode, allowed, denied = claude_permissions(policy)
    assert mode == "acceptEdits" and allowed == ["Bash(pytest:*)"]
    assert denied[:4] == ["Bash(git push --force:*)", "Bash(npm publish:*)", "Edit(//etc/**)", "Read(secrets/**)"]
    assert "Edit(.git/**)" in denied and "Read(~/.ssh/**)" in denied
    assert claude_permissions(PermissionPolicy(mode="bypass"))[0] == "acceptEdits"


def test_opencode_permission_map_from_a_policy():
    policy = PermissionPolicy.parse("mode accept_edits\nallow shell\ndeny shell:git push --force*\n"
                                    "ask shell:npm publish\ndeny edit:secrets/**\nallow edit:src/\nroot /srv/data\n")
    permission = opencode_permissions(policy)
    bash = list(permission["bash"].items())
    assert bash[0] == ("*", "allow") and ("npm publish", "deny") in bash and ("npm publish *", "deny") in bash
    assert ("git push --force*", "deny") in bash
    assert list(permission["edit"].items())[:3] == [("*", "allow"), ("src/*", "allow"), ("secrets/*", "deny")]
    assert permission["edit"][".git/*"] == "deny" and permission["read"]["~/.ssh/*"] == "deny"
    assert permission["external_directory"] == {"*": "deny", "/srv/data/*": "allow"}
    assert opencode_permissions(PermissionPolicy())["bash"]["*"] == "deny"
    assert opencode_permissions(None) == {"edit": "allow", "bash": "allow"}


@pytest.mark.parametrize("backend", [ClaudeCliBackend, OpenCodeCliBackend])
def test_kinds_the_programs_cannot_compile_fail_at_construction(backend):
    for rules in ("deny network:example.com", "deny mcp:github/*"):
        with pytest.raises(ConfigurationError, match="cannot enforce"):
            backend.check_permissions(BackendSettings(
                model=None, tools=[], sandbox=False, options=backend.options_model(),
                permissions=PermissionPolicy.parse(rules)))


# ---------------------------------------------------------------------------------- real programs


def side_requests(request: Any) -> Any:
    return None if request.tools else reply(text("ok"))


@pytest.fixture(params=["claude-cli", "opencode-cli"])
def case(request: Any, tmp_path_factory: pytest.TempPathFactory) -> CliCase:
    if request.param == "claude-cli":
        return CliCase(
            backend=ClaudeCliBackend, program=need(CLAUDE, "Claude Code"), wire="anthropic", model="claude-sonnet-4-5",
            write=lambda path, content: reply(tool_call("Write", {"file_path": path, "content": content})),
            shell=lambda command: reply(tool_call("Bash", {"command": command, "description": "Run it"})),
            handler=side_requests)
    return CliCase(
        backend=OpenCodeCliBackend, program=need(OPENCODE, "OpenCode (npm install opencode-ai)"), wire="openai",
        model="openai/gpt-4.1", options={"home": str(tmp_path_factory.mktemp("opencode-home"))},
        env={"OPENCODE_DISABLE_MODELS_FETCH": "1"},
        write=lambda path, content: reply(tool_call("write", {"filePath": path, "content": content})),
        shell=lambda command: reply(tool_call("bash", {"command": command, "description": "Run it"})),
        handler=side_requests)


@pytest.mark.agent
async def test_a_force_push_and_a_hook_write_are_denied_and_the_run_goes_on(kit, tmp_path):
    work, remote, pushed = repository(tmp_path)
    hook = work / ".git" / "hooks" / "pre-commit"
    server = kit.server([
        kit.case.shell("git push --force origin main"),
        kit.case.write(str(hook), "#!/bin/sh\nexit 0\n"),
        kit.case.write(str(work / "after.txt"), "went on\n"),
        reply(text("done")),
    ])
    messages = await kit.one_turn(kit.backend(server, sandbox=False, permissions=POLICY), work,
                                  "Push it and install the hook.")
    assert git(remote, "rev-parse", "main") == pushed
    assert not hook.exists()
    assert (work / "after.txt").read_text() == "went on\n"
    results = [m for m in messages if m.type in (MessageType.TOOL_RESULT, MessageType.COMMAND_END)]
    assert [m.is_error for m in results] == [True, True, False]
    # Each program's own words for its permission rules' refusal.
    assert all(re.search(r"denied|prevents you", m.content) for m in results[:2])
