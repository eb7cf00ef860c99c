"""What Claude Code's tool results say, shared by the claude-code backend (through the SDK) and
claude-cli (through `claude -p --output-format stream-json`): both read the same tool blocks and
tool_use_result payloads, so one set of pure rules maps them to commands, exit codes, file edits
and redactable text deltas.
"""

from __future__ import annotations

import re
from typing import Any

from agenter.backends._deltas import DeltaBuffer
from agenter.backends.base import BackendMessage, MessageType
from agenter.host.requirements import Credentials

__all__ = ["FILE_WRITE_TOOLS", "SHELL_TOOL", "DeltaBuffer", "compacted", "exit_code", "line_changes", "result_text"]

#: Claude Code's tools that write a file named in their input, and the input key holding the path.
FILE_WRITE_TOOLS: dict[str, str] = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}

#: Claude Code's shell tool: its calls are commands in the event vocabulary.
SHELL_TOOL = "Bash"

# How Claude Code's Bash result says a command failed ("Exit code 4\n<output>").
_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (-?\d+)")

def result_text(content: Any) -> str:
    """Text of a tool result's content (a string or a list of MCP-style blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                parts.append(str(block.get("text", "")) if block.get("type") == "text" else f"[{block.get('type')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return str(content)

#: Where Claude Code's credentials may be (claude-code and claude-cli).
CREDENTIALS = Credentials(env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                               "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
                          files=("$CLAUDE_CONFIG_DIR/.credentials.json", "~/.claude/.credentials.json"))


def exit_code(text: str, is_error: bool, tool_use_result: Any) -> int | None:
    """A Bash result's exit code: 0 when it succeeded, the code its error text names, else None
    (interrupted, denied, timed out)."""
    if not is_error:
        interrupted = isinstance(tool_use_result, dict) and tool_use_result.get("interrupted")
        return None if interrupted else 0
    match = _EXIT_CODE.match(text.lstrip())
    return int(match.group(1)) if match else None


def line_changes(name: str, tool_input: dict[str, Any], tool_use_result: Any) -> tuple[int, int]:
    """Lines added and removed by a file tool: from the patch Claude Code reports, else (a new
    file, an older CLI) from the tool's input."""
    patch = tool_use_result.get("structuredPatch") if isinstance(tool_use_result, dict) else None
    if patch:
        lines = [line for hunk in patch if isinstance(hunk, dict) for line in hunk.get("lines") or []
                 if isinstance(line, str)]
        return sum(line.startswith("+") for line in lines), sum(line.startswith("-") for line in lines)

    def count(value: Any) -> int:
        return len(value.splitlines()) if isinstance(value, str) else 0

    if name == "Write":
        before = tool_use_result.get("originalFile") if isinstance(tool_use_result, dict) else None
        return count(tool_input.get("content")), count(before)
    edits = tool_input.get("edits") if name == "MultiEdit" else [tool_input]
    pairs = [e for e in edits if isinstance(e, dict)] if isinstance(edits, list) else []
    return (sum(count(e.get("new_string", e.get("new_source"))) for e in pairs),
            sum(count(e.get("old_string")) for e in pairs))


def compacted(event: dict[str, Any]) -> BackendMessage:
    """Claude Code's `compact_boundary` system message (the data of the SDK's SystemMessage, or
    the stream-json event) as COMPACTED, with the context size before and after when it says."""
    metadata = event.get("compact_metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    before, after = metadata.get("pre_tokens"), metadata.get("post_tokens")
    return BackendMessage(MessageType.COMPACTED, "Claude Code compacted its context", raw=event,
                          details={"tokens_before": before if isinstance(before, int) else None,
                                   "tokens_after": after if isinstance(after, int) else None,
                                   "trigger": metadata.get("trigger")})
