"""A Codex thread kept in agenter's conversation store, for a session with a private CODEX_HOME.

Codex keeps a thread in its rollout file under CODEX_HOME (`sessions/YYYY/MM/DD/rollout-…-<thread
id>.jsonl`) and resumes it (`thread/resume`) only from there; agenter's private CODEX_HOME is
deleted when the session ends. So a run that pauses (docs/approvals.md) keeps its thread in the
pause store: a conversation under the thread id whose messages are the rollout's records, with
`kind` "codex-thread" and the file's path in CODEX_HOME in its metadata. A session that resumes
that thread in a new private CODEX_HOME writes the file back before `thread/resume`, and keeps the
stored copy up to date when it ends. Found by experiment with Codex 0.169: `thread/resume` by id
finds a rollout file put there; without it Codex answers "no rollout found for thread id".

The store scrubs secrets from what it writes, as for any conversation. Blocking file and store
I/O: call these in a thread.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agenter._errors import ConfigurationError

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["THREAD_KIND", "keep_thread", "restore_thread"]

#: The `kind` in the metadata of a stored Codex thread.
THREAD_KIND = "codex-thread"


def keep_thread(store: ConversationStore, thread_id: str, home: Path, rollout: Path) -> bool:
    """Store the thread's rollout file (under `home`) as it is now; False when it is not there."""
    try:
        relative = rollout.resolve().relative_to(home.resolve())
        text = rollout.read_text(encoding="utf-8", errors="surrogateescape")
    except (ValueError, OSError):
        return False
    records: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # a line still being written (only ever the last)
            continue
        if isinstance(record, dict):
            records.append(record)
    store.save(thread_id, records, {"kind": THREAD_KIND, "path": relative.as_posix()})
    return True


def restore_thread(store: ConversationStore, thread_id: str, home: Path) -> bool:
    """Write a stored thread's rollout file back under `home`; False when the store keeps none
    under this id (a thread of the user's own CODEX_HOME, or one that never paused)."""
    from agenter.store import check_session_id

    try:
        check_session_id(thread_id)
    except ConfigurationError:
        return False
    kept = store.load(thread_id)
    if kept is None or kept.metadata.get("kind") != THREAD_KIND:
        return False
    relative = PurePosixPath(str(kept.metadata.get("path") or ""))
    if relative.is_absolute() or ".." in relative.parts or relative.parts[:1] != ("sessions",):
        return False  # not a path Codex wrote: never write outside CODEX_HOME's sessions
    target = home.joinpath(*relative.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in kept.messages),
                      encoding="utf-8", errors="surrogateescape")
    return True
