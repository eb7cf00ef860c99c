"""The file I/O behind ADK's ReadFile, EditFile and WriteFile tools, inside the session's
PathResolver (inside cwd with sandbox=True, never inside .git/, only where allowed_write_paths
permits). Blocking: the environment runs these in the backend's tracked threads. Free of ADK.

ADK's tools read a whole file and decode it themselves; here reads are bounded (MAX_FILE_BYTES)
and of regular files only (a FIFO never blocks a thread), and what an edit would do to a file
that is not UTF-8 text (ADK decodes with replacement characters) is refused instead. A write
reports the file's path relative to cwd and its lines added and removed.
"""

from __future__ import annotations

from agenter.backends._edits import text_counts
from agenter.sandbox.paths import PathResolver, shown_path

__all__ = ["MAX_FILE_BYTES", "read_file", "write_file"]

#: The largest file the tools read (ReadFile shows a part of it; EditFile holds it whole).
MAX_FILE_BYTES = 10_000_000


def read_file(resolver: PathResolver, path: str, *, text_only: bool = False) -> bytes:
    """The bytes of a regular file; `text_only`: it must be UTF-8 text (for an edit). Raises what
    the tools report to the model (PathSecurityError, FileNotFoundError, ValueError)."""
    with resolver.open_for_read(path) as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{shown_path(path)} is larger than {MAX_FILE_BYTES // 1_000_000} MB; read a part of it "
                         "with Execute (sed -n '1,200p' FILE) or change it with a command")
    if text_only:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{shown_path(path)} is not UTF-8 text; nothing was changed") from None
    return data


def write_file(resolver: PathResolver, path: str, content: str | bytes) -> tuple[str, int, int]:
    """Write the whole file (parents created); (its path relative to cwd, lines added, lines
    removed)."""
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    before = _text_before(resolver, path)
    with resolver.open_for_write(path, "wb") as handle:
        handle.write(data)
    added, removed = text_counts(before, data.decode("utf-8", "replace"))
    return resolver.relative(resolver.resolve_write(path)), added, removed


def _text_before(resolver: PathResolver, path: str) -> str | None:
    """The text a write replaces, for counting lines (None: a new, unreadable or huge file)."""
    try:
        with resolver.open_for_read(path) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_FILE_BYTES:
        return None
    return data.decode("utf-8", "replace")
