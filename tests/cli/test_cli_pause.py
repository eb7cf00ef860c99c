"""`agenter run --on-ask pause` and `agenter approve HANDLE`: a run that pauses prints the calls
and the handle and exits 3; another process (a second `agenter` command) continues it from the
store the run kept it in (SQLite here: what two hosts would share), the real anthropic-sdk
backend against the scripted model server; bad handles and stores are one-line usage errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agenter.cli import EXIT_PAUSED
from agenter.testing import ScriptedModelServer, reply, text, tool_call

from .test_cli import clean_env, run_cli

KEY = "sk-test-cli-pause-0123456789"
USAGE = {"input_tokens": 1000, "output_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
SCRIPT = [reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"}, id="call_a"),
                tool_call("write_file", {"path": "secret.txt", "content": "s\n"}, id="call_secret"), usage=USAGE),
          reply(text("Both written."), usage=USAGE)]


def events_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


@pytest.mark.timeout(600)
def test_a_paused_run_is_approved_by_another_agenter_process_through_a_shared_store(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    store = f"sqlite:///{tmp_path / 'shared' / 'runs.db'}"
    with ScriptedModelServer(SCRIPT) as server:
        first = run_cli("run", "Write a.txt and secret.txt", "--cwd", str(repo), "--json", "--on-ask", "pause",
                        "--permission", "mode bypass", "--permission", "ask edit:secret.txt",
                        "--option", f"base_url={server.base_url}", "--option", f"api_key={KEY}",
                        "--option", f"conversation_store={store}", timeout=240)
        assert first.returncode == EXIT_PAUSED == 3, first.stderr
        events = events_of(first.stdout)
        assert [e["type"] for e in events[-2:]] == ["paused", "session_end"]
        paused = events[-1]["data"]["result"]
        assert paused["status"] == "paused" and paused["files"] == {"a.txt": "a\n"}
        assert [(c["id"], c["rule"]) for c in paused["pending"]] == [("call_secret", "ask edit:secret.txt")]
        handle = paused["resume_handle"]
        assert not (repo / "secret.txt").exists()
        # The record is in the shared database, without the key.
        with sqlite3.connect(tmp_path / "shared" / "runs.db") as db:
            rows = db.execute("SELECT session_id, metadata FROM agenter_conversations").fetchall()
        assert handle in [row[0] for row in rows] and all(KEY.encode() not in bytes(row[1]) for row in rows)

        # Another process: the record names the backend, model and options; the key comes again.
        second = run_cli("approve", handle, "--store", store, "--json", "--option", f"api_key={KEY}", timeout=240)
        assert second.returncode == 0, second.stderr
        result = events_of(second.stdout)[-1]["data"]["result"]
        assert result["status"] == "completed" and result["files"] == {"a.txt": "a\n", "secret.txt": "s\n"}
        assert result["total_tokens"] == 2 * paused["total_tokens"] == 2200
        assert result["iterations"] == paused["iterations"] == 1
        body = server.model_requests[1].body
        results = {b["tool_use_id"]: b for b in body["messages"][2]["content"] if b["type"] == "tool_result"}
        assert "secret.txt" in str(results["call_secret"]["content"]) and not results["call_secret"].get("is_error")
        assert KEY not in first.stdout + second.stdout + second.stderr

        # Used: a second approve is one line on stderr, exit 2, and nothing runs.
        again = run_cli("approve", handle, "--store", store, "--option", f"api_key={KEY}")
        assert again.returncode == 2 and len(server.model_requests) == 2
        assert again.stderr.strip().splitlines() == [again.stderr.strip()]
        assert f"resume handle '{handle}' was already used" in again.stderr


@pytest.mark.timeout(600)
def test_the_live_display_lists_the_calls_and_deny_goes_on(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    cache = tmp_path / "cache"  # the default store: the user's cache
    with ScriptedModelServer([SCRIPT[0], reply(text("I left secret.txt alone."))]) as server:
        env = clean_env(XDG_CACHE_HOME=str(cache), ANTHROPIC_API_KEY=KEY)
        first = run_cli("run", "Write a.txt and secret.txt", "--cwd", str(repo), "--on-ask", "pause",
                        "--permission", "mode bypass", "--permission", "ask edit:secret.txt",
                        "--option", f"base_url={server.base_url}", env=env, timeout=240)
        assert first.returncode == 3, first.stderr
        assert "PAUSED  1 call waits for your approval" in first.stderr
        assert "waits for approval: write_file secret.txt (ask edit:secret.txt)  [call call_secret]" in first.stderr
        assert "permission deferred: write_file" in first.stderr
        handle = next(word for word in first.stderr.split() if word.startswith("pause-"))
        assert f"continue: agenter approve {handle}" in first.stderr
        second = run_cli("approve", handle, "--deny", env=env, timeout=240)
        assert second.returncode == 0, second.stderr
        assert "COMPLETED" in second.stderr and not (repo / "secret.txt").exists()
        assert "denied by a person" in json.dumps(server.model_requests[1].body)


def test_bad_input_is_a_one_line_usage_error(tmp_path):
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    cases = [
        (["approve", "pause-" + "0" * 32], "unknown resume handle 'pause-00000000000000000000000000000000'"),
        (["approve", "not-a-handle"], "unknown resume handle 'not-a-handle'"),
        (["approve", "pause-" + "0" * 32, "--store", "postgres://db/x"], "no conversation store for postgres://"),
        (["approve", "pause-" + "0" * 32, "--store", str(Path(__file__))], "could not be used"),
        (["run", "x", "--cwd", str(tmp_path), "--backend", "codex-cli", "--on-ask", "pause"],
         "--on-ask pause: the codex-cli backend cannot pause a run; backends that can: acp, aider-cli, anthropic-sdk, "
         "claude-code, codex, gemini, google-adk, litellm, openai, openai-agents, openhands"),
        (["run", "x", "--cwd", str(tmp_path), "--permission", "ask bash:rm"], "--permission 'ask bash:rm'"),
    ]
    for args, message in cases:
        proc = run_cli(*args, env=env)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    both = run_cli("approve", "pause-x", "--deny", "--always", env=env)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
