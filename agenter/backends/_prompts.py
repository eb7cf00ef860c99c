"""What every backend tells its model, composed one way: the autonomous contract, the sandbox,
the allowed write paths, refusal, structured output, then the user's own system prompt.

Also the shared parsing of what comes back: a refusal line, a structured-output object.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

AUTONOMOUS_CONTRACT = (
    "You are running headless inside an automated pipeline: no human will answer questions or "
    "approve steps. Act: make the changes the task needs directly in the working directory, then "
    "stop. Do not ask for confirmation."
)
#: The contract for an agent that changes files by what it writes in its reply (Aider's file
#: listings): told to act "in the working directory", a small model replies that it will, and
#: writes no change (measured: Qwen2.5-Coder-1.5B through Aider, every first attempt).
REPLY_CONTRACT = (
    "You are running headless inside an automated pipeline: no human will answer questions or "
    "approve steps. Do not ask for confirmation and do not announce what you will do: write the "
    "complete change in this reply, in the format you were given."
)

REFUSAL_TOOL_NAME = "refuse_task"
#: Its first sentence is all a text-mode tools section shows (the instructions say when to decline).
REFUSAL_TOOL_DESCRIPTION = (
    "Decline the task instead of doing it, with the reason. Only a harmful task or one that cannot be done "
    "in this repository at all, never because it is hard or its tests fail. Ends the turn."
)
#: Refusal is for what must not or cannot be done: worded loosely ("if you must decline"), it was
#: a small model's way out of a hard task (measured: Qwen2.5-Coder-1.5B declined a stub to complete
#: through Aider, and called refuse_task with the failing tests as its reason).
_DECLINE_ONLY = "Decline only a task that is harmful or cannot be done in this repository at all: then "
_NOT_A_REASON = " A hard or unclear task, or failing tests, is not a reason to decline: do your best."
#: The same for a model that declines by a line of text, where the way out is one word away. The
#: wording above still made Qwen2.5-Coder-1.5B begin 6 of 8 patch-mode replies (files format) with
#: "REFUSED: the task requires modifying averages.py, which is not allowed"; worded as below, 0 of
#: 22 (the benchmark's tasks, first requests replayed). A task that cannot be done then fails
#: truthfully instead of being declined.
_DECLINE_BY_LINE = ("Do the task: a programming task is never declined, however hard. Only a request to cause harm "
                    "(malware, stealing credentials, destroying data) is answered instead with one line starting "
                    "with 'REFUSED:' and the reason.")
REFUSAL_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "description": "Why the task is declined."},
        "category": {"type": "string", "description": "Short label, e.g. 'harmful', 'impossible'."},
    },
    "required": ["reason"],
}
#: What the refusal tool answers; the turn ends after it.
REFUSAL_REPLY = "Refusal recorded. Stop now: make no more tool calls or changes."

STRUCTURED_OUTPUT_TOOL_NAME = "final_result"
#: Tool names agenter itself gives the model on some backends; custom tools may not take them.
AGENTER_TOOL_NAMES = frozenset({REFUSAL_TOOL_NAME, STRUCTURED_OUTPUT_TOOL_NAME})

#: How a backend's model returns structured output.
OutputChannel = Literal["tool", "native", "text"]

_REFUSAL_LINE = re.compile(r"^\s*REFUSED:\s*(.+)$", re.MULTILINE)


def compose_instructions(*, cwd: str, sandbox: bool, allowed_write_paths: list[str] | None,
                         system_prompt: str | None, output_type: type[BaseModel] | None,
                         refusal_tool: str | None, output_channel: OutputChannel,
                         output_tool: str = STRUCTURED_OUTPUT_TOOL_NAME,
                         contract: bool | str = True) -> str:
    """The instructions every backend gives its model, in one order.

    refusal_tool: the name under which the model sees the refusal tool, or None when the backend
        cannot add tools (the model then writes a 'REFUSED:' line).
    output_channel: "tool" (a tool named output_tool), "native" (the agent's own structured-output
        feature; nothing to add) or "text" (one fenced JSON object at the end of the reply).
    contract: the autonomous contract (True), none (False), or other words for it.
    """
    parts: list[str] = []
    if contract:
        parts.append(contract if isinstance(contract, str) else AUTONOMOUS_CONTRACT)
    if refusal_tool:
        parts.append(f"{_DECLINE_ONLY}call the `{refusal_tool}` tool with the reason.{_NOT_A_REASON}")
    else:
        parts.append(_DECLINE_BY_LINE)
    if sandbox:
        # Not the directory's absolute path: it says nothing the agent needs, sends a local path
        # to the provider, and makes the prompt (and a cached or seeded answer) depend on where
        # the repository lies.
        parts.append("Work only inside the working directory; never write inside .git/. "
                     "A refused path or command comes back to you as an error.")
    if allowed_write_paths is not None:
        parts.append(_allowed_paths_rule(allowed_write_paths))
    if output_type is not None:
        if output_channel == "tool":
            parts.append(f"When you are done, call the `{output_tool}` tool with the result. The turn "
                         "ends when the result is accepted.")
        elif output_channel == "text":
            parts.append(output_instructions(output_type))
    if system_prompt:
        parts.append(system_prompt)
    return "\n\n".join(parts)


#: A character that makes an allowed-write entry a pattern rather than one file's path.
_PATTERN_CHARS = frozenset("*?[!\\")


def _allowed_paths_rule(allowed_write_paths: list[str]) -> str:
    """The allowed-write rule. When every entry is a plain file path (no wildcard, negation or
    trailing slash) the model is told the files, not how gitignore patterns match: that paragraph
    is 170 characters a small model's prompt carries for nothing."""
    allowed = ", ".join(allowed_write_paths) or "(none: do not change any file)"
    if allowed_write_paths and not any(_PATTERN_CHARS & set(entry) or entry.endswith("/")
                                       for entry in allowed_write_paths):
        return (f"Only create, change or delete these files (relative to the working directory): {allowed}. "
                "Other changes fail the task.")
    return ("Only create, change or delete files matching these gitignore-style patterns "
            f"(relative to the working directory): {allowed}. A pattern with no slash "
            "before its end (`*.py`, `src/`) matches only at the top of the working directory "
            "(`**/*.py`: at any depth). Other changes fail the task.")


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


def validation_problems(exc: ValidationError) -> str:
    """A pydantic error as one line the model can act on."""
    return "; ".join(f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}"
                     for error in exc.errors())


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema made acceptable to OpenAI's strict structured outputs: every object
    closed (additionalProperties false) with all properties required (optional ones nullable)."""
    schema = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and isinstance(node.get("properties"), dict):
                required = set(node.get("required") or [])
                for name, prop in node["properties"].items():
                    if name not in required and isinstance(prop, dict) and not _nullable(prop):
                        node["properties"][name] = {"anyOf": [prop, {"type": "null"}]}
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


def _nullable(prop: dict[str, Any]) -> bool:
    if prop.get("type") == "null" or (isinstance(prop.get("type"), list) and "null" in prop["type"]):
        return True
    return any(isinstance(option, dict) and option.get("type") == "null" for option in prop.get("anyOf") or [])
