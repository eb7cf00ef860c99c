"""Prompt pieces and parsing every backend shares: the autonomous contract, refusal, structured output."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

AUTONOMOUS_CONTRACT = (
    "You are running headless inside an automated pipeline: no human will answer questions or "
    "approve steps. Act: make the changes the task needs directly in the working directory, then "
    "stop. Do not ask for confirmation. If you must decline the task, say so with the refusal "
    "tool (or, without tools, a line starting with 'REFUSED:' and the reason)."
)

REFUSAL_TOOL_NAME = "refuse_task"
REFUSAL_TOOL_DESCRIPTION = (
    "Decline the task instead of doing it (for example: harmful, impossible, or outside the "
    "repository). Give the reason. Ends the turn."
)
REFUSAL_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "description": "Why the task is declined."},
        "category": {"type": "string", "description": "Short label, e.g. 'harmful', 'impossible'."},
    },
    "required": ["reason"],
}

STRUCTURED_OUTPUT_TOOL_NAME = "final_result"

_REFUSAL_LINE = re.compile(r"^\s*REFUSED:\s*(.+)$", re.MULTILINE)


def text_refusal(text: str) -> str | None:
    """A refusal stated in plain text (for agents whose tools we cannot extend)."""
    match = _REFUSAL_LINE.search(text or "")
    return match.group(1).strip() if match else None


def output_schema(output_type: type[BaseModel]) -> dict[str, Any]:
    return output_type.model_json_schema()


def output_instructions(output_type: type[BaseModel]) -> str:
    """For agents without a native structured-output channel: ask for one fenced JSON object."""
    return (
        "When you are done, end your final message with one JSON object in a ```json fenced "
        "block that matches this JSON schema:\n" + json.dumps(output_schema(output_type))
    )


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def parse_structured_output(text: str | dict[str, Any] | None,
                            output_type: type[BaseModel]) -> BaseModel | None:
    """Parse an instance of output_type from a dict, a fenced JSON block or the last JSON object."""
    if text is None:
        return None
    if isinstance(text, dict):
        try:
            return output_type.model_validate(text)
        except ValidationError:
            return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    candidates.reverse()
    stripped = text.strip()
    if stripped.startswith("{"):
        candidates.append(stripped)
    last_open = stripped.rfind("{")
    while last_open != -1:
        candidates.append(stripped[last_open:])
        last_open = stripped.rfind("{", 0, last_open)
    for candidate in candidates:
        try:
            return output_type.model_validate_json(candidate)
        except (ValidationError, ValueError):
            continue
    return None
