"""A file an agent program keeps for its session, kept in agenter's conversation store while a
run waits for approval (docs/approvals.md).

Codex resumes a thread only from its rollout file under CODEX_HOME, and Claude Code a session only
from its transcript under `~/.claude/projects/`; both are files of the host the run paused on
(Codex's private CODEX_HOME is even deleted with the session). So a run that pauses keeps that
file in the pause store: a conversation under the agent's session id whose messages are the
file's JSON lines, with a `kind` naming the program and the file's path under the program's folder
in its metadata. The process that approves, on this host or another one with the same store,
writes the file back before the program resumes the session.

A program that keeps a session as a folder of JSON files (OpenHands: `base_state.json` and one
file per event) keeps that folder instead (`keep_folder` / `restore_folder`): one message per
file, `{"path": <its path under the folder, POSIX>, "json": <the file's JSON value>}`, so the
store scrubs the values it holds as for any message (a file's text would hide a secret that JSON
escapes). Written back, a file holds the same JSON value (not the same bytes: OpenHands reads its
files as JSON only). Limits: KEPT_FOLDER_FILES files and KEPT_FOLDER_BYTES bytes in all; a larger
folder is not kept (StoreError).

A program whose session is a text file (Aider's markdown chat history) keeps its text
(`keep_text` / `restore_text`): one message `{"text": ...}`, written back as a new private file
where the program says (its own folder, not a path the store names).

The store scrubs secrets from what it writes, as for any conversation. Blocking file and store
I/O: call these in a thread.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agenter._errors import ConfigurationError

if TYPE_CHECKING:
    from agenter.store import Conversation, ConversationStore

__all__ = ["KEPT_FOLDER_BYTES", "KEPT_FOLDER_FILES", "keep_file", "keep_folder", "keep_text", "kept", "restore_file",
           "restore_folder", "restore_text"]

#: The most files `keep_folder` keeps of one folder.
KEPT_FOLDER_FILES = 10_000
#: The most bytes (the files' sizes on disk, together) `keep_folder` keeps of one folder.
KEPT_FOLDER_BYTES = 32 * 1024 * 1024


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


def keep_text(store: ConversationStore, key: str, kind: str, text: str) -> None:
    """Store a program's text file (its session) under `key` as it is now."""
    store.save(key, [{"text": text}], {"kind": kind})


def restore_text(store: ConversationStore, key: str, kind: str, path: Path) -> bool:
    """Write the text `keep_text` stored under `key` as the new file `path` (0600, its folder
    there already); False when the store keeps none of this kind there, or a file is at `path`
    (it stays as it is)."""
    found = kept(store, key, kind)
    if found is None:
        return False
    parts = [message.get("text") for message in found.messages if isinstance(message, dict)]
    try:
        _write_private(path, "".join(part for part in parts if isinstance(part, str)))
    except FileExistsError:
        return False
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


def keep_folder(store: ConversationStore, key: str, kind: str, folder: Path,
                wanted: Callable[[PurePosixPath], bool]) -> int:
    """Store the JSON files under `folder` whose relative path `wanted` accepts (symbolic links
    are not followed), as they are now, under `key`; the number of files. StoreError when a
    wanted file is not JSON or the folder is over the limits (nothing is stored then)."""
    from agenter.store import StoreError

    records: list[dict[str, Any]] = []
    total = 0
    for relative, path in _folder_files(folder, wanted):
        total += path.stat().st_size
        if len(records) >= KEPT_FOLDER_FILES or total > KEPT_FOLDER_BYTES:
            raise StoreError(f"the folder {folder.name!r} is too large to keep in the store (more than "
                             f"{KEPT_FOLDER_FILES} files or {KEPT_FOLDER_BYTES // (1024 * 1024)} MiB)")
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise StoreError(f"{relative.as_posix()!r} in the folder {folder.name!r} is not JSON, so it cannot "
                             "be kept in the store") from None
        records.append({"path": relative.as_posix(), "json": value})
    store.save(key, records, {"kind": kind, "files": len(records)})
    return len(records)


def restore_folder(store: ConversationStore, key: str, kind: str, folder: Path,
                   wanted: Callable[[PurePosixPath], bool]) -> bool:
    """Write the folder stored under `key` back as `folder` (0700, its files 0600), which must
    not exist yet (or be empty); False when the store keeps none of this kind there. Every path
    is checked before anything is written: one that is absolute, climbs out ('..'), is hidden or
    is not one `wanted` accepts is refused (StoreError: the record is not what `keep_folder`
    wrote). Written beside `folder` first and moved into place whole, so a reader never finds
    half of it."""
    from agenter.store import StoreError

    found = kept(store, key, kind)
    if found is None:
        return False
    files = [_stored_path(message, key, wanted) for message in found.messages]
    if len(files) > KEPT_FOLDER_FILES:
        raise StoreError(f"the folder stored under {key!r} holds more than {KEPT_FOLDER_FILES} files: refused")
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".agenter-restore-", dir=folder.parent))  # 0700
    try:
        for relative, value in files:
            parent = staging
            for part in relative.parts[:-1]:
                parent = parent / part
                parent.mkdir(mode=0o700, exist_ok=True)
            _write_private(parent / relative.name, json.dumps(value))
        os.replace(staging, folder)  # onto nothing or an empty folder only
    except OSError as exc:
        raise StoreError(f"the folder stored under {key!r} cannot be written back as {str(folder)!r}: "
                         f"{exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def _folder_files(folder: Path, wanted: Callable[[PurePosixPath], bool]) -> list[tuple[PurePosixPath, Path]]:
    """The regular files under `folder` that `wanted` accepts, sorted by relative path."""
    found = []
    for top, dirs, names in os.walk(folder):  # os.walk follows no symbolic link to a folder
        dirs.sort()
        for name in names:
            path = Path(top, name)
            relative = PurePosixPath(*path.relative_to(folder).parts)
            if not path.is_symlink() and path.is_file() and wanted(relative):
                found.append((relative, path))
    return sorted(found)


def _stored_path(message: Any, key: str, wanted: Callable[[PurePosixPath], bool]) -> tuple[PurePosixPath, Any]:
    """A stored file's checked relative path and its JSON value (StoreError for a path that is
    not one `keep_folder` would have written)."""
    from agenter.store import StoreError

    raw = message.get("path") if isinstance(message, dict) else None
    relative = PurePosixPath(raw) if isinstance(raw, str) else None
    if (relative is None or not raw or "\\" in raw or "\0" in raw or relative.is_absolute()
            or any(part in ("", ".", "..") or part.startswith(".") for part in relative.parts)
            or relative.as_posix() != raw or not wanted(relative) or "json" not in message):
        shown = repr(raw)[:120] if isinstance(raw, str) else type(message).__name__
        raise StoreError(f"the folder stored under {key!r} names a file {shown} that is not one agenter keeps "
                         "(an absolute path, '..', a hidden name or a file the program does not write): refused, "
                         "nothing was written")
    return relative, message["json"]


def _write_private(path: Path, text: str) -> None:
    """Write `text` as the new file `path`, only its owner can read (0600); FileExistsError when
    something is there already (a symbolic link included: it is never followed)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
