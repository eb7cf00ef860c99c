"""What Aider spends without saying so, read from the files it writes beside its output.

Aider prints a "Tokens: ... sent, ... received" line after each main model call, and nothing
else about usage. Two kinds of call go unreported:

- the main call a run was waiting for when it was cut short (a time budget, a stop): Aider logs
  every main call's messages to its LLM history file (--llm-history-file) before it sends them,
  and the reply after it; a call logged without a reply was in flight, and its prompt is known to
  the character;
- its chat-history summaries: when the chat history Aider holds grows past its threshold
  (--max-chat-history-tokens), a thread of its own asks the weak model to summarize the older
  part, once when the run starts with a restored history (from the chat-history file) and again
  after each exchange (that last one runs while Aider exits, and its summary is thrown away).
  Aider prints nothing about them. A summary shows only in the next main call's prompt (it
  starts with Aider's summary prefix); the others are predicted with Aider's rule applied to
  agenter's count of the history (the restored file, then each call's message and reply from the
  LLM history file), about four characters a token where Aider counts with the model's
  tokenizer, so a history close to the threshold may be judged the other way.

Everything here is an estimate, about four characters a token: pure functions over the text of
those files. Read against Aider 0.86's formats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agenter._types import CHARS_PER_TOKEN

#: The length of Aider 0.86's instructions to its summarizer (aider.prompts.summarize).
SUMMARIZE_INSTRUCTIONS_CHARS = 858
#: How every summary Aider puts in the chat begins (aider.prompts.summary_prefix).
SUMMARY_PREFIX = "I spoke to you previously about a number of things."
#: Tokens a chat message costs beside its content (the chat format's role and separators).
MESSAGE_TOKENS = 4
#: Aider's threshold when the model's context window is unknown, and its bounds otherwise.
MIN_HISTORY_TOKENS = 1024
MAX_HISTORY_TOKENS = 8192
#: Aider summarizes the whole history when it has no more messages than this.
_MIN_SPLIT = 4
#: A block header of the LLM history file: "TO LLM <iso time>" or "LLM RESPONSE <iso time>".
_BLOCK = re.compile(r"^(TO LLM|LLM RESPONSE) \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")

Message = tuple[str, str]
"""(role, content) of one chat message."""


@dataclass
class MainCall:
    """One main model call from the LLM history file: its messages, and its reply when logged."""

    messages: list[Message]
    reply: str | None = None

    @property
    def prompt_chars(self) -> int:
        return sum(len(content) for _, content in self.messages)


def history_threshold(context_window: int | None) -> int:
    """Aider's own rule for its history threshold: 1/16 of the model's context window, between
    1k and 8k tokens (1k for a model it does not know)."""
    if not context_window:
        return MIN_HISTORY_TOKENS
    return int(min(max(context_window / 16, MIN_HISTORY_TOKENS), MAX_HISTORY_TOKENS))


def main_calls(log: str) -> list[MainCall]:
    """The main calls in the text of an LLM history file, in order."""
    calls: list[MainCall] = []
    kind: str | None = None
    lines: list[str] = []
    for line in [*log.splitlines(), "TO LLM 0000-00-00T00:00:00"]:  # a last header closes the last block
        header = _BLOCK.match(line)
        if header is None:
            lines.append(line)
            continue
        if kind == "TO LLM":
            calls.append(MainCall(_messages(lines)))
        elif kind == "LLM RESPONSE" and calls and calls[-1].reply is None:
            calls[-1].reply = "\n".join(content for _, content in _messages(lines))
        kind, lines = header.group(1), []
    return calls


def _messages(lines: list[str]) -> list[Message]:
    """Aider's log of messages: "-------" before each message, every line as "ROLE text"."""
    messages: list[Message] = []
    role: str | None = None
    content: list[str] = []
    for line in [*lines, "-------"]:
        if line == "-------":
            if role is not None:
                messages.append((role.lower(), "\n".join(content)))
            role, content = None, []
            continue
        name, _, text = line.partition(" ")
        role = role or name
        content.append(text)
    return messages


def history_messages(markdown: str) -> list[Message]:
    """The chat Aider restores from its chat-history file: "#### " lines are the user's,
    headings ("# ") and its own notes ("> ") are left out, the rest is the assistant's."""
    messages: list[Message] = []
    role = ""
    lines: list[str] = []
    for line in markdown.splitlines(keepends=True):
        if line.startswith("# "):
            continue
        if line.startswith("> "):
            current = "note"
        elif line.startswith("#### "):
            current, line = "user", line[5:]
        else:
            current = "assistant"
        if current != role:
            if role in ("user", "assistant") and "".join(lines).strip():
                messages.append((role, "".join(lines)))
            role, lines = current, []
        lines.append(line)
    if role in ("user", "assistant") and "".join(lines).strip():
        messages.append((role, "".join(lines)))
    return messages


def exchanges(calls: list[MainCall]) -> list[Message]:
    """What a run's main calls add to the chat Aider holds: each call's message (the last user
    message of its prompt) and its reply, whole (the restored chat file loses lines that look
    like headings)."""
    added: list[Message] = []
    for call in calls:
        asked = next((content for role, content in reversed(call.messages) if role == "user"), "")
        added += [("user", asked), ("assistant", call.reply or "")]
    return added


def tokens(messages: list[Message]) -> int:
    """agenter's count of a chat, as Aider would size it: content plus each message's overhead."""
    return sum(-(-len(content) // CHARS_PER_TOKEN) + MESSAGE_TOKENS for _, content in messages)


def summarized(messages: list[Message], threshold: int) -> tuple[list[Message], list[Message]] | None:
    """What Aider sends its summarizer for this history, and the recent part it keeps as it is
    (head, tail), or None when the history is within the threshold. Aider keeps the latest
    messages that fit in half the threshold, from an assistant message on, and summarizes all
    when that would leave too few."""
    if tokens(messages) <= threshold:
        return None
    if len(messages) <= _MIN_SPLIT:
        return messages, []
    split, tail = len(messages), 0
    for index in range(len(messages) - 1, -1, -1):
        size = tokens(messages[index:index + 1])
        if tail + size >= threshold // 2:
            break
        tail, split = tail + size, index
    while split > 1 and messages[split - 1][0] != "assistant":
        split -= 1
    if split <= _MIN_SPLIT:
        return messages, []
    return messages[:split], messages[split:]


def summary_request_chars(head: list[Message]) -> int:
    """Characters of the request summarizing `head`: the instructions, then each message as
    "# ROLE" and its text."""
    return SUMMARIZE_INSTRUCTIONS_CHARS + sum(len(f"# {role.upper()}\n") + len(content) + (0 if content.endswith("\n")
                                                                                         else 1)
                                              for role, content in head)


def summary_in(call: MainCall) -> str | None:
    """The summary a main call's prompt carries (Aider's summary prefix opens it), else None."""
    for role, content in call.messages:
        if role == "user" and content.startswith(SUMMARY_PREFIX):
            return content
    return None
