"""A file an agent program keeps for its session, kept in agenter's conversation store while a
run waits for approval (docs/approvals.md).

Codex resumes a thread only from its rollout file under CODEX_HOME, and Claude Code a session only
from its transcript under `~/.claude/projects/`; both are files of the host the run paused on
(Codex's private CODEX_HOME is even deleted with the session). So a run that pauses keeps that
file in the pause store: a conversation under the agent's session id whose messages are the
file's JSON lines, with a `kind` naming the program and the file's path under the program's folder
in its metadata. The process that approves, on this host or another one with the same store,
writes the file back before the program resumes the session.

The store scrubs secrets from what it writes, as for any conversation. Blocking file and store
I/O: call these in a thread.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agenter._errors import ConfigurationError

if TYPE_CHECKING:
    from agenter.store import Conversation, ConversationStore

__all__ = ["keep_file", "kept", "restore_file"]


def keep_file(store: ConversationStore, key: str, kind: str, root: Path, path: Path) -> bool:
    """Store the JSON-lines file `path` (under `root`) under `key` as it is now; False when it is
    not there or not under `root`."""
    try:
        relative = path.resolve().relative_to(root.resolve())
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
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
    store.save(key, records, {"kind": kind, "path": relative.as_posix()})
    return True


def restore_file(store: ConversationStore, key: str, kind: str, root: Path, top: str, *,
                 replace: bool = True) -> bool:
    """Write the file stored under `key` back under `root`; False when the store keeps none of
    this kind there, its path is not under `root/top` (never written elsewhere), or (with
    `replace=False`) the file is there already."""
    found = kept(store, key, kind)
    if found is None:
        return False
    relative = PurePosixPath(str(found.metadata.get("path") or ""))
    if relative.is_absolute() or ".." in relative.parts or relative.parts[:1] != (top,) or len(relative.parts) < 2:
        return False  # not a path the program wrote
    target = root.joinpath(*relative.parts)
    if not replace and target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in found.messages),
                      encoding="utf-8", errors="surrogateescape")
    return True


def kept(store: ConversationStore, key: str, kind: str) -> Conversation | None:
    """What the store keeps under `key` when it is of this `kind` (an agent program's file, or
    ADK's session events); None for a key that is no store id, nothing there, or another kind."""
    from agenter.store import check_session_id

    try:
        check_session_id(key)
    except ConfigurationError:
        return None
    found = store.load(key)
    return found if found is not None and found.metadata.get("kind") == kind else None
