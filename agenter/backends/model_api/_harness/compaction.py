"""Compaction as the harness runs it: when the conversation no longer fits the model's context
window, the turns after the task and before the most recent ones become one summary, written by
the model in one small request (`ModelWire.complete`) or, when that fails, mechanically. The rules
of where to cut and how to rebuild the history are conversation.py's; this is the step around
them (the summary request, its usage, the COMPACTED message, the bound on compactions in a row).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from agenter._errors import BackendError
from agenter.backends.base import BackendMessage, MessageType
from agenter.backends.model_api._harness.conversation import (
    compact,
    compaction_boundary,
    estimate_tokens,
    mechanical_summary,
    render_transcript,
    summarized_part,
)
from agenter.backends.model_api._harness.wire import Message, ModelWire, WireRequest

if TYPE_CHECKING:
    from agenter.usage import UsageLedger

log = logging.getLogger(__name__)

#: Compactions in a row (with no model response between them) before a context_length
#: BackendError; the share of the conversation (after the task) the first and the second of
#: them keep verbatim, the rest summarized.
MAX_COMPACTIONS = 2
KEEP_FRACTIONS = (0.3, 0.1)
#: The summary request: small, bounded in time, never retried (a failure falls back to a
#: mechanical summary).
SUMMARY_MAX_TOKENS = 4096
SUMMARY_TIMEOUT = 120.0
SUMMARY_SYSTEM = ("You write the working notes an autonomous coding agent continues its task from, after the "
                  "older part of its conversation is dropped to fit the context window. Be factual and "
                  "specific; never invent work that is not in the transcript.")
SUMMARY_REQUEST = """\
Summarize this transcript of the earlier part of the session (the agent's tool calls and their \
results). The agent keeps its task and its most recent turns; this summary replaces everything \
shown here. Include:
- what has been done: files created, edited or deleted (paths) and what changed in them;
- what was learned: facts about the code (paths, names, signatures), commands and their outcomes, errors;
- what was tried and failed, and why;
- what remains to be done, as far as the transcript shows.
Plain text, at most about 600 words, no preamble.

<transcript>
{transcript}
</transcript>"""


class Compactor:
    """Compacts one session's conversation through its wire (usage settled in its ledger)."""

    def __init__(self, wire: ModelWire, ledger: UsageLedger, *, backend: str, request_timeout: float,
                 redact: Callable[[str], str]):
        self.wire = wire
        self.ledger = ledger
        self.backend = backend
        self.request_timeout = request_timeout
        self.redact = redact

    async def compact(self, messages: list[Message], number: int, overflow: BackendError | None) -> BackendMessage:
        """Compaction `number` in a row, in place: the COMPACTED message that reports it. Raises a
        context_length BackendError past MAX_COMPACTIONS in a row or when nothing is left to
        compact (`overflow` itself at the first: the request that did not fit).

        The bound is on compactions in a row, not per iteration: a long iteration may compact
        each time it outgrows the window again, as long as the model answers in between."""
        why = "the prompt was too long" if overflow is not None else "a response filled the context window"
        boundary = compaction_boundary(messages, KEEP_FRACTIONS[number - 1]) if number <= MAX_COMPACTIONS else None
        if boundary is None:
            # Past the bound, or only the task (and a summary) left: nothing more to summarize.
            if overflow is not None and number == 1:
                raise overflow
            done = min(number - 1, MAX_COMPACTIONS)
            detail = f": {overflow}" if overflow is not None else ""
            raise BackendError(
                f"the conversation does not fit the model's context window even after {done} "
                f"compaction{'s' if done != 1 else ''} in a row{detail}", backend=self.backend,
                kind="context_length", status_code=overflow.status_code if overflow is not None else None)
        older = summarized_part(messages, boundary)
        summary, failure = await self.summarize(older)
        before = estimate_tokens(messages)
        messages[:] = compact(messages, boundary, summary or mechanical_summary(older))
        after = estimate_tokens(messages)
        source = "the model's summary" if summary else f"a mechanical summary ({failure})"
        return BackendMessage(
            MessageType.COMPACTED, content=(
                f"context compacted: {why}; {boundary - 1} earlier messages replaced by {source}, "
                f"about {before} -> {after} tokens (compaction {number}/{MAX_COMPACTIONS} in a row)"),
            details={"tokens_before": before, "tokens_after": after, "messages_removed": boundary - 1,
                     "summary": "model" if summary else "mechanical"})

    async def summarize(self, older: list[Message]) -> tuple[str | None, str]:
        """The model's summary of `older` by one small request, or (None, why it failed)."""
        request = WireRequest(
            system=SUMMARY_SYSTEM, max_tokens=SUMMARY_MAX_TOKENS, cache=False,
            messages=[{"role": "user", "content": SUMMARY_REQUEST.format(transcript=render_transcript(older))}],
            timeout=min(self.request_timeout, SUMMARY_TIMEOUT))
        try:
            answer = await self.wire.complete(request)
        except Exception as exc:  # noqa: BLE001 - any failure falls back to the mechanical summary
            failure = self.wire.failure(exc)
            status = failure.status if failure is not None else None
            why = (f"the summary request failed: {status} {failure.error_type or ''}".strip()
                   if failure is not None and status is not None
                   else f"the summary request failed: {type(exc).__name__}")
            log.info("%s (%s)", why, self.redact(failure.message if failure is not None else str(exc)))
            return None, why
        self.ledger.settle(answer.usage)
        text = answer.text().strip()
        return (text, "") if text else (None, "the summary request came back empty")
