"""The file tools the SDK's agent gets: read a file, write, edit or delete one. Free of the SDK.

Every path goes through the session's PathResolver (inside cwd with sandbox=True, never inside
.git/, only where allowed_write_paths permits). Writes are `agenter.tools.patch`'s changes of
one file: checked first, written atomically (a temporary file, then a rename), the file's mode,
line endings and final newline kept. Reads are bounded (MAX_READ_BYTES, MAX_READ_LINES) and only
of regular files. A tool never raises: what goes wrong is an error the model reads and corrects.
Listing and searching are the shell's (`ls`, `grep -rn`, `find`), as with the SDK's own tools.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenter._errors import PathSecurityError
from agenter.backends._edits import diff_counts
from agenter.sandbox.paths import PathResolver, shown_path
from agenter.tools.patch import FileChange, PatchError, PatchProposal, SearchReplace, apply_proposal

__all__ = ["FILE_TOOLS", "READ_FILE", "WRITE_TOOLS", "FileOutcome", "FileTools"]

log = logging.getLogger(__name__)

#: Lines read_file shows per call, and the bytes of a file it reads at most.
MAX_READ_LINES = 2000
MAX_READ_BYTES = 2_000_000
#: Characters of one shown line, and of one read_file answer.
MAX_LINE_CHARS = 2000
MAX_OUTPUT_CHARS = 100_000
#: Bytes read_file looks at for a NUL to call a file binary.
SNIFF_BYTES = 8192

READ_FILE = "read_file"
#: The tools that change files (offered in autonomous sessions only).
WRITE_TOOLS = ("write_file", "edit_file", "delete_file")

_PATH = {"type": "string", "description": "Path relative to the working directory."}

#: name -> (description, JSON schema of the arguments)
FILE_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    READ_FILE: (
        "Read a text file. Lines are numbered (line number, a tab, then the line); the numbers are not part of "
        f"the file. At most {MAX_READ_LINES} lines per call: use start_line and end_line (1-based, inclusive) "
        "for longer files. List and search files with the shell (ls, find, grep -rn).",
        {"type": "object", "properties": {"path": _PATH, "start_line": {"type": "integer", "minimum": 1},
                                          "end_line": {"type": "integer", "minimum": 1}},
         "required": ["path"], "additionalProperties": False}),
    "write_file": (
        "Create a file or replace its whole content. Parent folders are created.",
        {"type": "object", "properties": {"path": _PATH, "content": {"type": "string"}},
         "required": ["path", "content"], "additionalProperties": False}),
    "edit_file": (
        "Replace one exact piece of text in a file: old_string must occur exactly once (include enough "
        "surrounding lines to make it unique). Copy it exactly as read_file shows it, without the line numbers.",
        {"type": "object", "properties": {"path": _PATH, "old_string": {"type": "string"},
                                          "new_string": {"type": "string"}},
         "required": ["path", "old_string", "new_string"], "additionalProperties": False}),
    "delete_file": (
        "Delete a file.",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"], "additionalProperties": False}),
}


@dataclass
class FileOutcome:
    """What the model reads, and what changed on disk (paths relative to cwd)."""

    text: str
    is_error: bool = False
    written: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    #: path -> (lines added, lines removed)
    edits: dict[str, tuple[int, int]] = field(default_factory=dict)


class FileTools:
    """The file tools of one session, inside `resolver`'s confinement. Blocking: run them in a
    thread (the backend's `in_thread`)."""

    def __init__(self, resolver: PathResolver):
        self.resolver = resolver

    def run(self, name: str, arguments: dict[str, Any]) -> FileOutcome:
        path = arguments.get("path")
        if not isinstance(path, str) or not path:
            return FileOutcome("'path' must be a non-empty string", is_error=True)
        handlers: dict[str, Callable[[], FileOutcome]] = {
            READ_FILE: lambda: self.read(path, arguments.get("start_line"), arguments.get("end_line")),
            "write_file": lambda: self.write(path, arguments.get("content")),
            "edit_file": lambda: self.edit(path, arguments.get("old_string"), arguments.get("new_string")),
            "delete_file": lambda: self._change(FileChange(path=path, operation="delete")),
        }
        handler = handlers.get(name)
        if handler is None:
            return FileOutcome(f"unknown file tool {name!r}", is_error=True)
        return _guarded(name, path, handler)

    def read(self, path: str, start_line: Any = None, end_line: Any = None) -> FileOutcome:
        first = _line_number(start_line, 1)
        last = _line_number(end_line, first + MAX_READ_LINES - 1)
        if last < first:
            return FileOutcome(f"end_line {last} is before start_line {first}", is_error=True)
        with self.resolver.open_for_read(path) as handle:
            data = handle.read(MAX_READ_BYTES + 1)
        if b"\x00" in data[:SNIFF_BYTES]:
            return FileOutcome(f"{shown_path(path)} is a binary file; not shown", is_error=True)
        cut = len(data) > MAX_READ_BYTES
        lines = data[:MAX_READ_BYTES].decode("utf-8", "replace").splitlines()
        if cut:
            lines = lines[:-1]  # the last one may be cut in the middle
        if not lines:
            return FileOutcome("(empty file)")
        if first > len(lines):
            where = f"the first {MAX_READ_BYTES:,} bytes of " if cut else ""
            return FileOutcome(f"start_line {first} is past the end of {where}{shown_path(path)} ({len(lines)} lines)",
                               is_error=True)
        shown: list[str] = []
        used = 0
        end = min(last, first + MAX_READ_LINES - 1, len(lines))
        for number in range(first, end + 1):
            line = lines[number - 1]
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " [line truncated]"
            entry = f"{number:6d}\t{line}"
            used += len(entry) + 1
            if used > MAX_OUTPUT_CHARS:
                end = number - 1
                break
            shown.append(entry)
        if end < len(lines) and end < last:
            shown.append(f"[shown lines {first}-{end} of {len(lines)}; read on with start_line={end + 1}]")
        if cut:
            shown.append(f"[the file is larger than {MAX_READ_BYTES:,} bytes: read_file shows only its start; "
                         "use the shell (sed -n 'A,Bp' FILE) for the rest]")
        return FileOutcome("\n".join(shown))

    def write(self, path: str, content: Any) -> FileOutcome:
        if not isinstance(content, str):
            return FileOutcome("'content' must be a string", is_error=True)
        exists = self.resolver.resolve_write(path).exists()
        return self._change(FileChange(path=path, operation="modify" if exists else "create", content=content))

    def edit(self, path: str, old: Any, new: Any) -> FileOutcome:
        if not isinstance(old, str) or not isinstance(new, str):
            return FileOutcome("'old_string' and 'new_string' must be strings", is_error=True)
        if not old:
            return FileOutcome("old_string is empty; use write_file to create or replace a file", is_error=True)
        if old == new:
            return FileOutcome("old_string and new_string are the same; nothing to change", is_error=True)
        return self._change(FileChange(path=path, operation="modify",
                                       search_replace=[SearchReplace(search=old, replace=new)]))

    def _change(self, change: FileChange) -> FileOutcome:
        try:
            applied = apply_proposal(PatchProposal(summary="", files=[change]), self.resolver)
        except PatchError as exc:
            return FileOutcome("\n".join(error.message for error in exc.errors), is_error=True)
        if applied.deleted:
            (rel,) = applied.deleted
            return FileOutcome(f"Deleted {rel}", deleted=set(applied.deleted))
        (rel,) = applied.written
        verb = "Wrote" if change.operation == "create" or change.content is not None else "Edited"
        return FileOutcome(f"{verb} {rel}", written=set(applied.written), edits={rel: diff_counts(applied.diff)})


def _line_number(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(1, value)


def _guarded(name: str, path: str, call: Callable[[], FileOutcome]) -> FileOutcome:
    """Run one tool call; whatever goes wrong becomes an error the model reads."""
    shown = shown_path(path)
    try:
        return call()
    except PathSecurityError as exc:
        return FileOutcome(str(exc), is_error=True)
    except FileNotFoundError:
        return FileOutcome(f"No such file: {shown}", is_error=True)
    except IsADirectoryError:
        return FileOutcome(f"{shown} is a directory, not a file (list it with the shell: ls)", is_error=True)
    except NotADirectoryError:
        return FileOutcome(f"{shown}: a folder on its path is a file", is_error=True)
    except OSError as exc:
        return FileOutcome(f"{name} failed on {shown}: {exc.strerror or exc}", is_error=True)
    except (ValueError, RecursionError) as exc:
        return FileOutcome(f"Bad arguments for {name}: {exc}", is_error=True)
    except Exception as exc:  # a bug in a tool must not end the session: log it, tell the model
        log.exception("file tool %s failed", name)
        return FileOutcome(f"{name} failed on {shown}: {type(exc).__name__}", is_error=True)
