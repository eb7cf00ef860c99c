"""How a request runs, beyond the loop every mode shares: the session's strategies.

- autonomous: the agent changes the workspace with its own tools (the loop alone).
- analysis: the agent only reads and answers; the facade runs it under the permission
  policy's plan mode, and a turn that changed a file fails the run.
- patch (PatchMode, here): on any backend that returns structured output, the agent proposes
  the change and agenter makes it. Each turn runs read-only (the plan policy, as in analysis)
  and is asked for a `Proposal` as its structured output; agenter checks every path, asks the
  permission gate for each file, applies all files or none (agenter.tools.patch), and the
  validators check the result. A proposal that cannot be applied (an empty one, one that would
  leave every file as it is, a path refused, a search text not found) goes back to the model
  with what to correct, as a validation failure does, so every attempt counts as an iteration.

The proposal carries no test commands: what checks a change is the validators
(`validators=["command:pytest -q"]`), whose failures go back to the model with the changed
files as they now read (for backends that cannot read files themselves).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agenter._errors import PathSecurityError
from agenter.backends.base import BackendMessage, Denial, MessageType
from agenter.permissions import PermissionDecision, ToolCall
from agenter.tools.patch import FileChange, PatchError, PatchProposal, apply_proposal, check_proposal
from agenter.tools.shown import file_block

__all__ = ["PatchMode", "PatchStep", "Proposal", "output_type_for"]

#: Characters of a changed file's current text shown again after a failed validation (each, and
#: in all), for backends that cannot read the workspace themselves.
SHOWN_FILE_CHARS = 12_000
SHOWN_TOTAL_CHARS = 40_000
#: Characters of one event's text (the apply result).
EVENT_TEXT_LIMIT = 4000
#: Characters of a failed proposal shown again to a backend that does not keep its conversation.
PROPOSAL_ECHO_CHARS = 16_000


class Proposal(BaseModel):
    """What patch mode asks the model for: the change, file by file. (No test commands or risks:
    the validators check the change, and a model fills such fields with guesses.)"""

    # Fields a model adds anyway (test commands, risks) are ignored, not a reason to ask again.
    model_config = ConfigDict(extra="ignore", title="PatchProposal")

    summary: str = Field(description="What the change does, in one sentence.")
    files: list[FileChange] = Field(description="The file changes, at most one per file.")


GUIDANCE = """\
Propose the change as one JSON object; you do not edit files yourself. agenter checks it, \
applies it (all files or none) and tells you what to correct. Its fields:
- "summary": what the change does, in one sentence.
- "files": one entry per changed file: "path" (relative to the repository root), "operation" \
("create", "modify", "delete", or "rename" with "new_path"), and the change given ONE way (the \
other two null): "content" (the whole new text of the file, every unchanged line included: for \
new files and files under about 300 lines), "search_replace" (a list of {{"search", "replace"}} \
blocks, each search text copied exactly from the file and found in it once: small edits to large \
files), or "diff" (a unified diff of that file).
Change only what the task needs, keep the existing style, and never guess the content of a file \
you have not seen.

Example. Task: "Add a function multiply(a, b) to mathutil.py", where mathutil.py reads:
def add(a, b):
    return a + b
A correct reply:
{example}"""

#: The same, for a backend whose model writes the changed files themselves (capability
#: `patch_files`): the backend reads them into the proposal. Small local models write a fenced
#: file well and a JSON-escaped one badly (measured on the 22-task benchmark, Qwen2.5-Coder-1.5B:
#: 7 tasks solved against 3, with half the prompt and a third of the generated tokens per task
#: solved). The files come first and the sentence after them: asked for the sentence first, the
#: model wrote only the sentence in 8 of 22 first replies; files first, 1 of 22 gave no file, and
#: 5 first replies passed the tests against 3.
_FILES_EXAMPLE_TASK = """\
Example. Task: "Add a function multiply(a, b) to mathutil.py", where mathutil.py reads:
def add(a, b):
    return a + b
A correct reply:
"""
_FILES_EXAMPLE_FILE = """\
mathutil.py
```python
def add(a, b):
    return a + b


def multiply(a, b):
    return a * b
```"""
_FILES_EXAMPLE_SENTENCE = "Add multiply(a, b) to mathutil.py."
_FILES_HOW = "its path on a line of its own, then its whole new text in a ``` block, every unchanged line included"
_FILES_REST = ("Change only what the task needs, keep the existing style, and never guess the content of a file "
               "you have not seen.")
FILES_GUIDANCE = (f"agenter writes the files you give and tells you what to correct. Give each file you change as "
                  f"{_FILES_HOW}; then say in one sentence what the change does. {_FILES_REST}\n\n"
                  f"{_FILES_EXAMPLE_TASK}{_FILES_EXAMPLE_FILE}\n{_FILES_EXAMPLE_SENTENCE}")
#: The same for a retry, the sentence first: shown the files that failed and asked for files
#: first, the model gave them back unchanged in 14 of 14 retries (replayed); asked for the
#: sentence first, 2 of the 14 then passed the tests.
FILES_RETRY_GUIDANCE = (f"agenter writes the files you give and tells you what to correct. First say in one sentence "
                        f"what the change does. Then give each file you change as {_FILES_HOW}. {_FILES_REST}\n\n"
                        f"{_FILES_EXAMPLE_TASK}{_FILES_EXAMPLE_SENTENCE}\n{_FILES_EXAMPLE_FILE}")
FILES_AGAIN = ("Reply with the changed files, each as its path on a line of its own, then its whole new text "
               "in a ``` block, against the files as they are now.")

_EXAMPLE = {
    "summary": "Add multiply(a, b) to mathutil.py.",
    "files": [{"path": "mathutil.py", "operation": "modify", "new_path": None, "diff": None, "search_replace": None,
               "content": "def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n"}],
}


@dataclass
class PatchStep:
    """What applying one turn's proposal did: events to show, and either the files it changed
    (with their diff) or the problem that goes back to the model."""

    messages: list[BackendMessage] = field(default_factory=list)
    written: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    diff: str = ""
    summary: str = ""
    problem: str | None = None
    #: Paths refused before the gate was asked (outside the workspace, .git/, allowed_write_paths).
    denials: list[Denial] = field(default_factory=list)


Permit = Callable[[ToolCall], Awaitable[PermissionDecision]]


def output_type_for(mode: str, output_type: type[BaseModel] | None) -> type[BaseModel] | None:
    """The structured output a backend is asked for: patch mode's proposal, else the request's.
    (Patch mode takes no output_type of its own: the facade refuses the two together.)"""
    if mode == "patch":
        if output_type is not None:
            from agenter._errors import ConfigurationError

            raise ConfigurationError("patch mode returns the applied change, not structured output: run the "
                                     "request without output_type, or in analysis mode", parameter="output_type")
        return Proposal
    return output_type


class PatchMode:
    """Patch mode's part of a run (see the module docstring).

    cwd, allowed_write_paths, sandbox: where proposals may write (agenter.sandbox.paths rules).
    permit: the session's permission gate (the backend's `permit`).
    shows_files: whether the model needs the changed files' text after a failed validation (it
        cannot read files itself).
    files: whether the model writes the changed files in fenced blocks, which the backend reads
        into the proposal (capability `patch_files`), rather than the proposal as JSON.
    """

    output_type: type[BaseModel] = Proposal

    def __init__(self, *, cwd: str | Path, allowed_write_paths: Sequence[str] | None, sandbox: bool,
                 permit: Permit, shows_files: bool, files: bool = False):
        from agenter.sandbox.paths import PathResolver

        self.resolver = PathResolver(cwd, allowed_write_paths, sandbox=sandbox)
        self._inside = PathResolver(cwd, None, sandbox=True)  # tells allowed_write_paths' refusals apart
        self.permit = permit
        self.shows_files = shows_files
        self.files = files
        #: The unified diff of every proposal applied in this run.
        self.diff = ""
        self.changed: list[str] = []
        #: The latest proposal as JSON (shown again with its problems to a backend that forgets).
        self.last_proposal = ""

    # ------------------------------------------------------------------ prompts
    def task(self, prompt: str, *, again: bool = False) -> str:
        """The first turn's prompt: how to propose, then the task (`again`: for a retry)."""
        if self.files:
            guidance = FILES_RETRY_GUIDANCE if again else FILES_GUIDANCE
        else:
            guidance = GUIDANCE.format(example=json.dumps(_EXAMPLE))
        return guidance + "\n\nTask:\n" + prompt

    def retry(self, problems: list[str], *, applied: bool, task: str | None) -> str:
        """The next turn's prompt after a proposal that was not applied, or was applied and then
        failed validation (`applied`). `task`: the task again, for a backend that forgets; it
        gets the first turn's prompt again, the format included (without it, Qwen2.5-Coder-1.5B
        gave a file's change two ways at once, three replies in a row)."""
        lines = [self.task(task, again=True) + "\n"] if task else []
        if applied:
            lines.append("Your proposal was applied, but the result did not pass validation:")
        else:
            if task and self.last_proposal:
                # A backend that starts each turn afresh has not kept the proposal it corrects.
                lines.append("Your last proposal was:\n" + _truncate(self.last_proposal, PROPOSAL_ECHO_CHARS) + "\n")
            lines.append("Your proposal was not applied; no file was changed. Correct this:")
        lines += [f"- {p}" for p in problems[:50]]
        if applied:
            lines.append("\nThe checks are right: change the code, not the tests or the checks.")
            shown = self._current_files()
            if shown:
                lines.append("The files you changed now read (your last proposal is in them):\n" + shown)
        lines.append("\n" + (FILES_AGAIN if self.files else
                             "Reply with a new proposal, as one JSON object, against the files as they are now."))
        return "\n".join(lines)

    def _current_files(self) -> str:
        if not self.shows_files:
            return ""
        from agenter.sandbox.paths import read_text_capped

        parts, total = [], 0
        for path in self.changed:
            text = read_text_capped(str(self.resolver.cwd / path), SHOWN_FILE_CHARS)
            if text is None or total + len(text) > SHOWN_TOTAL_CHARS:
                continue
            total += len(text)
            parts.append(file_block(path, text))
        return "\n".join(parts)

    # ------------------------------------------------------------------ applying
    async def apply(self, output: Any) -> PatchStep:
        """Check, permit and apply one turn's proposal (never raises for a bad proposal)."""
        import asyncio

        step = PatchStep()
        if output is None:
            step.problem = ("no changed file was given: give each file you change as its path on a line of its "
                            "own, then its whole new text in a ``` block" if self.files else
                            "no proposal was returned: reply with one JSON object as described (its summary and files)")
            return step
        try:
            proposal = output if isinstance(output, PatchProposal) else PatchProposal.model_validate(
                output.model_dump() if isinstance(output, BaseModel) else output)
        except Exception as exc:  # noqa: BLE001 - a shape error goes back to the model
            step.problem = f"the proposal does not match its schema: {exc}"
            return step
        step.summary = proposal.summary
        self.last_proposal = _as_files(proposal) if self.files else proposal.model_dump_json(exclude_defaults=True)
        step.messages.append(_plan_message(proposal))
        if not proposal.files:
            step.problem = ("the proposal changes no file, but the task needs a change: give the files to "
                            "change in \"files\"")
            return step
        step.messages.append(BackendMessage(MessageType.TOOL_CALL, tool_name="apply_patch",
                                            tool_input={"files": [_change_summary(c) for c in proposal.files]}))
        # Where a path may not be written at all (outside the workspace, .git/, allowed_write_paths):
        # a refusal, named in the result like the gate's.
        refused = []
        for change in proposal.files:
            for path in [change.path] + ([change.new_path] if change.new_path else []):
                try:
                    self.resolver.resolve_write(path)
                except PathSecurityError as exc:
                    rule, reason = "workspace", str(exc)
                    if self._inside.is_allowed_write(path):
                        patterns = ", ".join(self.resolver.allowed_write_paths or []) or "none"
                        rule, reason = "allowed_write_paths", f"not in allowed_write_paths ({patterns})"
                    step.denials.append(Denial(tool="apply_patch", target=path, reason=reason, rule=rule))
                    refused.append(f"{path}: {reason}")
        if not refused:
            try:
                await asyncio.to_thread(check_proposal, proposal, self.resolver)
            except PatchError as exc:
                return self._failed(step, exc.for_model())
            for change in proposal.files:
                paths = [change.path] + ([change.new_path] if change.new_path else [])
                decision = await self.permit(ToolCall.edit(*paths, name="apply_patch"))
                if not decision.allowed:
                    refused.append(f"{change.path}: {decision.reason}")
                    step.denials.append(Denial(tool="apply_patch", target=decision.summary, reason=decision.reason,
                                               rule=decision.rule))
        if refused:
            return self._failed(step, "The patch was not applied; no file was changed. These changes were refused "
                                      "(leave those files alone, or choose allowed paths):\n"
                                      + "\n".join(f"- {line}" for line in refused))
        try:
            result = await asyncio.to_thread(apply_proposal, proposal, self.resolver)
        except PatchError as exc:
            if exc.partial:
                step.written = {e.path for e in exc.errors if e.path}
            return self._failed(step, exc.for_model())
        if not result.written and not result.deleted:
            return self._failed(step, "the proposal leaves every file as it already is (its content is the "
                                      "current content): it does not change anything")
        step.written, step.deleted, step.diff = set(result.written), set(result.deleted), result.diff
        self.diff += result.diff
        for path in sorted(result.written):
            if path not in self.changed:
                self.changed.append(path)
        self.changed = [p for p in self.changed if p not in result.deleted]
        step.messages.append(BackendMessage(
            MessageType.TOOL_RESULT, tool_name="apply_patch", content=_applied_text(step.written, step.deleted),
            tool_input={"written": sorted(step.written), "deleted": sorted(step.deleted)}))
        return step

    @staticmethod
    def _failed(step: PatchStep, problem: str) -> PatchStep:
        step.problem = problem
        step.messages.append(BackendMessage(MessageType.TOOL_RESULT, tool_name="apply_patch", is_error=True,
                                            content=_truncate(problem, EVENT_TEXT_LIMIT)))
        return step


def _as_files(proposal: PatchProposal) -> str:
    """A proposal as the model wrote it in the files format (each file's path and text, then its
    summary)."""
    parts = []
    for change in proposal.files:
        body = change.content or ""
        if body and not body.endswith("\n"):
            body += "\n"
        parts.append(f"{change.path}\n```\n{body}```")
    parts.append(proposal.summary.strip())
    return "\n".join(part for part in parts if part)


def _plan_message(proposal: PatchProposal) -> BackendMessage:
    data = {"summary": proposal.summary, "files": [_change_summary(c) for c in proposal.files]}
    lines = [proposal.summary] + [f"- {c.operation} {c.path}" + (f" -> {c.new_path}" if c.new_path else "")
                                  for c in proposal.files]
    return BackendMessage(MessageType.PLAN, content="\n".join(lines), tool_name="patch_proposal", tool_input=data)


def _change_summary(change: FileChange) -> dict[str, Any]:
    how = next((name for name in ("content", "search_replace", "diff") if getattr(change, name) is not None), None)
    data: dict[str, Any] = {"path": change.path, "operation": change.operation}
    if change.new_path:
        data["new_path"] = change.new_path
    if how:
        data["as"] = how
    return data


def _applied_text(written: set[str], deleted: set[str]) -> str:
    parts = []
    if written:
        parts.append(f"written: {', '.join(sorted(written))}")
    if deleted:
        parts.append(f"deleted: {', '.join(sorted(deleted))}")
    return "Applied. " + "; ".join(parts)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"
