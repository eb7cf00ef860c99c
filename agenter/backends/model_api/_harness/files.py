"""File tools the model calls: pure Python, every path through PathResolver, bounded output.

A tool never raises: a refused path, a missing file, a bad argument, a path nested too deeply
or a special file (FIFO, device, socket) becomes an error result the model reads and
corrects. Only regular files are opened, never blocking, and reads are bounded by size, so a
hostile workspace can neither hang a worker thread nor fill memory. Writes and deletes are
recorded so the backend can report them.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from agenter._errors import PathSecurityError
from agenter.backends._edits import text_counts
from agenter.sandbox.paths import PathResolver, shown_path
from agenter.sandbox.workspace import IGNORED_DIRS

log = logging.getLogger(__name__)

MAX_READ_LINES = 2000
MAX_OUTPUT_CHARS = 100_000
MAX_LINE_CHARS = 2000
MAX_LISTED = 500
MAX_LIST_DEPTH = 20
MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 2_000_000
#: read_file looks at this many first bytes for a NUL to call a file binary.
SNIFF_BYTES = 8192
#: read_file reads files up to this size to the end, to give the line count and check UTF-8;
#: larger ones only as far as the lines it shows.
COUNT_LINES_BYTES = 2_000_000
#: read_file never reads further into a file than this (to reach a far start_line).
MAX_SCAN_BYTES = 256 * 1024 * 1024
#: edit_file and the editor's insert hold the whole file in memory; larger files are refused.
MAX_EDIT_BYTES = 10_000_000
_READ_CHUNK = 64 * 1024
# What str.splitlines() splits on. A line from it holds none of these but its own break.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
#: The function Python names in a TypeError for missing or unexpected arguments
#: ("FileToolbox._tool_write_file() missing 1 required positional argument: 'content'").
_PYTHON_CALLABLE = re.compile(r"^[\w.]+\(\) ")

FILE_TOOL_NAMES = ("read_file", "write_file", "edit_file", "delete_file", "list_directory", "glob", "grep")
TEXT_EDITOR_TOOL_NAME = "str_replace_based_edit_tool"
TEXT_EDITOR_TOOL_TYPE = "text_editor_20250728"


@dataclass
class ToolOutcome:
    """What the model sees (content, is_error) and what changed on disk."""

    content: str
    is_error: bool = False
    written: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    #: path -> (lines added, lines removed), for each file the tool edited
    edits: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: The path the sandbox or allowed_write_paths refused (the content says why), for the
    #: run's denials: a refusal is named in the result, not only told to the model.
    refused: str | None = None


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(message, is_error=True)


class _ToolError(Exception):
    """Raised inside a tool to end it with this message as the error result."""


def _quoted(path: object) -> str:
    return shown_path(path) if isinstance(path, str) else repr(path)


def _size_text(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 1_000_000 else f"{size} bytes"


_PATH = {"type": "string", "description": "Path relative to the working directory."}

FILE_TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": (
            "Read a text file. Lines are numbered (line number, a tab, then the line); the numbers "
            f"are not part of the file. At most {MAX_READ_LINES} lines per call: use start_line and "
            "end_line (1-based, inclusive) for longer files."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
    },
    {
        "name": "write_file",
        "description": "Create a file or replace its whole content. Parent folders are created.",
        "input_schema": {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "edit_file",
        "description": (
            "Replace an exact piece of text in a file. old_string must occur exactly once (include "
            "enough surrounding lines to make it unique) unless replace_all is true. Copy the text "
            "exactly as read_file shows it, without the line-number prefix."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": False},
            },
            "required": ["path", "old_string", "new_string"],
        },
    },
    {
        "name": "delete_file",
        "description": "Delete a file.",
        "input_schema": {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    },
    {
        "name": "list_directory",
        "description": "List a directory's entries; folders end with '/'.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {**_PATH, "default": "."}},
        },
    },
    {
        "name": "glob",
        "description": (
            "Find files by glob pattern relative to path, e.g. '**/*.py' or 'src/*.txt'. "
            "VCS folders and virtualenvs are skipped."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {**_PATH, "default": "."}},
            "required": ["pattern"],
        },
    },
    {
        "name": "grep",
        "description": (
            "Search file contents with a Python regular expression. Prints 'path:line: text' for "
            f"each match (at most {MAX_GREP_MATCHES}). Optional glob filters the files searched."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {**_PATH, "default": "."},
                "glob": {"type": "string", "description": "e.g. '**/*.py'"},
                "case_insensitive": {"type": "boolean", "default": False},
            },
            "required": ["pattern"],
        },
    },
]

TEXT_EDITOR_TOOL_DEFINITION: dict[str, Any] = {"type": TEXT_EDITOR_TOOL_TYPE, "name": TEXT_EDITOR_TOOL_NAME}


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """A glob over POSIX relative paths: '**/' spans folders, '*' and '?' stay in one segment."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1:end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


class FileToolbox:
    """Runs file tools for one session inside `resolver`'s sandbox."""

    def __init__(self, resolver: PathResolver):
        self.resolver = resolver

    # ------------------------------------------------------------------ dispatch

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        handler = getattr(self, f"_tool_{name}", None)
        if handler is None:
            return _error(f"Unknown file tool {name!r}")
        if not isinstance(arguments, dict):
            return _error("Tool input must be a JSON object")
        return _guarded(name, arguments.get("path"), lambda: handler(**arguments))

    def run_text_editor(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Anthropic's text editor tool (view / create / str_replace / insert)."""
        if not isinstance(arguments, dict):
            return _error("Tool input must be a JSON object")
        return _guarded(str(arguments.get("command")), arguments.get("path"),
                        lambda: self._text_editor(arguments))

    def _text_editor(self, arguments: dict[str, Any]) -> ToolOutcome:
        command = arguments.get("command")
        path = arguments.get("path")
        if not isinstance(path, str):
            return _error("'path' is required")
        if command == "view":
            view_range = arguments.get("view_range")
            target = self.resolver.resolve_read(path) if _safe(self.resolver, path) else None
            if target is not None and target.is_dir():
                return self.run("list_directory", {"path": path, "depth": 2})
            start = end = None
            if isinstance(view_range, list) and len(view_range) == 2:
                start, end = view_range[0], (None if view_range[1] == -1 else view_range[1])
            return self.run("read_file", {"path": path, "start_line": start, "end_line": end})
        if command == "create":
            if "file_text" not in arguments:
                return _error("'file_text' is required for create")
            return self.run("write_file", {"path": path, "content": arguments["file_text"]})
        if command == "str_replace":
            if "old_str" not in arguments:
                return _error("'old_str' is required for str_replace")
            return self.run("edit_file", {"path": path, "old_string": arguments["old_str"],
                                          "new_string": arguments.get("new_str", "")})
        if command == "insert":
            text = arguments.get("insert_text", arguments.get("new_str"))
            if text is None or "insert_line" not in arguments:
                return _error("'insert_line' and 'insert_text' are required for insert")
            return self.run("insert_lines", {"path": path, "insert_line": arguments["insert_line"],
                                             "text": text})
        return _error(f"Unknown command {command!r}; use view, create, str_replace or insert")

    # ------------------------------------------------------------------ tools

    def _tool_read_file(self, path: str, start_line: int | None = None,
                        end_line: int | None = None) -> ToolOutcome:
        first = max(1, int(start_line or 1))
        wanted_last = None if end_line is None else int(end_line)
        window_last = first + MAX_READ_LINES - 1
        if wanted_last is not None:
            window_last = min(window_last, wanted_last)
        with self.resolver.open_for_read(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(SNIFF_BYTES)
            if b"\x00" in head:
                return _error(f"{_quoted(path)} is a binary file ({size} bytes); not shown")
            reader = _LineReader(handle, head)
            out: list[str] = []
            used = 0
            shown_last = first - 1
            more = False  # a wanted line was left out: the footer tells how to read on
            done = False  # everything asked for was shown: the rest of the file does not matter
            number = 0  # lines seen so far
            for batch in reader.batches():
                if more:  # only counting now
                    number += len(batch)
                    continue
                if number + len(batch) < first:  # the whole batch is before the window
                    number += len(batch)
                    if reader.bytes_read > MAX_SCAN_BYTES:
                        return _error(f"start_line {first} is too far into {_quoted(path)}: read_file "
                                      f"reads at most the first {_size_text(MAX_SCAN_BYTES)} of a file "
                                      "(use grep to find the lines you need)")
                    continue
                for index, piece in enumerate(batch):
                    number += 1
                    if number < first:
                        continue
                    if number == first and wanted_last is not None and wanted_last < first:
                        return _error(f"end_line {wanted_last} is before start_line {first}")
                    if number <= window_last:
                        line = piece.rstrip(_LINE_BREAKS)
                        if len(line) > MAX_LINE_CHARS:
                            line = line[:MAX_LINE_CHARS] + " [line truncated]"
                        entry = f"{number:6d}\t{line}"
                        used += len(entry) + 1
                        if used <= MAX_OUTPUT_CHARS:
                            out.append(entry)
                            shown_last = number
                            continue
                    if wanted_last is not None and number > wanted_last:
                        done = True
                    else:
                        more = True
                        number += len(batch) - index - 1
                    break
                if done or (more and size > COUNT_LINES_BYTES):
                    break  # a large file is not read to the end only to count its lines
            total = None if more and size > COUNT_LINES_BYTES else number
        if total == 0:
            return ToolOutcome("(empty file)")
        if total is not None and first > total:
            return _error(f"start_line {first} is past the end of {_quoted(path)} ({total} lines)")
        if more:
            if total is None:
                out.append(f"[shown lines {first}-{shown_last}; the file is too large "
                           f"({_size_text(size)}) to count its lines; read on with start_line={shown_last + 1}]")
            else:
                out.append(f"[shown lines {first}-{shown_last} of {total}; "
                           f"read on with start_line={shown_last + 1}]")
        return ToolOutcome("\n".join(out))

    def _tool_write_file(self, path: str, content: str) -> ToolOutcome:
        if not isinstance(content, str):
            return _error("'content' must be a string")
        before = self._text_before_write(path)
        self._write(path, content)
        rel = self._rel(path)
        return ToolOutcome(f"Wrote {len(content)} characters to {rel}", written={rel},
                           edits={rel: text_counts(before, content)})

    def _tool_edit_file(self, path: str, old_string: str, new_string: str,
                        replace_all: bool = False) -> ToolOutcome:
        if not isinstance(old_string, str) or not isinstance(new_string, str):
            return _error("'old_string' and 'new_string' must be strings")
        if old_string == "":
            return _error("old_string is empty; use write_file to create or overwrite a file")
        if old_string == new_string:
            return _error("old_string and new_string are identical; nothing to change")
        text = self._read_for_edit(path)
        count = text.count(old_string)
        if count == 0:
            hint = ""
            if old_string.strip() and old_string.strip() in text:
                hint = " (it matches when leading/trailing whitespace is ignored: check indentation)"
            return _error(f"old_string was not found in {_quoted(path)}{hint}. Read the file and copy the "
                          "exact text, including whitespace, without line-number prefixes.")
        if count > 1 and not replace_all:
            return _error(f"old_string occurs {count} times in {_quoted(path)}; include more surrounding "
                          "context to make it unique, or set replace_all to true.")
        updated = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        self._write(path, updated)
        rel = self._rel(path)
        return ToolOutcome(f"Replaced {count if replace_all else 1} occurrence(s) in {rel}", written={rel},
                           edits={rel: text_counts(text, updated)})

    def _tool_insert_lines(self, path: str, insert_line: int, text: str) -> ToolOutcome:
        content = self._read_for_edit(path)
        lines = content.splitlines(keepends=True)
        try:
            position = int(insert_line)
        except (TypeError, ValueError):
            return _error("'insert_line' must be an integer")
        if position < 0 or position > len(lines):
            return _error(f"insert_line {position} is out of range 0..{len(lines)} for {_quoted(path)}")
        if lines and not lines[-1].endswith("\n") and position == len(lines):
            lines[-1] += "\n"
        block = text if text.endswith("\n") else text + "\n"
        lines.insert(position, block)
        self._write(path, "".join(lines))
        rel = self._rel(path)
        return ToolOutcome(f"Inserted text after line {position} of {rel}", written={rel},
                           edits={rel: (block.count("\n"), 0)})

    def _tool_delete_file(self, path: str) -> ToolOutcome:
        target = self.resolver.resolve_write(path)
        lexical = Path(os.path.join(self.resolver.cwd, path))
        if lexical.is_symlink():  # remove the link itself, never what it points to
            target = lexical
        elif target.is_dir():
            return _error(f"{_quoted(path)} is a directory; delete_file removes files only")
        target.unlink()
        rel = self._rel(path)
        return ToolOutcome(f"Deleted {rel}", deleted={rel})

    def _tool_list_directory(self, path: str = ".", depth: int = 1) -> ToolOutcome:
        root = self.resolver.resolve_read(path)
        if not root.is_dir():
            return _error(f"{_quoted(path)} is not a directory")
        depth = min(int(depth), MAX_LIST_DEPTH)
        entries: list[str] = []
        truncated = False
        # Depth first, in name order, with an explicit stack: a deep tree cannot exhaust
        # Python's recursion limit.
        stack = [(iter(_sorted_children(root)), "", 1)]
        while stack:
            children, prefix, level = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                continue
            if len(entries) >= MAX_LISTED:
                truncated = True
                break
            is_dir = child.is_dir(follow_symlinks=False)
            if is_dir and child.name in IGNORED_DIRS:
                continue
            entries.append(prefix + child.name + ("/" if is_dir else ""))
            if is_dir and level < depth:
                stack.append((iter(_sorted_children(child.path)), prefix + child.name + "/", level + 1))
        if not entries:
            return ToolOutcome("(empty directory)")
        if truncated:
            entries.append(f"[listing truncated at {MAX_LISTED} entries]")
        return ToolOutcome("\n".join(entries))

    def _tool_glob(self, pattern: str, path: str = ".") -> ToolOutcome:
        if not isinstance(pattern, str) or not pattern:
            return _error("'pattern' must be a non-empty string")
        root = self.resolver.resolve_read(path)
        if not root.is_dir():
            return _error(f"{_quoted(path)} is not a directory")
        matcher = glob_to_regex(pattern.lstrip("./") if pattern.startswith("./") else pattern)
        matches: list[str] = []
        for rel in self._walk_files(root):
            if matcher.match(rel):
                matches.append(rel)
                if len(matches) >= MAX_LISTED:
                    break
        prefix = self._rel_dir_prefix(root)
        shown = [prefix + m for m in sorted(matches)]
        if not shown:
            return ToolOutcome(f"No files match {pattern!r}")
        if len(matches) >= MAX_LISTED:
            shown.append(f"[stopped after {MAX_LISTED} matches; narrow the pattern]")
        return ToolOutcome("\n".join(shown))

    def _tool_grep(self, pattern: str, path: str = ".", glob: str | None = None,
                   case_insensitive: bool = False) -> ToolOutcome:
        try:
            regex = re.compile(pattern, re.IGNORECASE if case_insensitive else 0)
        except (re.error, TypeError) as exc:
            return _error(f"Invalid regular expression {pattern!r}: {exc}")
        start = self.resolver.resolve_read(path)
        file_filter = glob_to_regex(glob) if glob else None
        single = not start.is_dir()
        candidates: Iterator[tuple[str | Path, str]]
        if single:  # one file named: say why it is not searched instead of "No matches"
            candidates = iter([(path, self._rel(path))])
        else:
            prefix = self._rel_dir_prefix(start)
            candidates = ((start / rel, prefix + rel) for rel in self._walk_files(start)
                          if file_filter is None or file_filter.match(rel))
        hits: list[str] = []
        for file_path, shown in candidates:
            try:
                # open_for_read resolves again and opens regular files only: a FIFO or
                # device in the tree is skipped, never opened.
                with self.resolver.open_for_read(file_path) as handle:
                    size = os.fstat(handle.fileno()).st_size
                    if size > MAX_GREP_FILE_BYTES:
                        if single:
                            return _error(f"{_quoted(path)} is larger than {_size_text(MAX_GREP_FILE_BYTES)} "
                                          f"({_size_text(size)}); grep does not search files that large")
                        continue
                    data = handle.read(MAX_GREP_FILE_BYTES + 1)
            except OSError:
                if single:
                    raise
                continue
            if b"\x00" in data[:SNIFF_BYTES]:
                continue
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{shown}:{number}: {line[:300]}")
                    if len(hits) >= MAX_GREP_MATCHES:
                        hits.append(f"[stopped after {MAX_GREP_MATCHES} matches; narrow the search]")
                        return ToolOutcome("\n".join(hits))
        return ToolOutcome("\n".join(hits) if hits else f"No matches for {pattern!r}")

    # ------------------------------------------------------------------ helpers

    def _rel(self, path: str) -> str:
        try:
            target: str | Path = self.resolver.resolve_read(path)  # once: each resolve walks the path
        except PathSecurityError:
            target = os.path.join(self.resolver.cwd, path)
        return self.resolver.relative(target)

    def _rel_dir_prefix(self, directory: Path) -> str:
        rel = self.resolver.relative(directory)
        return "" if rel == "." else rel.rstrip("/") + "/"

    def _walk_files(self, root: Path) -> Iterator[str]:
        """Relative POSIX paths of files under root; no symlinked folders, no IGNORED_DIRS,
        and only files the resolver lets the model read.

        Top-down in name order like os.walk, but with an explicit stack: Python 3.11's os.walk
        recurses once per level, and a deeply nested tree raised RecursionError.
        """
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            folders: list[str] = []
            for entry in _sorted_children(os.path.join(root, rel_dir)):
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:  # a symlinked folder is neither walked nor listed, as with os.walk
                    if entry.name not in IGNORED_DIRS and not entry.is_symlink():
                        folders.append(f"{rel_dir}{entry.name}/")
                    continue
                if entry.is_symlink() and not _safe(self.resolver, entry.path):
                    continue
                yield rel_dir + entry.name
            stack.extend(reversed(folders))

    def _read_for_edit(self, path: str, *, check_write: bool = True) -> str:
        """The whole text of a file the model may write, bounded by MAX_EDIT_BYTES."""
        if check_write:
            self.resolver.resolve_write(path)  # refuses what may not be written before reading
        with self.resolver.open_for_read(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_EDIT_BYTES:
                raise _ToolError(f"{_quoted(path)} is too large to edit ({_size_text(size)}; the limit is "
                                 f"{_size_text(MAX_EDIT_BYTES)}); write_file can replace it whole")
            data = handle.read(MAX_EDIT_BYTES + 1)
        if len(data) > MAX_EDIT_BYTES:  # grew since the fstat
            raise _ToolError(f"{_quoted(path)} is too large to edit")
        return data.decode("utf-8")

    def _text_before_write(self, path: str) -> str:
        """The text a write replaces, for counting lines ("" for a new, binary or huge file).
        Read as any file is (the write that follows checks that it may be written, and the
        counts are shown only when it could): one path resolution fewer on every write."""
        try:
            return self._read_for_edit(path, check_write=False)
        except (_ToolError, OSError, ValueError, PathSecurityError):
            return ""

    def _write(self, path: str, text: str) -> None:
        # Encode first: text the file cannot hold must fail before the open truncates it.
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _ToolError(f"the new content for {_quoted(path)} is not valid text ({exc.reason} at "
                             f"character {exc.start}); nothing was written") from None
        with self.resolver.open_for_write(path, "wb") as handle:
            handle.write(data)


class _LineReader:
    """The lines of a UTF-8 file, split as str.splitlines() splits them, read in chunks.

    batches() yields the lines of each chunk with their line breaks. Memory stays bounded
    whatever the file: a line longer than what read_file shows is cut while reading.
    bytes_read tells how far into the file the reader has got.
    """

    # Cut an unfinished line once it is this long: its start is all read_file shows.
    _CARRY_LIMIT = 4 * MAX_LINE_CHARS

    def __init__(self, handle: BinaryIO, head: bytes, chunk_size: int = _READ_CHUNK):
        self._handle = handle
        self._head = head
        self._chunk_size = chunk_size
        self.bytes_read = len(head)

    def batches(self) -> Iterator[list[str]]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        carry = ""
        chunk = self._head
        while True:
            final = not chunk
            lines = (carry + decoder.decode(chunk, final=final)).splitlines(keepends=True)
            carry = ""
            if not final and lines:
                # The last piece may go on in the next chunk (even a lone "\r" may be half of
                # a "\r\n"), so it waits for it.
                carry = lines.pop()
                if len(carry) > self._CARRY_LIMIT:
                    # Keep the start (and so the truncation mark) and the last character.
                    carry = carry[:MAX_LINE_CHARS + 1] + carry[-1]
            if lines:
                yield lines
            if final:
                return
            chunk = self._handle.read(self._chunk_size)
            self.bytes_read += len(chunk)


def _sorted_children(directory: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as scanner:
            return sorted(scanner, key=lambda entry: entry.name)
    except OSError:
        return []


def _guarded(name: str, path: object, call: Callable[[], ToolOutcome]) -> ToolOutcome:
    """Run one tool call; whatever goes wrong becomes an error result for the model."""
    shown = _quoted(path)
    try:
        return call()
    except _ToolError as exc:
        return _error(str(exc))
    except PathSecurityError as exc:
        return ToolOutcome(str(exc), is_error=True, refused=path if isinstance(path, str) else name)
    except TypeError as exc:  # missing or unexpected arguments; the model never saw our function's name
        return _error(f"Bad arguments for {name}: {_PYTHON_CALLABLE.sub('', str(exc), count=1)}")
    except FileNotFoundError as exc:
        return _error(f"No such file or directory: {shown if path is not None else _quoted(exc.filename)}")
    except IsADirectoryError:
        return _error(f"{shown} is a directory, not a file")
    except NotADirectoryError:
        return _error(f"{shown} is not a directory, or a folder on its path is a file")
    except UnicodeDecodeError:
        return _error(f"{shown} is not a UTF-8 text file")
    except OSError as exc:
        return _error(f"{name} failed on {shown}: {exc.strerror or exc}")
    except RecursionError:
        return _error(f"{name} failed on {shown}: the path or the folders under it are nested too deeply")
    except (ValueError, OverflowError) as exc:
        return _error(f"Bad arguments for {name}: {exc}")
    except re.error as exc:
        return _error(f"Invalid pattern for {name}: {exc}")
    except Exception as exc:  # a bug in a tool must not end the session: log it, tell the model
        log.exception("file tool %s failed", name)
        return _error(f"{name} failed on {shown}: {type(exc).__name__}")


def _safe(resolver: PathResolver, path: str) -> bool:
    try:
        resolver.resolve_read(path)
    except PathSecurityError:
        return False
    return True
