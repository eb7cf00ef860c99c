"""acp's cases (tests/backends/kit.py): agenter as the ACP client of real agents against the
scripted model server (claude-agent-acp, Gemini CLI, OpenCode) and of a scripted fake agent
(fake_acp_agent.py, no model) that plays the contract's scenarios on demand.

claude-agent-acp asks agenter (session/request_permission) before its edits and commands, so it
plays the permission proofs; its refusal reaches the model as Claude Code's "refused
permission", and agenter's reasons only in the session's next prompt (not `told`: the facade
test in test_acp_permissions.py proves that prompt). Gemini CLI and OpenCode act by themselves
here: no gated runs."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter.backends.agents.acp import ACPBackend, ACPOptions
from agenter.backends.base import BackendSettings
from agenter.testing import conformance, reply, text, tool_call
from agenter.testing._scene import private_home

from ...kit import NODE_BIN, TOKEN_ENV, Case, Kit, need

FAKE_AGENT = Path(__file__).parent / "fake_acp_agent.py"
USAGE = {"input_tokens": 1200, "output_tokens": 40}


def program(name: str) -> str:
    """An ACP agent installed by `npm install` (package.json pins them), or skip."""
    path = NODE_BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    return need(found, f"{name} (run `npm install` in the project root)")


def fenced_json(value: dict[str, Any]) -> Any:
    return reply(text(f"```json\n{json.dumps(value)}\n```"))


def backend_for(options: dict[str, Any], *, sandbox: bool = True, model: str | None = None) -> ACPBackend:
    return ACPBackend(BackendSettings(model=model, tools=[], sandbox=sandbox, options=ACPOptions(**options)))


# ---------------------------------------------------------------------------------- the fake agent
class Fake:
    """Options for the scripted fake agent, plus its event log."""

    def __init__(self, tmp_path: Path, token: str, turns: list[list[dict[str, Any]]], **env: str):
        self.log_path = tmp_path / "fake-agent.log"
        script = tmp_path / "fake-agent-script.json"
        script.write_text(json.dumps(turns))
        self.env = {"FAKE_ACP_SCRIPT": str(script), "FAKE_ACP_LOG": str(self.log_path), TOKEN_ENV: token, **env}

    def options(self, **extra: Any) -> dict[str, Any]:
        return {"acp_command": sys.executable, "acp_args": [str(FAKE_AGENT)], "env": self.env, **extra}

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        events = [json.loads(line) for line in self.log_path.read_text().splitlines()]
        return [e for e in events if kind is None or e["event"] == kind]


class FakeHarness:
    """The conformance scenarios played by the scripted fake agent (no model: the "model
    failure" is the agent's own error answer to session/prompt, as real agents relay it)."""

    capabilities = ACPBackend.capabilities

    def __init__(self, kit: Kit):
        self.kit = kit

    def supports(self, scenario: str) -> bool:
        return scenario in ("write", "shell", "hang", "refuse", "output", "fail", "usage")

    def make(self, scenario: str, cwd: Path) -> ACPBackend:
        turns: dict[str, list[dict[str, Any]]] = {
            "write": [{"write": conformance.WRITE_PATH, "content": conformance.WRITE_CONTENT}, {"say": "Done."}],
            "shell": [{"shell": conformance.SHELL_COMMAND}, {"say": "Ran it."}],
            "hang": [{"sleep": 60}],
            "refuse": [{"say": f"REFUSED: {conformance.REFUSAL_REASON}"}],
            "output": [{"say": f"```json\n{json.dumps(conformance.OUTPUT_VALUE)}\n```"}],
            "fail": [{"error": {"code": -32603, "message": "Internal error: API Error: 500 scripted failure"}}],
            "usage": [{"usage": {"used": 1200}}, {"read": "app.py"}, {"usage": {"used": 1500}},
                      {"say": "It greets."}],
        }
        return backend_for(Fake(self.kit.fresh_dir(), self.kit.token, [turns[scenario]]).options())


def fake_agent(shared: Path) -> Case:
    return Case(backend=ACPBackend, wire="anthropic", model=None, harness=FakeHarness)


# ---------------------------------------------------------------------------------- claude-agent-acp
def claude_env(kit: Kit, server: Any, home: Path) -> dict[str, str]:
    env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdef",
           "HOME": str(home), "TMPDIR": str(kit.fresh_dir()), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "ENABLE_TOOL_SEARCH": "false", TOKEN_ENV: kit.token, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    return env


def claude_options(server: Any, tmp_path: Path, token: str, **extra: Any) -> dict[str, Any]:
    """claude-agent-acp against the scripted Anthropic API, with a private HOME
    (`tmp_path/claude-home`, holding the fake private key) and TMPDIR."""
    home = private_home(tmp_path / "claude-home")
    env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdef",
           "HOME": str(home), "TMPDIR": str(tmp_path), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "ENABLE_TOOL_SEARCH": "false", TOKEN_ENV: token, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    return {"acp_command": program("claude-agent-acp"), "env": env, **extra}


def claude_connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """Its edits and commands ask session/request_permission: without a gate policy, the
    permission_policy allows them (with one, the gate decides)."""
    env = {**claude_env(kit, server, home), "CLAUDE_CODE_MAX_RETRIES": "0"}
    return {"acp_command": program("claude-agent-acp"), "env": env, "permission_policy": "allow"}


def tool_results(server: Any) -> list[tuple[bool, str]]:
    """(is_error, text) of the tool results the model got, in order."""
    seen: dict[str, tuple[bool, str]] = {}
    for request in server.model_requests:
        for result in request.model_request.tool_results:
            seen[result["id"]] = (result["is_error"], str(result["output"]))
    return list(seen.values())


def hostile(evidence: Any, server: Any) -> None:
    """Claude Code's refusal at once; the .git write meets the sandbox's path check first."""
    results = tool_results(server)
    assert [is_error for is_error, _ in results] == [True, True, True, True, False]
    assert all("refused permission" in said for _, said in results[:4])
    assert "outside the allowed paths" in evidence.report.denials[0].reason
    assert [(d["kind"], d["decision"]) for d in evidence.decisions] == [
        ("shell", "deny"), ("read", "deny"), ("shell", "deny"), ("edit", "allow")]


def asked(evidence: Any, server: Any) -> None:
    assert [q.call.command for q in evidence.questions] == ["touch approved.txt", "touch refused.txt"]
    assert [is_error for is_error, _ in tool_results(server)] == [False, True]


EXPECT = {"hostile_calls_are_refused_and_the_turn_goes_on": hostile, "asks_are_answered_by_the_callback": asked}


def claude_agent_acp(shared: Path) -> Case:
    return Case(
        backend=ACPBackend, wire="anthropic", model=None, connect=claude_connect, sandbox=True, absolute_paths=True,
        write=lambda path, content: reply(tool_call("Write", {"file_path": path, "content": content})),
        shell=lambda command: reply(tool_call("Bash", {"command": command, "description": "Run it"})),
        read=lambda path: reply(tool_call("Read", {"file_path": path})),
        output=fenced_json, usage=USAGE, hang_seconds=60, supports=frozenset({"permissions", "ask"}),
        expect=EXPECT)


# ---------------------------------------------------------------------------------- Gemini CLI
def gemini_options(server: Any, root: Path, cwd: Path, token: str, **extra: Any) -> dict[str, Any]:
    """`gemini --acp` (Gemini CLI 0.61) against the scripted server's Gemini API: an API-key
    login in a private HOME, the workspace trusted, and a fixed model (its default "auto" first
    asks a router model, which would take a script item)."""
    home = root / "gemini-home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        # maxAttempts 1: no retries of a failed model call (its own backoff takes minutes)
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
        "telemetry": {"enabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(cwd): "TRUST_FOLDER"}))
    env = {"HOME": str(home), "TMPDIR": str(root), "GOOGLE_GEMINI_BASE_URL": server.base_url,
           "GEMINI_API_KEY": "dummy-gemini-key-0123456789", TOKEN_ENV: token,
           "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    return {"acp_command": program("gemini"), "acp_args": ["--acp", "-m", "gemini-2.5-flash"], "env": env,
            "permission_policy": "allow", **extra}


def gemini(shared: Path) -> Case:
    """Its edits and commands ask session/request_permission (default mode): the policy allows
    them; its writes then reach agenter's fs/write_text_file."""
    program("gemini")
    return Case(
        backend=ACPBackend, wire="gemini", model=None, hang_seconds=60, usage=USAGE,
        write=lambda path, content: reply(tool_call("write_file", {"file_path": path, "content": content})),
        shell=lambda command: reply(tool_call("run_shell_command", {"command": command})),
        read=lambda path: reply(tool_call("list_directory", {"dir_path": "."})), output=fenced_json,
        connect=lambda kit, server, home, cwd: gemini_options(server, kit.fresh_dir(), cwd or home, kit.token))


# ---------------------------------------------------------------------------------- OpenCode
def opencode_title(request: Any) -> Any:
    """OpenCode first asks a small model for the session title (a request without tools): that
    one gets a title, the script plays the agent's model."""
    return None if request.tool_names else reply(text("Title"))


def opencode_options(server: Any, root: Path, token: str, *, config: dict[str, Any] | None = None,
                     **extra: Any) -> dict[str, Any]:
    """`opencode acp` with an OpenAI-compatible provider pointed at the scripted server, in a
    private HOME, with no update checks, model list downloads, sharing or default plugins. The
    model is not named gpt-*: OpenCode gives GPT models apply_patch instead of write/edit."""
    home = root / "opencode-home"
    home.mkdir(parents=True, exist_ok=True)
    settings = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                                  "options": {"baseURL": server.openai_base_url, "apiKey": "sk-test-0123456789abcdef"},
                                  "models": {"test-model": {"name": "Test model"}}}},
        "model": "scripted/test-model", "small_model": "scripted/test-model",
        "autoupdate": False, "share": "disabled", **(config or {}),
    }
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".data"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".state"), "TMPDIR": str(root),
           "OPENCODE_CONFIG_CONTENT": json.dumps(settings), "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
           "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
           TOKEN_ENV: token, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    return {"acp_command": program("opencode"), "acp_args": ["acp"], "env": env, **extra}


def opencode(shared: Path) -> Case:
    """`opencode acp` edits and runs commands by itself (its default permissions allow both)."""
    program("opencode")
    return Case(
        backend=ACPBackend, wire="openai", model=None, handler=opencode_title, absolute_paths=True,
        hang_seconds=60, usage=USAGE,
        connect=lambda kit, server, home, cwd: opencode_options(server, kit.fresh_dir(), kit.token),
        write=lambda path, content: reply(tool_call("write", {"filePath": path, "content": content})),
        shell=lambda command: reply(tool_call("bash", {"command": command, "description": "Run it"})),
        read=lambda path: reply(tool_call("glob", {"pattern": "*"})), output=fenced_json)


CASES = [
    pytest.param(fake_agent, id="acp-fake-agent"),
    pytest.param(claude_agent_acp, id="acp-claude-agent-acp", marks=pytest.mark.agent),
    pytest.param(gemini, id="acp-gemini", marks=pytest.mark.agent),
    pytest.param(opencode, id="acp-opencode", marks=pytest.mark.agent),
]
