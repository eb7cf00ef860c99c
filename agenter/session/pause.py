"""Approvals that can wait, the session's half (docs/approvals.md).

A run whose turn ended at calls waiting for a person (`TurnReport.pending`) is PAUSED: the run
writes down what it needs to go on (`pause_record`: the request and its budget, the iterations,
time, tokens and cost spent so far, the files changed so far, the refusals, the calls not run)
and the backend keeps it beside its conversation (`CodingBackend.hold`), which gives the handle.

A later process continues it: `answers_for` checks the person's answers against the calls that
wait, `request_of` rebuilds the request, and the run is given a `Continuation`: its first turn is
the backend's `continue_paused` instead of a new prompt, its counts start from the recorded ones
(the iteration that paused goes on as the same iteration), and its files and refusals include
those from before the pause, each once.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agenter._errors import ConfigurationError
from agenter._types import Budget, CodingRequest, ModifiedFiles, PendingCall, Usage
from agenter.backends.base import Denial

__all__ = ["ANSWERS", "Continuation", "answers_for", "pause_record", "request_of"]

#: What a person may answer a call that waits: run it, refuse it, or run it and allow the same
#: tool on the same target for the rest of the run.
ANSWERS = ("allow", "deny", "always")


@dataclass(frozen=True)
class Continuation:
    """A paused run being continued: its handle, its record, and the answers (call id → answer)."""

    handle: str
    record: dict[str, Any]
    answers: dict[str, str]

    @property
    def _run(self) -> dict[str, Any]:
        run = self.record.get("run")
        return run if isinstance(run, dict) else {}

    @property
    def iterations(self) -> int:
        """Iterations before the pause, the one that paused included (it goes on as the same one)."""
        return max(int(self._run.get("iterations") or 1), 1)

    @property
    def elapsed(self) -> float:
        """Seconds the run had run before it paused (the time it waited is not counted)."""
        return max(float(self._run.get("elapsed") or 0.0), 0.0)

    @property
    def usage(self) -> Usage:
        return Usage.model_validate(self._run.get("usage") or {})

    @property
    def files(self) -> ModifiedFiles:
        files = self._run.get("files") or {}
        return ModifiedFiles(written=set(files.get("written") or ()), deleted=set(files.get("deleted") or ()),
                             created=set(files.get("created") or ()))

    @property
    def denials(self) -> list[Denial]:
        return [Denial(tool=str(d.get("tool", "")), target=str(d.get("target", "")), reason=str(d.get("reason", "")),
                       rule=str(d.get("rule", ""))) for d in self._run.get("denials") or [] if isinstance(d, dict)]

    @property
    def summary(self) -> str:
        return str(self._run.get("summary") or "")

    @property
    def prompt(self) -> str | None:
        """The prompt of the iteration that paused (a retry's), for the record."""
        prompt = self._run.get("prompt")
        return prompt if isinstance(prompt, str) else None


def pause_record(*, backend: str, model: str | None, mode: str, agent: Mapping[str, Any], request: CodingRequest,
                 budget: Budget, iterations: int, elapsed: float, usage: Usage, files: ModifiedFiles,
                 denials: list[Denial], summary: str, prompt: str, pending: list[PendingCall]) -> dict[str, Any]:
    """What a later process needs to continue the run (JSON data; the store scrubs secrets)."""
    output_type = request.output_type
    return {
        "backend": backend, "model": model, "mode": mode, "agent": dict(agent),
        "request": {"prompt": request.prompt, "cwd": str(request.cwd), "system_prompt": request.system_prompt,
                    "allowed_write_paths": request.allowed_write_paths, "require_changes": request.require_changes,
                    "budget": budget.model_dump(mode="json"),
                    "output_type": f"{output_type.__module__}:{output_type.__qualname__}" if output_type else None},
        "run": {"iterations": iterations, "elapsed": round(elapsed, 3), "usage": usage.model_dump(mode="json"),
                "files": {"written": sorted(files.written), "deleted": sorted(files.deleted),
                          "created": sorted(files.created)},
                "denials": [d.as_dict() for d in denials], "summary": summary, "prompt": prompt},
        "pending": [call.model_dump(mode="json") for call in pending],
    }


def pending_of(record: Mapping[str, Any]) -> list[PendingCall]:
    return [PendingCall.model_validate(call) for call in record.get("pending") or [] if isinstance(call, dict)]


def answers_for(record: Mapping[str, Any], decisions: Any) -> dict[str, str]:
    """The person's answers as call id → "allow" | "deny" | "always". `decisions`: None or one
    answer (every call that needs approval gets it), or a mapping of call ids to answers (a call
    left out is decided as usual when the run goes on; it may ask, and pause, again). True and
    False are "allow" and "deny". ConfigurationError, one line, for anything else."""
    pending = pending_of(record)
    if decisions is None or isinstance(decisions, str | bool):
        answer = _answer(decisions if decisions is not None else "allow", "decisions")
        return {call.id: answer for call in pending if call.needs_approval}
    if not isinstance(decisions, Mapping):
        raise ConfigurationError("decisions must be 'allow', 'deny' or 'always', or a dict of call ids to those, "
                                 f"got {type(decisions).__name__}", parameter="decisions")
    ids = [call.id for call in pending]
    answers = {}
    for call_id, value in decisions.items():
        if call_id not in ids:
            raise ConfigurationError(f"call {call_id!r} is not pending in this paused run (pending: "
                                     f"{', '.join(ids) or 'none'})", parameter="decisions")
        answers[str(call_id)] = _answer(value, f"the answer for call {call_id!r}")
    return answers


def _answer(value: Any, what: str) -> str:
    if value is True:
        return "allow"
    if value is False:
        return "deny"
    if isinstance(value, str) and value.strip().lower() in ANSWERS:
        return value.strip().lower()
    raise ConfigurationError(f"{what} must be 'allow', 'deny' or 'always', got {value!r}", parameter="decisions")


def request_of(record: Mapping[str, Any]) -> CodingRequest:
    """The paused request, to continue: its own settings, its budget, resuming its conversation."""
    data = record.get("request")
    session_id = record.get("session_id")
    if not isinstance(data, dict) or not isinstance(session_id, str):
        raise ConfigurationError("the paused run's record is incomplete (no request or conversation): it cannot "
                                 "be continued", parameter="handle")
    return CodingRequest(prompt=data["prompt"], cwd=data["cwd"], system_prompt=data.get("system_prompt"),
                         allowed_write_paths=data.get("allowed_write_paths"),
                         require_changes=bool(data.get("require_changes", True)),
                         budget=Budget(**data["budget"]) if data.get("budget") else None,
                         output_type=_output_type(data.get("output_type")), resume=session_id)


def _output_type(path: Any) -> Any:
    """The request's output_type, imported again by its `module:qualname`."""
    if not path:
        return None
    module_name, _, qualname = str(path).partition(":")
    try:
        value: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        raise ConfigurationError(f"the paused run's output_type {path} cannot be imported in this process: "
                                 "approve it where that class can be imported", parameter="handle") from None
    return value
