"""A permission policy compiled to the agent programs' own allow/deny mechanisms, proven with the
real programs against the scripted model server: a denied `git push --force` and a denied write
to .git/hooks/pre-commit do not happen, and the run goes on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agenter._errors import ConfigurationError
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.cli.claude import ClaudeCliBackend, bundled_cli, claude_permissions
from agenter.permissions import PermissionPolicy
from agenter.testing import reply, text, tool_call

from .conftest import CliCase, Kit, installed, need

CLAUDE = installed(shutil.which("claude"), bundled_cli())
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


# ---------------------------------------------------------------------------------- pure logic


def test_claude_flags_from_a_policy():
    policy = PermissionPolicy.parse("mode accept_edits\ndeny shell:git push --force*\nask shell:npm publish\n"
                                    "deny edit:/etc/**\ndeny read:secrets/**\nallow shell:pytest\n")
    mode, allowed, denied = claude_permissions(policy)
    assert mode == "acceptEdits" and allowed == ["Bash(pytest:*)"]
    assert denied[:4] == ["Bash(git push --force:*)", "Bash(npm publish:*)", "Edit(//etc/**)", "Read(secrets/**)"]
    assert "Edit(.git/**)" in denied and "Read(~/.ssh/**)" in denied
    assert claude_permissions(PermissionPolicy(mode="bypass"))[0] == "acceptEdits"


def test_claude_refuses_kinds_it_cannot_compile():
    for rules in ("deny network:example.com", "deny mcp:github/*"):
        with pytest.raises(ConfigurationError, match="cannot enforce"):
            ClaudeCliBackend.check_permissions(BackendSettings(
                model=None, tools=[], sandbox=False, options=ClaudeCliBackend.options_model(),
                permissions=PermissionPolicy.parse(rules)))


# ---------------------------------------------------------------------------------- real programs


def side_requests(request: Any) -> Any:
    return None if request.tools else reply(text("ok"))


@pytest.fixture
def case() -> CliCase:
    return CliCase(backend=ClaudeCliBackend, program=need(CLAUDE, "Claude Code"), wire="anthropic",
                   model="claude-sonnet-4-5", write=lambda path, content: reply(text("unused")),
                   handler=side_requests)


async def run_policy(kit: Kit, server: Any, cwd: Path, policy: PermissionPolicy) -> list[Any]:
    cls = kit.case.backend
    settings = BackendSettings(model=kit.case.model, tools=[], sandbox=False, permissions=policy,
                               options=cls.options_model(**kit.options(server)))
    cls.check_settings(settings)
    backend = cls(settings)
    await backend.connect(SessionSpec(cwd=cwd))
    try:
        return await kit.turn(backend, "Push it and install the hook.")
    finally:
        await backend.disconnect()


@pytest.mark.agent
async def test_claude_denies_a_force_push_and_a_hook_write_and_goes_on(kit, tmp_path):
    work, remote, pushed = repository(tmp_path)
    hook = work / ".git" / "hooks" / "pre-commit"
    server = kit.server([
        reply(tool_call("Bash", {"command": "git push --force origin main", "description": "Push"})),
        reply(tool_call("Write", {"file_path": str(hook), "content": "#!/bin/sh\nexit 0\n"})),
        reply(tool_call("Write", {"file_path": str(work / "after.txt"), "content": "went on\n"})),
        reply(text("done")),
    ])
    messages = await run_policy(kit, server, work, POLICY)
    assert git(remote, "rev-parse", "main") == pushed
    assert not hook.exists()
    assert (work / "after.txt").read_text() == "went on\n"
    results = [m for m in messages if m.type in (MessageType.TOOL_RESULT, MessageType.COMMAND_END)]
    assert [m.is_error for m in results] == [True, True, False]
    assert "denied" in results[0].content and "denied" in results[1].content
