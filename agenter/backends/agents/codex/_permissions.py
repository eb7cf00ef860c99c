"""Answers to the questions `codex app-server` asks (approvals, user input, MCP elicitations).

With a permission gate (`permit`), agenter starts every thread under the approval policy
"untrusted", so that Codex 0.169 asks before every command and every patch (found by experiment:
it asks even for `ls`; an approved command still runs in the workspace-write sandbox). Each
request is then decided in this order: what the user's `codex_approval_policy` and the sandbox
allow (the headless answers agenter always gave), then the permission gate. A declined call is
explained to the model: Codex's own decline says only "rejected by user", so the reason follows
as a `turn/steer` message that the model reads with the tool's result. Without a gate the
headless answers alone decide (docs/backends/codex.md has the table).

Approvals that can wait (docs/approvals.md): a call the gate defers is answered "cancel", with
which Codex itself ends the turn (turn/completed with status "interrupted", every call of that
model response given the output "aborted by user", and a `<turn_aborted>` note in the thread):
found by experiment with Codex 0.169, where "decline" only rejects the call and the turn goes on
with another model request, and `turn/interrupt` sent with the answer ends the turn too but
leaves a window in which Codex may ask the model again first. A later approval request of the
turn (a parallel call of the same response) is cancelled too, without asking the gate. A custom
tool the gate defers interrupts the turn (`turn/interrupt`) and answers with the gate's reason
only once the turn has ended (Codex gives the call "aborted by user"). Both are reported through
`Pausing.waiting` (the backend's pending calls); a continued run's answers come back through
`Pausing.repeated` when the model makes a paused call again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenter.backends._pauses import RepeatedCalls
from agenter.backends.agents.codex._events import pending_paths
from agenter.backends.agents.codex._rpc import AppServerConnection, Notification
from agenter.backends.agents.codex._tools_server import SERVER_NAME
from agenter.backends.base import ToolReply
from agenter.permissions import PermissionDecision, ToolCall
from agenter.tools import Tool
from agenter.tools.spec import ToolSpec

__all__ = ["DESCRIPTIVE_KEYS", "ENFORCED_KINDS", "GATED_POLICY", "NOT_RUN", "Answering", "Approvals", "Decision",
           "Pausing", "gate_call", "gated_tool", "protocol_policy"]

log = logging.getLogger("agenter.backends.agents.codex")

#: The rule kinds enforced: commands (shell, also the paths they read and write), patches
#: (edit) and agenter's custom tools. Not "network" (no tool of Codex is a network call agenter
#: sees; commands' network is the sandbox's business) nor "mcp" (extra MCP servers' tools run
#: without asking agenter).
ENFORCED_KINDS = frozenset({"read", "edit", "shell", "custom"})
#: The approval policy under which Codex asks agenter before every command and patch.
GATED_POLICY = "untrusted"
#: Input keys of a call Codex asks about that describe it rather than change it: the model's
#: justification (`reason`), which a paused call made again may word differently. A command is
#: its `command` (as Codex runs it: `/bin/bash -lc '...'`) and `cwd`; a patch its `changes`
#: (path, kind, diff); a custom tool its arguments.
DESCRIPTIVE_KEYS = frozenset({"reason"})
#: What the model reads for a custom tool call after the one the turn paused at.
NOT_RUN = ("Not run: the run paused at an earlier call of this response, which waits for a person's approval. "
           "You will be told when to go on.")
#: Codex's answer to a call the turn stops at: Codex ends the turn itself (see the module docstring).
STOP = {"decision": "cancel"}
#: Seconds a deferred custom tool call holds its answer back for the interrupted turn to end, so
#: the model never reads it in that turn.
STOP_WAIT = 10.0
#: Seconds a waiting custom tool call waits for Codex's announcement of it (item/started), which
#: names it by Codex's own id: the announcement and the call reach agenter on two connections,
#: so the call may come first.
ANNOUNCE_WAIT = 2.0


@dataclass(frozen=True)
class Decision:
    """One answer agenter gave: to which tool, about what, the verdict, and why.

    recorded: the permission gate already recorded it (a denial is in result.permission_denials).
    """

    approved: bool
    tool: str  # the Codex tool that asked: shell, apply_patch, ...
    what: str  # the request in words: "command 'rm -rf build'"
    why: str
    rule: str = ""
    recorded: bool = False

    @property
    def text(self) -> str:
        return f"agenter {'approved' if self.approved else 'declined'} {self.what}: {self.why}"


#: Receives each decision as it is made.
Report = Callable[[Decision], None]
#: Decides a call through the session's permission gate: permit(call, answer=..., defer=...)
#: (BaseBackend.permit; answer and defer only with a Pausing).
Permit = Callable[..., Awaitable[PermissionDecision]]
#: Records a call the turn stops before: (call id, tool, input, call, asked): `asked` for the call
#: the gate deferred, False for a later one.
Waiting = Callable[[str, str, dict[str, Any], ToolCall, bool], Any]
#: Tells the model why a call was declined, in the running turn: (thread id, turn id, text).
#: Awaited before the decline is sent, so Codex has the reason queued when the turn goes on.
Explain = Callable[[str, str, str], Awaitable[None]]


def protocol_policy(policy: str) -> str:
    """The approval policy as Codex's protocol spells it."""
    # Codex 0.15x+ dropped "on-failure" from its protocol; it behaves like "on-request" there.
    return "on-request" if policy == "on-failure" else policy


class Pausing:
    """Where a turn stops for calls that wait for a person, for one session (the module docstring).

    permit: the permission gate; waiting: records the calls the turn stops before (None: nothing
    pauses, a call the gate would defer is decided as before). `paused` says the turn stops, until
    `begin_turn`; `repeated` holds a continued run's answers. It also remembers the custom tool
    calls Codex announced (`observe`), so a paused one is named by Codex's own call id.
    """

    def __init__(self, permit: Permit, waiting: Waiting | None = None, *, announce_wait: float = ANNOUNCE_WAIT):
        self.permit = permit
        self.waiting = waiting
        self.paused = False
        self.repeated = RepeatedCalls(DESCRIPTIVE_KEYS)
        self._tool_calls: dict[str, tuple[str, Any]] = {}  # Codex's item id -> (tool, arguments)
        self._announced = asyncio.Event()  # set at each custom tool call Codex announces
        self._announce_wait = announce_wait
        self._unnamed = 0
        self._ended = asyncio.Event()

    def begin_turn(self) -> None:
        self.paused = False
        self._ended.clear()

    def end_turn(self) -> None:
        self._ended.set()

    async def turn_ended(self, timeout: float = STOP_WAIT) -> None:
        """Wait (bounded) until the running turn has ended."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), timeout)

    async def decide(self, call_id: str | Callable[[], Awaitable[str]], tool: str, data: dict[str, Any],
                     call: ToolCall) -> PermissionDecision | None:
        """The gate's decision for one call (a deferred one: the turn stops at it); None when an
        earlier call of the turn waits, so the turn stops before this one without asking.
        `call_id` may be a coroutine function, awaited only when the call waits."""
        if self.paused:
            await self._wait(call_id, tool, data, call, asked=False)
            return None
        decision = await self.permit(call, answer=self.repeated.take(tool, data), defer=self.waiting is not None)
        if decision.deferred:
            self.paused = True
            await self._wait(call_id, tool, data, call, asked=True)
        return decision

    async def _wait(self, call_id: str | Callable[[], Awaitable[str]], tool: str, data: dict[str, Any],
                    call: ToolCall, *, asked: bool) -> None:
        if self.waiting is not None:
            self.waiting(call_id if isinstance(call_id, str) else await call_id(), tool, data, call, asked)

    def observe(self, notification: Notification) -> None:
        """Remember agenter's custom tool calls while they run (in the reader, like Approvals.observe)."""
        item = notification.params.get("item") or {}
        if item.get("type") != "mcpToolCall" or item.get("server") != SERVER_NAME or not item.get("id"):
            return
        if notification.method == "item/started":
            self._tool_calls[item["id"]] = (str(item.get("tool")), item.get("arguments"))
            self._announced.set()
        elif notification.method == "item/completed":
            self._tool_calls.pop(item["id"], None)

    async def tool_call_id(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """Codex's id of the running custom tool call with this input, waiting (bounded) for
        Codex to announce it; else one of agenter's."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._announce_wait
        while True:
            for item_id, (name, given) in self._tool_calls.items():
                if name == tool and given == arguments:
                    return item_id
            left = deadline - loop.time()
            if left <= 0:
                break
            self._announced.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._announced.wait(), left)
        self._unnamed += 1
        return f"agenter-{tool}-{self._unnamed}"


class Approvals:
    """Decides Codex's server requests for one session.

    policy: the user's codex_approval_policy; sandbox: whether Codex's sandbox is on.
    permit: the permission gate (None: the headless answers alone, for a thread started under
        `policy` itself, where Codex asks only what that policy asks).
    explain: sends the model the reason for a declined call (with permit).
    pausing: where a call the gate defers stops the turn (with permit; None: the gate decides
        every call now).
    """

    def __init__(self, *, policy: str, sandbox: bool, cwd: Path, writable_roots: Sequence[Path],
                 report: Report | None = None, permit: Permit | None = None, explain: Explain | None = None,
                 pausing: Pausing | None = None):
        self.policy = policy
        self.sandbox = sandbox
        self.cwd = cwd
        self.writable_roots = list(writable_roots)
        self._report = report
        self._permit = permit
        self._explain = explain
        self._pausing = pausing
        self._pending: dict[str, list[dict[str, Any]]] = {}  # a pending patch's changes, by item id

    @property
    def thread_policy(self) -> str:
        """The approval policy the Codex thread is started with."""
        return GATED_POLICY if self._permit is not None else protocol_policy(self.policy)

    def observe(self, notification: Notification) -> None:
        """Runs in the reader, before any later approval request is answered: remember which
        files a pending patch touches (the approval request itself does not say)."""
        if notification.method == "item/started":
            item = notification.params.get("item") or {}
            if item.get("type") == "fileChange" and item.get("id"):
                self._pending[item["id"]] = [change for change in item.get("changes") or []
                                             if isinstance(change, dict)]
        elif notification.method == "item/completed":
            item = notification.params.get("item") or {}
            if item.get("type") == "fileChange":
                self._pending.pop(item.get("id") or "", None)

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """The reply to one server request (awaitable when the permission gate decides it);
        LookupError for a request agenter does not know."""
        if method == "item/commandExecution/requestApproval":
            command = str(params.get("command") or "")
            accept, why = self._command_decision(params)
            if self._permit is not None:
                data = _described(params, command=command, cwd=str(params.get("cwd") or ""))
                return self._gate(params, ToolCall.shell(command, name="shell"), "shell", f"command {command!r}",
                                  (accept, why), data)
            self._tell(accept, "shell", f"command {command!r}", why)
            return {"decision": "accept" if accept else "decline"}
        if method == "item/fileChange/requestApproval":
            accept, why = self._file_change_decision(params)
            changes = self._pending.get(params.get("itemId") or "", [])
            paths = pending_paths({"changes": changes})
            what = f"file change {', '.join(paths) or '(unknown paths)'}"
            if self._permit is not None:
                return self._gate(params, ToolCall.edit(*paths, name="apply_patch"), "apply_patch", what,
                                  (accept, why), _described(params, changes=changes))
            self._tell(accept, "apply_patch", what, why)
            return {"decision": "accept" if accept else "decline"}
        if method in ("execCommandApproval", "applyPatchApproval"):  # legacy v1 requests
            accept = not self.sandbox and self.policy != "untrusted" and self._permit is None
            self._tell(accept, method, method, "legacy approval request")
            return {"decision": "approved" if accept else "denied"}
        if method == "item/permissions/requestApproval":
            self._tell(False, "permissions", "extra permissions", "agenter grants no permissions beyond the sandbox")
            return {"permissions": {}, "scope": "turn"}
        if method == "item/tool/requestUserInput":
            self._tell(False, "request_user_input", "question to the user", "no human is available in a headless run")
            return {"answers": {}}
        if method == "mcpServer/elicitation/request":
            self._tell(False, "mcp_elicitation", f"MCP elicitation from {params.get('serverName')!r}",
                       "no human is available in a headless run")
            return {"action": "decline", "content": None}
        raise LookupError(method)

    async def _gate(self, params: dict[str, Any], call: ToolCall, tool: str, what: str,
                    headless: tuple[bool, str], data: dict[str, Any]) -> dict[str, Any]:
        """The sandbox rules' verdict (`headless`), then the permission gate's; a decline is
        explained to the model before it is sent. A call the gate defers (or any call once the
        turn stops) is cancelled, which ends Codex's turn. `data`: the call's input as the
        pending call and a repeated call are described."""
        assert self._permit is not None
        accept, why = headless
        pausing = self._pausing
        call_id = str(params.get("itemId") or "")
        if pausing is not None and pausing.paused:  # the turn ends at an earlier call that waits
            await pausing.decide(call_id, tool, data, call)
            return STOP
        if accept:
            decision = await (pausing.decide(call_id, tool, data, call) if pausing is not None else self._permit(call))
            if decision is None or decision.deferred:
                return STOP
            accept, why = decision.allowed, decision.reason
            self._tell(accept, tool, what, why, rule=decision.rule, recorded=True)
        else:
            self._tell(False, tool, what, why)
        thread, turn = params.get("threadId"), params.get("turnId")
        if not accept and self._explain is not None and thread and turn:
            await self._explain(str(thread), str(turn), f"The {what} was rejected by agenter: {why}")
        return {"decision": "accept" if accept else "decline"}

    def _command_decision(self, params: dict[str, Any]) -> tuple[bool, str]:
        if self.policy == "untrusted":
            return False, ("approval policy 'untrusted': only commands Codex itself trusts run; "
                           "nobody can vouch for this one in a headless run")
        if not self.sandbox:
            return True, "sandbox=False: commands already run with full access"
        if self._permit is None:
            # The thread runs under the user's policy: Codex asks only to leave its sandbox.
            return False, (f"approval policy {self.policy!r} with sandbox=True: Codex asks only to leave "
                           "its sandbox, and the sandbox stays closed")
        if params.get("reason") or params.get("additionalPermissions") or params.get("networkApprovalContext"):
            # Codex 0.169 sends the model's justification as `reason` when a command asks to run
            # outside the sandbox (or for network): an approval would lift the sandbox.
            return False, (f"sandbox=True: the command asks to run outside Codex's sandbox "
                           f"({params.get('reason') or 'extra permissions'}), and the sandbox stays closed")
        return True, "runs in Codex's sandbox"

    def _file_change_decision(self, params: dict[str, Any]) -> tuple[bool, str]:
        if params.get("grantRoot") and self.sandbox:
            return False, f"asks for write access to {params['grantRoot']!r} outside the workspace"
        paths = pending_paths({"changes": self._pending.get(params.get("itemId") or "", [])})
        if not self.sandbox:
            return True, "sandbox=False"
        if not paths:
            return False, "cannot tell which files the change touches"
        outside = [p for p in paths if not self._is_writable(p)]
        if outside:
            return False, f"outside the workspace: {', '.join(outside)}"
        return True, "every path is inside the workspace"

    def _is_writable(self, path: str) -> bool:
        absolute = Path(os.path.normpath(Path(path) if Path(path).is_absolute() else self.cwd / path))
        return any(absolute == root or root in absolute.parents for root in self.writable_roots)

    def _tell(self, accept: bool, tool: str, what: str, why: str, *, rule: str = "", recorded: bool = False) -> None:
        if self._report is not None:
            self._report(Decision(accept, tool, what, why, rule=rule, recorded=recorded))


class Answering(AppServerConnection):
    """An app-server connection whose request handler may answer later (a question to a person):
    such answers run in tasks of their own, so the reader and the turn go on meanwhile."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._answering: set[asyncio.Task[None]] = set()

    def _answer(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params") or {}
        try:
            result: Any = self._handle_request(method, params)
        except LookupError:
            self._reply(message["id"], error={"code": -32601, "message": f"{method} is not supported"})
            return
        except Exception as exc:
            log.exception("answering %s failed", method)
            self._reply(message["id"], error={"code": -32603, "message": str(exc)})
            return
        if not inspect.isawaitable(result):
            self._reply(message["id"], result=result)
            return
        task = asyncio.ensure_future(self._answer_later(message["id"], method, result))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer_later(self, request_id: Any, method: str, pending: Awaitable[dict[str, Any]]) -> None:
        try:
            result = await pending
        except Exception as exc:  # a failed decision is an error reply, never an approval
            log.exception("answering %s failed", method)
            self._reply(request_id, error={"code": -32603, "message": str(exc)})
            return
        self._reply(request_id, result=result)

    def _reply(self, request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> None:
        reply: dict[str, Any] = {"id": request_id}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        with contextlib.suppress(Exception):
            self._write(reply)

    async def aclose(self) -> None:
        for task in list(self._answering):
            task.cancel()
        if self._answering:
            await asyncio.gather(*self._answering, return_exceptions=True)
        await super().aclose()


def gated_tool(run: Callable[[Tool, dict[str, Any]], Awaitable[ToolReply]], permit: Permit, *,
               pausing: Pausing | None = None,
               stop: Callable[[], None] | None = None) -> Callable[[Tool, dict[str, Any]], Awaitable[ToolReply]]:
    """A custom-tool runner that asks the permission gate first (the tool's ToolSpec says what
    it does); a denial is the tool's error result, which the model reads. With `pausing`, a call
    the gate defers answers with the gate's reason and `stop`s the turn (turn/interrupt)."""

    async def run_gated(tool: Tool, arguments: dict[str, Any]) -> ToolReply:
        call = (tool.spec or ToolSpec()).call(tool.name, arguments)
        if pausing is None:
            decision = await permit(call)
        else:
            decided = await pausing.decide(lambda: pausing.tool_call_id(tool.name, arguments), tool.name,
                                           dict(arguments), call)
            if decided is None:  # an earlier call of the turn waits
                return ToolReply(NOT_RUN, is_error=True)
            if decided.deferred and stop is not None:
                stop()
                await pausing.turn_ended()  # so the answer cannot reach the model in this turn
            decision = decided
        if not decision.allowed:
            return ToolReply(decision.reason, is_error=True)
        return await run(tool, arguments)

    return run_gated


def gate_call(tool: str, data: Mapping[str, Any], tools: Mapping[str, Tool]) -> ToolCall | None:
    """The gate's view of a paused call as it was described (`Approvals`, `gated_tool`): None for
    a tool agenter does not know."""
    if tool == "shell":
        return ToolCall.shell(str(data.get("command") or ""), name="shell")
    if tool == "apply_patch":
        return ToolCall.edit(*pending_paths({"changes": data.get("changes") or []}), name="apply_patch")
    custom = tools.get(tool)
    if custom is not None:
        return (custom.spec or ToolSpec()).call(tool, dict(data))
    return None


def _described(params: Mapping[str, Any], **data: Any) -> dict[str, Any]:
    """A call's input as a pending call shows it (and a repeated call is matched by): `data`,
    and the model's justification when Codex sent one."""
    if params.get("reason"):
        data["reason"] = str(params["reason"])
    return data
