"""Fallback chains: a backend made of other backends, tried in order.

    from agenter.backends.fallback import fallback_chain

    Chain = fallback_chain("claude-cli", ("codex-cli", {"api_key": "..."}), "anthropic-sdk")
    agent = AutonomousCodingAgent(backend=Chain)        # the session sees one backend

The chain runs its first member that can run. When a turn fails with a BackendError whose kind
another backend can fix (a missing program, auth, quota, rate limit after the member's own
retries, an overloaded or failing server, a context too long, a crashed agent), what the failed
attempt changed is put back (or kept, with a note: `failed_changes="keep"`), a STATUS message
named "fallback" says from, to and why, and the next member runs the turn. A refusal or a failed
validation moves on only when `fallback_on` lists "refusal" or "validation". One budget spans
the chain: `usage()` counts every attempt. `attempts()` lists them all (backend, status, error
class, usage, cost).

Members are built as the facade builds a backend: each with its own options (an entry
`(name, {options})`, where "model" is that member's model), checked when the chain is built. A
member whose program or package is missing is skipped at run time, recorded as an attempt; the
chain fails to build only when no member can run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator

from agenter._errors import BackendError, ConfigurationError, RequirementError
from agenter._types import ModifiedFiles, Usage
from agenter.backends import load_backend
from agenter.backends._failures import ANOTHER_BACKEND_MAY_FIX, ERROR_KINDS
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BackendSettings,
    MessageType,
    SessionSpec,
    TurnReport,
)
from agenter.backends.wrapper import WrapperBackend
from agenter.host.requirements import missing_requirements

__all__ = ["DEFAULT_FALLBACK_ON", "Attempt", "FallbackBackend", "FallbackOptions", "fallback_chain"]

#: Failure classes another backend can fix (the shared classifier's, agenter.backends._failures,
#: which gives every backend's failures these kinds). Never by default: "config" (a bad request
#: is likely to fail anywhere), "unknown", and the outcomes "refusal" and "validation".
DEFAULT_FALLBACK_ON: tuple[str, ...] = ANOTHER_BACKEND_MAY_FIX
#: What `fallback_on` may name: BackendError kinds and two outcomes.
FALLBACK_REASONS = (*ERROR_KINDS, "refusal", "validation")
#: A failed attempt's changes are put back from copies taken before it; files larger than this,
#: or beyond the total, are not copied (and then reported as kept).
BACKUP_FILE_LIMIT = 16 * 1024 * 1024
BACKUP_TOTAL_LIMIT = 512 * 1024 * 1024

Entry = str | type[Any] | tuple[str | type[Any], dict[str, Any]]


class FallbackOptions(BackendOptions):
    """Options of a fallback chain (keyword arguments of AutonomousCodingAgent)."""

    fallback_on: list[str] = Field(
        default_factory=lambda: list(DEFAULT_FALLBACK_ON),
        description="Failure classes that move on to the next backend (BackendError kinds, 'refusal', 'validation').")
    failed_changes: Literal["revert", "keep"] = Field(
        "revert", description="What happens to a failed attempt's changes before the next backend runs.")

    @field_validator("fallback_on")
    @classmethod
    def _known_reasons(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(FALLBACK_REASONS))
        if unknown:
            raise ValueError(f"unknown fallback reason(s) {', '.join(unknown)}; valid: {', '.join(FALLBACK_REASONS)}")
        return value


@dataclass
class Attempt:
    """One member's part in a run."""

    backend: str
    #: "running", "completed" (its last turn ended without error), "failed", "refused",
    #: "validation_failed" (moved on after a failed validation) or "skipped" (could not start).
    status: str = "running"
    error_kind: str | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    #: Files the attempt changed that were put back, or kept, when the chain moved on.
    reverted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = self.usage.model_dump()
        data["cost_usd"] = self.usage.cost_usd
        return data


@dataclass(frozen=True)
class _Member:
    cls: type[Any]
    options: dict[str, Any]
    model: str | None
    explicit_model: bool

    @property
    def name(self) -> str:
        return str(getattr(self.cls, "name", self.cls.__name__))


def _member(entry: Entry) -> _Member:
    target, options = entry if isinstance(entry, tuple) else (entry, {})
    cls = load_backend(target) if isinstance(target, str) else target
    if not (isinstance(cls, type) and hasattr(cls, "options_model") and hasattr(cls, "capabilities")):
        raise ConfigurationError(f"{target!r} is not a backend", parameter="backend")
    options = dict(options)
    explicit = "model" in options
    model = options.pop("model", None)
    return _Member(cls, options, model, explicit)


def _common(capabilities: Sequence[BackendCapabilities]) -> BackendCapabilities:
    """What every member can do (the chain can promise no more). A chain never pauses: a paused
    run is continued by the backend that paused it, which a chain does not keep across processes."""
    common = {f.name: all(getattr(c, f.name) for c in capabilities) for f in fields(BackendCapabilities)}
    return BackendCapabilities(**{**common, "pause": False})


def fallback_chain(*backends: Entry, name: str | None = None) -> type[FallbackBackend]:
    """A backend class that runs `backends` in order (names, classes or (name, {options}))."""
    if len(backends) < 1:
        raise ConfigurationError("a fallback chain needs at least one backend", parameter="backend")
    members = tuple(_member(entry) for entry in backends)
    kinds = [frozenset(getattr(m.cls, "permission_kinds", frozenset())) for m in members]
    attributes = {
        "members": members,
        "name": name or "fallback(" + ", ".join(m.name for m in members) + ")",
        "capabilities": _common([m.cls.capabilities for m in members]),
        "permission_kinds": frozenset.intersection(*kinds),
        "__module__": __name__,
    }
    return type("FallbackChain", (FallbackBackend,), attributes)


class FallbackBackend(WrapperBackend[FallbackOptions]):
    """Runs its members in order (see the module docstring); build one with `fallback_chain`."""

    name: ClassVar[str] = "fallback"
    options_model: ClassVar[type[BackendOptions]] = FallbackOptions
    members: ClassVar[tuple[_Member, ...]] = ()

    # ------------------------------------------------------------------ configuration
    @classmethod
    def member_settings(cls, settings: BackendSettings[Any], member: _Member) -> BackendSettings[Any]:
        options = member.cls.options_model(**member.options)
        model = member.model if member.explicit_model else settings.model
        return replace(settings, options=options, model=model)

    @classmethod
    def check_settings(cls, settings: BackendSettings[Any]) -> None:
        """Each member's settings are checked as the facade checks a backend's, except that a
        member that cannot run here is allowed while another one can."""
        if not cls.members:
            raise ConfigurationError("build a chain with fallback_chain(...)", parameter="backend")
        missing = []
        for member in cls.members:
            try:
                member_settings = cls.member_settings(settings, member)
            except ValidationError as exc:  # an unknown or invalid option of this member
                raise ConfigurationError(f"invalid options for {member.name} in the fallback chain: {exc}",
                                         parameter="backend") from None
            problems = missing_requirements(member.cls.requirements(member_settings))
            if problems:
                missing += [f"{member.name}: {p}" for p in problems]
            member.cls.check_tool_names(settings.tools)
            member.cls.check_permissions(member_settings)
            member.cls.validate_settings(member_settings)
        if all(missing_requirements(m.cls.requirements(cls.member_settings(settings, m))) for m in cls.members):
            lines = "\n".join(f"  - {m}" for m in missing)
            raise RequirementError(f"no backend of the chain {cls.name} can run here; they need:\n{lines}",
                                   backend=cls.name, missing=missing)

    def __init__(self, settings: BackendSettings[FallbackOptions]):
        super().__init__(settings)
        self._chain = [(m, self.member_settings(settings, m)) for m in self.members]
        self._index = -1
        self._attempts: list[Attempt] = []
        self._first_prompt: str | None = None
        self._member_turns = 0
        self._backup: _Backup | None = None
        #: Files of this turn's replaced members that stayed changed (failed_changes="keep", or
        #: too large to back up).
        self._kept: set[str] = set()

    def attempts(self) -> list[Attempt]:
        """Every member's part so far, the running one included (its usage as of now)."""
        if self._member is not None and self._attempts and self._attempts[-1].status in ("running", "completed"):
            self._attempts[-1].usage = self._member.usage()
        return list(self._attempts)

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        await self._advance(None)

    def _report_turn(self, member: TurnReport | None) -> TurnReport:
        report = member or TurnReport()
        files = report.files
        if self._kept:
            files = ModifiedFiles(written=set(files.written) | {p for p in self._kept if p not in files.deleted},
                                  deleted=set(files.deleted), created=set(files.created))
        return replace(report, files=files, attempts=tuple(self.attempts()))

    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        self._kept = set()
        if self._first_prompt is None:
            self._first_prompt = prompt
        elif "validation" in self.options.fallback_on and self._member_turns > 0 and self._has_next():
            # A second turn of the same member means its work did not pass validation.
            for message in await self._move_on("validation_failed", "validation",
                                               "its changes did not pass validation"):
                yield message
        while True:
            member = self._member
            if member is None:  # moved on, but every member left was skipped
                failed = next((a for a in reversed(self._attempts) if a.status != "skipped"), self._attempts[-1])
                raise BackendError(f"every backend of {self.name} failed; the last: {failed.backend}: {failed.error}",
                                   backend=self.name, kind=failed.error_kind or "unknown")
            self._member_turns += 1
            self._attempts[-1].turns += 1
            try:
                async with contextlib.aclosing(member.execute(self._prompt_for_member(prompt))) as stream:
                    async for message in stream:
                        yield message
            except BackendError as exc:
                if not (exc.kind in self.options.fallback_on and self._has_next()):
                    self._close_attempt("failed", exc.kind, str(exc))
                    raise
                for message in await self._move_on("failed", exc.kind, str(exc)):
                    yield message
                continue
            refusal = member.last_turn().refusal
            if refusal is not None and "refusal" in self.options.fallback_on and self._has_next():
                for message in await self._move_on("refused", "refusal", refusal.reason):
                    yield message
                continue
            self._attempts[-1].status = "refused" if refusal is not None else "completed"
            return

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._backup is not None:
            self._backup.close()
            self._backup = None

    # ------------------------------------------------------------------ moving along the chain
    def _has_next(self) -> bool:
        return self._index + 1 < len(self._chain)

    def _prompt_for_member(self, prompt: str) -> str:
        """A member joining mid-session has not seen the task: it gets it before the prompt."""
        first = self._first_prompt
        if self._member_turns > 1 or first is None or prompt == first:
            return prompt
        return f"Task:\n{first}\n\n{prompt}"

    async def _advance(self, reason: str | None) -> str | None:
        """Connect the next member that can run; returns its name (None: the chain ran out)."""
        while self._has_next():
            self._index += 1
            member, settings = self._chain[self._index]
            attempt = Attempt(backend=member.name)
            self._attempts.append(attempt)
            problems = missing_requirements(member.cls.requirements(settings))
            if problems:
                attempt.status, attempt.error_kind, attempt.error = "skipped", "missing_program", "; ".join(problems)
                continue
            backend = member.cls(settings)
            spec = self.spec if self._index == 0 else replace(self.spec, resume_session_id=None)
            try:
                await backend.connect(spec)
            except BackendError as exc:
                await backend.disconnect()
                attempt.status, attempt.error_kind, attempt.error = "failed", exc.kind, self.redact(str(exc))
                if exc.kind in self.options.fallback_on and self._has_next():
                    continue
                raise
            self._use(backend)
            self._member_turns = 0
            if self._has_next() and self.options.failed_changes == "revert":
                self._backup = await asyncio.to_thread(_Backup.take, self.cwd)
            return member.name
        return None

    async def _move_on(self, status: str, kind: str, error: str) -> list[BackendMessage]:
        """Close the running attempt, put back (or keep) what it changed, start the next member."""
        member = self._member
        origin = self._attempts[-1].backend
        attempt = self._close_attempt(status, kind, error)
        self._member = None
        if member is not None:
            self._retire(member)
            await member.disconnect()
        backup, self._backup = self._backup, None
        if backup is not None:
            attempt.reverted, attempt.kept = await asyncio.to_thread(backup.restore)
            backup.close()
        self._kept |= set(attempt.kept)
        target = await self._advance(kind)
        note = f"{origin} {status.replace('_', ' ')} ({kind}); "
        note += f"falling back to {target}" if target else "no backend left"
        if attempt.reverted:
            note += f"; its changes were undone: {', '.join(attempt.reverted[:20])}"
        if attempt.kept:
            note += f"; changes kept: {', '.join(attempt.kept[:20])}"
        details = {"from": origin, "to": target, "reason": kind, "error": self.redact(error)[:2000],
                   "reverted": attempt.reverted, "kept": attempt.kept}
        return [BackendMessage(MessageType.STATUS, note, tool_name="fallback", details=details)]

    def _close_attempt(self, status: str, kind: str | None, error: str | None) -> Attempt:
        attempt = self._attempts[-1]
        attempt.status, attempt.error_kind = status, kind
        attempt.error = self.redact(error)[:2000] if error else None
        if self._member is not None:
            attempt.usage = self._member.usage()
            if self.options.failed_changes == "keep" or self._backup is None:
                attempt.kept = sorted(self._member.last_turn().files.all)
        return attempt

    def _retire(self, member: Any) -> None:
        """A member leaves: its usage and denials stay with the chain (and its attempt, the last)."""
        self._attempts[-1].usage = member.usage()
        super()._retire(member)


class _Backup:
    """Copies of the workspace's files taken before an attempt, to put back what it changed."""

    def __init__(self, root: Path, snapshot: Any, folder: Path, saved: set[str], directories: set[str]):
        self.root, self.snapshot, self.folder = root, snapshot, folder
        self.saved, self.directories = saved, directories

    @classmethod
    def take(cls, root: Path) -> _Backup:
        from agenter.sandbox.workspace import WorkspaceSnapshot

        snapshot = WorkspaceSnapshot.take(root)
        folder = Path(tempfile.mkdtemp(prefix="agenter-fallback-"))
        saved: set[str] = set()
        total = 0
        for rel in snapshot.entries:
            source = root / rel
            try:
                info = source.lstat()
                if not stat.S_ISREG(info.st_mode) or info.st_size > BACKUP_FILE_LIMIT:
                    continue
                if total + info.st_size > BACKUP_TOTAL_LIMIT:
                    continue
                target = folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target, follow_symlinks=False)
            except OSError:
                continue
            saved.add(rel)
            total += info.st_size
        directories = {str(Path(rel).parent) for rel in snapshot.entries}
        return cls(root, snapshot, folder, saved, directories)

    def restore(self) -> tuple[list[str], list[str]]:
        """Put back every file the attempt changed; returns (restored, could not restore)."""
        changes: ModifiedFiles = self.snapshot.changes_since()
        restored, kept = [], []
        for rel in sorted(changes.written | changes.deleted):
            target = self.root / rel
            try:
                if rel in self.saved:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if target.is_symlink() or target.exists():
                        target.unlink()
                    shutil.copy2(self.folder / rel, target, follow_symlinks=False)
                elif rel not in self.snapshot.entries:  # new: remove it
                    if target.is_symlink() or target.exists():
                        target.unlink()
                else:  # existed, but too large (or unreadable) to back up
                    kept.append(rel)
                    continue
            except OSError:
                kept.append(rel)
                continue
            restored.append(rel)
        self._remove_new_directories(changes)
        return restored, kept

    def _remove_new_directories(self, changes: ModifiedFiles) -> None:
        candidates = {Path(rel).parent for rel in changes.written}
        for directory in sorted(candidates, key=lambda p: len(p.parts), reverse=True):
            while str(directory) not in ("", ".") and str(directory) not in self.directories:
                with contextlib.suppress(OSError):
                    os.rmdir(self.root / directory)  # only when empty
                directory = directory.parent

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
