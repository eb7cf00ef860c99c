"""File tools the model calls: pure Python, every path through PathResolver, bounded output.

A tool never raises: a refused path, a missing file or a bad argument becomes an error result
the model reads and corrects. Writes and deletes are recorded so the backend can report them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenter._errors import PathSecurityError
from agenter.sandbox.paths import PathResolver
from agenter.sandbox.workspace import IGNORED_DIRS

MAX_READ_LINES = 2000
MAX_OUTPUT_CHARS = 100_000
MAX_LINE_CHARS = 2000
MAX_LISTED = 500
MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 2_000_000

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


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(message, is_error=True)


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
        try:
            return handler(**arguments)
        except PathSecurityError as exc:
            return _error(str(exc))
        except TypeError as exc:  # missing or unexpected arguments
            return _error(f"Bad arguments for {name}: {exc}")
        except FileNotFoundError as exc:
            return _error(f"No such file or directory: {exc.filename or arguments.get('path')}")
        except IsADirectoryError:
            return _error(f"{arguments.get('path')!r} is a directory, not a file")
        except NotADirectoryError:
            return _error(f"{arguments.get('path')!r} is not a directory")
        except UnicodeDecodeError:
            return _error(f"{arguments.get('path')!r} is not a UTF-8 text file")
        except OSError as exc:
            return _error(f"{name} failed: {exc.strerror or exc}")

    def run_text_editor(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Anthropic's text editor tool (view / create / str_replace / insert)."""
        if not isinstance(arguments, dict):
            return _error("Tool input must be a JSON object")
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
        target = self.resolver.resolve_read(path)
        data = target.read_bytes()
        if b"\x00" in data[:8192]:
            return _error(f"{path!r} is a binary file ({len(data)} bytes); not shown")
        lines = data.decode("utf-8").splitlines()
        first = max(1, int(start_line or 1))
        last = len(lines) if end_line is None else min(int(end_line), len(lines))
        if lines and first > len(lines):
            return _error(f"start_line {first} is past the end of {path!r} ({len(lines)} lines)")
        if last < first and lines:
            return _error(f"end_line {last} is before start_line {first}")
        shown_last = min(last, first + MAX_READ_LINES - 1)
        out: list[str] = []
        size = 0
        for number in range(first, shown_last + 1):
            line = lines[number - 1]
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " [line truncated]"
            entry = f"{number:6d}\t{line}"
            size += len(entry) + 1
            if size > MAX_OUTPUT_CHARS:
                shown_last = number - 1
                break
            out.append(entry)
        if not lines:
            return ToolOutcome("(empty file)")
        if shown_last < last:
            out.append(f"[shown lines {first}-{shown_last} of {len(lines)}; "
                       f"read on with start_line={shown_last + 1}]")
        return ToolOutcome("\n".join(out))

    def _tool_write_file(self, path: str, content: str) -> ToolOutcome:
        if not isinstance(content, str):
            return _error("'content' must be a string")
        with self.resolver.open_for_write(path) as handle:
            handle.write(content)
        rel = self._rel(path)
        return ToolOutcome(f"Wrote {len(content)} characters to {rel}", written={rel})

    def _tool_edit_file(self, path: str, old_string: str, new_string: str,
                        replace_all: bool = False) -> ToolOutcome:
        if not isinstance(old_string, str) or not isinstance(new_string, str):
            return _error("'old_string' and 'new_string' must be strings")
        if old_string == "":
            return _error("old_string is empty; use write_file to create or overwrite a file")
        if old_string == new_string:
            return _error("old_string and new_string are identical; nothing to change")
        source = self.resolver.resolve_write(path)
        text = source.read_text(encoding="utf-8")
        count = text.count(old_string)
        if count == 0:
            hint = ""
            if old_string.strip() and old_string.strip() in text:
                hint = " (it matches when leading/trailing whitespace is ignored: check indentation)"
            return _error(f"old_string was not found in {path!r}{hint}. Read the file and copy the "
                          "exact text, including whitespace, without line-number prefixes.")
        if count > 1 and not replace_all:
            return _error(f"old_string occurs {count} times in {path!r}; include more surrounding "
                          "context to make it unique, or set replace_all to true.")
        updated = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        with self.resolver.open_for_write(path) as handle:
            handle.write(updated)
        rel = self._rel(path)
        return ToolOutcome(f"Replaced {count if replace_all else 1} occurrence(s) in {rel}", written={rel})

    def _tool_insert_lines(self, path: str, insert_line: int, text: str) -> ToolOutcome:
        source = self.resolver.resolve_write(path)
        content = source.read_text(encoding="utf-8")
        lines = content.splitlines(keepends=True)
        try:
            position = int(insert_line)
        except (TypeError, ValueError):
            return _error("'insert_line' must be an integer")
        if position < 0 or position > len(lines):
            return _error(f"insert_line {position} is out of range 0..{len(lines)} for {path!r}")
        if lines and not lines[-1].endswith("\n") and position == len(lines):
            lines[-1] += "\n"
        block = text if text.endswith("\n") else text + "\n"
        lines.insert(position, block)
        with self.resolver.open_for_write(path) as handle:
            handle.write("".join(lines))
        rel = self._rel(path)
        return ToolOutcome(f"Inserted text after line {position} of {rel}", written={rel})

    def _tool_delete_file(self, path: str) -> ToolOutcome:
        target = self.resolver.resolve_write(path)
        lexical = Path(os.path.join(self.resolver.cwd, path))
        if lexical.is_symlink():  # remove the link itself, never what it points to
            target = lexical
        elif target.is_dir():
            return _error(f"{path!r} is a directory; delete_file removes files only")
        target.unlink()
        rel = self._rel(path)
        return ToolOutcome(f"Deleted {rel}", deleted={rel})

    def _tool_list_directory(self, path: str = ".", depth: int = 1) -> ToolOutcome:
        root = self.resolver.resolve_read(path)
        if not root.is_dir():
            return _error(f"{path!r} is not a directory")
        entries: list[str] = []
        truncated = False

        def walk(directory: Path, prefix: str, level: int) -> None:
            nonlocal truncated
            try:
                children = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                return
            for child in children:
                if len(entries) >= MAX_LISTED:
                    truncated = True
                    return
                is_dir = child.is_dir(follow_symlinks=False)
                if is_dir and child.name in IGNORED_DIRS:
                    continue
                entries.append(prefix + child.name + ("/" if is_dir else ""))
                if is_dir and level < depth:
                    walk(Path(child.path), prefix + child.name + "/", level + 1)

        walk(root, "", 1)
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
            return _error(f"{path!r} is not a directory")
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
        if start.is_file():
            candidates = [(start, self._rel(path))]
        else:
            prefix = self._rel_dir_prefix(start)
            candidates = ((start / rel, prefix + rel) for rel in self._walk_files(start)
                          if file_filter is None or file_filter.match(rel))
        hits: list[str] = []
        for file_path, shown in candidates:
            try:
                if file_path.stat().st_size > MAX_GREP_FILE_BYTES:
                    continue
                data = file_path.read_bytes()
            except OSError:
                continue
            if b"\x00" in data[:8192]:
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
        return self.resolver.relative(self.resolver.resolve_read(path) if _safe(self.resolver, path)
                                      else os.path.join(self.resolver.cwd, path))

    def _rel_dir_prefix(self, directory: Path) -> str:
        rel = self.resolver.relative(directory)
        return "" if rel == "." else rel.rstrip("/") + "/"

    def _walk_files(self, root: Path):
        """Relative POSIX paths of files under root; no symlinked folders, no IGNORED_DIRS,
        and only files the resolver lets the model read."""
        for directory, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS)
            rel_dir = os.path.relpath(directory, root)
            for name in sorted(files):
                rel = name if rel_dir == "." else f"{Path(rel_dir).as_posix()}/{name}"
                full = os.path.join(directory, name)
                if os.path.islink(full) and not _safe(self.resolver, full):
                    continue
                yield rel


def _safe(resolver: PathResolver, path: str) -> bool:
    try:
        resolver.resolve_read(path)
    except PathSecurityError:
        return False
    return True
