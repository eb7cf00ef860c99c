"""Resume across processes for agenter's own agent (model_api/_harness/keeper.py over
agenter.store): a run killed (SIGKILL) in a child process is continued by a new process with
`resume=<transcript>`, on every harness wire, and the scripted model server's next request holds
the first run's conversation. Where the store lives, what it holds, and what it refuses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ConfigurationError
from agenter.backends.model_api._harness.keeper import ConversationKeeper, load
from agenter.host import Redactor
from agenter.session.transcript import read_transcript
from agenter.store import ConversationConflictError, FileConversationStore, StoreError
from agenter.testing import hang, reply, text, tool_call

KEYS = {"anthropic-sdk": "sk-test-SUPERSECRET-resume-0123456789", "gemini": "AIza-test-SUPERSECRET-resume-0123456789",
        "openai-chat": "sk-test-SUPERSECRET-chat-0123456789", "openai-responses": "sk-test-SUPERSECRET-resp-0123456789"}
#: Every wire of the harness: anthropic, gemini, and openai's Chat Completions and Responses.
WIRES = ["anthropic-sdk", "gemini", "openai-chat", "openai-responses"]
agent_test = pytest.mark.agent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's cache for this test: where a run without log_dir keeps its conversation."""
    folder = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder / "agenter" / "conversations"


def agent_kwargs(server: Any, wire: str) -> dict[str, Any]:
    """The facade's arguments for `wire` against the scripted server."""
    if wire.startswith("openai-"):
        return {"backend": "openai", "model": "scripted-model", "base_url": server.openai_base_url,
                "openai_wire": wire.removeprefix("openai-"), "api_key": KEYS[wire]}
    return {"backend": wire, "base_url": server.base_url, "api_key": KEYS[wire]}


def make_agent(server: Any, wire: str = "anthropic-sdk", **kwargs: Any) -> AutonomousCodingAgent:
    return AutonomousCodingAgent(**agent_kwargs(server, wire), **kwargs)


def request_text(server: Any, index: int) -> str:
    return json.dumps(server.model_requests[index].body)


RUN_ONE = """
import asyncio, json, sys
from agenter import AutonomousCodingAgent
arguments, repo, logs = sys.argv[1:4]
agent = AutonomousCodingAgent(**json.loads(arguments), log_dir=logs)

async def main():
    async with agent.session(cwd=repo) as session:
        await session.execute("Write first.txt")
        await session.execute("Now wait for me")

asyncio.run(main())
"""


@agent_test
@pytest.mark.timeout(300)  # two processes importing their SDK: a minute each on a loaded machine
@pytest.mark.parametrize("backend", WIRES)
async def test_a_run_killed_mid_session_is_continued_by_a_new_process(scripted_model_server, repo, tmp_path, backend):
    logs = tmp_path / "logs"
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "first.txt", "content": "1\n"})),
        reply(text("Wrote first.txt.")),
        hang(60),  # run 1's second request: the process is killed while its model call hangs
        reply(tool_call("write_file", {"path": "second.txt", "content": "2\n"})),
        reply(text("Back again.")),
    ])
    arguments = json.dumps(agent_kwargs(server, backend))
    run_one = subprocess.Popen([sys.executable, "-c", RUN_ONE, arguments, str(repo), str(logs)],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await asyncio.to_thread(server.wait_for_requests, 3, 90)
        os.killpg(run_one.pid, signal.SIGKILL)  # no cleanup of any kind
        run_one.wait(10)
    finally:
        if run_one.poll() is None:
            os.killpg(run_one.pid, signal.SIGKILL)
            run_one.wait(10)
        run_one.stderr.close()
    (path,) = logs.glob("*.jsonl")
    killed = read_transcript(path)
    assert killed.end is None and killed.session_id
    assert (repo / "first.txt").read_text() == "1\n"
    # The conversation beside the transcript: private, and without the API key.
    folder = logs / "conversations"
    stored = folder / f"{killed.session_id}.jsonl"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}
    assert KEYS[backend] not in stored.read_text() and "Write first.txt" in stored.read_text()

    result = await make_agent(server, backend, log_dir=logs).execute("Continue", cwd=repo, resume=path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "second.txt").read_text() == "2\n"
    assert result.session_id == killed.session_id
    # The new process's first model call carries the first run's conversation: both prompts, the
    # tool call and its result, the answer; then the new prompt.
    resumed = request_text(server, 3)
    for said in ("Write first.txt", "first.txt", "Wrote first.txt.", "Now wait for me", "Continue"):
        assert said in resumed, said
    assert resumed.index("Write first.txt") < resumed.index("Wrote first.txt.") < resumed.index("Now wait for me") \
        < resumed.index("Continue")
    body = server.model_requests[3].body
    if backend == "anthropic-sdk":
        messages = body["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
        assert [b["text"] for b in messages[-1]["content"]] == ["Now wait for me", "Continue"]
    elif backend == "openai-chat":
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "user"], roles
        call = body["messages"][2]["tool_calls"][0]
        assert body["messages"][3]["tool_call_id"] == call["id"]  # the call and its result, paired
    elif backend == "openai-responses":
        kinds = [item.get("type", item.get("role")) for item in body["input"]]
        assert kinds.count("function_call") == 1 and kinds.count("function_call_output") == 1, kinds
    else:
        roles = [content["role"] for content in body["contents"]]
        assert roles == ["user", "model", "user", "model", "user"], roles
    # The store holds the continued conversation under the same id; nothing holds the key.
    after = FileConversationStore(folder).load(killed.session_id)
    assert after is not None and after.metadata["backend"] == agent_kwargs(server, backend)["backend"]
    assert "Back again." in json.dumps(after.messages[-1])
    for file in [*folder.iterdir(), *logs.glob("*.jsonl")]:
        assert KEYS[backend] not in file.read_text(errors="replace")
    assert not (repo / "conversations").exists()


@agent_test
@pytest.mark.parametrize("backend", WIRES)
async def test_resume_by_id_finds_the_conversation_in_the_users_cache(scripted_model_server, repo, cache, backend):
    server = scripted_model_server([
        reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"})), reply(text("Wrote a.txt.")),
        reply(text("You asked for a.txt.")),
    ])
    first = await make_agent(server, backend).execute("Write a.txt", cwd=repo)
    assert first.status is CodingStatus.COMPLETED, first.error
    assert [p.name for p in cache.glob("*.jsonl")] == [f"{first.session_id}.jsonl"]
    # Another agent (another backend instance, as in another process) continues it by its id.
    second = await make_agent(server, backend).execute("What did I ask?", cwd=repo, resume=first.session_id,
                                                        require_changes=False)
    assert second.status is CodingStatus.COMPLETED, second.error
    assert second.session_id == first.session_id
    later = request_text(server, 2)
    assert "Write a.txt" in later and "Wrote a.txt." in later and "What did I ask?" in later


@agent_test
async def test_a_session_switched_to_text_tool_calls_resumes_in_text_mode(scripted_model_server, repo, cache):
    server = scripted_model_server([
        reply(text('Let me write it.\n```json\n{"name": "write_file", "arguments": {"path": "n.txt", '
                   '"content": "n\\n"}}\n```')),
        reply(text("Done.")),
        reply(text("Still writing calls as text.")),
    ])
    first = await make_agent(server, "openai-chat").execute("Write n.txt", cwd=repo)  # openai_tool_calls="auto"
    assert first.status is CodingStatus.COMPLETED, first.error
    assert FileConversationStore(cache).load(first.session_id).metadata["tool_calls"] == "text"
    second = await make_agent(server, "openai-chat").execute("And now?", cwd=repo, resume=first.session_id,
                                                             require_changes=False)
    assert second.status is CodingStatus.COMPLETED, second.error
    resumed = server.model_requests[2].body
    # The new process starts in text mode: no tools on the wire, the tools in the system prompt,
    # the earlier call in its text form.
    assert "tools" not in resumed and "# Tools" in resumed["messages"][0]["content"]
    assert "<tool_call>" in json.dumps(resumed) and "Write n.txt" in json.dumps(resumed)
    # openai_tool_calls="native" is the user's word: it resumes natively.
    third = scripted_model_server([reply(text("Native."))])
    again = await make_agent(third, "openai-chat", openai_tool_calls="native").execute(
        "Native now", cwd=repo, resume=first.session_id, require_changes=False)
    assert again.status is CodingStatus.COMPLETED, again.error
    assert "tools" in third.model_requests[0].body


@agent_test
async def test_what_cannot_be_resumed_fails_at_connect_naming_it(scripted_model_server, repo, cache):
    server = scripted_model_server([reply(text("never asked"))])
    result = await make_agent(server).execute("Go on", cwd=repo, resume="0123abcd")
    assert result.status is CodingStatus.ERROR
    assert "cannot resume session '0123abcd'" in result.error and str(cache) in result.error
    result = await make_agent(server).execute("Go on", cwd=repo, resume="no good")
    assert result.status is CodingStatus.ERROR and "invalid conversation session id" in result.error
    # Another backend's conversation is not this one's.
    FileConversationStore(cache).save("fromgemini", [{"role": "user", "content": "hi"}], {"backend": "gemini"})
    result = await make_agent(server).execute("Go on", cwd=repo, resume="fromgemini")
    assert result.status is CodingStatus.ERROR and "is of the gemini backend, not anthropic-sdk" in result.error
    assert not server.model_requests


@agent_test
async def test_without_a_store_nothing_is_written_and_resume_says_why(scripted_model_server, repo, cache, tmp_path):
    server = scripted_model_server([reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"})),
                                    reply(text("Done."))])
    logs = tmp_path / "logs"
    first = await make_agent(server, conversation_store=False, log_dir=logs).execute("Write a.txt", cwd=repo)
    assert first.status is CodingStatus.COMPLETED, first.error
    assert not cache.exists() and not (logs / "conversations").exists()
    again = await make_agent(server, conversation_store=False).execute("Go on", cwd=repo, resume=first.session_id)
    assert again.status is CodingStatus.ERROR and "conversation_store=False" in again.error


@agent_test
async def test_a_store_of_your_own(scripted_model_server, repo, cache, tmp_path):
    mine = FileConversationStore(tmp_path / "mine", durable=False)
    server = scripted_model_server([reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"})),
                                    reply(text("Done.")), reply(text("Still here."))])
    first = await make_agent(server, conversation_store=mine).execute("Write a.txt", cwd=repo)
    assert first.status is CodingStatus.COMPLETED, first.error
    assert mine.session_ids() == [first.session_id] and not cache.exists()
    second = await make_agent(server, conversation_store=mine).execute("And now?", cwd=repo,
                                                                       resume=first.session_id, require_changes=False)
    assert second.status is CodingStatus.COMPLETED, second.error
    assert "Write a.txt" in request_text(server, 2)
    with pytest.raises(ConfigurationError, match="conversation_store takes a folder path"):
        AutonomousCodingAgent(backend="anthropic-sdk", api_key=KEYS["anthropic-sdk"], conversation_store=42)


async def test_a_store_named_by_url(scripted_model_server, repo, cache, tmp_path):
    """conversation_store="sqlite:///..." (or redis://, or a folder) goes through open_store."""
    from agenter.store import SQLiteConversationStore

    database = tmp_path / "conversations.db"
    server = scripted_model_server([reply(text("Noted.")), reply(text("Still here."))])
    url = f"sqlite://{database}"
    first = await make_agent(server, conversation_store=url).execute("Remember 42.", cwd=repo,
                                                                     require_changes=False)
    assert first.status is CodingStatus.COMPLETED, first.error
    with SQLiteConversationStore(database) as store:
        assert store.session_ids() == [first.session_id]
    second = await make_agent(server, conversation_store=url).execute("What was it?", cwd=repo,
                                                                      resume=first.session_id, require_changes=False)
    assert second.status is CodingStatus.COMPLETED, second.error
    assert "Remember 42." in request_text(server, 1) and not cache.exists()
    with pytest.raises(ConfigurationError, match="sqlite"):
        AutonomousCodingAgent(backend="anthropic-sdk", api_key=KEYS["anthropic-sdk"],
                              conversation_store="postgres://db/conversations")


class FullDisk(FileConversationStore):
    """A store whose appends fail, as on a full disk."""

    def append(self, session_id: str, messages: Any, **kwargs: Any) -> int:
        raise StoreError(f"cannot append to {self.path(session_id)}: No space left on device")


@agent_test
async def test_a_store_that_cannot_be_written_ends_the_run_naming_it(scripted_model_server, repo, tmp_path):
    store = FullDisk(tmp_path / "full", durable=False)
    server = scripted_model_server([reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"})),
                                    reply(text("Done."))])
    result = await make_agent(server, conversation_store=store).execute("Write a.txt", cwd=repo)
    assert result.status is CodingStatus.ERROR
    assert "No space left on device" in result.error and str(tmp_path / "full") in result.error


@agent_test
async def test_a_log_dir_inside_the_workspace_is_not_a_change(scripted_model_server, repo):
    server = scripted_model_server([reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"})),
                                    reply(text("Done."))])
    result = await make_agent(server, log_dir=repo / "runs").execute("Write a.txt", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert (repo / "runs" / "conversations" / f"{result.session_id}.jsonl").exists()
    assert result.files == {"a.txt": "a\n"}


@agent_test
async def test_resumed_from_a_transcript_elsewhere_the_new_run_keeps_it_beside_its_own(scripted_model_server, repo,
                                                                                       tmp_path):
    old_logs, new_logs = tmp_path / "old", tmp_path / "new"
    server = scripted_model_server([reply(tool_call("write_file", {"path": "a.txt", "content": "a\n"})),
                                    reply(text("Done.")), reply(text("Continued."))])
    first = await make_agent(server, log_dir=old_logs).execute("Write a.txt", cwd=repo)
    (transcript,) = old_logs.glob("*.jsonl")
    before = FileConversationStore(old_logs / "conversations").load(first.session_id)
    second = await make_agent(server, log_dir=new_logs).execute("Go on", cwd=repo, resume=transcript,
                                                                require_changes=False)
    assert second.status is CodingStatus.COMPLETED, second.error
    assert "Write a.txt" in request_text(server, 2)
    moved = FileConversationStore(new_logs / "conversations").load(first.session_id)
    assert moved is not None and "Continued." in json.dumps(moved.messages) and "Write a.txt" in json.dumps(moved.messages)
    assert FileConversationStore(old_logs / "conversations").load(first.session_id) == before  # left as it was


# ---------------------------------------------------------------------------------------------
# The keeper, on a real file store


def user(text_: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text_}]}


def assistant(text_: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text_}]}


def lines(store: FileConversationStore, session_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.path(session_id).read_text().splitlines()]


async def test_the_keeper_appends_what_changed_and_saves_a_rewritten_history(tmp_path):
    store = FileConversationStore(tmp_path, durable=False)
    keeper = ConversationKeeper(store, "s1", {"backend": "anthropic-sdk"})
    messages = [user("one")]
    await keeper.keep(messages)
    messages += [assistant("two"), user("three")]
    await keeper.keep(messages)
    await keeper.keep(messages)  # nothing changed: nothing written
    messages[-1] = {"role": "user", "content": [*messages[-1]["content"], {"type": "text", "text": "four"}]}
    await keeper.keep(messages)  # the last message merged into: rewritten from there
    assert [(r.get("at"), r["n"], r["rev"]) for r in lines(store, "s1")] == [(None, 1, 1), (1, 3, 2), (2, 3, 3)]
    messages[:] = [user("[summary] one two three four"), assistant("five")]  # a compaction
    await keeper.keep(messages)
    records = lines(store, "s1")
    assert len(records) == 1 and records[0]["rev"] == 4 and records[0]["n"] == 2  # one snapshot
    assert store.load("s1").messages == messages


async def test_two_writers_of_one_conversation_conflict_rather_than_interleave(tmp_path):
    store = FileConversationStore(tmp_path, durable=False)
    await ConversationKeeper(store, "s1", {}).keep([user("one"), assistant("two")])
    loaded = await load(store, "s1", backend="anthropic-sdk", redact=Redactor())
    assert loaded is not None
    messages, conversation = loaded
    first = ConversationKeeper(store, "s1", {}, stored=conversation.messages, revision=conversation.revision)
    second = ConversationKeeper(store, "s1", {}, stored=conversation.messages, revision=conversation.revision)
    await first.keep([*messages, user("from the first")])
    with pytest.raises(ConversationConflictError):
        await second.keep([*messages, user("from the second")])


async def test_a_stored_conversation_is_checked_before_it_is_continued(tmp_path):
    store = FileConversationStore(tmp_path, durable=False)
    half = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]}
    store.save("half", [user("go"), half])
    loaded = await load(store, "half", backend="anthropic-sdk", redact=Redactor())
    assert loaded is not None
    messages, _ = loaded
    assert messages[-1]["role"] == "user" and messages[-1]["content"][0]["tool_use_id"] == "t1"
    store.save("broken", [user("go"), {"text": "not a message"}])
    with pytest.raises(ConfigurationError, match="message 1 is not a"):
        await load(store, "broken", backend="anthropic-sdk", redact=Redactor())
    store.save("twice", [user("a"), user("b")])
    with pytest.raises(ConfigurationError, match="two user messages in a row"):
        await load(store, "twice", backend="anthropic-sdk", redact=Redactor())
