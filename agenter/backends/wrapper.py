"""WrapperBackend: the base of a backend made of backends (a fallback chain today; retrying or
recording wrappers later).

A wrapper is not an agent: it starts none, watches no workspace, prices nothing and owns no
permission gate. Every turn is run by a member, a complete backend of its own (BaseBackend or
another wrapper), and the wrapper reports what its members did: their usage, their refusals
and denials, the files they changed. So a subclass writes only its policy:

- `_connect(spec)`: choose and connect the first member (`self._use(backend)`);
- `_turn(prompt)`: run the turn on members, yielding their messages (it may switch members);
- `_disconnect()`: end every member still running.

and it may add to the turn's report (`_report(member_report)`: attempts, files kept from a
member that was replaced). Class-level checks (`check_settings`, `requirements`, ...) come from
BackendClass, as for every backend; a wrapper overrides them to check its members.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Generic

from agenter._errors import BackendError
from agenter._types import Usage
from agenter.backends.base import (
    BackendClass,
    BackendMessage,
    BackendSettings,
    Denial,
    OptionsT,
    SessionSpec,
    TurnReport,
)
from agenter.host.redact import Redactor
from agenter.permissions import PermissionDecision, ToolCall

__all__ = ["WrapperBackend"]


class WrapperBackend(BackendClass, Generic[OptionsT]):
    """A backend made of backends (see the module docstring)."""

    name: ClassVar[str] = "wrapper"

    def __init__(self, settings: BackendSettings[OptionsT]):
        self.settings = settings
        self.options: OptionsT = settings.options
        self.redact = Redactor(extra=settings.options.secrets())
        self._spec: SessionSpec | None = None
        self._member: Any = None
        self._state = "new"
        self._closing: asyncio.Future[None] | None = None
        self._report = TurnReport()
        #: Usage and denials of members that left (the running member's are added live).
        self._spent = Usage()
        self._past_denials: list[Denial] = []

    # ------------------------------------------------------------------ for subclasses
    async def _connect(self, spec: SessionSpec) -> None:
        raise NotImplementedError

    def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        raise NotImplementedError

    async def _disconnect(self) -> None:
        """End the running member (a subclass with more to close extends it)."""
        member, self._member = self._member, None
        if member is not None:
            self._retire(member)
            await member.disconnect()

    def _report_turn(self, member: TurnReport | None) -> TurnReport:
        """The turn's report from the last member's (None: no member finished the turn)."""
        return member or TurnReport()

    def _use(self, member: Any) -> None:
        """`member` (connected) runs the next turns."""
        self._member = member

    def _retire(self, member: Any) -> None:
        """A member leaves: its usage and denials stay with the wrapper."""
        self._spent = self._spent + member.usage()
        self._past_denials += [d for d in member.denials() if d not in self._past_denials]

    # ------------------------------------------------------------------ the contract
    @property
    def spec(self) -> SessionSpec:
        if self._spec is None:
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        return self._spec

    @property
    def cwd(self) -> Path:
        return Path(self.spec.cwd)

    @property
    def member(self) -> Any:
        """The backend running now (None before connect and once none is left)."""
        return self._member

    @property
    def default_model(self) -> str | None:
        return self._member.default_model if self._member is not None else self.settings.model

    @property
    def session_id(self) -> str | None:
        return self._member.session_id if self._member is not None else None

    @property
    def price_provider(self) -> str | None:  # type: ignore[override]
        return getattr(self._member, "price_provider", None)

    async def connect(self, spec: SessionSpec) -> None:
        if self._state != "new":
            raise BackendError(f"the {self.name} backend was already connected once", backend=self.name)
        self._spec, self._state = spec, "connecting"
        try:
            await self._connect(spec)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.disconnect()
            raise
        if self._state == "connecting":
            self._state = "connected"

    async def execute(self, prompt: str) -> AsyncGenerator[BackendMessage, None]:
        if self._state != "connected":
            raise BackendError(f"the {self.name} backend is not connected", backend=self.name)
        self._report = TurnReport()
        try:
            async with contextlib.aclosing(self._turn(prompt)) as messages:  # type: ignore[type-var]
                async for message in messages:
                    yield message
        finally:
            member = self._member
            self._report = self._report_turn(member.last_turn() if member is not None else None)

    def last_turn(self) -> TurnReport:
        return self._report

    def usage(self) -> Usage:
        return self._spent + (self._member.usage() if self._member is not None else Usage())

    def denials(self) -> list[Denial]:
        current = self._member.denials() if self._member is not None else []
        return self._past_denials + [d for d in current if d not in self._past_denials]

    def steer(self, text: str) -> str | None:
        """The running member takes the message (its STEERED message comes through the turn)."""
        member = self._member
        if member is None:
            return "no member of this backend is running: send it as the next request"
        reason: str | None = member.steer(text)
        return reason

    async def permit(self, call: ToolCall) -> PermissionDecision:
        if self._member is None:
            raise BackendError(f"the {self.name} backend has no backend running", backend=self.name)
        decision: PermissionDecision = await self._member.permit(call)
        return decision

    async def disconnect(self) -> None:
        if self._closing is None:
            self._state = "closed"
            self._closing = asyncio.ensure_future(self._disconnect())
        await asyncio.shield(self._closing)
