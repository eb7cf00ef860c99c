"""MCP servers in agenter's own agent (model_api/_harness/mcptools.py): real MCP server processes
(mcp_notes_server.py beside this file, on the `mcp` package's MCPServer) over stdio and streamable
HTTP, the real anthropic-sdk, gemini and openai (Chat Completions and Responses) backends against
the scripted model server. Each call goes through the permission gate; a stdio server not on the
allow-list is never started; no server outlives its session (checked by pid)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agenter import AutonomousCodingAgent, CodingStatus
from agenter.backends._mcp import MCPServer
from agenter.backends.agents.codex._options import CodexMCPServer
from agenter.backends.model_api._harness.mcptools import model_name, result_text
from agenter.backends.model_api.anthropic_sdk import AnthropicSDKOptions
from agenter.host import _pids
from agenter.testing import reply, text, tool_call

pytest.importorskip("mcp")

SERVER = Path(__file__).parent / "mcp_notes_server.py"
API_KEY = "sk-test-SUPERSECRET-mcp-0123456789"
ALLOW_NOTES = {"mode": "bypass", "allowed_mcp_servers": ["notes"]}
#: Every test here starts Python programs that import the mcp package: slow on a loaded machine.
pytestmark = pytest.mark.timeout(300)
agent_test = pytest.mark.agent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


def notes(pid_file: Path, **extra: Any) -> dict[str, Any]:
    """The stdio notes server, writing its pid to `pid_file`."""
    return {"name": "notes", "command": sys.executable, "args": [str(SERVER)],
            "env": {"NOTES_PID_FILE": str(pid_file)}, **extra}


def make_agent(server: Any, backend: str = "anthropic-sdk", **kwargs: Any) -> AutonomousCodingAgent:
    key = API_KEY if backend == "anthropic-sdk" else "AIza-test-SUPERSECRET-mcp-0123456789"
    return AutonomousCodingAgent(backend=backend, base_url=server.base_url, api_key=key, **kwargs)


def tool_results(server: Any) -> dict[str, dict[str, Any]]:
    """The Anthropic-wire tool_result blocks the model was sent, by tool_use id (last request)."""
    found = {}
    for message in server.model_requests[-1].body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                found[block["tool_use_id"]] = block
    return found


def results_by_tool(server: Any) -> dict[str, dict[str, Any]]:
    calls = {}
    for message in server.model_requests[-1].body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_use":
                calls[block["id"]] = block["name"]
    return {calls[tool_id]: block for tool_id, block in tool_results(server).items()}


def offered(server: Any, index: int = 0) -> list[str]:
    return [tool["name"] for tool in server.model_requests[index].body["tools"]]


def assert_gone(pid_file: Path) -> int:
    """The server's pid, once it has exited (no process left by the session)."""
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _pids.is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _pids.is_alive(pid)
    if left:
        _pids.kill({pid})  # the test fails, and leaves nothing running either
    assert not left, f"the MCP server {pid} outlived its session"
    return pid


# ---------------------------------------------------------------------------------------------
# stdio


@agent_test
async def test_a_stdio_servers_tools_are_offered_called_and_answered(scripted_model_server, repo, tmp_path):
    pid_file, child_file = tmp_path / "notes.pid", tmp_path / "child.pid"
    server = scripted_model_server([
        reply(tool_call("mcp__notes__add", {"a": 2, "b": 3}), tool_call("mcp__notes__picture", {})),
        reply(tool_call("mcp__notes__write_note", {"text": "hello"})),
        reply(tool_call("mcp__notes__fail", {"why": "testing"})),
        reply(text("Done.")),
    ])
    helper = notes(pid_file)
    helper["env"]["NOTES_CHILD_PID_FILE"] = str(child_file)
    result = await make_agent(server, mcp_servers=[helper], permissions=ALLOW_NOTES).execute(
        "Use the notes tools", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    # The server wrote the file in the session's folder; the run reports it like any change.
    assert (repo / "notes.txt").read_text() == "hello" and result.files == {"notes.txt": "hello"}
    tools = {tool["name"]: tool for tool in server.model_requests[0].body["tools"]}
    assert {"mcp__notes__add", "mcp__notes__write_note", "mcp__notes__fail", "mcp__notes__picture"} <= set(tools)
    assert tools["mcp__notes__add"]["description"].startswith("Add two integers.")
    assert tools["mcp__notes__add"]["input_schema"]["required"] == ["a", "b"]
    answers = results_by_tool(server)
    assert answers["mcp__notes__add"]["content"] == "5" and not answers["mcp__notes__add"].get("is_error")
    assert answers["mcp__notes__write_note"]["content"] == "wrote 5 characters to notes.txt"
    picture = answers["mcp__notes__picture"]["content"]
    assert picture.startswith("[image (image/png, about") and "not shown" in picture
    assert picture.endswith("a one-pixel picture")
    assert answers["mcp__notes__fail"]["is_error"] is True
    assert "failed on purpose: testing" in answers["mcp__notes__fail"]["content"]
    # Nothing outlives the session: the server, and the helper it started outside its group.
    assert_gone(pid_file)
    assert_gone(child_file)


@agent_test
async def test_a_deny_rule_refuses_the_tool_and_the_run_goes_on(scripted_model_server, repo, tmp_path):
    pid_file = tmp_path / "notes.pid"
    server = scripted_model_server([
        reply(tool_call("mcp__notes__write_note", {"text": "nope"})),
        reply(tool_call("mcp__notes__add", {"a": 1, "b": 1})),
        reply(text("Could not write the note; 1 + 1 = 2.")),
    ])
    policy = {**ALLOW_NOTES, "rules": ["deny mcp:notes/write_note"]}
    result = await make_agent(server, mcp_servers=[notes(pid_file)], permissions=policy).execute(
        "Write a note, then add", cwd=repo, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert not (repo / "notes.txt").exists()
    # A tool every call of which a rule denies is not offered; a call to it anyway is refused.
    assert "mcp__notes__write_note" not in offered(server) and "mcp__notes__add" in offered(server)
    answers = results_by_tool(server)
    assert answers["mcp__notes__write_note"]["is_error"] is True
    assert "Permission denied by the rule 'deny mcp:notes/write_note'" in answers["mcp__notes__write_note"]["content"]
    assert answers["mcp__notes__add"]["content"] == "2"
    assert [(d["tool"], d["rule"]) for d in result.permission_denials] == [
        ("notes/write_note", "deny mcp:notes/write_note")]
    assert_gone(pid_file)


@agent_test
@pytest.mark.parametrize("permissions", [None, "bypass", {"mode": "bypass", "allowed_mcp_servers": ["other"]},
                                         {**ALLOW_NOTES, "rules": ["deny mcp:notes"]}],
                         ids=["no-policy", "bypass", "another-listed", "deny-rule"])
async def test_an_unlisted_stdio_server_is_never_started(scripted_model_server, repo, tmp_path, permissions):
    pid_file = tmp_path / "notes.pid"
    server = scripted_model_server([reply(text("never asked"))])
    result = await make_agent(server, mcp_servers=[notes(pid_file)], permissions=permissions).execute(
        "Use the notes", cwd=repo)
    assert result.status is CodingStatus.ERROR
    assert "the MCP server 'notes' was not started" in result.error and "allowed_mcp_servers" in result.error
    assert not pid_file.exists()  # the program never ran
    assert not server.model_requests  # nor did the model
    assert result.permission_denials and result.permission_denials[0]["tool"] == "start MCP server notes"


@agent_test
async def test_someone_asked_may_let_an_unlisted_server_start(scripted_model_server, repo, tmp_path):
    pid_file = tmp_path / "notes.pid"
    asked = []

    def answer(request: Any) -> bool:
        asked.append(request)
        return True

    server = scripted_model_server([reply(tool_call("mcp__notes__add", {"a": 4, "b": 5})), reply(text("9"))])
    result = await make_agent(server, mcp_servers=[notes(pid_file)], on_permission=answer).execute(
        "Add", cwd=repo, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert len(asked) == 1 and "notes" in str(asked[0])  # the start, asked once (the add is read-only)
    assert results_by_tool(server)["mcp__notes__add"]["content"] == "9"
    assert_gone(pid_file)


@agent_test
async def test_a_read_only_session_is_offered_only_the_read_only_tools(scripted_model_server, repo, tmp_path):
    pid_file = tmp_path / "notes.pid"
    server = scripted_model_server([reply(tool_call("mcp__notes__add", {"a": 1, "b": 2})), reply(text("It is 3."))])
    agent = make_agent(server, mode="analysis", mcp_servers=[notes(pid_file)], permissions=ALLOW_NOTES)
    result = await agent.execute("What is 1 + 2?", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    tools = offered(server)
    assert {"mcp__notes__add", "mcp__notes__fail", "mcp__notes__picture"} <= set(tools)
    assert "mcp__notes__write_note" not in tools
    assert results_by_tool(server)["mcp__notes__add"]["content"] == "3"
    assert_gone(pid_file)


@agent_test
async def test_a_server_that_does_not_start_is_a_clear_error(scripted_model_server, repo, tmp_path):
    server = scripted_model_server([reply(text("never asked"))])
    missing = {"name": "notes", "command": str(tmp_path / "no-such-program")}
    result = await make_agent(server, mcp_servers=[missing], permissions=ALLOW_NOTES).execute("Go", cwd=repo)
    assert result.status is CodingStatus.ERROR and "the MCP server 'notes' did not start" in result.error
    # One that dies at once: its stderr is in the error.
    dying = {"name": "notes", "command": sys.executable,
             "args": ["-c", "import sys; print('cannot open the database', file=sys.stderr); sys.exit(3)"]}
    result = await make_agent(server, mcp_servers=[dying], permissions=ALLOW_NOTES).execute("Go", cwd=repo)
    assert result.status is CodingStatus.ERROR and "the MCP server 'notes' did not start" in result.error
    assert "cannot open the database" in result.error
    assert not server.model_requests


@agent_test
async def test_gemini_calls_mcp_tools(scripted_model_server, repo, tmp_path):
    pid_file = tmp_path / "notes.pid"
    server = scripted_model_server([
        reply(tool_call("mcp__notes__add", {"a": 20, "b": 22})),
        reply(tool_call("mcp__notes__write_note", {"text": "from gemini"})),
        reply(text("Done.")),
    ])
    result = await make_agent(server, "gemini", mcp_servers=[notes(pid_file)], permissions=ALLOW_NOTES).execute(
        "Use the notes tools", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"notes.txt": "from gemini"}
    body = server.model_requests[-1].body
    declared = [f["name"] for tool in body["tools"] for f in tool.get("functionDeclarations", [])]
    assert "mcp__notes__add" in declared and "mcp__notes__write_note" in declared
    responses = [part["functionResponse"] for content in body["contents"] for part in content["parts"]
                 if "functionResponse" in part]
    assert "42" in json.dumps(responses[0]) and "wrote 11 characters" in json.dumps(responses[1])
    assert_gone(pid_file)


@agent_test
@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_openai_calls_mcp_tools_on_both_wires(scripted_model_server, repo, tmp_path, wire):
    pid_file = tmp_path / "notes.pid"
    server = scripted_model_server([
        reply(tool_call("mcp__notes__add", {"a": 20, "b": 22})),
        reply(tool_call("mcp__notes__write_note", {"text": "from openai"})),
        reply(text("Done.")),
    ])
    agent = AutonomousCodingAgent(backend="openai", model="scripted-model", base_url=server.openai_base_url,
                                  api_key="sk-test-SUPERSECRET-mcp-openai-0123", openai_wire=wire,
                                  mcp_servers=[notes(pid_file)], permissions=ALLOW_NOTES)
    result = await agent.execute("Use the notes tools", cwd=repo)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert result.files == {"notes.txt": "from openai"}
    first, last = server.model_requests[0].body, server.model_requests[-1].body
    if wire == "chat":
        declared = [tool["function"]["name"] for tool in first["tools"]]
        answers = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    else:
        declared = [tool["name"] for tool in first["tools"]]
        answers = [item["output"] for item in last["input"] if item.get("type") == "function_call_output"]
    assert "mcp__notes__add" in declared and "mcp__notes__write_note" in declared
    assert answers == ["42", "wrote 11 characters to notes.txt"]
    assert_gone(pid_file)


def test_openai_refuses_mcp_servers_on_its_context_path(tmp_path):
    from agenter._errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="MCP servers run in agenter's own agent, not on the context path"):
        AutonomousCodingAgent(backend="openai", model="m", api_key="k", mode="analysis",
                              mcp_servers=[notes(tmp_path / "x.pid")])
    # With openai_context="tools" analysis runs the agent, which takes them.
    AutonomousCodingAgent(backend="openai", model="m", api_key="k", mode="analysis", openai_context="tools",
                          mcp_servers=[notes(tmp_path / "x.pid")])


# ---------------------------------------------------------------------------------------------
# streamable HTTP


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_notes(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """The notes server over streamable HTTP, needing a bearer token: (url, token, its folder)."""
    port, token = _free_port(), "notes-token-SUPERSECRET-42"
    folder = tmp_path / "http-server"
    folder.mkdir()
    process = subprocess.Popen([sys.executable, str(SERVER), "streamable-http", str(port), token], cwd=folder,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the HTTP notes server did not start: {process.stderr.read()!r}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", token, folder
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        process.stderr.close()


@agent_test
async def test_a_streamable_http_server_with_a_bearer_token(scripted_model_server, repo, http_notes, monkeypatch):
    url, token, folder = http_notes
    monkeypatch.setenv("NOTES_MCP_BEARER", token)
    server = scripted_model_server([
        reply(tool_call("mcp__remote__add", {"a": 40, "b": 2})),
        reply(tool_call("mcp__remote__write_note", {"text": "over http"})),
        reply(text("Done.")),
    ])
    remote = {"name": "remote", "url": url, "bearer_token_env_var": "NOTES_MCP_BEARER"}
    # No allow-list is needed: nothing is started on this machine.
    result = await make_agent(server, mcp_servers=[remote], permissions="bypass").execute(
        "Use the remote tools", cwd=repo, require_changes=False)
    assert result.status is CodingStatus.COMPLETED, result.error
    answers = results_by_tool(server)
    assert answers["mcp__remote__add"]["content"] == "42"
    assert answers["mcp__remote__write_note"]["content"] == "wrote 9 characters to notes.txt"
    assert (folder / "notes.txt").read_text() == "over http"  # in the server's folder, not the session's
    # A wrong token: the server refuses, the run says which server, and never shows the token.
    monkeypatch.setenv("NOTES_MCP_BEARER", "wrong-token-SUPERSECRET-43")
    result = await make_agent(server, mcp_servers=[remote], permissions="bypass").execute("Again", cwd=repo)
    assert result.status is CodingStatus.ERROR and "the MCP server 'remote' did not start" in result.error
    assert "wrong-token-SUPERSECRET-43" not in result.error
    # A token variable that is not set is found before anything starts.
    monkeypatch.delenv("NOTES_MCP_BEARER")
    result = await make_agent(server, mcp_servers=[remote], permissions="bypass").execute("Again", cwd=repo)
    assert result.status is CodingStatus.ERROR and "NOTES_MCP_BEARER" in result.error


# ---------------------------------------------------------------------------------------------
# options and conversions


def test_the_option_takes_one_shape_for_every_backend():
    server = MCPServer(name="notes", command="python", args=["s.py"], env={"API_TOKEN": "tok-123456789"},
                       http_headers={"Accept": "x"})
    assert server.transport == "stdio" and server.command_line() == "python s.py"
    assert server.secrets() == ["tok-123456789"]
    http = MCPServer(name="remote", url="http://h/mcp", http_headers={"Authorization": "Bearer abcdefgh"})
    assert http.transport == "http" and http.secrets() == ["Bearer abcdefgh"]
    for bad in ({"name": "x"}, {"name": "x", "command": "c", "url": "u"}, {"name": "a b", "command": "c"}):
        with pytest.raises(ValidationError):
            MCPServer(**bad)
    with pytest.raises(ValidationError, match="duplicate MCP server names: notes"):
        AnthropicSDKOptions(mcp_servers=[{"name": "notes", "command": "a"}, {"name": "notes", "command": "b"}])
    # Codex takes the same shape, plus how Codex approves the tools.
    codex = CodexMCPServer(name="notes", command="python", args=["s.py"], tools_approval_mode="prompt")
    assert codex.to_config() == {"command": "python", "args": ["s.py"], "default_tools_approval_mode": "prompt"}


def test_tool_names_fit_every_model_api():
    assert model_name("notes", "add", set()) == "mcp__notes__add"
    assert model_name("gh", "issues.list/all", set()) == "mcp__gh__issues_list_all"
    long = model_name("server", "t" * 80, set())
    assert len(long) == 64 and long.startswith("mcp__server__ttt")
    clash = model_name("notes", "add", {"mcp__notes__add"})
    assert clash != "mcp__notes__add" and len(clash) <= 64
    assert model_name("a", "b.c", set()) != model_name("a", "b_c", {"mcp__a__b_c"})


def test_results_read_as_text():
    from mcp.types import (
        CallToolResult,
        EmbeddedResource,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    result = CallToolResult(content=[
        TextContent(type="text", text="one"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a.txt", text="inside")),
        ResourceLink(type="resource_link", uri="file:///b.txt", name="b"),
    ])
    assert result_text(result) == "one\ninside\n[resource link: file:///b.txt (b)]"
    assert result_text(CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'
    assert result_text(CallToolResult(content=[])) == "(the tool returned no content)"
