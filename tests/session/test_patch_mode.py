"""Patch-proposal mode end to end: the real openai and litellm backends against the scripted model
server (Chat Completions, Responses, and LiteLLM pointed at it), files really written by agenter.

Each test scripts what the model proposes and checks what agenter did with it: applied, refused
with the error sent back for a corrected proposal (the next iteration), or nothing written at all.
Patch mode is the session's (agenter.session.modes): the same on every backend; these tests run
it on the completion backends, tests/session/test_patch_mode_everywhere.py on the others.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenter import AutonomousCodingAgent, CodingStatus
from agenter.backends.capabilities import CapabilityError
from agenter.testing import ScriptedModelServer, http_error, reply, text

#: LiteLLM takes seconds to import: under `make check` its tests share one worker (xdist_group).
WIRES = ["chat", "responses", pytest.param("litellm", marks=pytest.mark.xdist_group("litellm"))]

# LiteLLM reads pydantic fields the deprecated way on every streamed chunk.
pytestmark = pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning")


def make_agent(server: ScriptedModelServer, wire: str = "chat", mode: str = "patch", **options: Any) -> AutonomousCodingAgent:
    common: dict[str, Any] = {"base_url": server.openai_base_url, "api_key": "test-key", "mode": mode,
                              "max_retry_wait": 0.0}
    common.update(options)
    if wire == "litellm":
        return AutonomousCodingAgent(backend="litellm", model="openai/scripted-model", **common)
    return AutonomousCodingAgent(backend="openai", model="scripted-model", openai_wire=wire, **common)


def change(path: str, operation: str = "modify", **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"path": path, "operation": operation, "new_path": None, "diff": None,
                            "search_replace": None, "content": None}
    data.update(fields)
    return data


def proposal(*files: dict[str, Any], summary: str = "Make the change.") -> Any:
    return reply(text(json.dumps({"summary": summary, "files": list(files)})))


def user_texts(request: Any) -> str:
    """Everything the model was sent in one request (system and user parts), as one text."""
    return json.dumps(request.body)


def events_of(result_events: list[Any], message_type: str) -> list[dict[str, Any]]:
    return [e.data for e in result_events if e.data.get("message_type") == message_type]


async def run(agent: AutonomousCodingAgent, prompt: str, cwd: Path, **fields: Any) -> tuple[Any, list[Any]]:
    events = []
    result = None
    async for event in agent.stream_execute(prompt, cwd=cwd, **fields):
        events.append(event)
        if event.type.value == "session_end":
            result = event._result
    return result, events


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    return root


CALC_DIFF = """--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,5 @@
 def add(a, b):
     return a + b
+
+def sub(a, b):
+    return a - b
"""


# ---------------------------------------------------------------------- applied


@pytest.mark.parametrize("wire", WIRES)
async def test_valid_diff_is_applied(project: Path, wire: str):
    with ScriptedModelServer([proposal(change("calc.py", diff=CALC_DIFF), summary="Add sub.")]) as server:
        result, events = await run(make_agent(server, wire), "Add sub(a, b) to calc.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    assert result.files == {"calc.py": (project / "calc.py").read_text()}
    # The result holds the applied diff (git format) after the summary.
    assert result.summary.startswith("Add sub.")
    assert "```diff\ndiff --git a/calc.py b/calc.py\n" in result.summary and "+def sub(a, b):\n" in result.summary
    plans = events_of(events, "plan")
    assert plans and plans[0]["tool_input"]["files"] == [{"path": "calc.py", "operation": "modify", "as": "diff"}]
    applied = [e for e in events_of(events, "tool_result") if e.get("tool_name") == "apply_patch"]
    assert applied and applied[0]["content"] == "Applied. written: calc.py" and not applied[0].get("is_error")
    # The model saw the file it had to change, and one worked example.
    sent = user_texts(server.model_requests[0])
    assert "===== calc.py =====" in sent and "Example. Task:" in sent
    assert len(server.model_requests) == 1


@pytest.mark.parametrize("wire", WIRES)
async def test_search_replace_is_applied(project: Path, wire: str):
    block = {"search": "    return a + b\n", "replace": "    return b + a\n"}
    with ScriptedModelServer([proposal(change("calc.py", search_replace=[block]))]) as server:
        result, _ = await run(make_agent(server, wire), "Swap the operands in calc.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return b + a\n"


async def test_whole_content_is_applied(project: Path):
    new = "def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n"
    with ScriptedModelServer([proposal(change("calc.py", content=new))]) as server:
        result, _ = await run(make_agent(server), "Add multiply to calc.py", project)
    assert result.status is CodingStatus.COMPLETED and (project / "calc.py").read_text() == new


# ---------------------------------------------------------------------- errors go back to the model


@pytest.mark.parametrize("wire", WIRES)
async def test_malformed_diff_gets_a_clear_error_and_a_corrected_retry(project: Path, wire: str):
    broken = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,3 @@\n def add(a, b):\n-    return a - b\n+    return a + b  # ok\n"
    script = [proposal(change("calc.py", diff=broken)), proposal(change("calc.py", diff=CALC_DIFF))]
    with ScriptedModelServer(script) as server:
        result, events = await run(make_agent(server, wire), "Add sub to calc.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert "def sub(a, b):" in (project / "calc.py").read_text()
    assert len(server.model_requests) == 2
    retry = server.model_requests[1].body
    feedback = json.dumps(retry)
    assert "The patch was not applied; no file was changed." in feedback
    assert "calc.py: the diff is malformed" in feedback and "must count its lines exactly" in feedback
    # A completion backend starts each turn afresh: its failed proposal is shown again with the task.
    assert "return a - b" in feedback and "Add sub to calc.py" in feedback
    errors = [e for e in events_of(events, "tool_result") if e.get("is_error")]
    assert errors and "the diff is malformed" in errors[0]["content"]


async def test_ambiguous_search_block_gets_a_clear_error_and_a_corrected_retry(project: Path):
    (project / "calc.py").write_text("x = 1\ny = 2\nx = 1\n")
    ambiguous = {"search": "x = 1\n", "replace": "x = 10\n"}
    unique = {"search": "y = 2\nx = 1\n", "replace": "y = 2\nx = 10\n"}
    script = [proposal(change("calc.py", search_replace=[ambiguous])), proposal(change("calc.py", search_replace=[unique]))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server), "Set the second x to 10 in calc.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == "x = 1\ny = 2\nx = 10\n"
    feedback = json.dumps(server.model_requests[1].body)
    assert "search_replace block #1 matches 2 places" in feedback and "must match exactly one" in feedback


async def test_reply_that_is_not_json_gets_a_clear_error(project: Path):
    script = [reply(text("Sure! I will add the function now.")),
              proposal(change("calc.py", diff=CALC_DIFF))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server), "Add sub to calc.py", project)
    assert result.status is CodingStatus.COMPLETED
    # The backend's structured-output check sends the reply back within the turn.
    assert "The reply is not valid JSON" in json.dumps(server.model_requests[1].body)


async def test_a_json_reply_that_loops_is_told_so_not_that_it_was_too_long(project: Path):
    loop = "".join(f"    # step {n}: check the sign\\n    # then return the difference\\n" for n in range(400))
    looping = reply(text('{"summary": "Add sub.", "files": [{"path": "calc.py", "content": "' + loop))
    script = [looping, proposal(change("calc.py", diff=CALC_DIFF))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server), "Add sub to calc.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    second = server.model_requests[1].body["messages"]
    assert "kept repeating the same lines" in second[-1]["content"]
    assert "output token limit" not in second[-1]["content"]
    assert second[-2]["content"].count("check the sign") <= 2  # the repetition is left out


def _outside_cases(tmp_path: Path, project: Path) -> dict[str, str]:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, project / "link")
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    return {"dotdot": "../outside/x.txt", "absolute": str(outside / "x.txt"), "symlink": "link/x.txt",
            "git": ".git/config"}


@pytest.mark.parametrize("case", ["dotdot", "absolute", "symlink", "git"])
async def test_unsafe_targets_are_refused_and_nothing_is_written(tmp_path: Path, project: Path, case: str):
    bad = _outside_cases(tmp_path, project)[case]
    operation = "modify" if case == "git" else "create"
    bad_change = change(bad, operation, content="pwned\n")
    script = [proposal(change("calc.py", content="changed = True\n"), bad_change)]
    with ScriptedModelServer(script, default=proposal(bad_change)) as server:
        result, events = await run(make_agent(server), "Do it", project, budget={"max_iterations": 2})
    assert result.status is CodingStatus.FAILED
    assert result.error.startswith("no proposal could be applied in 2 iteration(s)")
    assert not (tmp_path / "outside" / "x.txt").exists()
    assert (project / ".git" / "config").read_text() == "[core]\n"
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"  # all or nothing
    feedback = json.dumps(server.model_requests[1].body)
    assert "The patch was not applied; no file was changed." in feedback
    assert [e for e in events_of(events, "tool_result") if e.get("is_error")]
    # Named in the result as a refusal.
    assert bad in {d["target"] for d in result.permission_denials}


async def test_one_bad_file_in_a_five_file_proposal_writes_nothing(project: Path):
    good = [change(f"pkg/m{i}.py", "create", content=f"v = {i}\n") for i in range(4)]
    bad = change("calc.py", search_replace=[{"search": "def nothing_like_this():\n", "replace": "x\n"}])
    fixed = change("calc.py", search_replace=[{"search": "return a + b", "replace": "return a+b"}])
    with ScriptedModelServer([proposal(*good, bad), proposal(*good, fixed)]) as server:
        result, events = await run(make_agent(server), "Add modules", project)
    first_error = next(e for e in events_of(events, "tool_result") if e.get("is_error"))
    assert "calc.py: search_replace block #1 was not found" in first_error["content"]
    assert result.status is CodingStatus.COMPLETED, result.error
    assert sorted(result.files) == ["calc.py", "pkg/m0.py", "pkg/m1.py", "pkg/m2.py", "pkg/m3.py"]
    # Between the two proposals nothing had been written: the second one created the files.
    assert "pkg/m0.py: 'pkg/m0.py' already exists" not in json.dumps(server.model_requests[1].body)


async def test_create_delete_rename(project: Path):
    (project / "old.py").write_text("OLD = 1\n")
    (project / "gone.py").write_text("GONE = 1\n")
    script = [proposal(change("new.py", "create", content="NEW = 1\n"), change("gone.py", "delete"),
                       change("old.py", "rename", new_path="pkg/moved.py",
                              search_replace=[{"search": "OLD = 1", "replace": "MOVED = 1"}]))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server), "Reorganise", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "new.py").read_text() == "NEW = 1\n"
    assert not (project / "gone.py").exists() and not (project / "old.py").exists()
    assert (project / "pkg" / "moved.py").read_text() == "MOVED = 1\n"
    assert result.files == {"new.py": "NEW = 1\n", "gone.py": None, "old.py": None, "pkg/moved.py": "MOVED = 1\n"}
    assert "rename from old.py\nrename to pkg/moved.py" in result.summary


async def test_crlf_file_keeps_its_line_endings(project: Path):
    (project / "win.py").write_bytes(b"a = 1\r\nb = 2\r\n")
    block = {"search": "b = 2\n", "replace": "b = 3\nc = 4\n"}
    with ScriptedModelServer([proposal(change("win.py", search_replace=[block]))]) as server:
        result, _ = await run(make_agent(server), "Change b in win.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "win.py").read_bytes() == b"a = 1\r\nb = 3\r\nc = 4\r\n"


async def test_one_megabyte_file(project: Path):
    lines = [f"line_{i} = {i}\n" for i in range(60_000)]
    (project / "big.py").write_text("".join(lines))
    assert (project / "big.py").stat().st_size > 1_000_000
    diff = "--- a/big.py\n+++ b/big.py\n@@ -30001,1 +30001,1 @@\n-line_30000 = 30000\n+line_30000 = 'changed'\n"
    with ScriptedModelServer([proposal(change("big.py", diff=diff))]) as server:
        result, _ = await run(make_agent(server), "Change line_30000 in big.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    lines[30000] = "line_30000 = 'changed'\n"
    assert (project / "big.py").read_text() == "".join(lines)
    # The file is listed for the model, never sent whole.
    sent = user_texts(server.model_requests[0])
    assert "big.py" in sent and "line_45000" not in sent


async def test_allowed_write_paths_are_enforced(project: Path):
    script = [proposal(change("other.py", "create", content="x = 1\n")),
              proposal(change("src/ok.py", "create", content="x = 1\n"))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server), "Add a module", project, allowed_write_paths=["src/**"])
    assert result.status is CodingStatus.COMPLETED, result.error
    assert not (project / "other.py").exists() and (project / "src" / "ok.py").exists()
    assert "allowed_write_paths" in json.dumps(server.model_requests[1].body)
    assert [(d["target"], d["rule"]) for d in result.permission_denials] == [("other.py", "allowed_write_paths")]


async def test_permission_policy_decides_each_file(project: Path):
    (project / "secret").mkdir()
    script = [proposal(change("secret/keys.py", "create", content="k = 1\n")),
              proposal(change("calc.py", content="ok = 1\n"))]
    with ScriptedModelServer(script) as server:
        agent = make_agent(server, permissions={"rules": ["deny edit:secret/**"], "mode": "accept_edits"})
        result, _ = await run(agent, "Do it", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert not (project / "secret" / "keys.py").exists()
    assert [d["target"] for d in result.permission_denials] == ["secret/keys.py"]
    assert "These changes were refused" in json.dumps(server.model_requests[1].body)


async def test_no_applicable_proposal_fails_truthfully(project: Path):
    bad = proposal(change("calc.py", search_replace=[{"search": "nowhere\n", "replace": "x\n"}]))
    with ScriptedModelServer([], default=bad) as server:
        result, _ = await run(make_agent(server), "Do it", project, budget={"max_iterations": 2})
    assert result.status is CodingStatus.FAILED
    assert result.error.startswith("no proposal could be applied in 2 iteration(s); the last problem: ")
    assert "search_replace block #1 was not found" in result.error
    assert "The proposal was not applied" in result.summary and "Applied" not in result.summary
    assert len(server.model_requests) == 2  # one proposal per iteration
    # The retry iteration repeats the task and how to propose (a completion backend starts each
    # turn afresh).
    retry = json.dumps(server.model_requests[1].body)
    assert "Do it" in retry and "Propose the change as one JSON object" in retry and "A correct reply" in retry


async def test_refusal(project: Path):
    with ScriptedModelServer([reply(text("REFUSED: this would delete user data"))]) as server:
        result, _ = await run(make_agent(server), "Wipe the repository", project)
    assert result.status is CodingStatus.REFUSED
    assert result.refusal_reason == "this would delete user data"
    assert (project / "calc.py").exists()


# ---------------------------------------------------------------------- checks after a proposal


def test_allowed_commands_is_refused_with_its_replacement():
    from agenter._errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"validators=\['command:pytest -q'\]"):
        AutonomousCodingAgent(backend="openai", model="m", api_key="k", mode="patch", allowed_commands=["pytest"])


async def test_a_failed_validation_sends_its_output_and_the_files_as_they_are_now(project: Path):
    check = "command:python -c \"import calc, sys; sys.exit(0 if calc.add(2, 2) == 4 else 'add is wrong')\""
    script = [proposal(change("calc.py", content="def add(a, b):\n    return a - b\n")),
              proposal(change("calc.py", content="def add(a, b):\n    return a + b  # fixed\n"))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server, validators=[check]), "Refactor add", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    feedback = json.dumps(server.model_requests[1].body)
    assert "did not pass validation" in feedback and "add is wrong" in feedback
    assert "The checks are right" in feedback
    assert "===== calc.py =====\\ndef add(a, b):\\n    return a - b" in feedback  # the files as they are now
    # Both applied proposals are in the run's diff; the summary is the last one's.
    assert result.diff.count("diff --git a/calc.py b/calc.py") == 2
    assert "# fixed" in result.summary and result.summary.count("diff --git") == 1


async def test_a_completed_runs_summary_describes_the_final_state_only(project: Path):
    """Issue 25: a proposal that was refused, or applied and then failed validation, is
    superseded; the COMPLETED result's summary (and the completion event's) is the last applied
    proposal's alone, never an earlier 'not applied' next to it."""
    check = "command:python -c \"import calc, sys; sys.exit(0 if calc.add(2, 2) == 4 else 'add is wrong')\""
    script = [proposal(change("calc.py", content="def add(a, b):\n    return a - b\n"), summary="Break add."),
              proposal(change(".git/config", operation="create", content="x\n"), summary="Touch git."),
              proposal(change("net.py", operation="create", content="x = 1\n"),
                       change("calc.py", content="def add(a, b):\n    return a + b  # fixed\n"), summary="Fix add.")]
    with ScriptedModelServer(script) as server:
        result, events = await run(make_agent(server, validators=[check], max_iterations=3), "Fix add", project)
    assert result.status is CodingStatus.COMPLETED and result.iterations == 3, result.error
    assert result.summary.startswith("Fix add.\n\nApplied. written: calc.py, net.py\n\n```diff\n")
    for earlier in ("not applied", "no file was changed", "Break add.", "Touch git."):
        assert earlier not in result.summary, earlier
    assert result.summary.count("diff --git") == 2  # the last proposal's two files, not the run's diff
    assert [e.data["summary"] for e in events if e.type.value == "completed"] == [result.summary]


async def test_a_proposal_that_changes_nothing_goes_back(project: Path):
    same = proposal(change("calc.py", content="def add(a, b):\n    return a + b\n"))
    with ScriptedModelServer([same, proposal(change("calc.py", content="ok = 1\n"))]) as server:
        result, _ = await run(make_agent(server), "Do it", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert "leaves every file as it already is" in json.dumps(server.model_requests[1].body)


async def test_an_empty_proposal_goes_back(project: Path):
    with ScriptedModelServer([proposal(), proposal(change("calc.py", content="ok = 1\n"))]) as server:
        result, _ = await run(make_agent(server), "Do it", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert "the proposal changes no file" in json.dumps(server.model_requests[1].body)


# ---------------------------------------------------------------------- context and read step


async def test_read_step_shows_the_files_the_model_asks_for(project: Path):
    pkg = project / "pkg"
    pkg.mkdir()
    for i in range(30):
        (pkg / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" * 40)
    script = [reply(text(json.dumps({"read_files": ["pkg/mod7.py", "pkg/missing.py"]}))),
              proposal(change("pkg/mod7.py", search_replace=[{"search": "VALUE_7 = 7\n" * 40,
                                                               "replace": "VALUE_7 = 70\n"}]))]
    with ScriptedModelServer(script) as server:
        result, events = await run(make_agent(server, context_tokens=500), "Set VALUE_7 to 70", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "pkg" / "mod7.py").read_text() == "VALUE_7 = 70\n"
    first, second = (json.dumps(r.body) for r in server.model_requests)
    assert "read_files" in first and "pkg/mod7.py" in first  # the map lists it
    assert "===== pkg/mod7.py =====" in second and "===== pkg/mod8.py =====" not in second
    assert "pkg/missing.py: not a readable text file" in second
    reads = [e for e in events_of(events, "tool_call") if e.get("tool_name") == "read_files"]
    assert reads and reads[0]["tool_input"]["paths"] == ["pkg/mod7.py", "pkg/missing.py"]


async def test_read_step_never_sends_credentials(project: Path):
    (project / ".env").write_text("API_TOKEN=supersecret\n")
    for i in range(30):
        (project / f"m{i}.py").write_text("x = 1\n" * 100)
    script = [reply(text(json.dumps({"read_files": [".env"]}))), proposal(change("calc.py", content="ok = 1\n"))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(make_agent(server, context_tokens=300), "Use the token", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert all("supersecret" not in json.dumps(r.body) for r in server.model_requests)
    assert [d["target"] for d in result.permission_denials] == [".env"]


async def test_small_repository_is_shown_whole_without_a_read_step(project: Path):
    (project / "util.py").write_text("def helper():\n    return 1\n")
    with ScriptedModelServer([proposal(change("calc.py", content="ok = 1\n"))]) as server:
        result, _ = await run(make_agent(server), "Do it", project)
    assert result.status is CodingStatus.COMPLETED
    assert len(server.model_requests) == 1
    sent = user_texts(server.model_requests[0])
    assert "===== util.py =====" in sent and "===== calc.py =====" in sent


async def test_json_schema_response_format_is_sent(project: Path):
    with ScriptedModelServer([proposal(change("calc.py", content="ok = 1\n"))]) as server:
        await run(make_agent(server), "Do it", project)
    fmt = server.model_requests[0].body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Proposal"
    schema = fmt["json_schema"]["schema"]
    # No test commands or risks: the model filled them with guesses, and the validators check.
    assert schema["additionalProperties"] is False and set(schema["required"]) == {"summary", "files"}
    assert "default" not in json.dumps(schema)
    # The response format holds the reply to the schema and the message explains every field: the
    # schema's text is not sent a second time in the system prompt.
    system = server.model_requests[0].body["messages"][0]["content"]
    assert "matching this JSON schema" not in system
    assert '"search_replace"' in server.model_requests[0].body["messages"][1]["content"]


async def test_without_a_schema_response_format_the_schema_is_in_the_prompt(project: Path):
    with ScriptedModelServer([proposal(change("calc.py", content="ok = 1\n"))]) as server:
        await run(make_agent(server, structured_output="prompt"), "Do it", project)
    body = server.model_requests[0].body
    assert "response_format" not in body
    assert json.dumps(body).count("matching this JSON schema") == 1


# ---------------------------------------------------------------------- modes


def test_autonomous_mode_fails_fast_with_the_capability_error():
    """A backend without a tool loop (no built-in one is left: a registered one) is refused
    autonomous mode when the agent is built."""
    from agenter.backends import register_backend, unregister_backend
    from agenter.backends.base import BackendCapabilities
    from agenter.testing import FunctionBackend

    class CompletionOnly(FunctionBackend):
        name = "completion-only"
        capabilities = BackendCapabilities(text_completion=True, streaming=True, structured_output=True, sandbox=True)

    register_backend("completion-only", CompletionOnly)
    try:
        with pytest.raises(CapabilityError) as info:
            AutonomousCodingAgent(backend="completion-only", turn=lambda context: None)
    finally:
        unregister_backend("completion-only")
    assert str(info.value) == (
        "Cannot run in autonomous mode with backend=completion-only.\n"
        "Required capabilities:\n- filesystem_edit\n- native_tool_loop\n"
        "Available capabilities:\n- text_completion\n- streaming\n- structured_output\n- sandbox\n"
        "Instead: run it in patch mode (mode='patch'), where agenter applies the model's proposed changes, "
        "or choose a backend with its own tool loop (anthropic-sdk, openai, claude-code, codex, ...).")
    assert info.value.required == ["filesystem_edit", "native_tool_loop"]


class Review(BaseModel):
    verdict: str
    issues: list[str]


@pytest.mark.parametrize("wire", WIRES)
async def test_analysis_mode_returns_structured_output_and_writes_nothing(project: Path, wire: str):
    before = {p.name: p.read_bytes() for p in project.iterdir()}
    answer = {"verdict": "fine", "issues": ["no tests"]}
    with ScriptedModelServer([reply(text(json.dumps(answer)))]) as server:
        result, _ = await run(make_agent(server, wire, mode="analysis"), "Review calc.py", project,
                              output_type=Review)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Review(**answer)
    assert result.files == {}
    assert {p.name: p.read_bytes() for p in project.iterdir()} == before
    sent = user_texts(server.model_requests[0])
    assert "You cannot change files" in sent and "===== calc.py =====" in sent


async def test_analysis_output_that_does_not_validate_goes_back_with_the_errors(project: Path):
    script = [reply(text('{"verdict": "fine"}')), reply(text('{"verdict": "fine", "issues": []}'))]
    with ScriptedModelServer(script) as server:
        result, events = await run(make_agent(server, mode="analysis"), "Review calc.py", project, output_type=Review)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.output == Review(verdict="fine", issues=[])
    feedback = json.dumps(server.model_requests[1].body)
    assert "does not match the schema: issues: Field required" in feedback
    notes = [e for e in events_of(events, "status") if "did not match Review" in e["content"]]
    assert notes


async def test_a_reply_repeated_word_for_word_is_not_asked_for_again(project: Path):
    # Qwen2.5-Coder-1.5B at temperature 0 gave the same invalid proposal three times in a row.
    both = proposal(change("calc.py", diff="@@", search_replace=[{"search": "a", "replace": "b"}]))
    with ScriptedModelServer([both, both, both]) as server:
        result, events = await run(make_agent(server), "Do it", project, budget={"max_iterations": 1})
    assert result.status is CodingStatus.FAILED
    assert len(server.model_requests) == 2
    notes = [e["content"] for e in events_of(events, "status")]
    assert "reply 2 repeated the previous one word for word: not asking again" in notes


async def test_analysis_mode_answers_with_text(project: Path):
    with ScriptedModelServer([reply(text("calc.py adds two numbers."))]) as server:
        result, _ = await run(make_agent(server, mode="analysis"), "What does calc.py do?", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.summary == "calc.py adds two numbers."
    assert "response_format" not in server.model_requests[0].body


async def test_server_error_is_a_truthful_error_status(project: Path):
    with ScriptedModelServer([], default=http_error(500, "model crashed")) as server:
        result, _ = await run(make_agent(server, max_retries=1), "Do it", project)
    assert result.status is CodingStatus.ERROR
    assert "error 500 after 2 attempts" in (result.error or "") and "model crashed" in (result.error or "")


# ---------------------------------------------------------------------- pure helpers


def test_repo_map_lists_everything_that_fits():
    from agenter.backends.model_api._completion import render_repo_map

    assert render_repo_map([("a.py", 3), ("pkg/b.py", None)], 1000) == "a.py (3 lines)\npkg/b.py"


def test_repo_map_prefers_shallow_and_shown_files_and_sums_up_the_rest():
    from agenter.backends.model_api._completion import render_repo_map

    files = [("README.md", 10)] + [(f"src/deep/m{i}.py", 5) for i in range(200)] + [("src/main.py", 50)]
    text = render_repo_map(files, 400, first=["src/deep/m150.py"])
    lines = text.splitlines()
    assert "README.md (10 lines)" in lines and "src/main.py (50 lines)" in lines
    assert "src/deep/m150.py (5 lines)" in lines
    assert lines[-1].startswith("src/ ... ") and lines[-1].endswith("more file(s) not listed")
    assert len(text) <= 400


def test_named_files_are_found_by_path_or_unique_name():
    from agenter.backends.model_api._completion import select_named_files

    files = ["calc.py", "pkg/util.py", "pkg/a/__init__.py", "pkg/b/__init__.py", "docs/readme.md"]
    assert select_named_files("Fix pkg/util.py and calc.py.", files) == ["pkg/util.py", "calc.py"]
    assert select_named_files("Fix util.py", files) == ["pkg/util.py"]
    assert select_named_files("Fix mycalc.py", files) == []


def test_retry_delay_honours_the_server_then_backs_off():
    from agenter.backends.model_api._completion import retry_delay

    assert retry_delay(0, {"retry-after-ms": "250"}, 60) == 0.25
    assert retry_delay(0, {"retry-after": "3"}, 2) == 2
    assert retry_delay(2, None, 60, rand=lambda: 0.0) == 2.0
    assert retry_delay(10, None, 60, rand=lambda: 0.0) == 8.0


async def test_proposal_wrapped_in_prose_is_taken(project: Path):
    # Fields the schema does not ask for (an older proposal shape) are ignored, not refused.
    body = json.dumps({"summary": "s", "files": [change("calc.py", content="ok = 1\n")], "test_commands": [],
                       "risks": []})
    with ScriptedModelServer([reply(text(f"Here is my proposal:\n{body}\nHope it helps."))]) as server:
        result, _ = await run(make_agent(server), "Do it", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == "ok = 1\n" and len(server.model_requests) == 1


async def test_sandbox_off_still_refuses_git_internals(project: Path):
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    script = [proposal(change(".git/config", content="[core]\n\thooksPath = /tmp\n")),
              proposal(change("calc.py", content="ok = 1\n"))]
    with ScriptedModelServer(script) as server:
        agent = AutonomousCodingAgent(backend="openai", model="m", base_url=server.openai_base_url, api_key="k",
                                      mode="patch", sandbox=False)
        result, _ = await run(agent, "Do it", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / ".git" / "config").read_text() == "[core]\n"
    assert [d["target"] for d in result.permission_denials] == [".git/config"]


async def test_refusal_in_the_read_step_ends_the_turn(project: Path):
    for i in range(30):
        (project / f"m{i}.py").write_text("x = 1\n" * 100)
    with ScriptedModelServer([reply(text("REFUSED: not touching this code"))]) as server:
        result, _ = await run(make_agent(server, context_tokens=300), "Do it", project)
    assert result.status is CodingStatus.REFUSED and result.refusal_reason == "not touching this code"
    assert len(server.model_requests) == 1
