"""The agent-CLI family's cases (tests/backends/kit.py): each program, where it is, and how its
model writes a file, runs a command, reads and answers with structured output. The programs
enforce a permission policy by their own rules (agenter compiles it), not through agenter's
gate, so they play no gated run: tests/backends/cli/test_permissions_*.py prove each
program's compiled policy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agenter.backends._programs.claude import bundled_cli
from agenter.backends.cli.aider import AiderCliBackend
from agenter.backends.cli.claude import ClaudeCliBackend
from agenter.backends.cli.codex import CodexCliBackend
from agenter.backends.cli.gemini import GeminiCliBackend
from agenter.backends.cli.opencode import OpenCodeCliBackend
from agenter.testing import reply, text, tool_call

from ..kit import REPO, SLOW_SKIPS, Case, installed, need

AIDER = installed(REPO / ".venv-aider" / "bin" / "aider", name="aider")
CLAUDE = installed(shutil.which("claude"), bundled_cli())
CODEX = installed(REPO / "node_modules" / ".bin" / "codex", name="codex")
GEMINI = installed(REPO / "node_modules" / ".bin" / "gemini", name="gemini")
OPENCODE = installed(REPO / "node_modules" / ".bin" / "opencode", name="opencode")
HAVE_SANDBOX = bool(shutil.which("bwrap") and shutil.which("socat"))


def fenced_json(value: dict[str, Any]) -> Any:
    return reply(text("```json\n" + json.dumps(value) + "\n```"))


# ---------------------------------------------------------------------------------- aider
def whole_file(path: str, content: str) -> Any:
    """A reply in Aider's "whole" edit format: the file name, then the whole file fenced."""
    return reply(text(f"Here it is.\n\n{path}\n```\n{content}```\n"))


def aider(shared: Path) -> Case:
    return Case(
        backend=AiderCliBackend, program=need(AIDER, "Aider (scripts/install-aider.sh)"), wire="openai",
        model="openai/gpt-4.1", startup=8.0, options={"aider_edit_format": "whole"}, write=whole_file,
        output=lambda value: reply(text("The answer: " + json.dumps(value))), skip_checks=SLOW_SKIPS,
        # A short first prompt: Aider summarizes a long history with its weak model, a request of
        # its own. The facade builds agents in autonomous mode only for backends with a shell;
        # Aider runs none headless (agenter answers no to its shell questions), so the time
        # budget's session runs on the backend directly.
        resume={"second_turn": False, "big_prompt": False}, time_budget={"session_only": True, "counts_sent": True},
        error_classes=True, install="pipx install aider-chat")


# ---------------------------------------------------------------------------------- claude
def side_requests(request: Any) -> Any:
    """Claude Code and OpenCode may ask for a title or a summary (no tools): answer without
    using the script."""
    return None if request.tools else reply(text("ok"))


def claude(shared: Path) -> Case:
    return Case(
        backend=ClaudeCliBackend, program=need(CLAUDE, "Claude Code"), wire="anthropic", model="claude-sonnet-4-5",
        write=lambda path, content: reply(tool_call("Write", {"file_path": path, "content": content})),
        shell=lambda command: reply(tool_call("Bash", {"command": command, "description": "Run it"})),
        read=lambda path: reply(tool_call("Glob", {"pattern": "*.txt"})),
        output=lambda value: reply(tool_call("StructuredOutput", value)),
        sandbox=HAVE_SANDBOX, handler=side_requests, resume={}, time_budget={"counts_sent": True}, error_classes=True,
        install="npm install -g @anthropic-ai/claude-code")


# ---------------------------------------------------------------------------------- codex
def codex_shell(command: str) -> Any:
    return reply(tool_call("exec_command", {"cmd": command, "yield_time_ms": 30_000}))


def codex_write(path: str, content: str) -> Any:
    body = "".join(f"+{line}\n" for line in content.splitlines())
    return reply(tool_call("apply_patch", f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"))


def codex(shared: Path) -> Case:
    return Case(backend=CodexCliBackend, program=need(CODEX, "the Codex CLI (npm install)"), wire="openai",
                model="gpt-5.5", write=codex_write, shell=codex_shell,
                read=lambda path: codex_shell(f"cat {path} || true"),
                output=lambda value: reply(text(json.dumps(value))), sandbox=True, resume={}, time_budget={"counts_sent": True},
                error_classes=True, install="npm install -g @openai/codex")


# ---------------------------------------------------------------------------------- gemini
def gemini_shell(command: str) -> Any:
    return reply(tool_call("run_shell_command", {"command": command}))


def gemini(shared: Path) -> Case:
    return Case(
        backend=GeminiCliBackend, program=need(GEMINI, "Gemini CLI (npm install)"), wire="gemini",
        model="gemini-2.5-flash", startup=4.0,
        write=lambda path, content: reply(tool_call("write_file", {"file_path": path, "content": content})),
        shell=gemini_shell, read=lambda path: reply(tool_call("list_directory", {"dir_path": "."})),
        output=fenced_json, skip_checks=SLOW_SKIPS, resume={}, time_budget={"counts_sent": True}, error_classes=True,
        install="npm install -g @google/gemini-cli")


# ---------------------------------------------------------------------------------- opencode
def opencode(shared: Path) -> Case:
    """`shared` is one home for every test of a module: OpenCode sets up its database on a
    home's first run (seconds)."""
    home = shared / "opencode-home"
    home.mkdir(exist_ok=True)
    return Case(
        backend=OpenCodeCliBackend, program=need(OPENCODE, "OpenCode (npm install opencode-ai)"), wire="openai",
        model="openai/gpt-4.1", startup=8.0,
        # No models.dev fetch: there is no network here, and waiting for it costs seconds a run.
        options={"home": str(home)}, env={"OPENCODE_DISABLE_MODELS_FETCH": "1"},
        write=lambda path, content: reply(tool_call("write", {"filePath": path, "content": content})),
        shell=lambda command: reply(tool_call("bash", {"command": command, "description": "Run it"})),
        read=lambda path: reply(tool_call("glob", {"pattern": "*.txt"})),
        output=fenced_json, skip_checks=SLOW_SKIPS, resume={"second_turn": False}, time_budget={"counts_sent": True},
        error_classes=True, install="npm install -g opencode-ai")


CASES = [pytest.param(factory, id=name, marks=pytest.mark.agent) for name, factory in [
    ("aider-cli", aider), ("claude-cli", claude), ("codex-cli", codex), ("gemini-cli", gemini),
    ("opencode-cli", opencode)]]
