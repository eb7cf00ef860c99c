"""What Claude Code says, in agenter's terms: claude-agent-sdk messages → BackendMessages, usage
and error descriptions. Pure functions and one per-turn translator, free of I/O, so each rule can
be unit-tested with the SDK's own message classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agenter._types import Usage
from agenter.backends._programs.claude import (
    FILE_WRITE_TOOLS,
    SHELL_TOOL,
    StreamedBlocks,
    compacted,
    exit_code,
    line_changes,
    result_text,
    sandbox_hint,
    usage_from,
)
from agenter.backends.base import BackendMessage, MessageType

__all__ = ["TurnTranslator", "describe_result_error", "describe_sdk_error"]


class TurnTranslator:
    """Translates one turn's SDK messages and keeps what the backend acts on.

    After each message: `session_id`, `model` (from the API's answers) and `init_model` (what the
    CLI announced), `take_written()` (paths the file tools wrote, as the model gave them),
    `usage()` (the turn's API messages so far), `api_refusal` (reason, category) and `last_text`.

    With partial messages on, the API's stream events of the main agent become TEXT_DELTA and
    THINKING_DELTA; the whole block follows in the CLI's assistant message as TEXT or THINKING,
    which closes the deltas (the session does not show it again). Subagents' texts stay whole.
    """

    def __init__(self, redact: Callable[[str], str]):
        self._redact = redact
        self.session_id: str | None = None
        self.model: str | None = None
        self.init_model: str | None = None
        self.api_refusal: tuple[str, str] | None = None
        self.last_text = ""
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self._usage: dict[str, Usage] = {}
        self._written: list[str] = []
        self._blocks = StreamedBlocks(redact)

    def usage(self) -> Usage:
        """The turn's API messages so far; streamed copies of one message count once."""
        return sum(self._usage.values(), Usage())

    def take_written(self) -> list[str]:
        written, self._written = self._written, []
        return written

    def translate(self, message: Any) -> list[BackendMessage]:
        from claude_agent_sdk import AssistantMessage, StreamEvent, SystemMessage, UserMessage

        if isinstance(message, StreamEvent):
            return self._blocks.event(message.event) if message.parent_tool_use_id is None else []
        if isinstance(message, AssistantMessage):
            # Whatever of a block is still held back goes out before the block whole.
            pending = self._blocks.flush() if message.parent_tool_use_id is None else []
            return pending + self._assistant(message)
        if isinstance(message, UserMessage) and isinstance(message.content, list):
            return self._tool_results(message.content, message.tool_use_result)
        if isinstance(message, SystemMessage):
            return self._system(message.subtype, message.data)
        return []

    def _assistant(self, message: Any) -> list[BackendMessage]:
        from claude_agent_sdk import TextBlock, ThinkingBlock, ToolUseBlock

        if message.model and message.model != "<synthetic>":
            self.model = message.model
        if message.usage and message.message_id:
            earlier = self._usage.get(message.message_id, Usage())
            self._usage[message.message_id] = earlier.maximum(usage_from(message.usage))
        out: list[BackendMessage] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                if not message.error and block.text.strip():
                    self.last_text = block.text.strip()
                text = self._redact(block.text)
                if message.parent_tool_use_id is None:
                    if message.error and self._blocks.open_text:
                        # Streamed, then flagged as an error: the whole text still closes the deltas.
                        out.append(BackendMessage(MessageType.TEXT, text))
                    self._blocks.open_text = False
                kind = MessageType.ERROR if message.error else MessageType.TEXT
                out.append(BackendMessage(kind, text, is_error=bool(message.error)))
            elif isinstance(block, ThinkingBlock):
                out.append(BackendMessage(MessageType.THINKING, self._redact(block.thinking)))
            elif isinstance(block, ToolUseBlock):
                self._calls[block.id] = (block.name, block.input)
                if block.name == SHELL_TOOL:
                    out.append(BackendMessage(MessageType.COMMAND_START, tool_name=block.name, tool_input=block.input,
                                              tool_call_id=block.id, details={"command": block.input.get("command")},
                                              raw=block))
                else:
                    out.append(BackendMessage(MessageType.TOOL_CALL, tool_name=block.name,
                                              tool_input=block.input, tool_call_id=block.id, raw=block))
            elif hasattr(block, "name") and hasattr(block, "id"):  # server tools (web search, ...)
                out.append(BackendMessage(MessageType.TOOL_CALL, tool_name=str(block.name),
                                          tool_input=getattr(block, "input", None), tool_call_id=str(block.id)))
        return out

    def _tool_results(self, blocks: list[Any], tool_use_result: Any) -> list[BackendMessage]:
        from claude_agent_sdk import ToolResultBlock

        out: list[BackendMessage] = []
        for block in blocks:
            if not isinstance(block, ToolResultBlock):
                continue
            name, tool_input = self._calls.get(block.tool_use_id, (None, {}))
            text = self._redact(result_text(block.content))
            # The tool's own account (stdout, structuredPatch, ...), as the CLI reported it.
            raw = {"tool_use_id": block.tool_use_id, "content": block.content, "is_error": block.is_error,
                   "tool_use_result": tool_use_result}
            if name == SHELL_TOOL:
                out.append(BackendMessage(MessageType.COMMAND_END, text, tool_name=name, tool_call_id=block.tool_use_id,
                                          is_error=bool(block.is_error), raw=raw,
                                          details={"exit_code": exit_code(text, bool(block.is_error),
                                                                          tool_use_result)}))
                continue
            out.append(BackendMessage(MessageType.TOOL_RESULT, text, tool_name=name, tool_call_id=block.tool_use_id,
                                      is_error=bool(block.is_error), raw=raw))
            if not block.is_error and name in FILE_WRITE_TOOLS:
                path = tool_input.get(FILE_WRITE_TOOLS[name])
                if isinstance(path, str) and path:
                    self._written.append(path)
                    added, removed = line_changes(name, tool_input, tool_use_result)
                    out.append(BackendMessage(MessageType.FILE_EDIT, tool_name=name, tool_call_id=block.tool_use_id,
                                              details={"path": path, "lines_added": added, "lines_removed": removed}))
        return out

    def _system(self, subtype: str, data: dict[str, Any]) -> list[BackendMessage]:
        if subtype == "init":
            session_id = data.get("session_id")
            if isinstance(session_id, str):
                self.session_id = session_id
            model = data.get("model")
            if isinstance(model, str):
                self.init_model = model
            return [BackendMessage(MessageType.STATUS, f"Claude Code session {session_id} (model {model}, "
                                                       f"permission mode {data.get('permissionMode')})")]
        if subtype.startswith("model_refusal"):
            # The API refused (stop_reason "refusal") and Claude Code gave up on the turn.
            if self.api_refusal is None:
                explanation = data.get("api_refusal_explanation")
                category = data.get("api_refusal_category")
                self.api_refusal = (str(explanation or self.last_text or "the model refused the request"),
                                    str(category) if category else "refusal")
            return [BackendMessage(MessageType.STATUS, f"Claude Code: {subtype}")]
        if subtype == "informational" and data.get("content"):
            return [BackendMessage(MessageType.STATUS, self._redact(str(data["content"])))]
        if subtype == "compact_boundary":
            return [compacted(data)]
        if any(word in subtype for word in ("retry", "error", "compact")):
            return [BackendMessage(MessageType.STATUS, f"Claude Code: {subtype}")]
        return []


def describe_result_error(result: Any) -> tuple[str, int | None]:
    """Message and HTTP status for an error result (a ResultMessage or the SDK's ResultError)."""
    status = getattr(result, "api_error_status", None)
    text = (getattr(result, "result", None) or "").strip()
    errors = [str(e) for e in (getattr(result, "errors", None) or [])]
    subtype = getattr(result, "subtype", None)
    detail = "; ".join([text] + errors if text else errors) or str(result)
    if status:
        message = f"Claude Code API error (HTTP {status}): {detail}"
    elif subtype and subtype != "success":
        message = f"Claude Code stopped with {subtype}: {detail}"
    else:
        message = f"Claude Code failed: {detail}"
    return sandbox_hint(message), status if isinstance(status, int) else None


def describe_sdk_error(exc: BaseException, what: str) -> tuple[str, int | None, str | None]:
    """Message, HTTP status and error kind for an exception of claude-agent-sdk."""
    from claude_agent_sdk import CLINotFoundError, ProcessError, ResultError

    if isinstance(exc, CLINotFoundError):
        return (f"Claude Code CLI not found ({exc}). Install claude-agent-sdk (it bundles the CLI) or "
                "pass program_path=...", None, "missing_program")
    if isinstance(exc, ResultError):
        message, status = describe_result_error(exc)
        return message, status, None
    if isinstance(exc, ProcessError) and exc.exit_code is not None:
        how = (f"was killed by signal {-exc.exit_code}" if exc.exit_code < 0
               else f"exited with code {exc.exit_code}")
        return f"{what}: the claude process {how}", None, "agent_crash"
    return f"{what}: {exc}", None, None
