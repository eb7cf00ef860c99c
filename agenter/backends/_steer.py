"""The messages of session.steer, one shape for every backend that steers (agenter's harness,
codex's `turn/steer`, Claude Code's streaming input): STEERED where a message reached the agent,
STATUS for one that did not (docs/sessions.md, "Steering a running request")."""

from __future__ import annotations

from agenter.backends.base import BackendMessage, MessageType

#: steer()'s answer to an empty message.
EMPTY = "the message is empty"
#: steer()'s answer between requests (or while the session validates the agent's work).
IDLE = "no request is running (the agent is idle or its work is being validated): send it as the next request"


def steered(text: str, where: str) -> BackendMessage:
    """A steering message reached the agent; `where` says at which point of its work."""
    return BackendMessage(MessageType.STEERED, content=text, details={"text": text, "where": where})


def undelivered(text: str, why: str) -> BackendMessage:
    """The STATUS naming a steering message that did not reach the model, and why."""
    return BackendMessage(MessageType.STATUS, content=f"a steering message was not delivered: {why} "
                          f"({text[:80]!r}); send it as the next request", details={"steer_undelivered": text})
