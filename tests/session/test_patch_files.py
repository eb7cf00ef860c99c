"""Patch mode's files format (`proposal_format="files"`, capability `patch_files`): the model
writes each changed file's path and whole text in a fenced block, the backend reads them into the
session's proposal, and the session applies it as any other. The real openai and litellm
backends against the scripted model server; the files are really written by agenter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter.backends.base import BackendSettings
from agenter.backends.model_api.openai_compat import OpenAICompatBackend, OpenAIOptions
from agenter.testing import ScriptedModelServer, reply, text

from .test_patch_mode import WIRES, events_of, make_agent, run

pytestmark = pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning")

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
FIXED = CALC.replace("a + b\n", "a - b\n").replace("return a - b\n\n\n", "return a + b\n\n\n", 1)


def files_agent(server: ScriptedModelServer, wire: str = "chat", **options: Any) -> AutonomousCodingAgent:
    return make_agent(server, wire, proposal_format="files", **options)


def answer(*blocks: tuple[str, str], after: str = "Fix sub.", before: str = "") -> Any:
    """A reply in the files format: each file's path and its text in a block, then a sentence."""
    files = "".join(f"{path}\n```python\n{body}```\n" for path, body in blocks)
    return reply(text((before + "\n" if before else "") + files + after))


def sent(server: ScriptedModelServer, index: int) -> str:
    return json.dumps(server.model_requests[index].body)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "calc.py").write_text(CALC)
    return root


def test_the_option_declares_the_capability_on_the_context_path():
    def capabilities(mode: str, **options: Any) -> Any:
        settings = BackendSettings(model="m", tools=[], sandbox=True, mode=mode,
                                   options=OpenAIOptions(api_key="k", **options))
        return OpenAICompatBackend(settings).capabilities

    assert capabilities("patch", proposal_format="files").patch_files
    assert not capabilities("patch").patch_files
    assert not capabilities("patch", proposal_format="files", openai_context="tools").patch_files
    assert not capabilities("autonomous", proposal_format="files").patch_files


@pytest.mark.parametrize("wire", WIRES)
async def test_a_fenced_file_is_applied(project: Path, wire: str):
    with ScriptedModelServer([answer(("calc.py", FIXED))]) as server:
        result, events = await run(files_agent(server, wire), "sub(a, b) adds; make it subtract", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == FIXED
    assert result.summary.startswith("Fix sub.\n\nApplied. written: calc.py")
    plans = events_of(events, "plan")
    assert plans and plans[0]["tool_input"]["files"] == [{"path": "calc.py", "operation": "modify", "as": "content"}]
    first = sent(server, 0)
    # The format and its example, no JSON format or schema; the file the model changes is shown.
    assert "its whole new text in a ``` block" in first and "===== calc.py =====" in first
    assert "JSON" not in first and "response_format" not in first and '"text": {"format"' not in first
    assert len(server.model_requests) == 1


async def test_the_sentence_may_come_before_the_files(project: Path):
    with ScriptedModelServer([answer(("calc.py", FIXED), before="Make sub subtract.", after="")]) as server:
        result, _ = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.summary.startswith("Make sub subtract.\n\nApplied.")


async def test_a_block_of_functions_replaces_those_and_a_new_file_is_created(project: Path):
    only_sub = "def sub(a, b):\n    return a - b\n"
    with ScriptedModelServer([answer(("calc.py", only_sub), ("test_calc.py", "import calc\n"))]) as server:
        result, events = await run(files_agent(server), "Fix sub and add a test file", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == FIXED  # add() kept: the block named only sub()
    assert (project / "test_calc.py").read_text() == "import calc\n"
    plans = events_of(events, "plan")
    assert {f["path"]: f["operation"] for f in plans[0]["tool_input"]["files"]} == {
        "calc.py": "modify", "test_calc.py": "create"}


async def test_a_reply_with_no_file_goes_back_within_the_turn(project: Path):
    script = [reply(text("I would change the sign in sub.")), answer(("calc.py", FIXED))]
    with ScriptedModelServer(script) as server:
        result, events = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED and result.iterations == 1, result.error
    assert "Your reply gave no changed file" in sent(server, 1)
    assert any("reply 1 gave no file to write" in e.get("content", "") for e in events_of(events, "status"))


async def test_the_files_given_back_unchanged_are_named_so(project: Path):
    with ScriptedModelServer([answer(("calc.py", CALC)), answer(("calc.py", FIXED))]) as server:
        result, _ = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert "Your reply gave the files as they already are" in sent(server, 1)


async def test_a_file_given_back_the_way_files_are_shown_is_read(project: Path):
    shown = f"===== calc.py =====\n{FIXED}===== end of calc.py =====\nsub subtracts now."
    with ScriptedModelServer([reply(text(shown))]) as server:
        result, _ = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == FIXED
    assert result.summary.startswith("sub subtracts now.")


async def test_a_fragment_goes_back_with_why(project: Path):
    big = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(40))
    (project / "calc.py").write_text(big)
    fragment = "x = 1\nprint(x)\n"  # not definitions: the file's whole text, a small part of it
    script = [answer(("calc.py", fragment)), answer(("calc.py", big + "def g():\n    return 0\n"))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(files_agent(server), "Add g to calc.py", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert "No file was written: the block after the line calc.py was not written" in sent(server, 1)
    assert (project / "calc.py").read_text().endswith("def g():\n    return 0\n")


async def test_a_path_given_twice_keeps_its_last_block(project: Path):
    draft = CALC.replace("a + b\n", "a * b\n")
    with ScriptedModelServer([answer(("calc.py", draft), ("calc.py", FIXED))]) as server:
        result, events = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (project / "calc.py").read_text() == FIXED
    assert events_of(events, "plan")[0]["tool_input"]["files"] == [
        {"path": "calc.py", "operation": "modify", "as": "content"}]
    assert len(server.model_requests) == 1


async def test_a_repeating_cut_off_reply_is_not_continued(project: Path):
    loop = "".join("    # check the sign\n    # then return\n" for _ in range(20))
    cut = reply(text("Fix sub.\ncalc.py\n```python\ndef sub(a, b):\n" + loop), stop_reason="max_tokens")
    with ScriptedModelServer([cut, answer(("calc.py", FIXED))]) as server:
        result, _ = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    second = server.model_requests[1].body["messages"]
    assert "kept repeating the same lines" in second[-1]["content"]
    assert second[-2]["content"].count("# check the sign") <= 2  # about one round kept, the rest left out


async def test_a_reply_that_repeats_itself_is_stopped_while_it_streams(project: Path):
    loop = "".join(f"    # step {n}: check the sign\n    # then return the difference\n" for n in range(400))
    with ScriptedModelServer([reply(text("Fix sub.\ncalc.py\n```python\ndef sub(a, b):\n" + loop + "```\n")),
                              answer(("calc.py", FIXED))]) as server:
        result, events = await run(files_agent(server), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED, result.error
    second = server.model_requests[1].body["messages"]
    assert "kept repeating the same lines" in second[-1]["content"]
    assert second[-2]["content"].count("check the sign") <= 2


async def test_a_failed_validation_asks_for_the_files_again(project: Path):
    check = "command:python -c \"import calc, sys; sys.exit(0 if calc.sub(3, 1) == 2 else 'sub is wrong')\""
    wrong = CALC.replace("return a + b\n", "return a * b\n")
    with ScriptedModelServer([answer(("calc.py", wrong)), answer(("calc.py", FIXED))]) as server:
        result, _ = await run(files_agent(server, validators=[check]), "Fix sub", project)
    assert result.status is CodingStatus.COMPLETED and result.iterations == 2, result.error
    retry = sent(server, 1)
    assert "sub is wrong" in retry and "The checks are right" in retry
    assert "each as its path on a line of its own, then its whole new text in a ``` block" in retry
    assert "JSON" not in retry
    # The first request asks for the files, then a sentence; a retry for the sentence first.
    assert "; then say in one sentence what the change does" in sent(server, 0)
    assert "First say in one sentence what the change does. Then give each file" in retry


async def test_a_path_outside_the_workspace_is_refused_and_named(project: Path):
    (project / ".git").mkdir()
    script = [answer(("../outside.py", "x = 1\n")), answer((".git/hook.py", "x = 1\n")),
              answer((".git/hook.py", "x = 2\n"))]
    with ScriptedModelServer(script) as server:
        result, _ = await run(files_agent(server, max_iterations=2), "Write it", project)
    assert result.status is CodingStatus.FAILED, result.error
    assert not (project.parent / "outside.py").exists() and not (project / ".git" / "hook.py").exists()
    assert "the block after the line ../outside.py was not written: that path leads outside" in sent(server, 1)
    assert {d["target"] for d in result.permission_denials} == {".git/hook.py"}
