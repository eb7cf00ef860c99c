"""Answers to the questions `codex app-server` asks (approvals, user input, MCP elicitations).

With a permission gate (`permit`), agenter starts every thread under the approval policy
"untrusted", so that Codex 0.169 asks before every command and every patch (found by experiment:
it asks even for `ls`; an approved command still runs in the workspace-write sandbox). Each
request is then decided in this order: what the user's `codex_approval_policy` and the sandbox
allow (the headless answers agenter always gave), then the permission gate. A declined call is
explained to the model: Codex's own decline says only "rejected by user", so the reason follows
as a `turn/steer` message that the model reads with the tool's result. Without a gate the
headless answers alone decide (docs/backends/codex.md has the table).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenter.backends.agents.codex._events import pending_paths
from agenter.backends.agents.codex._rpc import AppServerConnection, Notification
from agenter.backends.base import ToolReply
from agenter.permissions import PermissionDecision, ToolCall
from agenter.tools import Tool
from agenter.tools.spec import ToolSpec

__all__ = ["ENFORCED_KINDS", "GATED_POLICY", "Answering", "Approvals", "Decision", "gated_tool", "protocol_policy"]

log = logging.getLogger("agenter.backends.agents.codex")

#: The rule kinds enforced: commands (shell, also the paths they read and write), patches
#: (edit) and agenter's custom tools. Not "network" (no tool of Codex is a network call agenter
#: sees; commands' network is the sandbox's business) nor "mcp" (extra MCP servers' tools run
#: without asking agenter).
ENFORCED_KINDS = frozenset({"read", "edit", "shell", "custom"})
#: The approval policy under which Codex asks agenter before every command and patch.
GATED_POLICY = "untrusted"


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
#: Decides a call through the session's permission gate.
Permit = Callable[[ToolCall], Awaitable[PermissionDecision]]
#: Tells the model why a call was declined, in the running turn: (thread id, turn id, text).
#: Awaited before the decline is sent, so Codex has the reason queued when the turn goes on.
Explain = Callable[[str, str, str], Awaitable[None]]


def protocol_policy(policy: str) -> str:
    """The approval policy as Codex's protocol spells it."""
    # Codex 0.15x+ dropped "on-failure" from its protocol; it behaves like "on-request" there.
    return "on-request" if policy == "on-failure" else policy


class Approvals:
    """Decides Codex's server requests for one session.

    policy: the user's codex_approval_policy; sandbox: whether Codex's sandbox is on.
    permit: the permission gate (None: the headless answers alone, for a thread started under
        `policy` itself, where Codex asks only what that policy asks).
    explain: sends the model the reason for a declined call (with permit).
    """

    def __init__(self, *, policy: str, sandbox: bool, cwd: Path, writable_roots: Sequence[Path],
                 report: Report | None = None, permit: Permit | None = None, explain: Explain | None = None):
        self.policy = policy
        self.sandbox = sandbox
        self.cwd = cwd
        self.writable_roots = list(writable_roots)
        self._report = report
        self._permit = permit
        self._explain = explain
        self._pending: dict[str, list[str]] = {}

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
                self._pending[item["id"]] = pending_paths(item)
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
                return self._gate(params, ToolCall.shell(command, name="shell"), "shell", f"command {command!r}",
                                  (accept, why))
            self._tell(accept, "shell", f"command {command!r}", why)
            return {"decision": "accept" if accept else "decline"}
        if method == "item/fileChange/requestApproval":
            accept, why = self._file_change_decision(params)
            paths = self._pending.get(params.get("itemId") or "", [])
            what = f"file change {', '.join(paths) or '(unknown paths)'}"
            if self._permit is not None:
                return self._gate(params, ToolCall.edit(*paths, name="apply_patch"), "apply_patch", what,
                                  (accept, why))
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
                    headless: tuple[bool, str]) -> dict[str, Any]:
        """The sandbox rules' verdict (`headless`), then the permission gate's; a decline is
        explained to the model before it is sent."""
        assert self._permit is not None
        accept, why = headless
        if accept:
            decision = await self._permit(call)
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
        paths = self._pending.get(params.get("itemId") or "")
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


def gated_tool(run: Callable[[Tool, dict[str, Any]], Awaitable[ToolReply]],
               permit: Permit) -> Callable[[Tool, dict[str, Any]], Awaitable[ToolReply]]:
    """A custom-tool runner that asks the permission gate first (the tool's ToolSpec says what
    it does); a denial is the tool's error result, which the model reads."""

    async def run_gated(tool: Tool, arguments: dict[str, Any]) -> ToolReply:
        decision = await permit((tool.spec or ToolSpec()).call(tool.name, arguments))
        if not decision.allowed:
            return ToolReply(decision.reason, is_error=True)
        return await run(tool, arguments)

    return run_gated
