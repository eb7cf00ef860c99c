"""acp backend: agenter as the ACP client of real agents (claude-agent-acp, codex-acp) talking to
the scripted model server, with files checked on disk and processes checked by pid.

A tiny scripted ACP agent (fake_acp_agent.py beside this file, built on the `acp` package's
agent side) covers protocol corners the real agents cannot be made to hit on demand: fs
requests, refusal and max_tokens stop reasons, crashes, agents that ignore stdin and SIGTERM.
The contract (conformance and permission proofs) runs from tests/backends/test_contract.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agenter import AutonomousCodingAgent, Budget, CodingEventType, CodingStatus
from agenter._errors import BackendError, ConfigurationError, RequirementError
from agenter._types import Usage
from agenter.backends._prompts import AUTONOMOUS_CONTRACT
from agenter.backends.agents.acp import ACPBackend, ACPOptions
from agenter.backends.agents.acp._backend import CONTINUE_PROMPT, asks_for_confirmation
from agenter.backends.agents.acp._usage import ESTIMATE_NOTE
from agenter.backends.base import MessageType, SessionSpec
from agenter.host import _pids
from agenter.testing import hang, http_error, reply, text, tool_call

from ...kit import NODE_BIN, TOKEN_ENV, leftovers
from .cases import (
    Fake,
    backend_for,
    claude_options,
    gemini_options,
    opencode_options,
    opencode_title,
    program,
    tool_results,
)

agent_test = pytest.mark.agent


# ---------------------------------------------------------------------------------- helpers
def live_pids_with_mark(mark: str) -> set[int]:
    return leftovers(mark)


async def run_turn(backend: ACPBackend, prompt: str) -> list:
    return [message async for message in backend.execute(prompt)]


async def one_turn(options: dict[str, Any], cwd: Path, prompt: str = "do it", **spec: Any) -> tuple[ACPBackend, list]:
    backend = backend_for(options)
    await backend.connect(SessionSpec(cwd=cwd, **spec))
    try:
        messages = await run_turn(backend, prompt)
    finally:
        await backend.disconnect()
    return backend, messages


# ---------------------------------------------------------------------------------- options
def test_permission_policy_is_validated_with_the_valid_values() -> None:
    with pytest.raises(ValidationError):
        ACPOptions(acp_command="x", permission_policy="ask")
    for name in ("permission_policy", "acp_permission_policy"):  # the old name maps to the new one
        with pytest.raises(ConfigurationError) as info:
            AutonomousCodingAgent(backend="acp", acp_command=sys.executable, **{name: "yes"})  # type: ignore[arg-type]
        assert "'deny'" in str(info.value) and "'allow'" in str(info.value)
        assert info.value.parameter == "permission_policy"


def test_facade_options_errors() -> None:
    with pytest.raises(ConfigurationError, match="acp_command"):
        AutonomousCodingAgent(backend="acp")
    with pytest.raises(ConfigurationError, match="acp_command must name"):
        AutonomousCodingAgent(backend="acp", acp_command="  ")
    with pytest.raises(ConfigurationError, match="unknown option"):
        AutonomousCodingAgent(backend="acp", acp_command=sys.executable, acp_wat=1)
    with pytest.raises(ConfigurationError, match="mcp_servers"):
        AutonomousCodingAgent(backend="acp", acp_command=sys.executable, acp_mcp_servers=[{"name": "m"}])
    with pytest.raises(ConfigurationError, match="acp_fs"):
        AutonomousCodingAgent(backend="acp", acp_command=sys.executable, acp_fs=["exec"])
    agent = AutonomousCodingAgent(backend="acp", acp_command=sys.executable, permission_policy="allow",
                                  mcp_servers=[{"name": "m", "command": "srv", "env": {"A": "1"}}])
    assert agent.options.acp_autonomous is True and agent.options.acp_fs == ["read", "write"]


def test_old_option_names_keep_working() -> None:
    old = ACPOptions(acp_command="x", acp_env={"A": "1"},  # type: ignore[call-arg]
                     acp_mcp_servers=[{"name": "m", "command": "s"}], acp_permission_policy="allow", startup_timeout=5)
    assert (old.env, old.mcp_servers, old.permission_policy, old.acp_startup_timeout) == (
        {"A": "1"}, [{"name": "m", "command": "s"}], "allow", 5.0)
    with pytest.raises(ConfigurationError, match="pass only 'env'"):
        ACPOptions(acp_command="x", acp_env={}, env={})  # type: ignore[call-arg]


def test_a_missing_agent_program_is_named_at_construction() -> None:
    with pytest.raises(RequirementError) as info:
        AutonomousCodingAgent(backend="acp", acp_command="no-such-acp-agent-xyz")
    assert "no-such-acp-agent-xyz" in str(info.value) and "install the ACP agent program" in str(info.value)
    # looked up on the PATH the agent will get
    with pytest.raises(RequirementError):
        AutonomousCodingAgent(backend="acp", acp_command="python3", env={"PATH": "/nonexistent"})


def test_a_missing_acp_package_is_named_at_construction() -> None:
    """Without the extra: one RequirementError naming the pip command, never a ModuleNotFoundError
    (also with mcp_servers, whose check needs the acp package)."""
    import subprocess

    code = (
        "import importlib.abc, sys\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'acp' or name.startswith('acp.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from agenter import AutonomousCodingAgent\n"
        "from agenter._errors import RequirementError\n"
        "try:\n"
        "    AutonomousCodingAgent(backend='acp', acp_command=sys.executable,\n"
        "                          mcp_servers=[{'name': 'm', 'command': 'srv'}])\n"
        "except RequirementError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'agenter-sdk[acp]'" in out.stdout and "agent-client-protocol" in out.stdout
    assert "Traceback" not in out.stderr


def test_confirmation_heuristic() -> None:
    assert asks_for_confirmation("I found the bug in app.py. Shall I go ahead and fix it?")
    assert asks_for_confirmation("Here is my plan. Let me know if you want me to apply it.")
    assert asks_for_confirmation("Would you like me to proceed")
    assert not asks_for_confirmation("Fixed the bug in app.py and added a test.")
    assert not asks_for_confirmation("")


def test_usage_reported_in_the_prompt_response() -> None:
    from acp.schema import PromptResponse

    from agenter.backends.agents.acp._usage import reported_usage

    spec = PromptResponse.model_validate({"stopReason": "end_turn", "usage": {
        "totalTokens": 180, "inputTokens": 100, "outputTokens": 20, "cachedReadTokens": 60}})
    assert reported_usage(spec) == (Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60), None)
    gemini = PromptResponse.model_validate({"stopReason": "end_turn", "_meta": {"quota": {
        "token_count": {"input_tokens": 24377, "output_tokens": 25},
        "model_usage": [{"model": "gemini-2.5-flash", "token_count": {"input_tokens": 24377, "output_tokens": 25}}]}}})
    assert reported_usage(gemini) == (Usage(input_tokens=24377, output_tokens=25), "gemini-2.5-flash")
    assert reported_usage(PromptResponse(stop_reason="end_turn")) == (None, None)
    assert reported_usage(PromptResponse.model_validate({"stopReason": "end_turn", "_meta": {"quota": "?"}})) == (
        None, None)


def test_module_imports_without_acp_package() -> None:
    import subprocess

    code = "import sys, agenter.backends.agents.acp; print('acp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------- fake agent: fs
async def test_fs_write_inside_cwd_and_refusals_outside(tmp_path: Path, repo: Path, mark: str) -> None:
    outside = tmp_path / "outside.txt"
    fake = Fake(tmp_path, mark, [[
        {"say": "Writing now."},
        {"write": str(repo / "pkg" / "new.py"), "content": "VALUE = 1\n"},
        {"write": "../outside.txt", "content": "escaped"},
        {"write": str(outside), "content": "escaped"},
        {"write": ".git/config", "content": "x"},
        {"read": str(repo / "app.py"), "line": 2, "limit": 1},
        {"read": "/etc/hostname"},
        {"say": "Done."},
    ]])
    backend, messages = await one_turn(fake.options(), repo)

    assert (repo / "pkg" / "new.py").read_text() == "VALUE = 1\n"
    assert not outside.exists() and not (repo / ".git").exists()
    writes = fake.events("write")
    assert [w["ok"] for w in writes] == [True, False, False, False]
    # the refusal is a JSON-RPC error whose message the agent relays to the model
    assert all(w["code"] == -32602 and "Refused" in w["message"] for w in writes[1:])
    reads = fake.events("read")
    assert reads[0] == {"event": "read", "path": str(repo / "app.py"), "ok": True, "content": "    return 'hello'\n"}
    assert reads[1]["ok"] is False and "outside the working directory" in reads[1]["message"]
    assert backend.modified_files().written == {"pkg/new.py"}
    init = fake.events("initialize")[0]
    assert init["fs"] == {"readTextFile": True, "writeTextFile": True} and not init["terminal"]
    failed = [m for m in messages if m.type is MessageType.TOOL_RESULT and m.is_error]
    assert len(failed) == 3 and "Refused" in failed[0].content


async def test_allowed_write_paths_limit_fs_writes(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[
        {"write": "src/ok.py", "content": "x = 1\n"},
        {"write": "app.py", "content": "overwritten"},
    ]])
    backend, _ = await one_turn(fake.options(), repo, allowed_write_paths=["src/"])
    assert (repo / "src" / "ok.py").exists()
    assert (repo / "app.py").read_text().startswith("def greet")
    assert [w["ok"] for w in fake.events("write")] == [True, False]
    assert "writes are limited to: src/" in fake.events("write")[1]["message"]
    assert backend.modified_files().written == {"src/ok.py"}
    assert "Only create, change or delete files matching these gitignore-style patterns" in (
        fake.events("prompt")[0]["text"])


async def test_snapshot_sees_what_the_agent_changes_by_itself(tmp_path: Path, repo: Path, mark: str) -> None:
    (repo / "old.txt").write_text("bye")
    fake = Fake(tmp_path, mark, [[{"write_self": "direct.py", "content": "A = 1\n"}, {"delete_self": "old.txt"}]])
    backend, _ = await one_turn(fake.options(), repo)
    changes = backend.modified_files()
    assert changes.written == {"direct.py"} and changes.deleted == {"old.txt"}


# ---------------------------------------------------------------------------------- fake agent: permissions
async def test_permission_policy_deny_and_allow(tmp_path: Path, repo: Path, mark: str) -> None:
    ask = {"permission": {"title": "Edit app.py", "kind": "edit", "paths": [str(repo / "app.py")],
                          "then_write_self": "granted.txt"}}
    fake = Fake(tmp_path, mark, [[ask]])
    _, messages = await one_turn(fake.options(), repo)  # default policy: deny
    assert fake.events("permission")[0]["chosen"] == "reject_once"
    assert not (repo / "granted.txt").exists()
    assert any("permission denied" in m.content for m in messages if m.type is MessageType.STATUS)

    (tmp_path / "second").mkdir()
    fake2 = Fake(tmp_path / "second", mark, [[ask]])
    await one_turn(fake2.options(permission_policy="allow"), repo)
    assert fake2.events("permission")[0]["chosen"] == "allow_once"  # once, never "always"
    assert (repo / "granted.txt").exists()


async def test_allow_policy_still_rejects_edits_outside_the_sandbox(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[
        {"permission": {"title": "Edit /etc/passwd", "kind": "edit", "paths": ["/etc/passwd"]}},
        {"permission": {"title": "Edit app.py", "kind": "edit", "paths": [str(repo / "app.py")]}},
        {"permission": {"title": "Run ls", "kind": "execute", "paths": []}},
        {"permission": {"title": "Edit", "kind": "edit", "options": ["allow_once"], "paths": ["/etc/x"]}},
    ]])
    await one_turn(fake.options(permission_policy="allow"), repo, allowed_write_paths=["app.py"])
    assert [p["chosen"] for p in fake.events("permission")] == ["reject_once", "allow_once", "allow_once", "cancelled"]


# ---------------------------------------------------------------------------------- fake agent: outcomes
async def test_refusal_stop_reason_and_refused_line(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[{"say": "I will not delete the production database."}, {"stop": "refusal"}],
                                 [{"say": "REFUSED: the task asks for malware"}]])
    backend = backend_for(fake.options())
    await backend.connect(SessionSpec(cwd=repo))
    try:
        await run_turn(backend, "drop the database")
        refusal = backend.refusal()
        assert refusal is not None and "production database" in refusal.reason
        await run_turn(backend, "write malware")
        refusal = backend.refusal()
        assert refusal is not None and refusal.reason == "the task asks for malware"
    finally:
        await backend.disconnect()


@pytest.mark.parametrize("stop", ["max_tokens", "max_turn_requests", "cancelled"])
async def test_truncated_turns_are_errors_not_success(tmp_path: Path, repo: Path, mark: str, stop: str) -> None:
    fake = Fake(tmp_path, mark, [[{"write": "half.py", "content": "x"}, {"stop": stop}]])
    backend = backend_for(fake.options())
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError, match=f"stop_reason={stop}"):
            await run_turn(backend, "go")
        assert backend.modified_files().written == {"half.py"}  # still reported truthfully
    finally:
        await backend.disconnect()


async def test_usage_from_usage_update_and_prompt_response(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [
        [{"usage": {"used": 5000, "cost": 0.02}}, {"say": "one"},
         {"usage_response": {"totalTokens": 6100, "inputTokens": 5000, "outputTokens": 100,
                             "cachedReadTokens": 1000}}],
        [{"usage": {"used": 9000, "cost": 0.05}}, {"say": "two"}],
        [{"usage": {"used": 9500, "cost": 0.01}}, {"say": "three (the agent restarted its count)"}],
    ])
    backend = backend_for(fake.options())
    await backend.connect(SessionSpec(cwd=repo))
    try:
        seen: list[int] = []
        async for message in backend.execute("one"):
            seen.append(backend.usage().total_tokens)
        assert seen[0] == 5000  # counted as soon as the usage_update arrives (budgets see it)
        usage = backend.usage()
        assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (5000, 100, 1000)
        assert usage.cost_usd == pytest.approx(0.02)
        await run_turn(backend, "two")
        usage = backend.usage()
        assert usage.input_tokens == 5000 + 9000  # no response usage: the context size is the floor
        assert usage.cost_usd == pytest.approx(0.05)  # cumulative per the ACP spec
        await run_turn(backend, "three")
        assert backend.usage().cost_usd == pytest.approx(0.06)
    finally:
        await backend.disconnect()


async def test_messages_are_streamed_as_deltas_and_closed_whole(tmp_path: Path, repo: Path, mark: str) -> None:
    """Each chunk is a delta as it arrives; the whole text follows them (the session does not send
    it again: the TEXT-after-deltas rule)."""
    fake = Fake(tmp_path, mark, [[{"think": "Let me look."}, {"plan": ["read", "fix"]},
                                  {"say": "I fixed the greeting in app.py."}]])
    _, messages = await one_turn(fake.options(), repo)
    notes = [m.content for m in messages if m.type is MessageType.STATUS]
    assert ESTIMATE_NOTE in notes  # this agent reports no usage
    messages = [m for m in messages if m.type not in (MessageType.STATUS, MessageType.USAGE)]
    kinds = [m.type for m in messages]
    # deltas are cut at whitespace (a key split over chunks is then redacted whole)
    assert kinds == [*[MessageType.THINKING_DELTA] * 2, MessageType.THINKING, MessageType.PLAN,
                     *[MessageType.TEXT_DELTA] * 6, MessageType.TEXT]
    deltas = [m.content for m in messages if m.type is MessageType.TEXT_DELTA]
    assert deltas[:2] == ["I ", "fixed "]
    assert "".join(deltas) == messages[-1].content == "I fixed the greeting in app.py."
    assert messages[3].content == "[pending] read\n[pending] fix"
    assert messages[3].raw["sessionUpdate"] == "plan" and messages[4].raw["sessionUpdate"] == "agent_message_chunk"


def backend_events(events: list[Any]) -> list[dict[str, Any]]:
    """The data of a run's backend messages, each with its vocabulary kind."""
    return [e.data for e in events if e.type is CodingEventType.BACKEND_MESSAGE]


def final_deltas(messages: list[dict[str, Any]]) -> str:
    """The text deltas after the last thing the agent did (a tool call, command or edit)."""
    work = {"tool_call_started", "tool_call_finished", "command_started", "command_finished", "file_edited"}
    last = max((i for i, m in enumerate(messages) if m["kind"] in work), default=-1)
    return "".join(m["content"] for m in messages[last + 1:] if m["kind"] == "text_delta")


async def test_stream_execute_speaks_the_event_vocabulary(tmp_path: Path, repo: Path, mark: str) -> None:
    """Through the facade: thought and text arrive as deltas whose text is the final text (the
    whole text is not sent again), and a file agenter wrote for the agent is file_edited with its
    lines added and removed."""
    new = "def greet():\n    return 'hi'\n\n\nGREETING = 'hi'\n"
    fake = Fake(tmp_path, mark, [[{"think": "Look first."}, {"write": "app.py", "content": new},
                                  {"say": "Changed the greeting in app.py."}]])
    agent = AutonomousCodingAgent(backend="acp", validators=[], **fake.options())
    events = [e async for e in agent.stream_execute("change the greeting", cwd=repo)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED and (repo / "app.py").read_text() == new
    messages = backend_events(events)
    kinds = {m["kind"] for m in messages}
    assert {"thinking_delta", "text_delta", "file_edited"} <= kinds and not kinds & {"text", "thinking"}
    assert final_deltas(messages) == result.summary == "Changed the greeting in app.py."
    (edit,) = [m for m in messages if m["kind"] == "file_edited"]
    assert (edit["path"], edit["lines_added"], edit["lines_removed"]) == ("app.py", 4, 1)
    assert edit["raw"]["method"] == "fs/write_text_file" and edit["raw"]["params"]["content"] == new
    # every message from the agent carries its payload (agenter's own notes and decisions have none)
    assert [m["kind"] for m in messages if not m.get("raw") and m["kind"] not in ("status", "permission_decision", "usage_updated")] == []


async def test_autonomous_contract_and_continue_once(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [
        [{"say": "I found the problem in app.py. Shall I go ahead and fix it?"}],
        [{"write": "app.py", "content": "def greet():\n    return 'hi'\n"}, {"say": "Fixed."}],
    ])
    _, messages = await one_turn(fake.options(), repo, prompt="fix greet")
    prompts = [p["text"] for p in fake.events("prompt")]
    assert prompts[0].startswith(AUTONOMOUS_CONTRACT) and prompts[0].endswith("Task:\nfix greet")
    assert prompts[1] == CONTINUE_PROMPT and len(prompts) == 2
    assert "return 'hi'" in (repo / "app.py").read_text()
    assert any("continuing automatically" in m.content for m in messages)


async def test_no_contract_and_no_continue_when_not_autonomous(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[{"say": "Shall I fix it?"}]])
    await one_turn(fake.options(acp_autonomous=False), repo, prompt="fix greet")
    (prompt,) = [p["text"] for p in fake.events("prompt")]  # no continue prompt
    assert AUTONOMOUS_CONTRACT not in prompt and prompt.endswith("Task:\nfix greet")


async def test_session_mode_and_env_var_authentication(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[{"say": "ok"}]], FAKE_ACP_AUTH_VAR="FAKE_TOKEN", FAKE_TOKEN="t0k3n-value")
    await one_turn(fake.options(acp_session_mode="yolo"), repo)
    assert fake.events("authenticate")[0]["method"] == "env-key"
    assert fake.events("set_mode")[0]["mode"] == "yolo"

    backend = backend_for(fake.options(acp_session_mode="turbo"))
    with pytest.raises(BackendError, match="available: default, yolo"):
        await backend.connect(SessionSpec(cwd=repo))
    await backend.disconnect()


async def test_structured_output_from_the_final_text(tmp_path: Path, repo: Path, mark: str) -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        functions: list[str]

    fake = Fake(tmp_path, mark, [[{"say": 'Found them. ```json {"functions": ["greet"]} ```'}]])
    backend, _ = await one_turn(fake.options(), repo, output_type=Answer)
    assert backend.structured_output() == Answer(functions=["greet"])
    assert '"functions"' in fake.events("prompt")[0]["text"]  # the schema was asked for


# ---------------------------------------------------------------------------------- fake agent: processes
async def test_agent_crash_is_a_backend_error_with_redacted_stderr(tmp_path: Path, repo: Path, mark: str) -> None:
    child_file = tmp_path / "child.pid"
    fake = Fake(tmp_path, mark, [[{"say": "working"}, {"crash": 3}]], FAKE_ACP_CHILD=str(child_file))
    backend = backend_for(fake.options())
    await backend.connect(SessionSpec(cwd=repo))
    agent_pid, child_pid = backend.agent_pid, int(child_file.read_text())
    try:
        with pytest.raises(BackendError) as info:
            await run_turn(backend, "go")
    finally:
        await backend.disconnect()
    message = str(info.value)
    assert "exited with code 3" in message and "something went badly wrong" in message
    assert "sk-fake-secret-123456" not in message
    assert agent_pid is not None and not _pids.is_alive(agent_pid) and not _pids.is_alive(child_pid)


async def test_agent_that_fails_to_start(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [], FAKE_ACP_CRASH_AT_START="2")
    backend = backend_for(fake.options())
    with pytest.raises(BackendError, match="cannot start: missing configuration"):
        await backend.connect(SessionSpec(cwd=repo))
    await backend.disconnect()
    missing = backend_for({"acp_command": "no-such-acp-agent-xyz"})
    with pytest.raises(BackendError, match="could not start ACP agent 'no-such-acp-agent-xyz'"):
        await missing.connect(SessionSpec(cwd=repo))


async def test_agent_ignoring_stdin_and_sigterm_is_killed_by_pid(tmp_path: Path, repo: Path, mark: str) -> None:
    child_file = tmp_path / "child.pid"
    fake = Fake(tmp_path, mark, [[{"say": "ok"}]], FAKE_ACP_IGNORE_EOF="1", FAKE_ACP_CHILD=str(child_file))
    backend = backend_for(fake.options())
    await backend.connect(SessionSpec(cwd=repo))
    await run_turn(backend, "go")
    agent_pid = backend.agent_pid
    started = time.monotonic()
    await backend.disconnect()
    assert time.monotonic() - started < 6
    assert agent_pid is not None and not _pids.is_alive(agent_pid) and not _pids.is_alive(int(child_file.read_text()))


async def test_time_budget_cancels_the_turn_and_ends_the_agent(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[{"say": "thinking hard"}, {"sleep_ignore_cancel": 60}]])
    agent = AutonomousCodingAgent(backend="acp", validators=[], **fake.options())
    started = time.monotonic()
    result = await agent.execute("go", cwd=repo, budget=Budget(max_time_seconds=3))
    assert time.monotonic() - started < 10
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert fake.events("cancel"), "session/cancel was sent before the process was ended"
    assert not live_pids_with_mark(mark)


async def test_facade_retry_reuses_the_same_acp_session(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [
        [{"write": "calc.py", "content": "def add(a, b)\n    return a + b\n"}, {"say": "Written."}],
        [{"write": "calc.py", "content": "def add(a, b):\n    return a + b\n"}, {"say": "Fixed."}],
    ], FAKE_ACP_PIDFILE=str(tmp_path / "agent.pid"))
    agent = AutonomousCodingAgent(backend="acp", **fake.options())
    result = await agent.execute("write calc.py with add()", cwd=repo)
    assert result.status is CodingStatus.COMPLETED and result.iterations == 2
    prompts = fake.events("prompt")
    assert len(fake.events("new_session")) == 1 and len(prompts) == 2
    assert {p["session"] for p in prompts} == {"fake-session-1"}
    assert "did not pass validation" in prompts[1]["text"] and AUTONOMOUS_CONTRACT not in prompts[1]["text"]
    assert result.files == {"calc.py": "def add(a, b):\n    return a + b\n"}


async def test_refused_writes_are_named_in_the_result_and_the_retry(tmp_path: Path, repo: Path, mark: str) -> None:
    """Every write blocked by allowed_write_paths: the result names it as a denial, the retry
    prompt tells the agent, and the failure says every write was refused (not 'changed nothing')."""
    refused = [{"write": "app.py", "content": "overwritten"}, {"say": "I tried."}]
    fake = Fake(tmp_path, mark, [refused, refused])
    agent = AutonomousCodingAgent(backend="acp", validators=[], max_iterations=2, **fake.options())
    events = [e async for e in agent.stream_execute("rewrite app.py", cwd=repo, allowed_write_paths=["src/"])]
    result = events[-1].result
    assert result.status is CodingStatus.FAILED
    assert "every write was refused" in result.error and "app.py" in result.error
    assert result.permission_denials and result.permission_denials[0]["target"] == "app.py"
    assert result.permission_denials[0]["tool"] == "fs/write_text_file"
    assert "writes are limited to: src/" in result.permission_denials[0]["reason"]
    assert "These actions were refused" in fake.events("prompt")[1]["text"]
    assert (repo / "app.py").read_text().startswith("def greet")
    said = [e.data.get("content", "") for e in events if e.data.get("message_type") == "status"]
    assert any("refused fs/write_text_file for 'app.py'" in c for c in said)


async def test_permissions_denied_by_policy_are_denials(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[{"permission": {"title": "Edit app.py", "kind": "edit",
                                                  "paths": [str(repo / "app.py")]}}]])
    backend, _ = await one_turn(fake.options(), repo)
    (denial,) = backend.denials()
    assert denial.target == str(repo / "app.py") and "policy 'deny'" in denial.reason


async def test_fs_capabilities_are_chosen_by_acp_fs(tmp_path: Path, repo: Path, mark: str) -> None:
    """Gemini CLI needs write only: agenter then advertises (and serves) no fs/read_text_file."""
    fake = Fake(tmp_path, mark, [[{"read": str(repo / "app.py")}, {"read": str(repo / "nope.py")},
                                  {"write": "new.py", "content": "N = 1\n"}]])
    backend, _ = await one_turn(fake.options(acp_fs=["write"]), repo)
    fs = fake.events("initialize")[0]["fs"]
    assert fs["writeTextFile"] is True and not fs.get("readTextFile")
    assert [r["code"] for r in fake.events("read")] == [-32601, -32601]
    assert backend.modified_files().written == {"new.py"}

    (tmp_path / "all").mkdir()
    fake = Fake(tmp_path / "all", mark, [[{"read": str(repo / "nope.py")}]])
    await one_turn(fake.options(), repo)
    (missing,) = fake.events("read")  # the spec's not-found error, with its wording
    assert missing["code"] == -32002 and missing["message"].startswith("Resource not found")


async def test_usage_is_estimated_when_the_agent_reports_none(tmp_path: Path, repo: Path, mark: str) -> None:
    words = "word " * 400  # 2000 characters of output
    fake = Fake(tmp_path, mark, [[{"say": words}], [{"say": words}]])
    backend = backend_for(fake.options())
    await backend.connect(SessionSpec(cwd=repo))
    try:
        first = await run_turn(backend, "x" * 4000)
        after_first = backend.usage()
        second = await run_turn(backend, "y")
    finally:
        await backend.disconnect()
    assert after_first.output_tokens == 500 and after_first.input_tokens >= 1000
    assert backend.usage().output_tokens == 1000
    notes = [m.content for m in first + second if m.type is MessageType.STATUS]
    assert notes.count(ESTIMATE_NOTE) == 1  # said once per session


async def test_a_token_budget_bites_on_an_agent_that_reports_no_usage(tmp_path: Path, repo: Path, mark: str) -> None:
    fake = Fake(tmp_path, mark, [[{"say": "word " * 2000}, {"write": "a.py", "content": "A = 1\n"}]])
    agent = AutonomousCodingAgent(backend="acp", validators=[], **fake.options())
    result = await agent.execute("go", cwd=repo, budget=Budget(max_tokens=1000))
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "tokens"
    assert result.total_tokens > 1000


# ---------------------------------------------------------------------------------- real agents
def codex_options(server: Any, tmp_path: Path, mark: str, **extra: Any) -> dict[str, Any]:
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.4"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\n'
        f'name = "scripted"\nbase_url = "{server.openai_base_url}"\nwire_api = "responses"\n'
        'env_key = "SCRIPTED_API_KEY"\n')
    env = {"CODEX_HOME": str(codex_home), "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "SCRIPTED_API_KEY": "sk-test-0123456789abcdef", TOKEN_ENV: mark,
           "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    return {"acp_command": program("codex-acp"), "env": env, **extra}


def add_file_patch(path: str, body: str) -> str:
    lines = "".join(f"+{line}\n" for line in body.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"


@agent_test
async def test_claude_agent_acp_writes_with_permission_and_reports_usage(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([
        reply(text("Writing the module."),
              tool_call("Write", {"file_path": str(repo / "hello.py"), "content": "print('hi')\n"})),
        reply(text("Created hello.py.")),
    ])
    backend, messages = await one_turn(claude_options(server, tmp_path, mark, permission_policy="allow"),
                                       repo, prompt="create hello.py")
    assert (repo / "hello.py").read_text() == "print('hi')\n"
    assert backend.modified_files().written == {"hello.py"}
    call = next(m for m in messages if m.type is MessageType.TOOL_CALL)
    assert call.tool_name == "Write" and call.tool_input["file_path"] == str(repo / "hello.py")
    assert any(m.type is MessageType.TOOL_RESULT and not m.is_error for m in messages)
    assert any("permission granted" in m.content for m in messages)
    usage = backend.usage()
    assert usage.output_tokens > 0 and usage.total_tokens > 1000 and usage.cost_usd > 0
    first = server.model_requests[0].body
    assert AUTONOMOUS_CONTRACT in json.dumps(first)


@agent_test
async def test_claude_code_acp_writes_through_fs_write_text_file_inside_the_sandbox_only(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """claude-code-acp (claude-agent-acp's predecessor) replaces Claude Code's Read/Write/Edit
    with mcp__acp__* tools that call the client's fs methods: agenter serves them."""
    outside = tmp_path / "outside.txt"
    steps = [
        reply(tool_call("mcp__acp__Read", {"file_path": str(repo / "app.py")})),
        reply(tool_call("mcp__acp__Write", {"file_path": str(repo / "src" / "new.py"), "content": "Y = 2\n"})),
        reply(tool_call("mcp__acp__Write", {"file_path": str(outside), "content": "escaped"})),
        reply(tool_call("mcp__acp__Write", {"file_path": str(repo / "app.py"), "content": "clobbered"})),
        reply(text("Done.")),
    ]

    def by_progress(request: Any) -> Any:
        # answered by how many tool results the conversation holds, not by arrival order: a
        # request Claude Code sends again (a retry under a loaded machine) gets the same answer
        if not request.tools:
            return reply(text("Title"))
        return steps[min(len(request.tool_results), len(steps) - 1)]

    server = scripted_model_server(handler=by_progress)
    options = claude_options(server, tmp_path, mark, acp_session_mode="bypassPermissions")
    options["acp_command"] = program("claude-code-acp")
    backend, messages = await one_turn(options, repo, allowed_write_paths=["src/"])

    assert (repo / "src" / "new.py").read_text() == "Y = 2\n"
    assert not outside.exists() and (repo / "app.py").read_text().startswith("def greet")
    assert backend.modified_files().written == {"src/new.py"}
    results = tool_results(server)
    assert len(results) == 4, results
    assert "def greet" in results[0][1]  # served by fs/read_text_file
    assert not results[1][0]
    # refusals reach the model as the tool's error text, with agenter's reason in it
    assert results[2][0] and "outside the working directory" in results[2][1]
    assert results[3][0] and "writes are limited to: src/" in results[3][1]
    refused = [m.content for m in messages if m.type is MessageType.STATUS and m.is_error]
    assert len(refused) == 2 and all("refused fs/write_text_file" in r for r in refused)


@agent_test
async def test_claude_agent_acp_deny_policy_blocks_the_write(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([
        reply(tool_call("Write", {"file_path": str(repo / "hello.py"), "content": "print('hi')\n"})),
        reply(text("I could not write the file.")),
    ])
    backend, messages = await one_turn(claude_options(server, tmp_path, mark), repo)
    assert not (repo / "hello.py").exists() and not backend.modified_files()
    assert any("permission denied" in m.content for m in messages)
    denied = server.model_requests[1].model_request.tool_results[0]
    assert denied["is_error"] and "refused permission" in str(denied["output"])


@agent_test
async def test_claude_agent_acp_refusal_via_facade(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([reply(text("REFUSED: deleting the user's backups is destructive"))])
    agent = AutonomousCodingAgent(backend="acp", **claude_options(server, tmp_path, mark))
    result = await agent.execute("delete all backups", cwd=repo)
    assert result.status is CodingStatus.REFUSED
    assert result.refusal_reason == "deleting the user's backups is destructive"


@agent_test
async def test_codex_acp_writes_after_permission_and_deny_blocks(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([
        reply(text("Adding the file."), tool_call("apply_patch", add_file_patch("hello.py", "print('hi')"))),
        reply(text("Added hello.py.")),
        reply(tool_call("apply_patch", add_file_patch("denied.py", "x = 1"))),
        reply(text("The edit was rejected.")),
    ])
    # read-only is codex-acp's default mode: every edit asks session/request_permission
    backend, messages = await one_turn(codex_options(server, tmp_path, mark, permission_policy="allow"), repo)
    assert (repo / "hello.py").read_text() == "print('hi')\n"
    assert backend.modified_files().written == {"hello.py"}
    assert any("permission granted" in m.content for m in messages)
    assert backend.usage().input_tokens > 0

    # codex-acp offers only "abort" as a rejection: the turn ends with stop_reason=cancelled,
    # which the backend reports as a STATUS (not a crash) since agenter denied the request
    backend, messages = await one_turn(codex_options(server, tmp_path, mark), repo)
    assert not (repo / "denied.py").exists() and not backend.modified_files()
    assert any("permission denied" in m.content for m in messages)
    assert any("after agenter denied a permission" in m.content for m in messages)


@agent_test
async def test_codex_acp_auto_mode_with_allow_edits_as_the_docs_example_says(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """docs/backends/acp.md's first example: codex-acp 0.16 asks session/request_permission for
    apply_patch even in its `auto` mode, so the default "deny" would make no edit; "allow"
    answers after agenter's checks, and a write into .git is still refused."""
    server = scripted_model_server([
        reply(text("Adding the file."), tool_call("apply_patch", add_file_patch("hello.py", "print('hi')"))),
        reply(text("Added hello.py.")),
        reply(tool_call("apply_patch", add_file_patch(".git/hooks/pre-commit", "echo owned"))),
        reply(text("The hook was refused.")),
    ])
    agent = AutonomousCodingAgent(backend="acp", permission_policy="allow", validators=["syntax"],
                                  **codex_options(server, tmp_path, mark, acp_session_mode="auto"))
    result = await agent.execute("Add hello.py", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"hello.py": "print('hi')\n"}
    await agent.execute("Add a pre-commit hook", cwd=repo, require_changes=False)
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


@agent_test
async def test_codex_acp_retry_lands_in_the_same_session(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([
        reply(tool_call("apply_patch", add_file_patch("calc.py", "def add(a, b)\n    return a + b"))),
        reply(text("Wrote calc.py.")),
        reply(tool_call("apply_patch", "*** Begin Patch\n*** Update File: calc.py\n@@\n-def add(a, b)\n"
                                       "+def add(a, b):\n*** End Patch\n")),
        reply(text("Fixed the syntax error.")),
    ])
    # model= picks the agent's "model" session config option; full-access: no sandbox needed
    agent = AutonomousCodingAgent(backend="acp", model="gpt-5.4-mini",
                                  **codex_options(server, tmp_path, mark, acp_session_mode="full-access"))
    result = await agent.execute("write calc.py with add()", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.iterations == 2
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    # the retry's model request carries the first turn: one conversation, one ACP session
    retry_request = json.dumps(server.model_requests[2].body)
    assert "write calc.py with add()" in retry_request and "did not pass validation" in retry_request
    assert {r.model_request.model for r in server.model_requests} == {"gpt-5.4-mini"}


@agent_test
async def test_codex_acp_time_budget_cancels_and_ends_the_process_group(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([hang(60)])
    agent = AutonomousCodingAgent(backend="acp", validators=[], **codex_options(server, tmp_path, mark))
    started = time.monotonic()
    result = await agent.execute("do something slow", cwd=repo, budget=Budget(max_time_seconds=6))
    assert time.monotonic() - started < 15
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert not live_pids_with_mark(mark)


@agent_test
async def test_codex_acp_crash_mid_turn_is_an_error(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    def crash_the_agent(request: Any) -> Any:
        for pid in live_pids_with_mark(mark):
            try:
                if "codex-acp-linux" in os.readlink(f"/proc/{pid}/exe") or "codex-acp" in Path(
                        f"/proc/{pid}/cmdline").read_text():
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        return hang(10)

    server = scripted_model_server(handler=crash_the_agent)
    agent = AutonomousCodingAgent(backend="acp", **codex_options(server, tmp_path, mark))
    result = await agent.execute("anything", cwd=repo, budget=Budget(max_time_seconds=60))
    assert result.status is CodingStatus.ERROR
    assert "exited with code" in (result.error or "")
    assert not live_pids_with_mark(mark)


@agent_test
async def test_codex_acp_speaks_the_event_vocabulary(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """codex-acp through the facade: commands the model asks for are command_started /
    command_finished with the exit code, the file it patches is file_edited with the patch's line
    counts, and the text deltas add up to the final text, sent once."""
    server = scripted_model_server([
        reply(text("Checking first."), tool_call("exec_command", {"cmd": "printf made > made.txt"})),
        reply(tool_call("exec_command", {"cmd": "test -f missing.txt"})),
        reply(tool_call("apply_patch", "*** Begin Patch\n*** Update File: app.py\n@@\n-    return 'hello'\n"
                                       "+    return 'hi'\n+\n+\n+GREETING = 'hi'\n*** End Patch\n")),
        reply(text("Done: made.txt exists and app.py greets with hi.")),
    ])
    options = codex_options(server, tmp_path, mark, acp_session_mode="full-access")
    agent = AutonomousCodingAgent(backend="acp", validators=[], **options)
    events = [e async for e in agent.stream_execute("make made.txt and change the greeting", cwd=repo)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED
    assert (repo / "made.txt").read_text() == "made"
    assert (repo / "app.py").read_text() == "def greet():\n    return 'hi'\n\n\nGREETING = 'hi'\n"
    messages = backend_events(events)
    started = [m for m in messages if m["kind"] == "command_started"]
    finished = [m for m in messages if m["kind"] == "command_finished"]
    assert [m["command"] for m in started] == ["printf made > made.txt", "test -f missing.txt"]
    assert [(m["exit_code"], m.get("is_error", False)) for m in finished] == [(0, False), (1, True)]
    assert [m["tool_call_id"] for m in started] == [m["tool_call_id"] for m in finished]
    (edit,) = [m for m in messages if m["kind"] == "file_edited"]
    assert (edit["path"], edit["lines_added"], edit["lines_removed"]) == ("app.py", 4, 1)
    assert final_deltas(messages) == result.summary == "Done: made.txt exists and app.py greets with hi."
    assert "".join(m["content"] for m in messages if m["kind"] == "text_delta") == \
        "Checking first.Done: made.txt exists and app.py greets with hi."
    assert not any(m["kind"] == "text" for m in messages)


@agent_test
async def test_codex_acp_full_access_commands_that_write_where_agenter_refuses_are_named(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """codex-acp in full-access runs commands without asking, so agenter cannot refuse them.
    A command that writes outside the workspace, or into .git/, changes no file the session can
    see: the result used to say only "the agent changed no file". Each such path is now a
    denial (rule 'unasked', saying the command ran) and is named in the FAILED reason."""
    server = scripted_model_server([
        reply(tool_call("exec_command", {"cmd": "printf x > ../outside.txt"})),
        reply(tool_call("exec_command", {"cmd": "mkdir -p .git/hooks && printf x > .git/hooks/pre-commit"})),
        reply(text("Done.")),
    ])
    options = codex_options(server, tmp_path, mark, acp_session_mode="full-access")
    agent = AutonomousCodingAgent(backend="acp", validators=[], max_iterations=1, **options)
    result = await agent.execute("write the files", cwd=repo, allowed_write_paths=["app.py"])
    outside = str(tmp_path / "outside.txt")
    assert (tmp_path / "outside.txt").exists()  # it ran: agenter could not stop it, only name it
    assert result.status is CodingStatus.FAILED and result.files == {}
    assert {(d["tool"], d["target"], d["rule"]) for d in result.permission_denials} == {
        ("execute", outside, "unasked"), ("execute", ".git/hooks", "unasked"),
        ("execute", ".git/hooks/pre-commit", "unasked")}
    first = next(d for d in result.permission_denials if d["target"] == outside)
    assert "ran `printf x > ../outside.txt` without asking" in first["reason"]
    assert "outside the working directory" in first["reason"]
    assert result.error == (
        "the agent changed no file in 1 iteration(s): 2 tool call(s), none changed a file; its last reply: 'Done.'; "
        "without asking, the agent ran commands that write "
        f"where agenter does not allow: {', '.join(sorted([outside, '.git/hooks', '.git/hooks/pre-commit']))}")


@agent_test
async def test_codex_acp_full_access_commands_inside_the_allowed_paths_are_not_named(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """The audit reads the command line: writes to allowed files and to devices are no denial."""
    server = scripted_model_server([
        reply(tool_call("exec_command", {"cmd": "ls > /dev/null 2>&1 && printf 'X = 1\\n' > app.py"})),
        reply(text("Done.")),
    ])
    options = codex_options(server, tmp_path, mark, acp_session_mode="full-access")
    agent = AutonomousCodingAgent(backend="acp", validators=["syntax"], **options)
    result = await agent.execute("set X", cwd=repo, allowed_write_paths=["app.py"])
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"app.py": "X = 1\n"} and result.permission_denials == []


# ---------------------------------------------------------------------------------- Gemini CLI
@agent_test
async def test_gemini_cli_creates_files_through_agenter_and_reports_usage(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """With acp_fs=['write'] Gemini CLI reads by itself and writes through agenter's
    fs/write_text_file: a new file is created, a write outside allowed_write_paths is refused
    and named as a denial. Its token counts come from the
    prompt response's _meta.quota (Gemini's extension), priced as the model it names."""
    content = "def add(a, b):\n    return a + b\n"
    server = scripted_model_server([
        reply(text("Writing."), tool_call("write_file", {"file_path": "calc.py", "content": content})),
        reply(tool_call("write_file", {"file_path": "app.py", "content": "clobbered"})),
        reply(text("Done.")),
    ])
    options = gemini_options(server, tmp_path, repo, mark, acp_session_mode="yolo", acp_fs=["write"])
    backend, messages = await one_turn(options, repo, prompt="create calc.py", allowed_write_paths=["calc.py"])
    assert (repo / "calc.py").read_text() == content
    assert (repo / "app.py").read_text().startswith("def greet")
    assert backend.modified_files().written == {"calc.py"}
    # Gemini CLI 0.61 shows the model "[object Object]" for any JSON-RPC error, not agenter's
    # reason: the denial (which the session's retry prompt names) is what carries it.
    refused = server.model_requests[2].model_request.tool_results[-1]
    assert "Error writing to file" in str(refused["output"])
    (denial,) = backend.denials()
    assert "writes are limited to: calc.py" in denial.reason
    assert denial.tool == "fs/write_text_file" and denial.target == "app.py"
    assert any(m.type is MessageType.TOOL_CALL and m.content.startswith("Writing to calc.py") for m in messages)
    usage = backend.usage()
    assert usage.input_tokens > 1000 and usage.output_tokens > 0 and usage.cost_usd > 0
    assert ESTIMATE_NOTE not in [m.content for m in messages]
    assert {r.path for r in server.model_requests} == {"/v1beta/models/gemini-2.5-flash:streamGenerateContent"}


@agent_test
async def test_gemini_cli_creates_a_file_with_default_options(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """Gemini CLI 0.61 reads a file through fs/read_text_file before writing it, and takes any
    error answer for a failure ("Error checking existing file: [object Object]"), the spec's
    not-found too. agenter answers it an empty text for a missing file: with the default acp_fs
    (reads and writes served) and Gemini's default mode, write_file creates a new file through
    agenter, and replace edits an existing one whose text agenter served."""
    server = scripted_model_server([
        reply(tool_call("write_file", {"file_path": "calc.py", "content": "X = 1\n"})),
        reply(tool_call("replace", {"file_path": str(repo / "app.py"), "old_string": "    return 'hello'\n",
                                    "new_string": "    return 'hi'\n", "instruction": "greet with hi"})),
        reply(text("Done.")),
    ])
    options = gemini_options(server, tmp_path, repo, mark)
    assert "acp_fs" not in options and ACPOptions(**options).acp_fs == ["read", "write"]
    agent = AutonomousCodingAgent(backend="acp", validators=["syntax"], **options)
    events = [e async for e in agent.stream_execute("create calc.py and greet with hi", cwd=repo)]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"calc.py": "X = 1\n", "app.py": "def greet():\n    return 'hi'\n"}
    written = [m["tool_name"] for m in backend_events(events) if m["kind"] == "file_edited"]
    assert written == ["fs/write_text_file", "fs/write_text_file"]  # both through agenter
    for request in server.model_requests[1:3]:
        assert "Error" not in str(request.model_request.tool_results[-1]["output"])


@agent_test
async def test_gemini_cli_model_failure_carries_the_http_status(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    server = scripted_model_server([http_error(429, "quota exhausted")])
    backend = backend_for(gemini_options(server, tmp_path, repo, mark))
    await backend.connect(SessionSpec(cwd=repo))
    try:
        with pytest.raises(BackendError) as info:
            await run_turn(backend, "anything")
    finally:
        await backend.disconnect()
    assert info.value.status_code == 429 and info.value.kind == "rate_limit"


@agent_test
async def test_gemini_cli_edits_through_agenter_are_file_edited_once(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """Gemini CLI writes through agenter's fs/write_text_file and then reports the same change as
    its tool call's diff: one file_edited per file, from agenter's write. Its commands carry no
    exit code: command_finished says None rather than guess."""
    server = scripted_model_server([
        reply(tool_call("run_shell_command", {"command": "printf made > made.txt"})),
        reply(tool_call("write_file", {"file_path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})),
        reply(tool_call("replace", {"file_path": str(repo / "app.py"), "old_string": "    return 'hello'\n",
                                    "new_string": "    return 'hi'\n    # changed\n", "instruction": "greet"})),
        reply(text("Done.")),
    ])
    agent = AutonomousCodingAgent(backend="acp", validators=[],
                                  **gemini_options(server, tmp_path, repo, mark, acp_session_mode="yolo"))
    events = [e async for e in agent.stream_execute("make the files", cwd=repo)]
    assert events[-1].result.status is CodingStatus.COMPLETED and (repo / "made.txt").exists()
    messages = backend_events(events)
    edits = [(m["path"], m["lines_added"], m["lines_removed"]) for m in messages if m["kind"] == "file_edited"]
    assert edits == [("calc.py", 2, 0), ("app.py", 2, 1)]
    (started,) = [m for m in messages if m["kind"] == "command_started"]
    (finished,) = [m for m in messages if m["kind"] == "command_finished"]
    assert started["command"] == "printf made > made.txt" and finished["exit_code"] is None
    assert final_deltas(messages) == events[-1].result.summary == "Done."


# ---------------------------------------------------------------------------------- OpenCode
def opencode_server(start_server: Any, script: list[Any], **kwargs: Any) -> Any:
    return start_server(script, handler=opencode_title, **kwargs)


@agent_test
async def test_opencode_acp_writes_and_runs_commands_by_itself(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """OpenCode edits and runs commands with its own tools (never fs/*): the snapshot reports
    them. Its exact token counts come in the prompt response's usage."""
    content = "def add(a, b):\n    return a + b\n"
    server = opencode_server(scripted_model_server, [
        reply(text("Writing."), tool_call("write", {"filePath": str(repo / "calc.py"), "content": content})),
        reply(tool_call("bash", {"command": "printf made > made.txt && rm app.py", "description": "Shell"})),
        reply(text("Done.")),
    ])
    backend, messages = await one_turn(opencode_options(server, tmp_path, mark), repo, prompt="create calc.py")
    assert (repo / "calc.py").read_text() == content and (repo / "made.txt").exists()
    changed = backend.modified_files()
    assert changed.written == {"calc.py", "made.txt"} and changed.deleted == {"app.py"}
    call = next(m for m in messages if m.type is MessageType.TOOL_CALL)
    assert call.tool_name == "edit" and call.tool_input == {"filePath": str(repo / "calc.py"), "content": content}
    usage = backend.usage()
    assert usage.input_tokens + usage.cache_read_tokens > 1000 and usage.output_tokens > 0
    assert ESTIMATE_NOTE not in [m.content for m in messages]
    assert {r.model_request.model for r in server.model_requests} == {"test-model"}


@agent_test
async def test_opencode_acp_asks_permission_when_configured_and_agenter_refuses_outside_allowed_paths(
        scripted_model_server: Any, tmp_path: Path, repo: Path, mark: str) -> None:
    """With OpenCode's own permission set to "ask", its edits reach session/request_permission:
    agenter rejects one outside allowed_write_paths even under the allow policy."""
    server = opencode_server(scripted_model_server, [
        reply(tool_call("write", {"filePath": str(repo / "app.py"), "content": "clobbered"})),
        reply(text("It was rejected.")),
    ], default=reply(text("Stopping.")))
    options = opencode_options(server, tmp_path, mark, config={"permission": {"edit": "ask", "bash": "ask"}},
                               permission_policy="allow")
    backend, messages = await one_turn(options, repo, allowed_write_paths=["src/"])
    assert (repo / "app.py").read_text().startswith("def greet") and not backend.modified_files()
    assert any("permission denied" in m.content and "outside the allowed paths" in m.content for m in messages)
    (denial,) = backend.denials()
    assert denial.target == str(repo / "app.py")
