"""What Claude Code's tool results say, shared by the claude-code backend (through the SDK) and
claude-cli (through `claude -p --output-format stream-json`): both read the same tool blocks and
tool_use_result payloads, so one set of pure rules maps them to commands, exit codes, file edits
and redactable text deltas.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["FILE_WRITE_TOOLS", "SHELL_TOOL", "DeltaBuffer", "exit_code", "line_changes", "result_text"]

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

# A word that a secret may follow after a space ("Bearer <token>", "x-api-key: <key>"): a streamed
# piece is never cut between the two, so the redaction patterns still see them together.
_KEY_LEAD = re.compile(r"(?i)(bearer|api-key[\"']?\s*[:=]?[\"']?)\s*$")


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


class DeltaBuffer:
    """Pieces of one streamed text, passed on redacted and cut only at whitespace.

    A key the model writes arrives split over several deltas, where no piece alone would match the
    redactor; keys hold no whitespace, so each piece is held back until the text reaches a space or
    line end (or the block ends) and goes out redacted whole.
    """

    def __init__(self, redact: Callable[[str], str]):
        self._redact = redact
        self._pending = ""

    def feed(self, piece: str) -> str:
        """What can go out now (redacted; may be empty)."""
        self._pending += piece
        cut = _cut(self._pending)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return self._redact(ready) if ready else ""

    def flush(self) -> str:
        """The rest, at the end of the block."""
        ready, self._pending = self._pending, ""
        return self._redact(ready) if ready else ""


def _cut(text: str) -> int:
    """Where `text` may be cut: after its last whitespace not ending a key's lead-in word."""
    end = len(text)
    while True:
        cut = max(text.rfind(" ", 0, end), text.rfind("\n", 0, end), text.rfind("\t", 0, end)) + 1
        if cut == 0 or not _KEY_LEAD.search(text[:cut]):
            return cut
        end = cut - 1


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
