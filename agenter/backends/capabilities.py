"""What a backend can do, what each mode of running a request needs, and the fail-fast check.

A model API is not a coding runtime: a backend declares the capabilities it really has (the
runtime's, not the model's), a request runs in a mode, and a mode the backend cannot serve
fails when the agent is built, naming what is required, what is there, and what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from agenter._errors import ConfigurationError

__all__ = ["MODE_REQUIREMENTS", "BackendCapabilities", "CapabilityError", "Mode", "check_mode"]

#: How a request runs: the agent edits the workspace itself (autonomous), proposes a patch that
#: agenter checks and applies (patch), or only reads and answers (analysis).
Mode = Literal["autonomous", "patch", "analysis"]


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend's runtime can do; the session and facade decide by these, never by name."""

    text_completion: bool = False  # answers a prompt with text
    streaming: bool = False  # streams its output while it runs
    structured_output: bool = False  # returns an instance of a requested schema
    native_tool_loop: bool = False  # runs its own model → tool → model loop
    custom_tools: bool = False  # takes agenter's custom Python tools (function tools)
    mcp: bool = False  # takes MCP servers
    filesystem_read: bool = False
    filesystem_edit: bool = False
    shell: bool = False
    apply_patch: bool = False
    subagents: bool = False
    sandbox: bool = False  # sandbox=True can be honoured
    resume: bool = False  # a retry prompt lands in the same conversation
    steering: bool = False  # takes a user message while a turn runs (session.steer)
    pause: bool = False  # an ask nobody answers now pauses the run (on_ask="pause"; agent.approve resumes)
    # Patch mode: the model writes each changed file as its path and its whole text in a fenced
    # block, and the backend reads them into the proposal (else: the proposal as one JSON object).
    patch_files: bool = False

    def names(self) -> list[str]:
        """The capabilities this backend has."""
        return [f.name for f in fields(self) if getattr(self, f.name)]


#: What each mode needs from the backend.
MODE_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    # A shell is not required: aider edits files in its own loop without one (the validators
    # run the tests); the runtime matrix shows which backends have one.
    "autonomous": ("filesystem_edit", "native_tool_loop"),
    "patch": ("text_completion", "structured_output"),
    "analysis": ("text_completion",),
}

_INSTEAD = {
    "autonomous": "run it in patch mode (mode='patch'), where agenter applies the model's proposed "
                  "changes, or choose a backend with its own tool loop (anthropic-sdk, openai, claude-code, codex, ...)",
    "patch": "choose a backend that returns structured output",
    "analysis": "choose a backend that answers with text",
}


class CapabilityError(ConfigurationError):
    """A backend cannot run a request in the mode asked for."""

    def __init__(self, message: str, *, required: list[str], available: list[str]):
        super().__init__(message, parameter="mode")
        self.required = required
        self.available = available


def check_mode(mode: str, capabilities: BackendCapabilities, backend: str) -> None:
    """Raise CapabilityError when `backend` lacks what `mode` requires."""
    if mode not in MODE_REQUIREMENTS:
        raise ConfigurationError(f"unknown mode {mode!r}", parameter="mode", valid=list(MODE_REQUIREMENTS))
    required = list(MODE_REQUIREMENTS[mode])
    missing = [name for name in required if not getattr(capabilities, name)]
    if not missing:
        return
    available = capabilities.names()
    raise CapabilityError(
        f"Cannot run in {mode} mode with backend={backend}.\n"
        "Required capabilities:\n" + "".join(f"- {name}\n" for name in required)
        + "Available capabilities:\n" + ("".join(f"- {name}\n" for name in available) or "- (none)\n")
        + f"Instead: {_INSTEAD[mode]}.",
        required=required, available=available)
