"""An OpenHands conversation kept in agenter's conversation store, for a paused run
(docs/approvals.md).

OpenHands keeps a conversation as a folder of `openhands_persistence_dir` named by the
conversation id (hex): `base_state.json` (the agent, its LLM settings with the key masked, the
execution status and the confirmation policy) and `events/event-<index>-<event id>.json`, one
JSON file per event, which it resumes from. Its other files are not needed to resume: the
`events/.eventlog*` lock and length marker (recounted when missing) and `observations/` (a long
terminal output saved whole; the event holds the part the model read). A run that pauses
elsewhere than where it is approved needs that folder, so `hold` keeps the two kinds of files in
the pause store under the conversation id (`backends/_stored_files.py`, `keep_folder`: one
message per file, kind "openhands-conversation", at most 10,000 files and 32 MiB). A process
whose persistence dir lacks the conversation writes the folder back before OpenHands resumes it;
one that has it uses its own, unless the stored copy holds events it lacks: then the
conversation went on on another host (`went_on_elsewhere`) and the pause cannot be approved.
Free of OpenHands imports; blocking file and store I/O: call these in a thread.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from agenter.backends._stored_files import keep_folder, kept, restore_folder

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["CONVERSATION_KIND", "conversation_file", "keep_conversation", "restore_conversation", "went_on_elsewhere"]

#: The `kind` in the metadata of a stored OpenHands conversation.
CONVERSATION_KIND = "openhands-conversation"
#: An event file's name, as OpenHands writes it (`persistence_const.EVENT_NAME_RE`).
EVENT_FILE = re.compile(r"event-\d{5,}-[0-9a-fA-F-]{8,}\.json")


def conversation_file(relative: PurePosixPath) -> bool:
    """Whether a path under a conversation's folder is one OpenHands resumes from."""
    parts = relative.parts
    return parts == ("base_state.json",) or (
        len(parts) == 2 and parts[0] == "events" and EVENT_FILE.fullmatch(parts[1]) is not None)


def keep_conversation(store: ConversationStore, persistence_dir: Path, conversation_id: uuid.UUID) -> int:
    """Store the conversation's files as they are now; the number of files (0: none here)."""
    folder = persistence_dir / conversation_id.hex
    if not (folder / "base_state.json").is_file():
        return 0
    return keep_folder(store, str(conversation_id), CONVERSATION_KIND, folder, conversation_file)


def restore_conversation(store: ConversationStore, persistence_dir: Path, conversation_id: uuid.UUID) -> bool:
    """Write a stored conversation back into `persistence_dir`; False when the store keeps none
    under this id. StoreError for a stored path that is not one of the conversation's files."""
    return restore_folder(store, str(conversation_id), CONVERSATION_KIND, persistence_dir / conversation_id.hex,
                          conversation_file)


def went_on_elsewhere(store: ConversationStore, persistence_dir: Path, conversation_id: uuid.UUID) -> bool:
    """Whether the stored copy holds an event this persistence dir's folder lacks: the
    conversation went on in another process (another host) since this folder was written."""
    found = kept(store, str(conversation_id), CONVERSATION_KIND)
    if found is None:
        return False
    events = persistence_dir / conversation_id.hex / "events"
    for message in found.messages:
        path = message.get("path") if isinstance(message, dict) else None
        relative = PurePosixPath(path) if isinstance(path, str) else None
        if relative is not None and conversation_file(relative) and relative.parts[0] == "events" \
                and not (events / relative.parts[1]).is_file():
            return True
    return False
