"""Detection: every registered backend, installed or not, with path, version, credentials found
(by name, never by value) and capabilities; backend="auto" takes the first usable one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agenter._errors import RequirementError
from agenter.backends import backend_names
from agenter.backends.registry import AUTO_ORDER, CREDENTIALS, Credentials, auto_backend, detect_backends

from .conftest import REPO, installed


def fake_program(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / name
    program.write_text(f"#!/bin/sh\necho '{version}'\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def test_every_registered_backend_is_listed_installed_or_not(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no agent program anywhere on PATH
    monkeypatch.chdir(tmp_path)  # and no node_modules/.bin above the current directory
    statuses = {s.name: s for s in detect_backends(versions=False)}
    assert set(statuses) == set(backend_names())
    for name in ("codex-cli", "gemini-cli", "opencode-cli", "aider-cli"):
        status = statuses[name]
        assert not status.installed and not status.usable and status.path is None
        assert "install" in (status.problem or "")
        assert status.capabilities  # declared whether installed or not
    assert "npm install -g @google/gemini-cli" in (statuses["gemini-cli"].problem or "")


def test_path_version_and_credentials_of_a_cli(monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, "gemini", "0.61.0")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_APPLICATION_CREDENTIALS",
                     "GEMINI_CLI_HOME"):
        monkeypatch.delenv(variable, raising=False)
    (status,) = detect_backends(["gemini-cli"])
    assert status.installed and status.path == str(bin_dir / "gemini") and status.version == "0.61.0"
    assert status.credentials is False and not status.usable

    secret = "AIza-not-a-real-key-but-long-enough-000"
    monkeypatch.setenv("GEMINI_API_KEY", secret)
    (status,) = detect_backends(["gemini-cli"])
    assert status.credentials is True and status.credentials_source == "GEMINI_API_KEY" and status.usable
    assert secret not in repr(status.as_dict())

    monkeypatch.delenv("GEMINI_API_KEY")
    login = tmp_path / "home" / ".gemini" / "oauth_creds.json"
    login.parent.mkdir(parents=True)
    login.write_text('{"refresh_token": "never read"}')
    (status,) = detect_backends(["gemini-cli"])
    assert status.credentials_source == "~/.gemini/oauth_creds.json" and status.usable


def test_credentials_files_under_a_variable_are_skipped_when_it_is_unset(tmp_path):
    where = Credentials(env=("NOPE_KEY",), files=("$NOPE_HOME/auth.json", "~/auth.json"))
    assert where.source({"HOME": str(tmp_path)}) is None
    (tmp_path / "auth.json").write_text("{}")
    assert where.source({"HOME": str(tmp_path)}) == "~/auth.json"
    assert where.source({"HOME": str(tmp_path), "NOPE_HOME": str(tmp_path)}) == "$NOPE_HOME/auth.json"
    assert where.source({"NOPE_KEY": "x"}) == "NOPE_KEY"
    assert set(CREDENTIALS) <= set(backend_names())


def test_auto_picks_the_first_usable_backend_in_the_documented_order(monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, "codex", "codex-cli 0.169.0")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.chdir(tmp_path)
    environ = {"HOME": str(tmp_path), "OPENAI_API_KEY": "sk-x"}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")  # what codex itself reads when the agent is built
    # claude-code needs its SDK's CLI and an Anthropic login: no credentials here, so codex wins.
    assert AUTO_ORDER.index("codex") < AUTO_ORDER.index("codex-cli")
    assert auto_backend(environ) == "codex"
    with pytest.raises(RequirementError) as caught:
        auto_backend({"HOME": str(tmp_path)})
    assert "no credentials found" in str(caught.value)


def test_auto_skips_a_backend_the_facade_would_refuse(monkeypatch, tmp_path):
    # Only OPENAI_API_KEY and no agent program: openai has credentials but needs model=, so auto
    # does not pick it (it used to, and the agent then failed to build); with a model it does.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    environ = {"HOME": str(tmp_path), "OPENAI_API_KEY": "sk-x"}
    with pytest.raises(RequirementError) as caught:
        auto_backend(environ, sandbox=False)
    assert "openai: the openai backend needs model=" in str(caught.value)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert auto_backend(environ, sandbox=False, model="gpt-5-mini", mode="patch") == "openai"
    (status,) = detect_backends(["openai"])
    assert status.installed and status.credentials and not status.usable and "model=" in (status.blocked or "")


@pytest.mark.skipif(installed(REPO / "node_modules" / ".bin" / "codex") is None, reason="npm install not run")
def test_the_pinned_programs_are_found_with_their_versions(monkeypatch):
    monkeypatch.chdir(REPO)  # node_modules/.bin of the current directory is searched
    statuses = {s.name: s for s in detect_backends(["codex-cli", "claude-cli"])}
    assert statuses["codex-cli"].version == "codex-cli 0.169.0"
    assert statuses["codex-cli"].path == str(REPO / "node_modules" / ".bin" / "codex")
    assert statuses["codex-cli"].sandbox  # workspace-write needs nothing more
    assert "Claude Code" in (statuses["claude-cli"].version or "")
