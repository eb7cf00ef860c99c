"""What `codex app-server` reports, in agenter's terms: pure functions from notifications to
BackendMessages, usage, changed paths and turn failures, free of I/O so each rule is testable.

What Codex 0.169 streams (recorded against the scripted model server): `item/agentMessage/delta`
and `item/reasoning/summaryTextDelta` (`item/reasoning/textDelta` for raw reasoning), each with
`itemId` and `delta`, before the `item/completed` that holds the whole text; a compaction is a
`contextCompaction` item, which carries no token figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agenter._types import Usage
from agenter.backends._deltas import DeltaBuffer
from agenter.backends._failures import kind_of_type
from agenter.backends._programs.codex import change_lines, token_usage
from agenter.backends.base import BackendMessage, MessageType

#: Codex turn errors that mean the model declined for policy reasons (a refusal, not a failure).
POLICY_REFUSALS = frozenset({"cyberPolicy", "misalignmentPolicyViolation", "inferenceHookDenied"})

#: codexErrorInfo in its string form: (HTTP status, what it means). Codex sends the object form
#: ({"httpConnectionFailed": {"httpStatusCode": 503}}) for most HTTP errors, but a bare name for
#: some, e.g. "internalServerError" for a 500. The kind each name stands for is in the shared
#: classifier's table (agenter.backends._failures.KNOWN_FAILURES).
_ERROR_NAMES: dict[str, tuple[int | None, str]] = {
    "internalServerError": (500, "internal server error"),
    "serverOverloaded": (503, "server overloaded"),
    "modelNotFound": (404, "model not found"),
    "badRequest": (400, "bad request"),
    "unauthorized": (401, "unauthorized"),
    "rateLimitExceeded": (429, "rate limit exceeded"),
    "usageLimitExceeded": (None, "usage limit exceeded"),
    "sessionBudgetExceeded": (None, "session budget exceeded"),
    "contextWindowExceeded": (None, "context window exceeded"),
    "flexUnavailable": (None, "flex processing unavailable"),
    "policyCapacityUnavailable": (None, "capacity unavailable"),
}
#: "unexpected status 401 Unauthorized: ..." / "exceeded retry limit, last status: 429 ..."
_STATUS_IN_TEXT = re.compile(r"\b(?:unexpected status|last status:?)\s+(\d{3})\b")


@dataclass(frozen=True)
class TurnFailure:
    """Why a turn did not complete. `refusal`: the model declined on policy grounds."""

    message: str
    status_code: int | None = None
    kind: str | None = None
    refusal: bool = False


def turn_failure(turn: dict[str, Any], server: str) -> TurnFailure:
    """A failed or interrupted turn, described for a BackendError; `server` names the model
    server (e.g. 'the model server https://api.openai.com/v1')."""
    error = turn.get("error") or {}
    info = error.get("codexErrorInfo")
    status = turn.get("status") or "failed"
    message = str(error.get("message") or f"turn {status}")
    if isinstance(info, str) and info in POLICY_REFUSALS:
        return TurnFailure(message, refusal=True)
    status_code, kind, meaning = None, None, ""
    if isinstance(info, str) and info in _ERROR_NAMES:
        (status_code, meaning), kind = _ERROR_NAMES[info], kind_of_type(info)
    elif isinstance(info, dict):
        for detail in info.values():
            if isinstance(detail, dict) and detail.get("httpStatusCode"):
                status_code = int(detail["httpStatusCode"])
    if status_code is None:
        found = _STATUS_IN_TEXT.search(message)
        status_code = int(found.group(1)) if found else None
    if status_code is not None:
        what = f"HTTP {status_code}" + (f" ({meaning})" if meaning else "")
        message = f"{server} answered {what}: {message}"
    elif isinstance(info, dict) or kind is not None:
        message = f"{message} ({server})"
    if error.get("additionalDetails"):
        message = f"{message} ({error['additionalDetails']})"
    return TurnFailure(f"Codex turn {status}: {message}", status_code, kind)


def thread_total(data: dict[str, Any]) -> Usage | None:
    """The thread's cumulative usage from thread/tokenUsage/updated (None when it has none)."""
    total = (data.get("tokenUsage") or {}).get("total")
    return token_usage(total) if isinstance(total, dict) else None


def usage_note(usage: Usage) -> str:
    """A model call's usage, as a STATUS line."""
    return (f"model call: {usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens} input "
            f"tokens ({usage.cache_read_tokens} cached), {usage.output_tokens} output tokens")


def changed_paths(item: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(written, deleted) paths of a completed fileChange item, as Codex reports them."""
    written: list[str] = []
    deleted: list[str] = []
    if item.get("status") != "completed":
        return written, deleted
    for change in item.get("changes") or []:
        path = change.get("path")
        kind = change.get("kind") or {}
        if not path:
            continue
        if kind.get("type") == "delete":
            deleted.append(path)
        elif kind.get("move_path"):
            deleted.append(path)
            written.append(kind["move_path"])
        else:
            written.append(path)
    return written, deleted


def line_changes(change: dict[str, Any]) -> tuple[int, int]:
    """Lines added and removed by one change of a fileChange item (its `diff` holds an added
    file's text, a deleted one's, or an update's unified diff)."""
    return change_lines((change.get("kind") or {}).get("type"), change.get("diff"))


def pending_paths(item: dict[str, Any]) -> list[str]:
    """The paths a fileChange item is about to touch."""
    return [change.get("path", "") for change in item.get("changes") or []]


def messages(method: str, data: dict[str, Any], redact: Callable[[str], str]) -> list[BackendMessage]:
    """The BackendMessages one notification stands for (most stand for none)."""
    item = data.get("item") or {}
    if method == "item/started":
        return _started(item)
    if method == "item/completed":
        return _completed(item)
    if method == "turn/plan/updated":
        steps = data.get("plan") or []
        text = "\n".join(f"[{step.get('status')}] {step.get('step')}" for step in steps)
        return [BackendMessage(MessageType.PLAN, text)] if text else []
    if method == "error":
        error = data.get("error") or {}
        note = " (Codex retries)" if data.get("willRetry") else ""
        return [BackendMessage(MessageType.ERROR, redact(str(error.get("message", ""))) + note, is_error=True)]
    if method in ("warning", "configWarning", "deprecationNotice"):
        text = data.get("message") or data.get("summary") or str(data)
        return [BackendMessage(MessageType.STATUS, f"Codex {method}: {redact(str(text))}")]
    return []


def _started(item: dict[str, Any]) -> list[BackendMessage]:
    kind, item_id = item.get("type"), item.get("id")
    if kind == "commandExecution":
        return [BackendMessage(MessageType.COMMAND_START, item.get("command") or "", tool_name="shell",
                               tool_input={"command": item.get("command"), "cwd": item.get("cwd")},
                               tool_call_id=item_id, details={"command": item.get("command")}, raw=item)]
    if kind == "fileChange":
        paths = pending_paths(item)
        return [BackendMessage(MessageType.TOOL_CALL, "\n".join(paths), tool_name="apply_patch",
                               tool_input={"paths": paths}, tool_call_id=item_id)]
    if kind == "mcpToolCall":
        name = mcp_tool_name(item)
        arguments = item.get("arguments")
        if not isinstance(arguments, dict):
            arguments = {"arguments": arguments}
        return [BackendMessage(MessageType.TOOL_CALL, name, tool_name=name, tool_input=arguments,
                               tool_call_id=item_id)]
    if kind in ("webSearch", "dynamicToolCall", "imageView"):
        return [BackendMessage(MessageType.TOOL_CALL, str(item.get("query") or item.get("tool") or ""),
                               tool_name=kind, tool_call_id=item_id)]
    return []


def _completed(item: dict[str, Any]) -> list[BackendMessage]:
    kind, item_id = item.get("type"), item.get("id")
    if kind == "agentMessage" and item.get("text"):
        return [BackendMessage(MessageType.TEXT, item["text"])]
    if kind == "reasoning":
        text = "\n".join([*(item.get("summary") or []), *(item.get("content") or [])])
        return [BackendMessage(MessageType.THINKING, text)] if text.strip() else []
    if kind == "plan" and item.get("text"):
        return [BackendMessage(MessageType.PLAN, item["text"])]
    if kind == "commandExecution":
        status = item.get("status")
        failed = status in ("failed", "declined") or (item.get("exitCode") not in (None, 0))
        output = (item.get("aggregatedOutput") or "")[-4000:]
        if status == "declined":
            output = output or "command declined"
        return [BackendMessage(MessageType.COMMAND_END, output, tool_name="shell", tool_call_id=item_id,
                               is_error=failed, details={"exit_code": item.get("exitCode")}, raw=item)]
    if kind == "fileChange":
        status = item.get("status")
        out = [BackendMessage(MessageType.TOOL_RESULT, f"{status}: " + ", ".join(pending_paths(item)),
                              tool_name="apply_patch", tool_call_id=item_id, is_error=status != "completed", raw=item)]
        if status == "completed":
            for change in item.get("changes") or []:
                if isinstance(change, dict) and change.get("path"):
                    added, removed = line_changes(change)
                    path = (change.get("kind") or {}).get("move_path") or change["path"]
                    out.append(BackendMessage(MessageType.FILE_EDIT, tool_name="apply_patch", tool_call_id=item_id,
                                              details={"path": path, "lines_added": added,
                                                       "lines_removed": removed}))
        return out
    if kind == "mcpToolCall":
        error = item.get("error")
        text = mcp_result_text(item.get("result")) if not error else str(error.get("message", error))
        return [BackendMessage(MessageType.TOOL_RESULT, text, tool_name=mcp_tool_name(item),
                               tool_call_id=item_id, is_error=bool(error) or item.get("status") == "failed")]
    return []


def mcp_tool_name(item: dict[str, Any]) -> str:
    return f"{item.get('server')}.{item.get('tool')}"


def mcp_result_text(result: Any) -> str:
    if not isinstance(result, dict):
        return "" if result is None else str(result)
    texts = [block.get("text", "") for block in result.get("content") or [] if isinstance(block, dict)]
    return "\n".join(t for t in texts if t) or str(result.get("structuredContent") or "")


def final_text(turn: dict[str, Any]) -> str | None:
    """The last agent message among a completed turn's items, if Codex included them."""
    texts = [item["text"] for item in turn.get("items") or []
             if item.get("type") == "agentMessage" and item.get("text")]
    return texts[-1] if texts else None


#: Streaming notifications: the kind of delta each stands for, and the field naming its part.
_DELTA_METHODS: dict[str, tuple[MessageType, str | None]] = {
    "item/agentMessage/delta": (MessageType.TEXT_DELTA, None),
    "item/reasoning/summaryTextDelta": (MessageType.THINKING_DELTA, "summaryIndex"),
    "item/reasoning/textDelta": (MessageType.THINKING_DELTA, "contentIndex"),
}


@dataclass
class _Stream:
    """One item's streamed text: what is held back, and the part the last piece belonged to."""

    type: MessageType
    buffer: DeltaBuffer
    part: tuple[str, Any] | None = None


class ItemStream:
    """A Codex thread's notifications as BackendMessages, with the state streaming needs.

    Deltas go out cut only at whitespace (agenter.backends._deltas), so a key split over
    notifications reaches the session's redaction whole; the completed item then closes them
    with its whole text (which the session does not send again). A reasoning item joins its
    summary parts and content with line breaks, so its deltas carry them too.
    """

    def __init__(self, redact: Callable[[str], str]):
        self._redact = redact
        self._streams: dict[str, _Stream] = {}
        self._context_tokens: int | None = None  # tokens in the context at the last model call
        self._compacting: dict[str, int | None] = {}  # compaction item id -> tokens before it

    def start_turn(self) -> None:
        """Forget what an earlier turn left unfinished (an interrupted turn's items)."""
        self._streams.clear()
        self._compacting.clear()

    def messages(self, method: str, data: dict[str, Any]) -> list[BackendMessage]:
        """The BackendMessages one notification stands for."""
        if method in _DELTA_METHODS:
            return self._delta(method, data)
        item = data.get("item") or {}
        if item.get("type") == "contextCompaction" and item.get("id"):
            if method == "item/started":
                self._compacting[item["id"]] = self._context_tokens
                return []
            if method == "item/completed":
                before = self._compacting.pop(item["id"], None)
                return [BackendMessage(MessageType.COMPACTED, "Codex compacted its context",
                                       details={"tokens_before": before, "tokens_after": None}, raw=item)]
        out = self._close(item.get("id")) if method == "item/completed" and item.get("id") else []
        return [*out, *messages(method, data, self._redact)]

    def observe_usage(self, data: dict[str, Any]) -> None:
        """thread/tokenUsage/updated: the last model call's tokens are the context's size."""
        last = (data.get("tokenUsage") or {}).get("last")
        if isinstance(last, dict) and last.get("totalTokens") is not None:
            self._context_tokens = int(last["totalTokens"])

    def flush(self) -> list[BackendMessage]:
        """The text still held back, of items that never completed (the turn ended)."""
        return [message for item_id in list(self._streams) for message in self._close(item_id)]

    def _delta(self, method: str, data: dict[str, Any]) -> list[BackendMessage]:
        kind, part_field = _DELTA_METHODS[method]
        item_id, piece = data.get("itemId"), data.get("delta")
        if not isinstance(item_id, str) or not isinstance(piece, str) or not piece:
            return []
        stream = self._streams.get(item_id)
        part = (method, data.get(part_field)) if part_field else None
        if stream is None:
            stream = self._streams[item_id] = _Stream(kind, DeltaBuffer(), part)
        elif part != stream.part:
            stream.part = part
            piece = "\n" + piece  # the completed item joins its parts with line breaks
        ready = stream.buffer.feed(piece)
        return [BackendMessage(kind, ready)] if ready else []

    def _close(self, item_id: str | None) -> list[BackendMessage]:
        stream = self._streams.pop(item_id, None) if item_id else None
        rest = stream.buffer.flush() if stream is not None else ""
        return [BackendMessage(stream.type, rest)] if stream is not None and rest else []
