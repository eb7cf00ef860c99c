"""PermissionGate: one decision per tool call, in a fixed order.

    deny rules → ask rules → tool-specific validation → safety checks → mode policy → capability

A deny rule ends it at once. An ask rule or a safety finding makes the call need a decision that
no mode and no allow rule can waive (that is what "bypass-immune" means); the mode policy and
allow rules decide the rest. A call that needs a decision goes to `on_permission` (a person, or
code acting for one) with a deadline; without a callback, or without an answer in time, it is
denied. Every decision is recorded and reported to `on_decision`, and a denial's reason is
written for the model to read.

Approvals that can wait: with `on_ask="pause"` (on a runtime that can pause, `can_pause`), an
unanswered question (no callback, or none in time) is deferred instead of denied, and so is a
call `on_permission` answers with "defer": the decision's behavior is "defer", and the caller
(agenter's own agent) stops before the call and keeps the run for a later answer. That answer
comes back as `decide(call, answer=...)`: a "no" denies; a "yes" allows unless a deny rule or a
check that denies (validation, plan mode, capability) says otherwise, as it would have anyway.
`approve_always(call)` allows the same tool on the same target without asking for the rest of
the run (`approvals` lists them, so a run continued in another process keeps them).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agenter._errors import ConfigurationError
from agenter.permissions._paths import Finding, ResolvedPath, Workspace
from agenter.permissions._rules import PermissionPolicy, PermissionRule, ToolCall, ToolKind
from agenter.permissions._safety import ShellAnalysis, analyze_shell, path_findings
from agenter.sandbox.paths import relative_to

__all__ = ["DEFER", "PermissionAnswer", "PermissionDecision", "PermissionGate", "PermissionRequest",
           "PermissionVerdict"]

log = logging.getLogger(__name__)

#: What `on_permission` returns to leave a call for later (the run pauses; see the module docstring).
DEFER = "defer"

Stage = Literal["deny_rule", "ask_rule", "validation", "safety", "mode", "allow_rule", "capability", "error"]


@dataclass(frozen=True)
class PermissionVerdict:
    """What the policy says before anyone is asked: allow, deny, or ask."""

    behavior: Literal["allow", "deny", "ask"]
    stage: Stage
    rule: str
    reason: str
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class PermissionRequest:
    """A question for `on_permission`: may this call run?"""

    call: ToolCall
    reason: str
    rule: str
    findings: tuple[Finding, ...]
    mode: str

    @property
    def question(self) -> str:
        return f"Allow {_what(self.call)}? It needs approval because {self.reason}."


@dataclass(frozen=True)
class PermissionAnswer:
    """An answer richer than a bool: `message` is passed on to the model with a denial."""

    allow: bool
    message: str = ""


@dataclass(frozen=True)
class PermissionDecision:
    """The final word on one call.

    rule: what decided it: a rule ('deny shell:git push*'), 'safety:<checks>', 'mode:<mode>',
        'validation', 'capability:<kind>', or for asked calls what made the question necessary.
    behavior: "allow", "deny", or "defer": nobody could answer now and the run pauses before the
        call (on_ask="pause", or on_permission returned "defer").
    asked: whether on_permission was consulted (or would have been: `answered_by` says which).
    answered_by: for asked calls: 'callback', 'timeout', 'headless' (no callback), 'error',
        'approval' (the answer given when a paused run was continued), 'always' (an earlier
        "always" answer for the same tool and target).
    """

    behavior: Literal["allow", "deny", "defer"]
    reason: str
    rule: str
    stage: Stage
    tool: str
    kind: ToolKind
    summary: str
    mode: str
    asked: bool = False
    answered_by: str | None = None
    findings: tuple[Finding, ...] = ()
    timestamp: float = field(default_factory=time.time)

    @property
    def allowed(self) -> bool:
        return self.behavior == "allow"

    @property
    def deferred(self) -> bool:
        """The call waits for a later answer (the run pauses before it)."""
        return self.behavior == "defer"

    def event_data(self) -> dict[str, Any]:
        """The decision as event data: tool, input summary, rule, decision, and why."""
        return {"tool": self.tool, "kind": self.kind, "input": self.summary, "decision": self.behavior,
                "rule": self.rule, "stage": self.stage, "reason": self.reason, "asked": self.asked,
                "answered_by": self.answered_by, "mode": self.mode,
                "findings": [{"check": f.check, "message": f.message} for f in self.findings]}


PermissionCallback = Callable[[PermissionRequest], "bool | PermissionAnswer | Awaitable[bool | PermissionAnswer]"]
DecisionHook = Callable[[PermissionDecision], Any]


@dataclass
class _Facts:
    """What a call touches, worked out once per call."""

    shell: ShellAnalysis | None = None
    # (path, access) for every known path the call reads or writes
    accesses: list[tuple[ResolvedPath, str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


class PermissionGate:
    """Decides tool calls for one session.

    policy: a PermissionPolicy (or anything PermissionPolicy.coerce accepts).
    cwd: the workspace; home: what `~` means (default: the user's home).
    on_permission: called with a PermissionRequest when a call needs a decision; returns (or
        resolves to) a bool or a PermissionAnswer. None = headless: such calls are denied.
    ask_timeout: seconds to wait for an answer; no answer in time is a denial (None: no deadline).
    on_decision: called with every PermissionDecision (events); may be async.
    extra_roots / read_roots: added to the policy's.
    capabilities: the tool kinds this runtime can run (None = all).
    on_ask: "deny" (the default): a question nobody answers is a denial; "pause": it is deferred.
    can_pause: whether the runtime can pause before a deferred call (default: on_ask == "pause");
        where it cannot, on_permission's "defer" is a denial that says so.
    """

    def __init__(self, policy: Any = None, cwd: str | os.PathLike[str] = ".", *,
                 home: str | os.PathLike[str] | None = None, on_permission: PermissionCallback | None = None,
                 ask_timeout: float | None = 60.0, on_decision: DecisionHook | None = None,
                 extra_roots: Iterable[str | os.PathLike[str]] = (),
                 read_roots: Iterable[str | os.PathLike[str]] = (),
                 capabilities: Collection[str] | None = None, on_ask: Literal["deny", "pause"] = "deny",
                 can_pause: bool | None = None):
        if on_ask not in ("deny", "pause"):
            raise ConfigurationError(f"on_ask must be 'deny' or 'pause', got {on_ask!r}", parameter="on_ask")
        self.policy = PermissionPolicy.coerce(policy)
        self.workspace = Workspace(cwd, home=home, extra_roots=[*self.policy.extra_roots, *extra_roots],
                                   read_roots=[*self.policy.read_roots, *read_roots],
                                   protected=self.policy.protected_paths)
        self.on_permission = on_permission
        self.ask_timeout = ask_timeout
        self.on_decision = on_decision
        self.capabilities = frozenset(capabilities) if capabilities is not None else None
        self.decisions: list[PermissionDecision] = []
        self.on_ask = on_ask
        self.can_pause = on_ask == "pause" if can_pause is None else bool(can_pause)
        self._ask_lock: asyncio.Lock | None = None
        self._specs: dict[PermissionRule, tuple[Any, bool]] = {}
        #: What "always" answers allowed for the rest of the run: (kind, tool, target) keys.
        self._always: dict[tuple[str, str, str], dict[str, str]] = {}

    @property
    def mode(self) -> str:
        return self.policy.mode

    @property
    def denials(self) -> list[PermissionDecision]:
        return [d for d in self.decisions if d.behavior == "deny"]

    def add_read_root(self, path: str | os.PathLike[str]) -> None:
        """Let calls read under `path` (e.g. the folder that holds saved tool results)."""
        self.workspace.add_read_root(path)

    def add_root(self, path: str | os.PathLike[str]) -> None:
        """Treat `path` like the workspace (reads and writes); `/` ends the outside-workspace check."""
        self.workspace.add_root(path)

    # ------------------------------------------------------------------ the decision

    async def decide(self, call: ToolCall, *, answer: PermissionAnswer | None = None,
                     defer: bool = True) -> PermissionDecision:
        """Decide `call`, asking on_permission when the policy says ask. `answer` is a person's
        answer given beforehand (a paused run continued): used instead of asking; a "no" also
        denies what the policy would allow, a "yes" never overrides a denial. `defer=False`: the
        caller cannot stop before this call (a server started while connecting), so it is
        never deferred. Never raises (except cancellation)."""
        verdict = self.evaluate(call)
        if answer is not None and verdict.behavior != "deny":
            decision = self._approved(call, verdict, answer)
        elif verdict.behavior == "ask":
            if _key(call) in self._always:
                decision = self._decision(call, verdict, "allow", asked=True, answered_by="always",
                                          reason="approved earlier for the rest of the run (\"always\")")
            else:
                decision = await self._ask(call, verdict, defer=defer)
        else:
            decision = self._decision(call, verdict, verdict.behavior)
        self.decisions.append(decision)
        await self._report(decision)
        return decision

    def evaluate(self, call: ToolCall) -> PermissionVerdict:
        """The policy's answer without asking anyone (pure; also for backends with their own
        prompt). An internal error denies."""
        try:
            return self._evaluate(call)
        except Exception as exc:  # fail closed: a bug here must not allow a call
            log.exception("permission check failed for %s", call.name)
            return PermissionVerdict("deny", "error", "error",
                                     f"Permission denied: the permission check failed ({type(exc).__name__}).")

    def _evaluate(self, call: ToolCall) -> PermissionVerdict:
        policy = self.policy
        summary = _what(call)
        facts = self._facts(call)
        # 1. deny rules
        for rule in policy.rules_with("deny"):
            if self._matches(rule, call, facts):
                return PermissionVerdict("deny", "deny_rule", str(rule),
                                         f"Permission denied by the rule '{rule}' ({summary}). Do not retry this "
                                         "call; find another way, or say in your answer why it is needed.")
        # 2. ask rules
        ask_rule = next((rule for rule in policy.rules_with("ask") if self._matches(rule, call, facts)), None)
        # 3. tool-specific validation
        problem = self._validate(call)
        if problem:
            return PermissionVerdict("deny", "validation", "validation", f"Invalid tool call: {problem}")
        # 4. safety checks (bypass-immune)
        findings = tuple(facts.findings)
        # 5. mode policy
        mode = policy.mode
        if mode == "plan" and not self._read_only(call, facts):
            return PermissionVerdict("deny", "mode", "mode:plan",
                                     f"Permission denied: the session is in plan mode (read-only), and {summary} "
                                     "may change files or state. Describe the change instead of making it.",
                                     findings)
        verdict: PermissionVerdict
        if ask_rule is not None:
            extra = f"; also, the call {_join(findings)}" if findings else ""
            verdict = PermissionVerdict("ask", "ask_rule", str(ask_rule),
                                        f"it matches the rule '{ask_rule}'{extra}", findings)
        elif findings:
            checks = ",".join(dict.fromkeys(f.check for f in findings))
            verdict = PermissionVerdict("ask", "safety", f"safety:{checks}",
                                        f"a safety check that holds in every mode fired: the call {_join(findings)}",
                                        findings)
        elif mode == "bypass":
            verdict = PermissionVerdict("allow", "mode", "mode:bypass", "allowed in bypass mode")
        else:
            verdict = self._allow_rules(call, facts) or self._mode_default(call, facts)
        # 6. capability check
        if verdict.behavior != "deny" and self.capabilities is not None and call.kind not in self.capabilities:
            return PermissionVerdict("deny", "capability", f"capability:{call.kind}",
                                     f"Permission denied: this runtime cannot run {call.kind} tools.", findings)
        return verdict

    # ------------------------------------------------------------------ facts

    def _facts(self, call: ToolCall) -> _Facts:
        facts = _Facts()
        workspace = self.workspace
        if call.kind == "shell":
            facts.shell = analyze_shell(call.command or "", workspace)
            for shell_access in facts.shell.accesses:
                if shell_access.path is not None:
                    facts.accesses.append((shell_access.path, shell_access.access))
            facts.findings.extend(facts.shell.findings)
        if call.paths and not any("\x00" in p for p in call.paths):
            access: Literal["read", "write"] = "read" if call.kind == "read" or (
                call.kind in ("mcp", "custom") and call.read_only) else "write"
            if call.kind == "network":
                access = "read"
            resolved = [workspace.resolve(text) for text in call.paths]  # once: it asks the file system
            facts.accesses.extend((path, access) for path in resolved)
            facts.findings.extend(path_findings(resolved, access, workspace))
        if call.kind == "mcp" and call.starts_server and call.command is not None \
                and call.mcp_server not in self.policy.allowed_mcp_servers:
            facts.findings.append(Finding("mcp-stdio", f"starts the local MCP server {call.mcp_server!r} "
                                                       f"(`{call.summary(120)}`), which is not on the allow-list"))
        return facts

    def _validate(self, call: ToolCall) -> str | None:
        if any("\x00" in p for p in call.paths) or "\x00" in (call.command or ""):
            return "a path or command contains a NUL byte"
        if call.kind == "shell" and not (call.command or "").strip():
            return "the shell command is empty"
        if call.validate is not None:
            try:
                return call.validate(call.input)
            except Exception as exc:  # noqa: BLE001 - a validator that raises rejects the input
                return f"{type(exc).__name__}: {exc}"
        return None

    def _read_only(self, call: ToolCall, facts: _Facts) -> bool:
        if call.kind in ("read", "network"):
            return True
        if call.kind == "edit":
            return False
        if call.kind == "shell":
            return facts.shell is not None and facts.shell.read_only
        if call.starts_server:
            return True  # starting a configured server changes nothing by itself
        return call.read_only

    # ------------------------------------------------------------------ rules

    def _path_matches(self, rule: PermissionRule, path: ResolvedPath) -> bool:
        compiled = self._specs.get(rule)
        if compiled is None:
            compiled = rule.path_spec(self.workspace.cwd, self.workspace.given_cwd, self.workspace.home)
            self._specs[rule] = compiled
        spec, absolute = compiled
        if absolute:
            candidates = {p.lstrip("/") for p in (path.real, path.lexical)}
        else:
            candidates = {path.rel} if path.rel is not None else set()
            given = self.workspace.given_cwd
            if path.lexical.startswith(given.rstrip("/") + "/"):
                candidates.add(relative_to(path.lexical, given))
        candidates -= {".", ""}
        if path.text.endswith("/") or os.path.isdir(path.real):
            # A directory operand (`grep -r x secrets/`) touches what is under it: `secrets/**` matches.
            candidates |= {c + "/" for c in candidates}
        return any(spec.match_file(c) for c in candidates)

    def _matches(self, rule: PermissionRule, call: ToolCall, facts: _Facts) -> bool:
        """For deny and ask rules: does the rule catch any part of the call?"""
        if rule.kind in ("read", "edit") and not rule.matches_all:
            # Path rules see every known path: read rules any access, edit rules writes.
            wanted = ("read", "write", "unknown") if rule.kind == "read" else ("write", "unknown")
            return any(access in wanted and self._path_matches(rule, path) for path, access in facts.accesses)
        if rule.kind != call.kind:
            return False
        if rule.matches_all:
            return True
        if call.kind == "shell":
            candidates = _command_texts(call, facts.shell, for_allow=False)
            return rule.matches_command(candidates)
        return rule.matches_target(_target(call))

    def _allow_rules(self, call: ToolCall, facts: _Facts) -> PermissionVerdict | None:
        rules = [r for r in self.policy.rules_with("allow") if r.kind == call.kind]
        if not rules:
            return None
        if call.kind in ("read", "edit"):
            if not call.paths:
                used = [r for r in rules if r.matches_all]
            else:
                used = []
                for path, _ in facts.accesses:
                    rule = next((r for r in rules if r.matches_all or self._path_matches(r, path)), None)
                    if rule is None:
                        return None
                    used.append(rule)
            if not used:
                return None
            return PermissionVerdict("allow", "allow_rule", _rule_list(used), f"allowed by '{used[0]}'")
        if call.kind == "shell":
            analysis = facts.shell
            everything = next((r for r in rules if r.matches_all), None)
            if everything is not None:  # `allow shell`: every command, parsed or not
                return PermissionVerdict("allow", "allow_rule", str(everything), f"allowed by '{everything}'")
            if analysis is None or not analysis.parsed:
                return None  # a command we could not parse is not allowed by a pattern
            used = []
            for index in analysis.judged():
                if self._auto_shell_command(analysis, index):
                    continue
                texts = _single_command_texts(analysis, index, for_allow=True)
                rule = next((r for r in rules if r.matches_command(texts)), None)
                if rule is None:
                    return None
                used.append(rule)
            if not used:
                return None  # nothing needed a rule: the mode default allows it
            return PermissionVerdict("allow", "allow_rule", _rule_list(used), f"allowed by '{used[0]}'")
        target = _target(call)
        rule = next((r for r in rules if r.matches_target(target)), None)
        if rule is None:
            return None
        return PermissionVerdict("allow", "allow_rule", str(rule), f"allowed by '{rule}'")

    def _auto_shell_command(self, analysis: ShellAnalysis, index: int) -> bool:
        """A command the mode allows by itself: read-only, or (accept_edits) an edit in the workspace."""
        info = analysis.infos[index]
        if info.read_only:
            return True
        if self.policy.mode == "accept_edits" and info.file_edit:
            return all(a.path is not None and self.workspace.in_roots(a.path, "write")
                       for a in analysis.accesses if a.command == index)
        return False

    def _mode_default(self, call: ToolCall, facts: _Facts) -> PermissionVerdict:
        mode = self.policy.mode
        if call.kind == "read":
            return PermissionVerdict("allow", "mode", f"mode:{mode}", "reads inside the workspace are allowed")
        if call.kind == "edit":
            if mode == "accept_edits" and call.paths and all(
                    self.workspace.in_roots(p, "write") for p, _ in facts.accesses):
                return PermissionVerdict("allow", "mode", "mode:accept_edits", "file edits are allowed in accept_edits")
            return self._ask_mode(call, f"file edits need approval in {mode} mode")
        if call.kind == "shell":
            analysis = facts.shell
            if analysis is not None and analysis.parsed and all(
                    self._auto_shell_command(analysis, i) for i in analysis.judged()):
                what = "read-only command" if analysis.read_only else "file edits in the workspace"
                return PermissionVerdict("allow", "mode", f"mode:{mode}", f"allowed: {what}")
            if analysis is not None and not analysis.parsed:
                return self._ask_mode(call, f"the command could not be fully parsed ({analysis.script.error})")
            return self._ask_mode(call, f"shell commands that may change things need approval in {mode} mode")
        if call.kind == "network":
            return self._ask_mode(call, f"network access needs approval in {mode} mode")
        if call.starts_server:
            return PermissionVerdict("allow", "mode", f"mode:{mode}", "the MCP server is on the allow-list")
        if call.read_only:
            return PermissionVerdict("allow", "mode", f"mode:{mode}", "the tool is declared read-only")
        if not call.requires_permission:
            return PermissionVerdict("allow", "mode", f"mode:{mode}", "the tool declares it needs no permission")
        return self._ask_mode(call, f"{call.kind} tools need approval in {mode} mode unless declared read-only")

    def _ask_mode(self, call: ToolCall, why: str) -> PermissionVerdict:
        return PermissionVerdict("ask", "mode", f"mode:{self.policy.mode}", why)

    # ------------------------------------------------------------------ asking

    # ------------------------------------------------------------------ answers given later

    def approve_always(self, call: ToolCall) -> None:
        """Allow calls of the same tool on the same target (its paths, its command, its URL or
        server) without asking, for the rest of the run. A deny rule still denies them."""
        self._always[_key(call)] = {"kind": call.kind, "tool": call.name, "target": _key(call)[2]}

    @property
    def approvals(self) -> list[dict[str, str]]:
        """The "always" answers so far ({kind, tool, target}), to carry into a continued run."""
        return [dict(item) for item in self._always.values()]

    def restore_approvals(self, approvals: Iterable[dict[str, str]]) -> None:
        """Take back what `approvals` listed (a run continued in another process)."""
        for item in approvals:
            kind, tool, target = str(item.get("kind", "")), str(item.get("tool", "")), str(item.get("target", ""))
            self._always[(kind, tool, target)] = {"kind": kind, "tool": tool, "target": target}

    def _approved(self, call: ToolCall, verdict: PermissionVerdict, answer: PermissionAnswer) -> PermissionDecision:
        """The decision a person's earlier answer makes (see `decide`)."""
        note = f": {answer.message}" if answer.message else ""
        if answer.allow:
            return self._decision(call, verdict, "allow", asked=True, answered_by="approval",
                                  reason=f"approved when the paused run was continued{note}")
        why = f" (approval was needed because {verdict.reason}.)" if verdict.behavior == "ask" else "."
        return self._decision(call, verdict, "deny", asked=True, answered_by="approval",
                              reason=f"Permission denied by a person when the paused run was continued{note}"
                                     f"{why} Do not retry the same call; find another way, or say in your "
                                     "answer why it is needed.")

    def _deferred(self, call: ToolCall, verdict: PermissionVerdict, answered_by: str) -> PermissionDecision:
        return self._decision(call, verdict, "defer", asked=True, answered_by=answered_by,
                              reason=f"Paused: {_what(call)} needs approval because {verdict.reason}; the run "
                                     "waits for a person's answer.")

    # ------------------------------------------------------------------ asking

    async def _ask(self, call: ToolCall, verdict: PermissionVerdict, *, defer: bool = True) -> PermissionDecision:
        can_pause = self.can_pause and defer
        pause = self.on_ask == "pause" and can_pause
        headless_tail = {"safety": "Do not try to work around it; if it is really needed, say so in your answer.",
                         "ask_rule": "There is no one to approve it in this session; do something else or say "
                                     "in your answer why it is needed."}.get(
            verdict.stage, "There is no one to approve it in this session; do something else or say in your "
                           "answer why it is needed.")
        if self.on_permission is None:
            if pause:
                return self._deferred(call, verdict, "headless")
            return self._decision(call, verdict, "deny", asked=True, answered_by="headless",
                                  reason=f"Permission denied: {_what(call)} needs approval because "
                                         f"{verdict.reason}. {headless_tail}")
        request = PermissionRequest(call=call, reason=verdict.reason, rule=verdict.rule, findings=verdict.findings,
                                    mode=self.policy.mode)
        if self._ask_lock is None:
            self._ask_lock = asyncio.Lock()
        async with self._ask_lock:  # one question at a time
            try:
                answer = await asyncio.wait_for(self._call_back(request), timeout=self.ask_timeout)
            except TimeoutError:
                if pause:
                    return self._deferred(call, verdict, "timeout")
                return self._decision(call, verdict, "deny", asked=True, answered_by="timeout",
                                      reason=f"Permission denied: no answer to the permission request within "
                                             f"{self.ask_timeout or 0:g} s (it was needed because {verdict.reason}).")
            except Exception as exc:  # noqa: BLE001 - a failing callback denies
                log.warning("on_permission failed: %s: %s", type(exc).__name__, exc)
                return self._decision(call, verdict, "deny", asked=True, answered_by="error",
                                      reason=f"Permission denied: the permission request failed "
                                             f"({type(exc).__name__}).")
        if isinstance(answer, str) and answer.strip().lower() == DEFER:
            if can_pause:
                return self._deferred(call, verdict, "callback")
            return self._decision(call, verdict, "deny", asked=True, answered_by="callback",
                                  reason=f"Permission denied: on_permission answered 'defer' for {_what(call)}, "
                                         "but the run cannot pause here (" + (
                                             "its backend has no pause capability" if not self.can_pause else
                                             "not before this call") + "), and approval was needed because "
                                         f"{verdict.reason}.")
        if isinstance(answer, PermissionAnswer):
            allow, message = answer.allow, answer.message
        else:
            allow, message = answer is True, ""
        if allow:
            return self._decision(call, verdict, "allow", asked=True, answered_by="callback",
                                  reason=f"approved{': ' + message if message else ''}")
        suffix = f": {message}" if message else "."
        return self._decision(call, verdict, "deny", asked=True, answered_by="callback",
                              reason=f"Permission denied by the user{suffix} (approval was needed because "
                                     f"{verdict.reason}.) Do not retry the same call.")

    async def _call_back(self, request: PermissionRequest) -> Any:
        callback = self.on_permission
        assert callback is not None
        if inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(type(callback).__call__):
            result = callback(request)
        else:
            # A plain function may block (input()): run it off the loop so the deadline holds.
            result = await asyncio.to_thread(callback, request)
        if inspect.isawaitable(result):
            result = await result
        return result

    # ------------------------------------------------------------------ records

    def _decision(self, call: ToolCall, verdict: PermissionVerdict, behavior: Literal["allow", "deny", "defer"], *,
                  asked: bool = False, answered_by: str | None = None, reason: str | None = None) -> PermissionDecision:
        return PermissionDecision(behavior=behavior, reason=reason or verdict.reason, rule=verdict.rule,
                                  stage=verdict.stage, tool=call.name, kind=call.kind, summary=call.summary(),
                                  mode=self.policy.mode, asked=asked, answered_by=answered_by,
                                  findings=verdict.findings)

    async def _report(self, decision: PermissionDecision) -> None:
        if self.on_decision is None:
            return
        try:
            result = self.on_decision(decision)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # noqa: BLE001 - an event hook must not change the decision
            log.warning("on_decision hook failed: %s: %s", type(exc).__name__, exc)


# ---------------------------------------------------------------------------------------------


def _what(call: ToolCall) -> str:
    """The call as named in reasons and questions."""
    summary = call.summary(160)
    if call.kind == "shell":
        return f"`{summary}`"
    if call.starts_server:
        return f"starting MCP server {call.mcp_server!r} (`{summary}`)"
    if call.kind in ("read", "edit"):
        return f"{call.name} of {summary or '(no path)'}"
    if call.kind == "network":
        return f"{call.name} of {summary}"
    return f"{call.name} `{summary}`"


def _key(call: ToolCall) -> tuple[str, str, str]:
    """What an "always" answer covers: the tool, and its target as the gate sees it (paths,
    the command with its spacing folded, the URL or MCP tool)."""
    if call.kind == "shell":
        target = " ".join((call.command or "").split())
    elif call.paths:
        target = "\n".join(call.paths)
    else:
        target = _target(call) or call.summary(300)
    return call.kind, call.name, target


def _join(findings: Iterable[Finding]) -> str:
    return "; ".join(f.message for f in findings)


def _rule_list(rules: list[PermissionRule]) -> str:
    return ", ".join(dict.fromkeys(str(r) for r in rules))


def _target(call: ToolCall) -> str | None:
    if call.kind == "custom":
        return call.name
    if call.kind == "mcp":
        return call.target or call.mcp_server or call.name
    return call.target


def _single_command_texts(analysis: ShellAnalysis, index: int, *, for_allow: bool) -> list[str]:
    command = analysis.commands[index]
    texts = []
    if command.prefix:
        texts.append(command.text(with_prefix=True))
    if not (for_allow and command.privileged):  # `allow shell:rm *` does not allow `sudo rm`
        texts.append(command.text())
        if command.words and "/" in command.words[0].text and not command.words[0].dynamic:
            texts.append(" ".join([command.name, *(w.text for w in command.args)]))
    return texts


def _command_texts(call: ToolCall, analysis: ShellAnalysis | None, *, for_allow: bool) -> list[str]:
    texts: list[str] = []
    if analysis is not None:
        for index in range(len(analysis.commands)):
            texts.extend(_single_command_texts(analysis, index, for_allow=for_allow))
    if not for_allow and call.command:
        texts.append(" ".join(call.command.split()))
    return texts
