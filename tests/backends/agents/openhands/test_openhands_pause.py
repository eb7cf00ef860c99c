"""Approvals that can wait on openhands (docs/approvals.md): the real OpenHands SDK against the
scripted model server. A call the policy asks about with nobody to answer stops OpenHands in its
confirmation mode with the response's actions unexecuted; a fresh agent (as another process would
build it, with the same store and persistence folder) answers, OpenHands runs the waiting actions
itself, and the model's next request holds their real results. The scripted model answers by
what a request holds (the tool results in it), never by arrival order."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.agents.openhands import OpenHandsBackend
from agenter.backends.agents.openhands._kept import CONVERSATION_KIND
from agenter.host.requirements import missing_requirements
from agenter.store import open_store
from agenter.testing import reply
from agenter.testing import tool_call as model_tool_call
from agenter.testing._scene import private_home

from .cases import tool_results

MISSING = "; ".join(missing_requirements(OpenHandsBackend.requirements(None)))  # type: ignore[arg-type]
MODEL = "openai/gpt-4o"
API_KEY = "sk-test-openhands-pause-0123456789"
#: Everything allowed but the write of secret.txt.
POLICY = {"rules": ["ask edit:secret.txt"], "mode": "bypass"}
#: Fixed token counts per model response, so what the continued run carries is exact.
USAGE = {"input_tokens": 1000, "output_tokens": 100}

pytestmark = [
    pytest.mark.py312,
    pytest.mark.agent,
    pytest.mark.skipif(bool(MISSING), reason=MISSING),
    pytest.mark.usefixtures("openhands_imported", "no_leftovers"),
    pytest.mark.timeout(300),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return private_home(tmp_path / "home")


def make_agent(server: Any, home: Path, store: Path, **kwargs: Any) -> AutonomousCodingAgent:
    """The agent, as this process or another one builds it."""
    kwargs.setdefault("on_ask", "pause")
    kwargs.setdefault("permissions", POLICY)
    return AutonomousCodingAgent(backend="openhands", model=MODEL, sandbox=False, base_url=server.base_url + "/v1",
                                 api_key=API_KEY, max_retries=0, openhands_retry_min_wait=0, max_retry_wait=0,
                                 env={"HOME": str(home)}, openhands_persistence_dir=str(home / "conversations"),
                                 conversation_store=str(store), max_iterations=1, **kwargs)


def said(request: Any) -> dict[str, str]:
    """The tool results a request holds: call id → what the model read."""
    return {result["id"]: result["output"] for result in request.tool_results}


def model_for(repo: Path) -> Any:
    """Write a.txt; then, in one response, write b.txt, write secret.txt (asks) and view a.txt;
    once secret.txt's call has a result, finish."""

    def model(request: Any) -> Any:
        results = said(request)
        if "call_secret" in results:
            return reply(model_tool_call("finish", {"message": "Done."}, id="call_finish"), usage=USAGE)
        if "call_a" in results:
            return reply(
                model_tool_call("file_editor", {"command": "create", "path": str(repo / "b.txt"), "file_text": "b\n"},
                                id="call_b"),
                model_tool_call("file_editor", {"command": "create", "path": str(repo / "secret.txt"),
                                                "file_text": "s\n"}, id="call_secret"),
                model_tool_call("file_editor", {"command": "view", "path": str(repo / "a.txt")}, id="call_read"),
                usage=USAGE)
        return reply(model_tool_call("file_editor", {"command": "create", "path": str(repo / "a.txt"),
                                                     "file_text": "a\n"}, id="call_a"), usage=USAGE)

    return model


async def test_an_ask_pauses_and_a_fresh_agent_runs_the_paused_action_itself(scripted_model_server, repo, home,
                                                                            tmp_path):
    server = scripted_model_server(handler=model_for(repo))
    store = tmp_path / "store"
    paused = await make_agent(server, home, store).execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and not paused.ok, paused.error
    # OpenHands holds the whole response: the call allowed before the one that asked waits too.
    assert [(c.id, c.tool, c.needs_approval) for c in paused.pending] == [
        ("call_b", "file_editor", False), ("call_secret", "file_editor", True), ("call_read", "file_editor", False)]
    asking = paused.pending[1]
    assert asking.input["path"] == str(repo / "secret.txt") and asking.paths == [str(repo / "secret.txt")]
    assert (asking.rule, asking.stage) == ("ask edit:secret.txt", "ask_rule")
    assert paused.resume_handle and paused.resume_handle.startswith("pause-")
    assert paused.files == {"a.txt": "a\n"} and not (repo / "b.txt").exists() and not (repo / "secret.txt").exists()
    assert (paused.input_tokens, paused.output_tokens) == (2000, 200)  # two responses
    assert len(server.model_requests) == 2  # the run ended at the response: no request after it

    resumed = await make_agent(server, home, store).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id  # the same OpenHands conversation
    assert (repo / "secret.txt").read_text() == "s\n"
    assert resumed.files == {"a.txt": "a\n", "b.txt": "b\n", "secret.txt": "s\n"}  # each once
    # OpenHands ran the waiting actions themselves: the model's next request holds their real
    # results, and nobody asked the model to make them again.
    assert len(server.model_requests) == 3
    results = said(server.model_requests[2].model_request)
    assert set(results) == {"call_a", "call_b", "call_secret", "call_read"}
    assert "created" in results["call_secret"].lower() and "a" in results["call_read"]
    assert not resumed.permission_denials
    # Tokens carry over: the paused run's two responses and the one after it, counted once.
    assert (resumed.input_tokens, resumed.output_tokens) == (3000, 300)

    # The store keeps no secret; the handle was used once; an unknown one is a one-line error.
    assert all(API_KEY not in path.read_text() for path in store.rglob("*") if path.is_file())
    again = make_agent(server, home, store)
    with pytest.raises(ConfigurationError, match="was already used"):
        await again.approve(paused.resume_handle)
    with pytest.raises(ConfigurationError) as unknown:
        await again.approve("pause-" + "0" * 32)
    assert "unknown resume handle 'pause-" in str(unknown.value) and "\n" not in str(unknown.value)


async def test_deny_tells_the_model_why_and_names_the_denial_in_the_result(scripted_model_server, repo, home,
                                                                           tmp_path):
    server = scripted_model_server(handler=model_for(repo))
    store = tmp_path / "store"
    # on_permission answers "defer": the run pauses (on_ask is "deny" here).
    asked = make_agent(server, home, store, on_ask="deny", on_permission=lambda request: "defer")
    paused = await asked.execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED, paused.error
    assert [c.id for c in paused.pending] == ["call_b", "call_secret", "call_read"]
    assert paused.resume_handle is not None
    resumed = await make_agent(server, home, store).approve(paused.resume_handle, "deny")
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert not (repo / "secret.txt").exists() and resumed.files == {"a.txt": "a\n", "b.txt": "b\n"}
    (denial,) = resumed.permission_denials
    assert (denial["tool"], denial["rule"]) == ("file_editor", "ask edit:secret.txt")
    assert "denied by a person" in denial["reason"]
    results = tool_results(server)
    secret = said(server.model_requests[-1].model_request)["call_secret"]
    assert secret.startswith("Action rejected") and "Permission denied by a person" in secret, results
    assert (resumed.input_tokens, resumed.output_tokens) == (3000, 300)


async def test_a_call_left_unanswered_pauses_again_without_a_model_request(scripted_model_server, repo, home,
                                                                           tmp_path):
    server = scripted_model_server(handler=model_for(repo))
    store = tmp_path / "store"
    paused = await make_agent(server, home, store).execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle is not None, paused.error
    # No answer for the call that asked: the gate asks again, nobody answers, the run pauses
    # again under a new handle before any model request; the allowed calls still wait.
    again = await make_agent(server, home, store).approve(paused.resume_handle, {})
    assert again.status is CodingStatus.PAUSED, again.error
    assert again.resume_handle is not None and again.resume_handle != paused.resume_handle
    assert [(c.id, c.needs_approval) for c in again.pending] == [
        ("call_b", False), ("call_secret", True), ("call_read", False)]
    assert len(server.model_requests) == 2 and not (repo / "b.txt").exists()
    done = await make_agent(server, home, store).approve(again.resume_handle, {"call_secret": "allow"})
    assert done.status is CodingStatus.COMPLETED, done.error
    assert done.files == {"a.txt": "a\n", "b.txt": "b\n", "secret.txt": "s\n"}
    assert (done.input_tokens, done.output_tokens) == (3000, 300) and len(server.model_requests) == 3


def test_pause_needs_a_kept_conversation():
    with pytest.raises(ConfigurationError, match="openhands_persistence_dir"):
        AutonomousCodingAgent(backend="openhands", model=MODEL, sandbox=False, on_ask="pause",
                              openhands_persistence_dir=None)
    with pytest.raises(ConfigurationError, match="conversation_store=False"):
        AutonomousCodingAgent(backend="openhands", model=MODEL, sandbox=False, on_ask="pause",
                              conversation_store=False)


def conversation_files(persistence_dir: Path, session_id: str) -> dict[str, Any]:
    """What OpenHands resumes a conversation from: its path under the conversation's folder →
    the file's JSON value."""
    folder = persistence_dir / uuid.UUID(session_id).hex
    return {path.relative_to(folder).as_posix(): json.loads(path.read_text())
            for path in sorted(folder.rglob("*.json"))}


@pytest.mark.parametrize("store_kind", ["folder", "sqlite"])
async def test_another_host_with_the_same_store_approves(scripted_model_server, repo, home, tmp_path, store_kind):
    """The run pauses with persistence dir A; a fresh agent with another, empty persistence dir
    B and the same store (a folder, or a SQLite file as on a shared disk) approves, as another
    host would: the conversation's files come back from the store, the paused call runs once,
    and the model's next request carries the earlier conversation."""
    server = scripted_model_server(handler=model_for(repo))
    store: Any = tmp_path / "store" if store_kind == "folder" else f"sqlite:///{tmp_path / 'pauses.db'}"
    paused = await make_agent(server, home, store).execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle and paused.session_id, paused.error
    here = conversation_files(home / "conversations", paused.session_id)
    assert "base_state.json" in here and sum(name.startswith("events/event-") for name in here) == 7
    kept = open_store(str(store)).load(paused.session_id)
    assert kept is not None and kept.metadata["kind"] == CONVERSATION_KIND
    assert {message["path"] for message in kept.messages} == set(here)  # no lock, no length marker

    other = private_home(tmp_path / "other-host")
    assert not (other / "conversations").exists()
    resumed = await make_agent(server, other, store).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert resumed.session_id == paused.session_id
    assert (repo / "secret.txt").read_text() == "s\n"
    assert resumed.files == {"a.txt": "a\n", "b.txt": "b\n", "secret.txt": "s\n"}
    # The continued request is the same conversation: the task, the run before the pause, and
    # the real results of the waiting actions, which OpenHands ran once.
    assert len(server.model_requests) == 3
    continued = server.model_requests[2].model_request
    assert "Write a.txt, b.txt and secret.txt" in json.dumps(continued.messages)
    assert [result["id"] for result in continued.tool_results] == ["call_a", "call_b", "call_secret", "call_read"]
    assert "created" in said(continued)["call_secret"].lower()

    # The other host's folder: private, holding every file the pause kept as it was, then the
    # events of the continued run; the first host's folder is as the pause left it.
    folder = other / "conversations" / uuid.UUID(paused.session_id).hex
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in folder.rglob("*.json"))
    there = conversation_files(other / "conversations", paused.session_id)
    assert all(there[name] == value for name, value in here.items() if name != "base_state.json")
    assert len(there) > len(here)
    observed = [value["tool_call_id"] for value in there.values() if value.get("kind") == "ObservationEvent"]
    assert sorted(observed) == ["call_a", "call_b", "call_finish", "call_read", "call_secret"]  # each once
    assert conversation_files(home / "conversations", paused.session_id) == here
    # The stored copy went on with the session that restored it.
    kept = open_store(str(store)).load(paused.session_id)
    assert kept is not None and {message["path"] for message in kept.messages} == set(there)
    assert all(API_KEY.encode() not in path.read_bytes() for path in tmp_path.glob("*store*/**/*") if path.is_file())
    assert all(API_KEY.encode() not in path.read_bytes() for path in tmp_path.glob("pauses.db*"))


async def test_a_stored_path_outside_the_conversation_is_refused(scripted_model_server, repo, home, tmp_path):
    server = scripted_model_server(handler=model_for(repo))
    store = tmp_path / "store"
    paused = await make_agent(server, home, store).execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle and paused.session_id, paused.error
    # The stored copy, tampered with: one file climbs out of the conversation's folder.
    opened = open_store(str(store))
    kept = opened.load(paused.session_id)
    assert kept is not None
    opened.save(paused.session_id, [*kept.messages, {"path": "events/../../../escaped.json", "json": {}}],
                kept.metadata)
    other = private_home(tmp_path / "other-host")
    failed = await make_agent(server, other, store).approve(paused.resume_handle)
    assert (failed.status, failed.error_kind) == (CodingStatus.ERROR, "config")
    error = str(failed.error)
    assert f"the OpenHands conversation {paused.session_id} kept in the conversation store cannot be restored" in error
    assert "'events/../../../escaped.json'" in error and "refused, nothing was written" in error
    assert list((other / "conversations").iterdir()) == []  # nothing written, nothing left over
    assert not list(tmp_path.rglob("escaped.json")) and not (repo / "secret.txt").exists()
    assert len(server.model_requests) == 2
    # The handle was not used up: with the stored copy as the pause kept it, the approval runs.
    opened.save(paused.session_id, kept.messages, kept.metadata)
    resumed = await make_agent(server, other, store).approve(paused.resume_handle)
    assert resumed.status is CodingStatus.COMPLETED, resumed.error
    assert (repo / "secret.txt").read_text() == "s\n"


@pytest.mark.parametrize("where", ["this host", "another host"])
async def test_a_new_request_on_a_paused_conversation_runs_none_of_its_waiting_actions(scripted_model_server, repo,
                                                                                      home, tmp_path, where):
    """`resume=` the paused conversation with a new prompt (not approve): OpenHands would run the
    actions waiting for its confirmation with the next run. They are rejected first instead: the
    model reads that they did not run and why, nothing the gate deferred (nor the calls of its
    response) runs, and the pause can no longer be approved."""
    first = model_for(repo)

    def model(request: Any) -> Any:  # the new prompt: write other.txt, then finish
        if "call_other" in said(request):
            return reply(model_tool_call("finish", {"message": "Done."}, id="call_done"), usage=USAGE)
        if "Never mind" in json.dumps(request.messages):
            return reply(model_tool_call("file_editor", {"command": "create", "path": str(repo / "other.txt"),
                                                         "file_text": "o\n"}, id="call_other"), usage=USAGE)
        return first(request)

    server = scripted_model_server(handler=model)
    store = tmp_path / "store"
    paused = await make_agent(server, home, store).execute("Write a.txt, b.txt and secret.txt", cwd=repo)
    assert paused.status is CodingStatus.PAUSED and paused.resume_handle and paused.session_id, paused.error
    host = home if where == "this host" else private_home(tmp_path / "other-host")
    later = await make_agent(server, host, store).execute("Never mind; write other.txt.", cwd=repo,
                                                           resume=paused.session_id)
    assert later.status is CodingStatus.COMPLETED, later.error
    assert later.session_id == paused.session_id
    assert not (repo / "secret.txt").exists() and not (repo / "b.txt").exists()
    assert later.files == {"other.txt": "o\n"} and len(server.model_requests) == 4
    request = server.model_requests[2].model_request
    results = said(request)
    assert set(results) == {"call_a", "call_b", "call_secret", "call_read"}
    for call in ("call_b", "call_secret", "call_read"):
        assert "the run paused for approval and went on without it" in results[call], results[call]
        assert "created" not in results[call].lower()
    assert "Never mind; write other.txt." in json.dumps(request.messages)
    # The stored copy went on with the request, wherever it ran, so a host that restores it
    # sees that; and the pause can no longer be approved, also on the host that paused, whose
    # folder still waits when the conversation went on on another host.
    kept = open_store(str(store)).load(paused.session_id)
    assert kept is not None
    assert {message["path"] for message in kept.messages} == set(conversation_files(host / "conversations",
                                                                                     paused.session_id))
    gone = await make_agent(server, home, store).approve(paused.resume_handle)
    assert gone.status is CodingStatus.ERROR and "went on after the run paused" in (gone.error or ""), gone.error
    assert not (repo / "secret.txt").exists() and len(server.model_requests) == 4
