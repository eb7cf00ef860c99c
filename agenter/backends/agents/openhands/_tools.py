"""agenter tools (custom tools and the refusal tool) as OpenHands tools, and the terminal.

Imported only when the openhands backend connects (it imports openhands-sdk). One registered
ToolDefinition class, "AgenterTools", resolves a session's tools from a process-wide table keyed
by session id, so nothing about a session outlives its disconnect in OpenHands' global registry.

"AgenterTerminal" resolves OpenHands' own terminal the same way, with the session's environment:
a tool spec's params are saved with a persisted conversation (base_state.json), and the `env`
option's values (keys, tokens) must not be written there.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from agenter.backends.base import ToolReply
from openhands.sdk.mcp.definition import MCPToolAction, MCPToolObservation
from openhands.sdk.tool import Action, Observation, ToolAnnotations, ToolDefinition, ToolExecutor, register_tool
from openhands.tools.terminal import TerminalTool

if TYPE_CHECKING:
    from openhands.sdk.conversation.state import ConversationState

#: Name of the OpenHands tool spec that resolves a session's agenter tools.
TOOL_SPEC_NAME = "AgenterTools"
#: Name of the OpenHands tool spec that resolves the session's terminal (with its environment).
TERMINAL_SPEC_NAME = "AgenterTerminal"

#: A handler runs in an OpenHands tool thread: arguments -> what the model reads.
ToolHandler = Callable[[dict[str, Any]], ToolReply]


@dataclass(frozen=True)
class SessionTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: ToolHandler
    read_only: bool = False


_SESSIONS: dict[str, list[SessionTool]] = {}
_TERMINAL_ENV: dict[str, dict[str, str]] = {}
_SESSIONS_LOCK = threading.Lock()


def add_session_tools(session_key: str, tools: list[SessionTool], terminal_env: dict[str, str] | None = None) -> None:
    with _SESSIONS_LOCK:
        _SESSIONS[session_key] = list(tools)
        _TERMINAL_ENV[session_key] = dict(terminal_env or {})


def remove_session_tools(session_key: str) -> None:
    with _SESSIONS_LOCK:
        _SESSIONS.pop(session_key, None)
        _TERMINAL_ENV.pop(session_key, None)


class _HandlerExecutor(ToolExecutor):
    def __init__(self, tool: SessionTool):
        self.tool = tool

    def __call__(self, action: Action, conversation: Any = None) -> Observation:
        arguments = dict(getattr(action, "data", {}) or {})
        try:
            reply = self.tool.handler(arguments)
        except Exception as exc:  # noqa: BLE001 - handlers report failures themselves; never lost
            reply = ToolReply(f"Tool {self.tool.name!r} failed: {type(exc).__name__}", is_error=True)
        return MCPToolObservation.from_text(text=reply.text, is_error=reply.is_error, tool_name=self.tool.name)


class AgenterToolDefinition(ToolDefinition[MCPToolAction, MCPToolObservation]):
    """One agenter tool: the model sees its JSON schema; arguments pass through as a dict."""

    tool_name: str = Field(description="The tool's name as the model sees it.")
    input_schema: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:  # type: ignore[override, unused-ignore]
        return self.tool_name

    @classmethod
    def create(cls, conv_state: ConversationState | None = None,
               session: str = "", **_: Any) -> Sequence[AgenterToolDefinition]:
        with _SESSIONS_LOCK:
            tools = list(_SESSIONS.get(session, []))
        return [
            cls(
                tool_name=tool.name,
                input_schema=tool.input_schema,
                description=tool.description,
                action_type=MCPToolAction,
                observation_type=MCPToolObservation,
                annotations=ToolAnnotations(title=tool.name, readOnlyHint=tool.read_only),
                executor=_HandlerExecutor(tool),
            )
            for tool in tools
        ]

    def action_from_arguments(self, arguments: dict[str, Any]) -> MCPToolAction:
        # agenter's Tool.run validates against the function signature; drop explicit nulls the
        # way OpenHands does for MCP tools so optional parameters take their defaults.
        return MCPToolAction(data={k: v for k, v in arguments.items() if v is not None})

    def _get_tool_schema(self, add_security_risk_prediction: bool = False,
                         action_type: Any = None) -> dict[str, Any]:
        schema = copy.deepcopy(self.input_schema) or {"type": "object", "properties": {}}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return schema


class AgenterTerminal(TerminalTool):
    """Resolves OpenHands' terminal with the environment of the session named in its params."""

    @classmethod
    def create(cls, conv_state: Any = None, session: str = "",  # type: ignore[override, unused-ignore]
               **params: Any) -> Sequence[TerminalTool]:
        with _SESSIONS_LOCK:
            env = dict(_TERMINAL_ENV.get(session, {}))
        # TerminalTool's own create: its instances keep the name "terminal".
        return TerminalTool.create(conv_state, env=env, **params)


_registered = False


def register_agenter_tools() -> None:
    """Register the resolver classes once per process."""
    global _registered
    if not _registered:
        register_tool(TOOL_SPEC_NAME, AgenterToolDefinition)
        register_tool(TERMINAL_SPEC_NAME, AgenterTerminal)
        _registered = True
