"""A Codex thread kept in agenter's conversation store, for a session with a private CODEX_HOME.

Codex keeps a thread in its rollout file under CODEX_HOME (`sessions/YYYY/MM/DD/rollout-…-<thread
id>.jsonl`) and resumes it (`thread/resume`) only from there; agenter's private CODEX_HOME is
deleted when the session ends. So a run that pauses (docs/approvals.md) keeps its thread in the
pause store (`backends/_stored_files.py`, kind "codex-thread"). A session that resumes that thread
in a new private CODEX_HOME writes the file back before `thread/resume`, and keeps the stored copy
up to date when it ends. Found by experiment with Codex 0.169: `thread/resume` by id finds a
rollout file put there; without it Codex answers "no rollout found for thread id".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agenter.backends._stored_files import keep_file, restore_file

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["THREAD_KIND", "keep_thread", "restore_thread"]

#: The `kind` in the metadata of a stored Codex thread.
THREAD_KIND = "codex-thread"


def keep_thread(store: ConversationStore, thread_id: str, home: Path, rollout: Path) -> bool:
    """Store the thread's rollout file (under `home`) as it is now; False when it is not there."""
    return keep_file(store, thread_id, THREAD_KIND, home, rollout)


def restore_thread(store: ConversationStore, thread_id: str, home: Path) -> bool:
    """Write a stored thread's rollout file back under `home`; False when the store keeps none
    under this id (a thread of the user's own CODEX_HOME, or one that never paused)."""
    return restore_file(store, thread_id, THREAD_KIND, home, "sessions")
