"""The conversation's rules, model-neutral: the tool_use/tool_result invariant and compaction
(older turns replaced by a summary when the conversation outgrows the context window).

The conversation is a list of messages in the harness's neutral shape, which is the Anthropic
Messages shape: `{"role": "user" | "assistant", "content": [block, ...]}` with blocks `text`,
`tool_use` (id, name, input), `tool_result` (tool_use_id, content, is_error), and the thinking
blocks a wire keeps (`thinking`, `redacted_thinking`). Wires convert from it; nothing here knows
a provider. Kept free of I/O so each rule can be unit-tested on plain message dicts.

Prompt-cache-stable assembly follows from how the harness uses these rules: the system prompt and
the tool definitions are fixed for the session, the conversation only grows at its end, and
only a compaction rewrites its start.
"""

from __future__ import annotations

import json
from typing import Any

INTERRUPTED_RESULT = "Not run: the turn was interrupted before this tool call was executed."
SKIPPED_RESULT = "Not run: the turn ended with an earlier tool call in the same response."


# ------------------------------------------------------------------ history rules


def tool_result(tool_use_id: str, content: str, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def tool_use_ids(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def append_user_content(messages: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Add blocks to the conversation as the user: merged into a trailing user message.

    tool_result blocks are kept ahead of text, as the API requires.
    """
    if not blocks:
        return
    if messages and messages[-1]["role"] == "user":
        content = messages[-1]["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        merged = content + list(blocks)
        results = [b for b in merged if b.get("type") == "tool_result"]
        others = [b for b in merged if b.get("type") != "tool_result"]
        messages[-1] = {"role": "user", "content": results + others}
    else:
        messages.append({"role": "user", "content": list(blocks)})


def close_open_tool_uses(messages: list[dict[str, Any]], partial_results: list[dict[str, Any]] | None = None,
                         reason: str = INTERRUPTED_RESULT) -> int:
    """Give every unanswered tool_use of the last assistant message an is_error result.

    `partial_results` are results already computed for that message (kept, in order).
    Returns how many results were synthesized.
    """
    if not messages or messages[-1]["role"] != "assistant":
        return 0
    ids = tool_use_ids(messages[-1])
    if not ids:
        return 0
    results = [r for r in (partial_results or []) if r.get("tool_use_id") in ids]
    answered = {r["tool_use_id"] for r in results}
    missing = [tool_result(i, reason, is_error=True) for i in ids if i not in answered]
    messages.append({"role": "user", "content": results + missing})
    return len(missing)


def invariant_violations(messages: list[dict[str, Any]]) -> list[str]:
    """Every tool_use answered exactly once, in the next (user) message. Empty list = holds."""
    problems: list[str] = []
    for index, message in enumerate(messages):
        if index and messages[index - 1]["role"] == message["role"]:
            problems.append(f"message {index}: two {message['role']} messages in a row")
        ids = tool_use_ids(message)
        if not ids:
            continue
        if index + 1 >= len(messages):
            problems.append(f"message {index}: tool_use without a following user message")
            continue
        following = messages[index + 1]
        content = following.get("content") if following["role"] == "user" else None
        found = [b.get("tool_use_id") for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
        for tool_id in ids:
            if found.count(tool_id) != 1:
                problems.append(f"message {index}: tool_use {tool_id} has {found.count(tool_id)} results")
        extra = {str(tool_id) for tool_id in found} - set(ids)
        if extra:
            problems.append(f"message {index + 1}: results for unknown tool_use ids {sorted(extra)}")
        if content:
            kinds = [b.get("type") for b in content if isinstance(b, dict)]
            if "tool_result" in kinds and "text" in kinds:
                last_result = max(i for i, kind in enumerate(kinds) if kind == "tool_result")
                if kinds.index("text") < last_result:
                    problems.append(f"message {index + 1}: text before tool_result blocks")
    return problems


# ------------------------------------------------------------------ compaction

#: First line of the text block that carries a compaction's summary (how the next compaction
#: finds it in the first message).
SUMMARY_MARK = "[agenter: summary of the earlier part of this conversation]"
SUMMARY_INTRO = ("The conversation grew too long for the model's context window, so its earlier turns were "
                 "replaced by this summary. Your task is the message above; continue it from where the "
                 "summary leaves off. Re-read a file before you edit it if you need its exact contents.")
#: Per block and in all, how much of the older turns a summary request shows the model.
TRANSCRIPT_BLOCK_CHARS = 2_000
TRANSCRIPT_CHARS = 120_000
#: Tool calls that change a file, with the text editor's commands that do.
_WRITE_TOOLS = frozenset({"write_file", "edit_file", "delete_file"})
_EDITOR_WRITES = frozenset({"create", "str_replace", "insert", "undo_edit"})
_READ_TOOLS = frozenset({"read_file", "list_directory", "glob", "grep"})


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


def message_chars(messages: list[dict[str, Any]]) -> int:
    """Size of messages as sent (JSON characters): the measure compaction plans with."""
    return sum(len(json.dumps(m.get("content"), ensure_ascii=False)) for m in messages)


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough token count (4 characters a token) for reports; the API's count is the real one."""
    return message_chars(messages) // 4


def _is_summary(block: dict[str, Any]) -> bool:
    return block.get("type") == "text" and str(block.get("text", "")).startswith(SUMMARY_MARK)


def split_first_message(message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first message as (task blocks, earlier compaction): what came before a compaction's
    summary block is the task, the summary and the blocks after it are an earlier compaction."""
    blocks = _blocks(message)
    for index, block in enumerate(blocks):
        if _is_summary(block):
            return blocks[:index], blocks[index:]
    return blocks, []


def compaction_boundary(messages: list[dict[str, Any]], keep_fraction: float) -> int | None:
    """Where the verbatim history starts after a compaction: the index of a user message, at
    least 2 (so that one assistant message or more before it is summarized). Its tool results
    are summarized with the call they answer; the messages after it are kept as they are.

    The earliest such message whose kept part fits in `keep_fraction` of the conversation after
    the first message, else the one before the newest exchange (that assistant message and its
    results stay); only with a single exchange is everything summarized. None when there is
    nothing older than the first message to summarize.
    """
    users = [i for i in range(2, len(messages)) if messages[i].get("role") == "user"
             and messages[i - 1].get("role") == "assistant"]
    if not users:
        return None
    candidates = users[:-1] or users
    budget = keep_fraction * message_chars(messages[1:])
    for index in candidates:
        if message_chars(messages[index + 1:]) <= budget:
            return index
    return candidates[-1]


def summarized_part(messages: list[dict[str, Any]], boundary: int) -> list[dict[str, Any]]:
    """The messages a compaction at `boundary` replaces, as the summary should see them: an
    earlier compaction's blocks, the turns between the first message and the boundary, and the
    tool results of the boundary message (their tool_use is summarized with them)."""
    _, earlier = split_first_message(messages[0])
    part: list[dict[str, Any]] = [{"role": "user", "content": earlier}] if earlier else []
    part.extend(messages[1:boundary])
    results = [b for b in _blocks(messages[boundary]) if b.get("type") == "tool_result"]
    if results:
        part.append({"role": "user", "content": results})
    return part


def summary_block(summary: str) -> dict[str, Any]:
    return {"type": "text", "text": f"{SUMMARY_MARK}\n{SUMMARY_INTRO}\n\n{summary.strip()}"}


def compact(messages: list[dict[str, Any]], boundary: int, summary: str) -> list[dict[str, Any]]:
    """The conversation with the turns before `boundary` replaced by `summary`.

    The first message keeps the task (an earlier summary is replaced, not stacked) and gains
    the summary and the boundary message's own text; the boundary message's tool results go
    with the tool_use they answer, so every tool_use kept is still answered once, and the
    history still alternates user, assistant, user.
    """
    task, _ = split_first_message(messages[0])
    carried = [b for b in _blocks(messages[boundary]) if b.get("type") != "tool_result"]
    first = {"role": "user", "content": [*task, summary_block(summary), *carried]}
    return [first, *messages[boundary + 1:]]


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more characters]"


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def render_transcript(messages: list[dict[str, Any]], *, block_chars: int = TRANSCRIPT_BLOCK_CHARS,
                      total_chars: int = TRANSCRIPT_CHARS) -> str:
    """The messages as plain text for a summary request: each block clipped to `block_chars`,
    thinking left out, and only the newest `total_chars` when it is longer."""
    names: dict[str, str] = {}
    lines: list[str] = []
    for message in messages:
        role = "ASSISTANT" if message.get("role") == "assistant" else "USER"
        for block in _blocks(message):
            kind = block.get("type")
            if kind == "text":
                lines.append(f"{role}: {_clip(str(block.get('text', '')), block_chars)}")
            elif kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
                arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
                lines.append(f"ASSISTANT called {block.get('name')}: {_clip(arguments, block_chars)}")
            elif kind == "tool_result":
                name = names.get(str(block.get("tool_use_id")), "a tool")
                failed = " (error)" if block.get("is_error") else ""
                lines.append(f"RESULT of {name}{failed}: {_clip(_result_text(block), block_chars)}")
    text = "\n\n".join(lines)
    if len(text) > total_chars:
        text = "[... the oldest part is left out]\n" + text[len(text) - total_chars:]
    return text


def _call_summary(name: str, arguments: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(file written, file read, command) of one tool call."""
    path = arguments.get("path")
    path = path if isinstance(path, str) and path else None
    if name in _WRITE_TOOLS:
        return path, None, None
    if name == "str_replace_based_edit_tool":
        return (path, None, None) if arguments.get("command") in _EDITOR_WRITES else (None, path, None)
    if name in _READ_TOOLS:
        return None, path or (None if name == "read_file" else "."), None
    if name == "bash":
        command = arguments.get("command")
        return None, None, command if isinstance(command, str) else None
    return None, None, None


def mechanical_summary(messages: list[dict[str, Any]]) -> str:
    """A summary made without the model: the tool calls made (with how many failed), the files
    written and read, the commands run, the newest user notes, the last thing the assistant said,
    and an earlier summary, each bounded."""
    calls: dict[str, int] = {}
    failed = 0
    written: dict[str, None] = {}
    read: dict[str, None] = {}
    commands: list[str] = []
    notes: list[str] = []
    said = ""
    earlier = ""
    for message in messages:
        for block in _blocks(message):
            kind = block.get("type")
            if kind == "tool_use":
                name = str(block.get("name"))
                calls[name] = calls.get(name, 0) + 1
                given = block.get("input")
                arguments: dict[str, Any] = given if isinstance(given, dict) else {}
                wrote, looked, command = _call_summary(name, arguments)
                if wrote:
                    written[wrote] = None
                if looked:
                    read[looked] = None
                if command:
                    commands.append(_clip(command.replace("\n", " "), 200))
            elif kind == "tool_result" and block.get("is_error"):
                failed += 1
            elif kind == "text" and message.get("role") == "assistant" and block.get("text"):
                said = str(block["text"])
            elif _is_summary(block):
                earlier = str(block["text"])[len(SUMMARY_MARK):].replace(SUMMARY_INTRO, "").strip()
            elif kind == "text" and block.get("text"):
                notes.append(_clip(str(block["text"]), 1_000))
    lines = ["(A mechanical summary: the model could not be asked for one.)"]
    if earlier:
        lines.append(f"Summary of the turns before these:\n{_clip(earlier, 6_000)}")
    if calls:
        made = ", ".join(f"{name} x{count}" for name, count in sorted(calls.items()))
        lines.append(f"Tool calls made: {made}" + (f" ({failed} failed)" if failed else ""))
    if written:
        lines.append("Files written, edited or deleted: " + _clip(", ".join(written), 4_000))
    if read:
        lines.append("Files and folders read or searched: " + _clip(", ".join(read), 2_000))
    if commands:
        shown = commands[-20:]
        more = f" (the last {len(shown)} of {len(commands)})" if len(commands) > len(shown) else ""
        lines.append(f"Commands run{more}:\n" + "\n".join(f"- {c}" for c in shown))
    if notes:
        lines.append("The newest messages from the user in these turns:\n" + "\n".join(f"- {n}" for n in notes[-3:]))
    if said:
        lines.append(f"The assistant's last words before the summary: {_clip(said, 2_000)}")
    return "\n".join(lines)
