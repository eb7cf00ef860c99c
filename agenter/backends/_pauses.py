"""Approvals that can wait (docs/approvals.md): what the backends with the pause capability share.

Where a paused run is kept: the `conversation_store` option (a folder, a sqlite:// or redis://
URL, a ConversationStore of the user's; None: the file store beside the run's transcripts, else
the user's cache; False: nowhere), read here (`backend_store`) for every backend that pauses.
agenter's own agent keeps its conversation in that store too; the others keep the pause record
there and, beside it, a copy of what their agent resumes from, so that another host with the
same store can approve: Claude Code's session file and Codex's thread (`_stored_files.keep_file`),
OpenHands's conversation folder (`keep_folder`), Aider's chat history (`keep_text`), ADK's
session and the OpenAI Agents SDK session's items (their `_kept` modules). `keep` writes the
session's record with the backend's own part under a new handle; `pending_call` is a call that
waits, as the gate saw it.

An agent that keeps its own conversation cannot be handed a paused call's result afterwards: its
turn ended at the call (denied, so that the agent stopped), and the continued run tells the model
the person's answers (`answer_paused`) and asks it to make an approved call again. `RepeatedCalls`
then lets exactly that call (same tool, same input) through the gate with the person's answer,
once; a denied call made again is denied with the person's answer each time. "always" is the
gate's own (`approve_always`: the same tool on the same target for the rest of the run).
Limit: a model that makes the approved call with another input is asked about it again.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from agenter._errors import ConfigurationError
from agenter._types import PendingCall
from agenter.host.redact import Redactor
from agenter.permissions import PermissionAnswer, PermissionVerdict, ToolCall

if TYPE_CHECKING:
    from agenter.backends.base import BaseBackend
    from agenter.store import ConversationStore

__all__ = ["PauseStoreOption", "RepeatedCalls", "answer_paused", "backend_store", "check_store_option", "defer_as_seen", "hold_paused",
           "keep", "no_pause_without_store", "pending_call", "resume_paused", "run_store", "store_for_pauses"]

#: Characters of a call's input the model is shown again when it is told the answers.
SHOWN_INPUT = 300


def check_store_option(value: Any) -> Any:
    """The `conversation_store` option, checked when the agent is built (True is the default)."""
    from agenter.store import ConversationStore

    if value is None or value is False or isinstance(value, ConversationStore):
        return value
    if value is True:
        return None
    if isinstance(value, str | os.PathLike):
        from agenter.store import open_store

        open_store(value)  # a scheme that names no store is refused when the agent is built
        return value
    raise ValueError("conversation_store takes a folder path, a sqlite:// or redis:// URL, a ConversationStore "
                     "(agenter.store: load, save, append, delete, session_ids), None for the default file "
                     f"store, or False; got {type(value).__name__}")


class PauseStoreOption(BaseModel):
    """The `conversation_store` option of a backend whose agent keeps its own conversation: it
    holds the paused runs' records (a backend's options class inherits it)."""

    conversation_store: Any = Field(
        None,
        description="Where a paused run is kept (on_ask='pause', docs/approvals.md): None (the default: a file "
                    "store beside the run's transcripts, else in the user's cache), a folder path, a "
                    "sqlite:///path.db or redis://host:port/db URL, a ConversationStore (agenter.store) of your "
                    "own, or False (none: on_ask='pause' is refused). The agent keeps its conversation itself; "
                    "this store holds the pause record (the backend's page says what else continuing needs).")

    @field_validator("conversation_store")
    @classmethod
    def _a_store(cls, value: Any) -> Any:
        return check_store_option(value)


def run_store(option: Any, log_dir: Path | None, redact: Redactor) -> ConversationStore | None:
    """The store the `conversation_store` option names for a run with this log_dir (None: False)."""
    from agenter.store import FileConversationStore, open_store

    if option is False:
        return None
    if isinstance(option, str | os.PathLike):
        return open_store(option, redact=redact)  # a folder, sqlite:///..., redis://...
    if option is not None:
        return option
    return FileConversationStore.beside(log_dir, redact=redact)


async def backend_store(backend: BaseBackend[Any]) -> ConversationStore | None:
    """The store a running agent backend's `conversation_store` option names (`run_store`, opened
    in a thread)."""
    return await asyncio.to_thread(run_store, backend.options.conversation_store, backend.spec.log_dir,
                                   backend.redact)


def store_for_pauses(option: Any, log_dir: Path | None, redact: Redactor) -> ConversationStore:
    """Where a run with this option and log_dir keeps its paused runs (`pause_store` of a backend)."""
    store = run_store(option, log_dir, redact)
    if store is None:
        raise ConfigurationError("conversation_store=False keeps no paused run: approve with the store the "
                                 "run kept it in", parameter="conversation_store")
    return store


def no_pause_without_store(on_ask: str, option: Any) -> None:
    """on_ask="pause" with conversation_store=False fails when the agent is built."""
    if on_ask == "pause" and option is False:
        raise ConfigurationError("on_ask='pause' keeps the paused run in a conversation store, and "
                                 "conversation_store=False keeps none: give a store (or leave the default)",
                                 parameter="on_ask")


async def keep(store: ConversationStore | None, record: Mapping[str, Any], *, backend: str, session_id: str | None,
               own: Mapping[str, Any]) -> str:
    """Keep the session's `record`, the agent's session id and the backend's `own` part under a
    new handle (`hold`); StoreError when there is no store or it fails."""
    from agenter.store import StoreError, save_pause

    if store is None:
        raise StoreError(f"the {backend} backend keeps no conversation store (conversation_store=False), so the "
                         "paused run cannot be kept")
    return await asyncio.to_thread(save_pause, store, {**record, "session_id": session_id, **own})


async def hold_paused(backend: BaseBackend[Any], record: Mapping[str, Any], key: str, own: Mapping[str, Any],
                      *, store: ConversationStore | None = None) -> str:
    """`hold` of an agent backend with `PauseStoreOption`: the session's record, the agent's
    session id, and under `key` the backend's `own` part with the gate's "always" answers, kept
    in `store` (by default the one its conversation_store option names)."""
    if store is None:
        store = await backend_store(backend)
    gate = backend.gate
    part = {**own, "approvals": gate.approvals if gate is not None else []}
    return await keep(store, record, backend=backend.name, session_id=backend.session_id, own={key: part})


def resume_paused(backend: BaseBackend[Any], held: Mapping[str, Any], key: str) -> tuple[dict[str, Any], list[PendingCall]]:
    """What `hold_paused` kept under `key`, with the gate's "always" answers given back to the
    gate, and the calls that wait."""
    own = held.get(key) or {}
    if backend.gate is not None:
        backend.gate.restore_approvals(own.get("approvals") or [])
    pending = [PendingCall.model_validate(call) for call in held.get("pending") or [] if isinstance(call, dict)]
    return own, pending


def pending_call(call_id: str, tool: str, tool_input: Any, call: ToolCall | None = None,
                 verdict: PermissionVerdict | None = None, *, needs_approval: bool) -> PendingCall:
    """A call that did not run because the run paused, as the gate saw it (`verdict` of `call`)."""
    shown = dict(tool_input) if isinstance(tool_input, Mapping) else {"input": tool_input}
    if call is None or verdict is None:
        return PendingCall(id=call_id, tool=tool, input=shown, needs_approval=needs_approval)
    return PendingCall(id=call_id, tool=tool, input=shown, needs_approval=needs_approval, rule=verdict.rule,
                       stage=verdict.stage, reason=verdict.reason, paths=list(call.paths), command=call.command)


def defer_as_seen(backend: BaseBackend[Any], call_id: str, tool: str, tool_input: Any, call: ToolCall,
                  *, asked: bool) -> None:
    """The turn stops before this call: it waits, as the gate sees it (`asked`: the gate deferred
    it; else a later call of the same response, which needs approval only if the gate would ask)."""
    gate = backend.gate
    verdict = gate.evaluate(call) if gate is not None else None
    needs_approval = asked or (verdict is not None and verdict.behavior == "ask")
    backend.defer_calls([pending_call(call_id, tool, tool_input, call, verdict, needs_approval=needs_approval)])


class RepeatedCalls:
    """The answers of a continued run, matched to the calls the model makes again (see the module
    docstring). `ignored`: input keys that describe a call rather than change it (Claude Code's
    Bash `description`), not compared."""

    def __init__(self, ignored: Collection[str] = ()):
        self._ignored = frozenset(ignored)
        self._waiting: list[tuple[str, dict[str, Any], bool]] = []  # (tool, input, allowed)

    def expect(self, tool: str, tool_input: Mapping[str, Any], *, allow: bool) -> None:
        self._waiting.append((tool, self._shape(tool_input), allow))

    def take(self, tool: str, tool_input: Any) -> PermissionAnswer | None:
        """The person's answer when this is a paused call made again (an allowed one is used once)."""
        shape = self._shape(tool_input) if isinstance(tool_input, Mapping) else None
        for index, (name, expected, allow) in enumerate(self._waiting):
            if name == tool and expected == shape:
                if allow:
                    del self._waiting[index]
                return PermissionAnswer(allow)
        return None

    def _shape(self, tool_input: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in tool_input.items() if key not in self._ignored}


async def answer_paused(backend: BaseBackend[Any], pending: Sequence[PendingCall], answers: Mapping[str, str],
                        to_call: Callable[[str, dict[str, Any]], ToolCall | None], calls: RepeatedCalls) -> str:
    """Take a person's answers to the calls a run paused at (call id → "allow", "deny" or
    "always"; a call without one is decided as usual when it is made again), for an agent that
    is asked to make them again: an allowed call waits in `calls` (an "always" also goes to the
    gate), a denied one is refused now through the gate (recorded, with the reason the model
    reads) and when it is made again. Returns what the model is told."""
    gate = backend.gate
    lines = []
    for waiting in pending:
        answer = answers.get(waiting.id)
        call = to_call(waiting.tool, dict(waiting.input))
        what = f"{waiting.tool} {_target(waiting)} (call {waiting.id})"
        if answer in ("allow", "always"):
            calls.expect(waiting.tool, waiting.input, allow=True)
            note = ""
            if answer == "always" and call is not None and gate is not None:
                gate.approve_always(call)
                note = "; the same tool on the same target is allowed for the rest of the run"
            lines.append(f"- {what}: approved{note}. Make this same call again now, with the same input.")
        elif answer == "deny":
            reason = "Permission denied by a person when the paused run was continued. Do not retry the same call."
            if call is not None:
                reason = (await backend.permit(call, answer=PermissionAnswer(False))).reason
            else:
                backend.deny(waiting.tool, _target(waiting), reason, waiting.rule)
            calls.expect(waiting.tool, waiting.input, allow=False)
            lines.append(f"- {what}: denied. {reason}")
        else:
            why = "it waited for approval and has no answer yet" if waiting.needs_approval else \
                "it came after the call that waited"
            lines.append(f"- {what}: not run ({why}). Make it again if you still need it.")
    return ("Your last turn ended before the tool calls below: the run was paused for a person's approval. "
            "The person has answered:\n" + "\n".join(lines) + "\nThen go on with the task.")


def _target(call: PendingCall) -> str:
    if call.command:
        return json.dumps(call.command)
    if call.paths:
        return ", ".join(call.paths)
    shown = json.dumps(call.input, default=str)
    return shown if len(shown) <= SHOWN_INPUT else shown[:SHOWN_INPUT] + "..."
