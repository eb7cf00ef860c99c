"""Headless answers to the questions `codex app-server` asks (approvals, user input, MCP
elicitations). Nobody is there to answer, so each is decided at once by the approval policy
and the sandbox; docs/backends/codex.md has the table."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenter.backends.codex._events import pending_paths
from agenter.backends.codex._rpc import Notification


@dataclass(frozen=True)
class Decision:
    """One answer agenter gave: to which tool, about what, the verdict, and why."""

    approved: bool
    tool: str  # the Codex tool that asked: shell, apply_patch, ...
    what: str  # the request in words: "command 'rm -rf build'"
    why: str

    @property
    def text(self) -> str:
        return f"agenter {'approved' if self.approved else 'declined'} {self.what}: {self.why}"


#: Receives each decision as it is made.
Report = Callable[[Decision], None]


def protocol_policy(policy: str) -> str:
    """The approval policy as Codex's protocol spells it."""
    # Codex 0.15x+ dropped "on-failure" from its protocol; it behaves like "on-request" there.
    return "on-request" if policy == "on-failure" else policy


class Approvals:
    """Decides Codex's server requests for one session."""

    def __init__(self, *, policy: str, sandbox: bool, cwd: Path, writable_roots: Sequence[Path],
                 report: Report | None = None):
        self.policy = policy
        self.sandbox = sandbox
        self.cwd = cwd
        self.writable_roots = list(writable_roots)
        self._report = report
        self._pending: dict[str, list[str]] = {}

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

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The reply to one server request; LookupError for a request agenter does not know."""
        if method == "item/commandExecution/requestApproval":
            accept, why = self._command_decision()
            self._tell(accept, "shell", f"command {params.get('command')!r}", why)
            return {"decision": "accept" if accept else "decline"}
        if method == "item/fileChange/requestApproval":
            accept, why = self._file_change_decision(params)
            paths = self._pending.get(params.get("itemId") or "", [])
            self._tell(accept, "apply_patch", f"file change {', '.join(paths) or '(unknown paths)'}", why)
            return {"decision": "accept" if accept else "decline"}
        if method in ("execCommandApproval", "applyPatchApproval"):  # legacy v1 requests
            accept = not self.sandbox and self.policy != "untrusted"
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

    def _command_decision(self) -> tuple[bool, str]:
        if self.policy == "untrusted":
            return False, ("approval policy 'untrusted': only commands Codex itself trusts run; "
                           "nobody can vouch for this one in a headless run")
        if not self.sandbox:
            return True, "sandbox=False: commands already run with full access"
        return False, (f"approval policy {self.policy!r} with sandbox=True: Codex asks only to leave "
                       "its sandbox, and the sandbox stays closed")

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

    def _tell(self, accept: bool, tool: str, what: str, why: str) -> None:
        if self._report is not None:
            self._report(Decision(accept, tool, what, why))
