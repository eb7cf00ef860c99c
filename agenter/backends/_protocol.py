"""The contract between the session and a backend.

The session knows backends only through this protocol and their declared capabilities; a
backend knows nothing of validators or budgets beyond reporting usage as it arrives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from agenter._types import Usage
from agenter.tools import Tool


class MessageType(str, Enum):
    TEXT = "text"
    THINKING = "thinking"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    PLAN = "plan"
    STATUS = "status"  # lifecycle notes: "retrying after 529", "session resumed", ...
    ERROR = "error"  # a recoverable problem the backend reports but survives


@dataclass
class BackendMessage:
    """One thing a backend said or did, streamed while the turn runs."""

    type: MessageType
    content: str = ""
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_call_id: str | None = None
    is_error: bool = False

    def event_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message_type": self.type.value, "content": self.content}
        if self.tool_name is not None:
            data["tool_name"] = self.tool_name
        if self.tool_input is not None:
            data["tool_input"] = self.tool_input
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.is_error:
            data["is_error"] = True
        return data


@dataclass
class ModifiedFiles:
    """Paths (relative to cwd, POSIX separators) a turn changed."""

    written: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.written or self.deleted)

    def __or__(self, other: ModifiedFiles) -> ModifiedFiles:
        written = (self.written | other.written) - other.deleted
        deleted = (self.deleted - other.written) | other.deleted
        return ModifiedFiles(written=written, deleted=deleted)

    @property
    def all(self) -> list[str]:
        return sorted(self.written | self.deleted)


@dataclass
class Refusal:
    reason: str
    category: str | None = None


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend can do; the session and facade decide by these, never by backend name."""

    custom_tools: bool = False
    structured_output: bool = False
    resume: bool = False  # a retry prompt lands in the same conversation
    sandbox: bool = False  # sandbox=True can be honoured
    streaming: bool = True


class BackendOptions(BaseModel):
    """Base for a backend's own options (passed as keyword arguments to the facade)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


@dataclass
class BackendSettings:
    """Per-agent settings, fixed when the facade is built."""

    model: str | None
    tools: list[Tool]
    sandbox: bool
    options: BackendOptions


@dataclass
class SessionSpec:
    """Per-session settings from the request."""

    cwd: Path
    allowed_write_paths: list[str] | None = None
    system_prompt: str | None = None
    output_type: type[BaseModel] | None = None
    resume_session_id: str | None = None


@runtime_checkable
class CodingBackend(Protocol):
    name: ClassVar[str]
    capabilities: ClassVar[BackendCapabilities]
    options_model: ClassVar[type[BackendOptions]]

    async def connect(self, spec: SessionSpec) -> None:
        """Start the agent for one session (spawn the process, open the client)."""

    def execute(self, prompt: str) -> AsyncIterator[BackendMessage]:
        """Run one turn; yields messages as they arrive. Raises BackendError on failure.

        Cancelling the consumer (time budget) must stop the turn: the backend cleans up in
        `finally` and `disconnect`.
        """

    def modified_files(self) -> ModifiedFiles:
        """Files changed by the latest turn."""

    def usage(self) -> Usage:
        """Cumulative usage for the whole session, updated as it arrives."""

    def structured_output(self) -> Any | None:
        """The latest turn's structured output (an instance of output_type), if any."""

    def refusal(self) -> Refusal | None:
        """Set when the latest turn declined the task."""

    @property
    def session_id(self) -> str | None:
        """The agent's own session/thread id, for resume."""

    async def disconnect(self) -> None:
        """End the session; no process or connection may outlive this."""


class BaseBackend:
    """Convenience base with the bookkeeping most backends share. Not required by the protocol."""

    name: ClassVar[str] = "base"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities()
    options_model: ClassVar[type[BackendOptions]] = BackendOptions

    def __init__(self, settings: BackendSettings):
        self.settings = settings
        self.options = settings.options
        self._usage = Usage()
        self._modified = ModifiedFiles()
        self._structured: Any | None = None
        self._refusal: Refusal | None = None
        self._session_id: str | None = None

    @classmethod
    def check_settings(cls, settings: BackendSettings) -> None:
        """Raise ConfigurationError for settings this backend cannot honour (called at facade init)."""

    def modified_files(self) -> ModifiedFiles:
        return self._modified

    def usage(self) -> Usage:
        return self._usage

    def structured_output(self) -> Any | None:
        return self._structured

    def refusal(self) -> Refusal | None:
        return self._refusal

    @property
    def session_id(self) -> str | None:
        return self._session_id

    def _start_turn(self) -> None:
        self._modified = ModifiedFiles()
        self._structured = None
        self._refusal = None
