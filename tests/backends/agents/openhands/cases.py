"""openhands' case (tests/backends/kit.py): the real OpenHands agent (openhands-sdk, in this
interpreter: Python >= 3.12, the `.venv312` environment) with its own tools, on the OpenAI wire
LiteLLM uses. Every action is decided by agenter's gate before OpenHands runs it; its own words
for a rejected action are checked in `EXPECT`. Structured output is a fenced JSON object in the
finish message."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agenter.backends.agents.openhands import OpenHandsBackend
from agenter.host.requirements import missing_requirements
from agenter.testing import reply, tool_call

from ...kit import TOKEN_ENV, Case, Kit

MODEL = "openai/gpt-4o"  # LiteLLM's bundled price map knows it: cost comes from LiteLLM
API_KEY = "sk-test-openhands-0123456789"


def openhands_missing() -> str | None:
    """Why the OpenHands SDK cannot run here, or None."""
    missing = missing_requirements(OpenHandsBackend.requirements(None))  # type: ignore[arg-type]
    return "; ".join(missing) or None


def import_openhands() -> None:
    """Import OpenHands once up front (seconds on a busy machine) so time budgets measure runs;
    skip where it cannot run."""
    problem = openhands_missing()
    if problem:
        pytest.skip(problem)
    from agenter.backends.agents.openhands import _runtime

    _runtime.prepare_environment()
    import openhands.sdk
    import openhands.tools.file_editor
    import openhands.tools.terminal  # noqa: F401

    from agenter.backends.agents.openhands import _tools  # noqa: F401


def child_processes() -> list[int]:
    """This process's live (non-zombie) children."""
    me, children = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                children.append(int(entry.name))
    return children


def backend_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("agenter-openhands") and t.is_alive()]


def wait_until(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def check_no_leftovers() -> None:
    """OpenHands runs in this process: no backend loop thread and no child process (bash) may
    survive a test."""
    assert wait_until(lambda: not backend_threads()), backend_threads()
    assert wait_until(lambda: not child_processes()), child_processes()


def connect(kit: Kit, server: Any, home: Path, cwd: Path | None) -> dict[str, Any]:
    """No retries; `home` is the terminal's HOME: empty, as OpenHands gives a new bash a fixed
    second before it sets the prompt it parses (a slow ~/.bashrc would make every command wait
    30 s); the conversations are kept in the kit's folder, not the user's ~/.openhands."""
    return {"base_url": server.base_url + "/v1", "api_key": API_KEY, "max_retries": 0,
            "openhands_retry_min_wait": 0, "max_retry_wait": 0, "env": {"HOME": str(home), TOKEN_ENV: kit.token},
            "openhands_persistence_dir": str(kit.fresh_dir())}


def tool_results(server: Any) -> list[str]:
    """What the model read back for each of its tool calls, in order."""
    seen: dict[str, str] = {}
    for request in server.model_requests:
        for result in request.model_request.tool_results:
            seen[result["id"]] = result["output"]
    return list(seen.values())


def hostile(evidence: Any, server: Any) -> None:
    """The model reads each rejection as the action's result; every decision names the tool."""
    said = tool_results(server)
    assert len(said) == 5
    for answer, why in zip(said[:4], ["version-control internals", "force-pushes", "holds credentials",
                                      "downloaded"], strict=True):
        assert answer.startswith("Action rejected: Permission denied") and why in answer, answer
        assert "safety check" in answer
    assert not said[4].startswith("Action rejected")
    denials = evidence.report.denials
    assert all(d.rule.startswith("safety:") for d in denials), denials
    assert [d.tool for d in denials] == ["file_editor", "terminal", "file_editor", "terminal"]
    decided = [(d["tool"], d["decision"]) for d in evidence.decisions]
    assert decided == [("file_editor", "deny"), ("terminal", "deny"), ("file_editor", "deny"), ("terminal", "deny"),
                       ("file_editor", "allow")]
    assert all(d["rule"] and d["input"] and d["mode"] == "bypass" for d in evidence.decisions)
    assert "Done; some calls were refused." in [m.content for m in evidence.messages if m.type.value == "text"]


def asked(evidence: Any, server: Any) -> None:
    assert [q.call.command for q in evidence.questions] == ["touch approved.txt", "touch refused.txt"]
    said = tool_results(server)
    assert not said[0].startswith("Action rejected")
    assert said[1].startswith("Action rejected: Permission denied by the user") and "frozen today" in said[1]


def unanswered(evidence: Any, server: Any) -> None:
    assert tool_results(server)[0].startswith("Action rejected")


EXPECT = {"hostile_calls_are_refused_and_the_turn_goes_on": hostile, "asks_are_answered_by_the_callback": asked,
          "an_unanswered_ask_is_refused_at_the_deadline": unanswered}


def finish(message: str = "done") -> Any:
    return reply(tool_call("finish", {"message": message}))


def openhands(shared: Path) -> Case:
    import_openhands()
    answer = "Here it is.\n```json\n{}\n```"
    return Case(
        backend=OpenHandsBackend, wire="openai", model=MODEL, connect=connect, sandbox=False, absolute_paths=True,
        write=lambda path, content: reply(tool_call("file_editor", {"command": "create", "path": path,
                                                                    "file_text": content})),
        shell=lambda command: reply(tool_call("terminal", {"command": command})),
        read=lambda path: reply(tool_call("file_editor", {"command": "view", "path": path})),
        output=lambda value: finish(answer.format(json.dumps(value))),
        refuse=lambda reason: reply(tool_call("refuse_task", {"reason": reason})), done=finish,
        usage={"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 0,
               "cache_creation_input_tokens": 0},
        hang_seconds=60, supports=frozenset({"permissions", "ask", "told"}), expect=EXPECT,
        check_after=check_no_leftovers)


CASES = [pytest.param(openhands, id="openhands", marks=[pytest.mark.agent, pytest.mark.py312,
                                                          pytest.mark.timeout(180)])]
