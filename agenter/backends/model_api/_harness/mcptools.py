"""MCP servers as a toolset of agenter's own agent, through the `mcp` package (imported only
when servers are configured).

At connect, every stdio server is first put to the permission gate as the start of a program
(`ToolCall.mcp_server_start`): the gate's bypass-immune `mcp-stdio` check asks for (and, with no
one to ask, refuses) a server not in the policy's `allowed_mcp_servers`, and a `deny mcp:<name>`
rule refuses it; a refused server fails the connect with a ConfigurationError before any server
has started. Then every server is started (stdio: its own process group, carrying a process
mark; streamable HTTP: one HTTP client) and its tools listed, within its startup timeout.

Each tool is offered to the model as `mcp__<server>__<tool>` (characters the model APIs do not
take become `_`; a name over 64 characters is cut and given a hash), and each call is a
`ToolCall.mcp(server, tool, input, read_only=...)` the gate judges (`mcp:<server>/<tool>` rules;
read-only when the server annotates the tool `readOnlyHint`). A read-only session (analysis,
patch, plan mode) is offered only the read-only tools, and a tool a deny rule covers is not
offered at all (a call to it anyway is refused by the gate). Results: text as it is, images and
audio as a note, resources as their text or a note, structured content as JSON; the server's
error flag is the result's; a failed call (the server gone, a timeout) is an error result the
model reads, never a failed turn. Oversize results go to the run's folder like any tool's.

The `mcp` client's contexts are entered and left in one task per server (anyio's cancel scopes
belong to the task that entered them; connect and disconnect may run in different tasks), which
waits for disconnect. At disconnect each task leaves its client (stdio: stdin closed, the group
terminated after a grace, then killed) and whatever still carries a server's mark is killed
(agenter.host.reap), so no server outlives the session.

Limits: a stdio server runs as the user configured it, outside the bash tool's sandbox, with a
minimal environment (HOME, PATH, SHELL, TERM, USER, LOGNAME) plus its `env`; the harness offers
tools only (no resources, prompts, sampling or elicitation).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agenter._errors import BackendError, ConfigurationError
from agenter.backends.base import ToolReply
from agenter.backends.model_api._harness.builtin import BuiltinSpec
from agenter.host.process import marked_env, reap
from agenter.permissions import ToolCall

if TYPE_CHECKING:
    from agenter.backends._mcp import MCPServer
    from agenter.backends.model_api._harness.loop import HarnessBackend
    from agenter.tools.spec import ToolSpec

__all__ = ["MCPTool", "MCPToolset", "model_name", "result_text"]

#: Seconds a server may take to start and list its tools (its startup_timeout_sec overrides).
STARTUP_TIMEOUT = 30.0
#: Seconds one tool call may take (its server's tool_timeout_sec overrides).
TOOL_TIMEOUT = 120.0
#: Seconds a server's task may take to leave its client at disconnect (the mcp stdio client
#: gives a server 2 s after its stdin closes, then 2 s after SIGTERM) before it is cancelled.
CLOSE_TIMEOUT = 6.0
#: A result longer than this is cut (the executor saves one over RESULT_CHARS to a file).
RESULT_LIMIT = 1_000_000
#: Characters of a server's stderr named in a start failure.
STDERR_TAIL = 2000
#: Longest tool name the model APIs take.
NAME_LIMIT = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclasses.dataclass(frozen=True)
class MCPTool:
    """One tool of one server, as the model sees it and as the server names it."""

    name: str
    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def spec(self, max_result_chars: int) -> ToolSpec:
        server, tool, read_only = self.server, self.tool, self.read_only

        def to_call(name: str, arguments: Mapping[str, Any]) -> ToolCall:
            return ToolCall.mcp(server, tool, arguments, read_only=read_only)

        return BuiltinSpec(kind="mcp", read_only=read_only, concurrency_safe=read_only,
                           max_result_chars=max_result_chars, mcp_server=server, to_call=to_call)


def model_name(server: str, tool: str, taken: set[str]) -> str:
    """`mcp__<server>__<tool>` in the characters every model API takes, at most 64 of them, and
    not in `taken` (a cut or clashing name ends in a hash of the server and tool)."""
    name = f"mcp__{server}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= NAME_LIMIT and name not in taken:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
    return f"{name[:NAME_LIMIT - 9]}_{digest}"


def result_text(result: Any) -> str:
    """A CallToolResult as the text the model reads (see the module docstring)."""
    parts = [_content_text(block) for block in result.content or []]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(part for part in parts if part) or "(the tool returned no content)"
    if len(text) > RESULT_LIMIT:
        text = text[:RESULT_LIMIT] + f"\n[... {len(text) - RESULT_LIMIT} more characters cut]"
    return text


def _content_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(block.data or "") * 3 // 4
        return f"[{kind} ({block.mime_type}, about {size} bytes): not shown; this agent reads text only]"
    if kind == "resource":
        contents = block.resource
        text = getattr(contents, "text", None)
        if isinstance(text, str):
            return text
        return f"[binary resource {contents.uri} ({contents.mime_type or 'unknown type'}): not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}{f' ({block.name})' if block.name else ''}]"
    return f"[content of type {kind!r}: not shown]"


@dataclasses.dataclass
class _Connection:
    """One server: the task that holds its client, and what the task shares."""

    server: MCPServer
    stop: asyncio.Event
    ready: asyncio.Future[list[Any]]
    task: asyncio.Task[None] | None = None
    client: Any = None
    mark: str | None = None
    errlog: IO[str] | None = None
    errlog_path: Path | None = None


class MCPToolset:
    """The session's MCP servers and their tools (see the module docstring)."""

    def __init__(self, backend: HarnessBackend[Any], servers: tuple[MCPServer, ...], log_dir: Path):
        self.backend = backend
        self.servers = servers
        self.tools: dict[str, MCPTool] = {}
        self._log_dir = log_dir
        self._connections: dict[str, _Connection] = {}

    # ------------------------------------------------------------------ connect
    async def open(self, taken: set[str]) -> None:
        """Ask the gate for every stdio server, then start them all and list their tools.
        ConfigurationError for a refused server or bad settings, BackendError for a server that
        does not start; what was started is ended before either is raised."""
        backend = self.backend
        for server in self.servers:
            backend.redact.add(*server.secrets())
            if server.bearer_token_env_var:
                backend.redact.add(os.environ.get(server.bearer_token_env_var))
        for server in self.servers:
            if server.transport == "stdio":
                await self._permit_start(server)
            elif server.bearer_token_env_var and not os.environ.get(server.bearer_token_env_var):
                raise ConfigurationError(
                    f"MCP server {server.name!r}: the environment variable {server.bearer_token_env_var} "
                    "(bearer_token_env_var) is not set", parameter="mcp_servers")
        # The first import of the client takes seconds on a busy machine: off the event loop.
        await asyncio.to_thread(importlib.import_module, "mcp.client.streamable_http")
        try:
            for server in self.servers:
                self._connections[server.name] = self._start(server)
            for connection in self._connections.values():
                await self._await_ready(connection, taken)
        except BaseException:
            await self.close()
            raise

    async def _permit_start(self, server: MCPServer) -> None:
        decision = await self.backend.permit(ToolCall.mcp_server_start(server.name, server.command_line()))
        if not decision.allowed:
            raise ConfigurationError(
                f"the MCP server {server.name!r} was not started: {decision.reason} A stdio server starts only "
                f"when the permission policy lists it (permissions={{'mode': ..., 'allowed_mcp_servers': "
                f"['{server.name}']}}, or the line 'mcp-server {server.name}' in its text form) or "
                "on_permission allows it", parameter="permissions")

    def _start(self, server: MCPServer) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = _Connection(server=server, stop=asyncio.Event(), ready=loop.create_future())
        connection.task = asyncio.create_task(self._serve(connection), name=f"agenter-mcp-{server.name}")
        return connection

    async def _await_ready(self, connection: _Connection, taken: set[str]) -> None:
        server = connection.server
        timeout = server.startup_timeout_sec or STARTUP_TIMEOUT
        try:
            listed = await asyncio.wait_for(asyncio.shield(connection.ready), timeout)
        except TimeoutError:
            raise self._start_failure(connection, f"no answer within {timeout:g} s (startup_timeout_sec)",
                                      "transient") from None
        except Exception as exc:  # noqa: BLE001 - becomes the BackendError that names the server
            kind = "missing_program" if isinstance(exc, FileNotFoundError) else "config"
            raise self._start_failure(connection, _describe(exc), kind) from None
        enabled = None if server.enabled_tools is None else set(server.enabled_tools)
        for tool in listed:
            if enabled is not None and tool.name not in enabled:
                continue
            name = model_name(server.name, tool.name, taken)
            taken.add(name)
            annotations = tool.annotations
            read_only = bool(annotations is not None and annotations.read_only_hint)
            schema = dict(tool.input_schema or {}) or {"type": "object", "properties": {}}
            description = (tool.description or tool.title or tool.name).strip()
            self.tools[name] = MCPTool(name=name, server=server.name, tool=tool.name,
                                       description=f"{description}\n(MCP server {server.name!r}, tool {tool.name!r})",
                                       input_schema=schema, read_only=read_only)

    def _start_failure(self, connection: _Connection, why: str, kind: str) -> BackendError:
        backend = self.backend
        tail = _tail(connection.errlog_path)
        return BackendError(backend.redact(f"the MCP server {connection.server.name!r} did not start: {why}"),
                            backend=backend.name, kind=kind, stderr_tail=backend.redact(tail) if tail else None)

    # ------------------------------------------------------------------ the task that holds a client
    async def _serve(self, connection: _Connection) -> None:
        """Enter the client, list its tools, wait for close(), leave the client: all in this task."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._client(connection, stack)
                await stack.enter_async_context(client)
                listed = await _list_tools(client)
                connection.client = client
                if not connection.ready.done():
                    connection.ready.set_result(listed)
                await connection.stop.wait()
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits for the server
            if not connection.ready.done():
                connection.ready.set_exception(exc)
        finally:
            connection.client = None
            if not connection.ready.done():
                connection.ready.cancel()

    async def _client(self, connection: _Connection, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.types import Implementation

        from agenter._version import __version__

        server = connection.server
        info = Implementation(name="agenter", version=__version__)
        if server.transport == "stdio":
            env, connection.mark = marked_env(server.env)
            cwd = Path(self.backend.cwd, server.cwd) if server.cwd else self.backend.cwd
            path = connection.errlog_path = self._log_dir / f"mcp-{server.name}.stderr"
            connection.errlog = stack.enter_context(open(path, "w", encoding="utf-8", errors="replace"))
            params = StdioServerParameters(command=server.command or "", args=list(server.args), env=env, cwd=cwd)
            return Client(stdio_client(params, errlog=connection.errlog), client_info=info)
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        headers = dict(server.http_headers)
        if server.bearer_token_env_var:
            headers["Authorization"] = f"Bearer {os.environ.get(server.bearer_token_env_var, '')}"
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        return Client(streamable_http_client(server.url or "", http_client=http), client_info=info)

    # ------------------------------------------------------------------ calls
    def definitions(self, *, read_only: bool) -> list[dict[str, Any]]:
        """What the model is offered: every tool, or only the read-only ones, less those a deny
        rule covers."""
        policy = self.backend.settings.permissions
        return [tool.definition() for tool in self.tools.values()
                if (tool.read_only or not read_only)
                and not (policy is not None and policy.denies_tool("mcp", f"{tool.server}/{tool.tool}"))]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        """One tool call (it passed the gate): the server's answer, or an error the model reads."""
        tool = self.tools[name]
        connection = self._connections[tool.server]
        client = connection.client
        redact = self.backend.redact
        if client is None:
            return ToolReply(f"The MCP server {tool.server!r} is not running; its tools cannot be called now.",
                             is_error=True)
        timeout = connection.server.tool_timeout_sec or TOOL_TIMEOUT
        try:
            result = await client.call_tool(tool.tool, arguments, read_timeout_seconds=timeout)
        except Exception as exc:  # noqa: BLE001 - reported to the model, never lost
            return ToolReply(redact(f"The MCP server {tool.server!r} could not run {tool.tool}: {_describe(exc)}"),
                             is_error=True)
        return ToolReply(redact(result_text(result)), is_error=bool(result.is_error))

    # ------------------------------------------------------------------ disconnect
    async def close(self) -> None:
        """End every server (idempotent): each task leaves its client, a task that does not in
        time is cancelled, and whatever still carries a server's mark is killed."""
        connections = list(self._connections.values())
        self._connections = {}
        for connection in connections:
            connection.stop.set()
            if connection.task is not None and not connection.ready.done():
                connection.task.cancel()  # still starting: nothing to leave gracefully
        tasks = {c.task for c in connections if c.task is not None and not c.task.done()}
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=2.0)
        for connection in connections:
            if connection.ready.done() and not connection.ready.cancelled():
                connection.ready.exception()  # seen: a start failure was reported (or not needed)
            if connection.mark is not None:
                await reap(connection.mark)


async def _list_tools(client: Any) -> list[Any]:
    """Every page of the server's tools/list."""
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """An exception in one line; an exception group by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tail(path: Path | None) -> str:
    if path is None:
        return ""
    with contextlib.suppress(OSError):
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - STDERR_TAIL))
            return handle.read().decode("utf-8", "replace").strip()
    return ""
