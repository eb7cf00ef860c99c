"""A plan-and-execute run written down as it changes, so that another process can finish it.

One JSON file, `state.json`, in the run's state directory, replaced whole (written to a temporary
file, flushed to disk, renamed over the old one) after every step that changes what a resumed
run must know: the plan, its approval, each task starting, ending, being merged or skipped, the
merged changes copied back, the end. A kill at any moment leaves either the old state or the new
one, never half of one.

What it holds: the run's prompt, cwd and request fields; the plan; the report so far
(PlanResult, with every TaskReport); each atomic task's execution state and, with worktrees, the
commit its work became; the merged state's commit; the usage and time spent; the runs' results
(counted once in the final totals).

What a resume does with it (agenter/planner/run.py): a task that had merged, failed or been
skipped keeps its report and is not run again; a task that was running is run again from the
current state (a worktree at the merged state, or cwd in place, where what it wrote before the
kill may still be); a task that finished but was not merged is merged from its recorded commit
(never twice: the merged state and the task's state are written in one replace). Budgets carry
over: the tokens, cost and time spent before count against the same limits.

The file is written owner-only (0600). It holds the prompt, the plan and the run's results
(redacted as the run's events are) — not the backend options or keys.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agenter._errors import ConfigurationError
from agenter._types import CodingResult, Usage
from agenter.planner.plan import Plan
from agenter.planner.report import PlanResult

__all__ = ["STATE_FILE", "PlanState", "read_state", "write_state"]

#: The file in a state directory.
STATE_FILE = "state.json"
#: The format's version: a state written by another version is refused with a one-line error.
VERSION = 1


class GitState(BaseModel):
    """Where the worktrees' commits are: enough to merge into and copy back from after a kill."""

    kind: str = Field(description="worktree (cwd's own repository) or copy (a private repository).")
    base: str = Field(description="The commit of cwd's state before the plan.")
    head: str = Field(description="The merged state so far.")
    scratch: str | None = Field(default=None, description="The killed run's temporary folder, removed on resume.")
    store: str | None = Field(default=None, description="copy: the private repository (kept in the state folder).")


class PlanState(BaseModel):
    """Everything a resumed run needs (see the module docstring)."""

    version: int = VERSION
    status: Literal["running", "ended"] = "running"
    prompt: str
    cwd: str
    request_fields: dict[str, Any] = Field(default_factory=dict)
    approved: bool = False
    plan: Plan | None = None
    result: PlanResult
    tasks: dict[str, str] = Field(default_factory=dict, description="Atomic task id -> execution state.")
    commits: dict[str, str | None] = Field(default_factory=dict)
    git: GitState | None = None
    applied: bool = Field(default=False, description="The merged changes were copied into cwd.")
    runs: list[CodingResult] = Field(default_factory=list, description="The execution runs so far.")
    spent: Usage = Field(default_factory=Usage)
    elapsed_seconds: float = 0.0
    budget_stop: str | None = None
    budget_limit: str | None = None
    budget_hit: list[str] = Field(default_factory=list)


def write_state(directory: Path, state: PlanState) -> None:
    """Replace the state file whole (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = state.model_dump_json()
    handle, temporary = tempfile.mkstemp(prefix=".state-", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, directory / STATE_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_state(directory: str | Path) -> PlanState:
    """The state in a state directory, or a ConfigurationError naming what is wrong."""
    path = Path(directory).expanduser() / STATE_FILE
    where = f"resume={str(directory)!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: no plan run was recorded there (no {STATE_FILE}); pass the folder "
                                 "a run was started with state_dir= (agenter plan prints it)",
                                 parameter="resume") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{where}: cannot read {path}: {exc}", parameter="resume") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{where}: {path} is not a plan state ({exc.msg})", parameter="resume") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ConfigurationError(f"{where}: {path} was written by another version of agenter "
                                 f"(format {data.get('version') if isinstance(data, dict) else '?'}, "
                                 f"this one reads {VERSION})", parameter="resume")
    try:
        return PlanState.model_validate(data)
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {path} is not a plan state "
                                 f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']})",
                                 parameter="resume") from None
