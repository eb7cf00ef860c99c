"""Patch-proposal mode: a model proposes file changes as data; agenter checks and applies them.

A model without safe tool execution fills a PatchProposal (the pydantic models below double
as the JSON schema it is given). `check_proposal` computes every new file content in memory
and reports what would change; `apply_proposal` does the same and then writes, all or
nothing: if any change fails, nothing is written and a PatchError lists, per file, what the
model must correct. Every path goes through a PathResolver (inside cwd, allowed_write_paths,
never .git/, no symlink out).

Text handling: files are read as UTF-8 (undecodable bytes survive untouched), a UTF-8 BOM
is kept, each line keeps its own line ending (new lines take the file's dominant one), and a
file without a final newline stays so unless the change says otherwise. Files containing NUL
bytes are binary: they can be replaced with `content`, deleted or renamed, never diffed.

Writes are atomic per file (a temporary file in the same directory, then os.replace) and keep
the file mode; if a write fails midway the files already written are restored. Files are not
fsynced: this protects a workspace from half-applied patches, not from a power cut.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import posixpath
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agenter._errors import AgenterError, PathSecurityError
from agenter.sandbox.paths import PathResolver, open_regular

__all__ = [
    "AppliedPatch", "FileChange", "FileError", "PatchError", "PatchProposal", "SearchReplace",
    "apply_proposal", "check_proposal", "parse_proposal",
]

# A hunk is looked for this many lines around where its header says; beyond that it is
# accepted only where it matches exactly one place in the file.
MAX_HUNK_OFFSET = 100
#: Larger files are not read for a diff or search/replace change (whole content still works).
MAX_PATCH_FILE_BYTES = 32 * 1024 * 1024

_CHANGE_FIELDS = ("diff", "search_replace", "content")
#: A modify whose content keeps under half of a file this long (non-blank lines) and is under
#: half its length is taken for a fragment and refused (see `_check_whole`).
FRAGMENT_MIN_LINES = 10


# ---------------------------------------------------------------------- the proposal (schema)


class SearchReplace(BaseModel):
    """One edit: the single place where `search` occurs becomes `replace`."""

    model_config = ConfigDict(extra="forbid")

    search: str = Field(description="Text copied exactly from the current file, with enough surrounding "
                                    "lines that it occurs exactly once.")
    replace: str = Field(description="The text that takes its place (empty to delete it).")


class FileChange(BaseModel):
    """One file's change: the operation and, where it needs one, exactly one way to give the change."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path relative to the working directory.")
    operation: Literal["create", "modify", "delete", "rename"] = Field(
        description="create: a new file (give content or a diff from /dev/null); modify: an existing file "
                    "(give diff, search_replace or content); delete: nothing else; rename: new_path, and "
                    "optionally a change to the moved file.")
    new_path: str | None = Field(default=None, description="rename only: the file's new path.")
    diff: str | None = Field(default=None, description="A unified diff of this one file (@@ hunks with "
                                                       "context lines copied exactly from the file).")
    search_replace: list[SearchReplace] | None = Field(
        default=None, description="Edits applied in order, each to the result of the previous one.")
    content: str | None = Field(default=None, description="The whole new content of the file.")

    @model_validator(mode="after")
    def _check_shape(self) -> FileChange:
        if not self.path.strip():
            raise ValueError("path is empty")
        given = [name for name in _CHANGE_FIELDS if getattr(self, name) is not None]
        op = self.operation
        if self.new_path is not None and op != "rename":
            raise ValueError(f"new_path is only for operation 'rename', not '{op}'")
        if len(given) > 1 and "content" in given and op != "rename":
            # The whole new text beside a diff or edits: it says everything they say (measured:
            # Qwen2.5-Coder-1.5B filled diff with the file as it was and content with the fix,
            # and a proposal refused for it cost a request). The whole text is the change.
            self.diff = self.search_replace = None
            given = ["content"]
        if len(given) > 1:
            raise ValueError(f"give the change one way only, not {' and '.join(given)}")
        if op == "create":
            if self.search_replace is not None:
                raise ValueError("a new file has nothing to search: give its whole text in content")
            if not given:
                raise ValueError("operation 'create' needs content (or a diff from /dev/null)")
        elif op == "modify" and not given:
            raise ValueError("operation 'modify' needs one of diff, search_replace or content")
        elif op == "delete" and given:
            raise ValueError(f"operation 'delete' takes no {given[0]}")
        elif op == "rename" and not (self.new_path or "").strip():
            raise ValueError("operation 'rename' needs new_path")
        if self.search_replace is not None and not self.search_replace:
            raise ValueError("search_replace is an empty list: give at least one block or leave it out")
        return self


class PatchProposal(BaseModel):
    """A model's proposed change to the workspace, checked and applied by apply_proposal."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(description="What the change does and why, in a few sentences.")
    files: list[FileChange] = Field(description="The file changes, at most one per file.")
    test_commands: list[str] = Field(default_factory=list,
                                     description="Commands that verify the change (run only if permitted).")
    risks: list[str] = Field(default_factory=list, description="What could go wrong with this change.")


# ---------------------------------------------------------------------- errors and the result


@dataclass(frozen=True)
class FileError:
    """One problem, written for the model: `path` as the model wrote it (None: the whole proposal)."""

    path: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path is not None else self.message


class PatchError(AgenterError, ValueError):
    """The proposal was refused or could not be applied; `errors` says what to correct, per file.

    Unless `partial` is True (a rollback itself failed; the message names the files), nothing
    in the workspace was changed.
    """

    def __init__(self, errors: list[FileError], *, partial: bool = False):
        self.errors = list(errors)
        self.partial = partial
        super().__init__(self.for_model())

    @property
    def by_path(self) -> dict[str | None, list[str]]:
        """The messages grouped by path (None: about the proposal as a whole)."""
        grouped: dict[str | None, list[str]] = {}
        for error in self.errors:
            grouped.setdefault(error.path, []).append(error.message)
        return grouped

    def for_model(self) -> str:
        """All problems as one text to send back to the model."""
        count = len(self.errors)
        if self.partial:
            head = "The patch failed while writing and could not be fully undone:"
        else:
            head = (f"The patch was not applied; no file was changed. Fix {'this problem' if count == 1 else f'these {count} problems'} "
                    "and propose the whole patch again:")
        return "\n".join([head, *(f"- {error}" for error in self.errors)])


@dataclass
class _Planned:
    """One file's computed outcome: what was there, what will be."""

    label: str                 # the path as the model wrote it
    rel: str                   # POSIX path relative to cwd
    target: Path               # resolved absolute path
    old: bytes | None          # None: the file does not exist yet
    new: bytes | None          # None: the file goes away
    mode: int | None = None    # permission bits to give the written file (None: the default)
    key: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) when read
    moved_from: str | None = None  # rename destination: the source's relative path...
    before: bytes | None = None    # ...and its content before the change (for the diff)
    moved_to: str | None = None    # rename source: where it went (its diff is shown there)


@dataclass
class AppliedPatch:
    """What a proposal changes: `written` and `deleted` are POSIX paths relative to cwd.

    `applied` is False for check_proposal's answer (nothing was written). `diff` is the
    unified diff of the whole change, made on first use.
    """

    written: set[str]
    deleted: set[str]
    applied: bool
    _files: list[_Planned] = field(default_factory=list, repr=False, compare=False)

    @cached_property
    def diff(self) -> str:
        return "".join(_file_diff(planned) for planned in self._files)


# ---------------------------------------------------------------------- public functions


def parse_proposal(data: str | bytes | Mapping[str, Any]) -> PatchProposal:
    """A PatchProposal from a model's JSON text (or already-decoded object), or a PatchError.

    JSON text wrapped in a Markdown code fence (a common model habit) is accepted.
    """
    if isinstance(data, str | bytes):
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        fenced = _FENCE.fullmatch(text)
        try:
            data = json.loads(fenced.group(1) if fenced else text)
        except ValueError as exc:
            raise PatchError([FileError(None, f"the proposal is not valid JSON ({exc})")]) from None
    try:
        return PatchProposal.model_validate(data)
    except ValidationError as exc:
        raise PatchError([_shape_error(data, error) for error in exc.errors()]) from None


_FENCE = re.compile(r"\s*```[\w-]*[ \t]*\n(.*?)\n?```\s*", re.DOTALL)


def check_proposal(proposal: PatchProposal, resolver: PathResolver) -> AppliedPatch:
    """Everything apply_proposal does except writing: the would-be result, or a PatchError."""
    files = _plan(proposal, resolver)
    written, deleted = _summary(files)
    return AppliedPatch(written, deleted, applied=False, _files=files)


def apply_proposal(proposal: PatchProposal, resolver: PathResolver) -> AppliedPatch:
    """Check the whole proposal, then write it all; on any failure write nothing (PatchError)."""
    files = _plan(proposal, resolver)
    _write_all(files, resolver)
    written, deleted = _summary(files)
    return AppliedPatch(written, deleted, applied=True, _files=files)


def _summary(files: list[_Planned]) -> tuple[set[str], set[str]]:
    written = {f.rel for f in files if f.new is not None}
    deleted = {f.rel for f in files if f.new is None}
    return written, deleted


def _shape_error(data: Any, error: Any) -> FileError:
    loc = tuple(error.get("loc", ()))
    message = str(error.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    path = None
    if len(loc) >= 2 and loc[0] == "files" and isinstance(loc[1], int):
        try:
            candidate = data["files"][loc[1]]["path"]
            path = candidate if isinstance(candidate, str) and candidate.strip() else None
        except (KeyError, IndexError, TypeError):
            path = None
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    text = f"{where}: {message}" if where else message
    return FileError(path, text)


# ---------------------------------------------------------------------- planning (no writes)


class _ChangeFailed(Exception):
    """A change cannot be computed; carries the messages for the model."""

    def __init__(self, *messages: str):
        super().__init__(*messages)
        self.messages = list(messages)


def _plan(proposal: PatchProposal, resolver: PathResolver) -> list[_Planned]:
    errors: list[FileError] = []
    planned: list[_Planned] = []
    claimed: dict[Path, str] = {}
    for change in proposal.files:
        try:
            planned.extend(_plan_change(change, resolver, claimed))
        except PathSecurityError as exc:
            errors.append(FileError(change.path, str(exc)))
        except _ChangeFailed as exc:
            errors.extend(FileError(change.path, message) for message in exc.messages)
    if errors:
        raise PatchError(errors)
    return planned


def _claim(claimed: dict[Path, str], target: Path, label: str) -> None:
    other = claimed.get(target)
    if other is not None:
        raise _ChangeFailed(f"this file is also changed by the change to {other!r}; "
                            "put all changes to one file in one change")
    claimed[target] = label


def _plan_change(change: FileChange, resolver: PathResolver, claimed: dict[Path, str]) -> list[_Planned]:
    op = change.operation
    target = _resolve(resolver, change.path)
    if op == "create":
        _must_be_absent(resolver, change.path, target, "use operation 'modify' to change it")
        _claim(claimed, target, change.path)
        rel = _relative(resolver, target)
        text = _new_text(change, "", {change.path, rel})
        return [_Planned(change.path, rel, target, None, _encode(text))]

    old, mode, key = _read_existing(resolver, change.path, target, symlink_ok=(op == "modify"))
    _claim(claimed, target, change.path)
    rel = _relative(resolver, target)
    if op == "delete":
        return [_Planned(change.path, rel, target, old, None, mode, key)]
    names = {change.path, rel}
    if change.new_path:
        names |= {change.new_path, _relative(resolver, _resolve(resolver, change.new_path))}
    new = _new_bytes(change, old, names)
    if op == "modify":
        if new == old:
            return []  # nothing changes: nothing to write or report
        return [_Planned(change.path, rel, target, old, new, mode, key)]

    assert change.new_path is not None  # rename; the model validator requires it
    destination = _resolve(resolver, change.new_path)
    _must_be_absent(resolver, change.new_path, destination, "rename onto an existing file is not supported; "
                    "choose a new_path that does not exist yet")
    _claim(claimed, destination, change.path)
    new_rel = _relative(resolver, destination)
    return [
        _Planned(change.new_path, new_rel, destination, None, new, mode, moved_from=rel, before=old),
        _Planned(change.path, rel, target, old, None, mode, key, moved_to=new_rel),
    ]


def _resolve(resolver: PathResolver, path: str) -> Path:
    if path.endswith(("/", os.sep)):
        raise _ChangeFailed(f"{path!r} names a directory; patch changes name files")
    return resolver.resolve_write(path)


def _relative(resolver: PathResolver, target: Path) -> str:
    """POSIX path of a resolved target relative to cwd (a plain slice in the usual case)."""
    text, root = str(target), str(resolver.cwd)
    if os.sep == "/" and text.startswith(root + "/"):
        return text[len(root) + 1:]
    return resolver.relative(target)


def _lexical(resolver: PathResolver, path: str) -> str:
    return os.path.join(resolver.given_cwd, path)


def _must_be_absent(resolver: PathResolver, path: str, target: Path, hint: str) -> None:
    if os.path.lexists(target) or os.path.lexists(_lexical(resolver, path)):
        raise _ChangeFailed(f"{path!r} already exists; {hint}")
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise _ChangeFailed(f"cannot create {path!r}: {resolver.relative(parent)!r} is a file, not a directory")


def _read_existing(resolver: PathResolver, path: str, target: Path,
                   symlink_ok: bool) -> tuple[bytes, int, tuple[int, int, int]]:
    if not symlink_ok and os.path.islink(_lexical(resolver, path)):
        raise _ChangeFailed(f"{path!r} is a symbolic link; only regular files can be deleted or renamed here")
    try:
        # Regular files only, opened without blocking: a FIFO the agent made must not hang us.
        fd = open_regular(target, os.O_RDONLY, shown=path)
    except FileNotFoundError:
        raise _ChangeFailed(f"{path!r} does not exist; use operation 'create' for a new file") from None
    except IsADirectoryError:
        raise _ChangeFailed(f"{path!r} is a directory; patch changes name files") from None
    except PathSecurityError:
        raise _ChangeFailed(f"{path!r} is not a regular file") from None
    except OSError as exc:
        raise _ChangeFailed(f"{path!r} could not be read ({exc.strerror})") from None
    info = os.fstat(fd)
    if info.st_size > MAX_PATCH_FILE_BYTES:
        os.close(fd)
        raise _ChangeFailed(f"{path!r} is too large to patch ({info.st_size} bytes; the limit is "
                            f"{MAX_PATCH_FILE_BYTES}); give its whole new content instead, or split it")
    with open(fd, "rb") as handle:
        data = handle.read(MAX_PATCH_FILE_BYTES + 1)
    return data, stat.S_IMODE(info.st_mode), (info.st_ino, info.st_size, info.st_mtime_ns)


def _new_bytes(change: FileChange, old: bytes, names: set[str]) -> bytes:
    if change.content is not None:
        if change.operation == "modify":
            merged = _merged_definitions(change.path, old, change.content)
            if merged is not None:
                return _encode(merged)
            _check_whole(change.path, old, change.content)
        return _encode(change.content)
    if change.diff is None and change.search_replace is None:
        return old  # a plain rename
    if b"\x00" in old:
        way = "diff" if change.diff is not None else "search_replace"
        raise _ChangeFailed(f"{change.path!r} is a binary file (it contains NUL bytes); {way} edits text only. "
                            "Give the whole new content with content, or leave the file alone")
    text = old.decode("utf-8", "surrogateescape")
    bom = text.startswith("\ufeff")
    new = _new_text(change, text[1:] if bom else text, names)
    return _encode("\ufeff" + new if bom else new)


def _merged_definitions(path: str, old: bytes, content: str) -> str | None:
    """A Python file's content that holds only whole top-level functions and classes the file
    already defines (and imports), fewer than half of its definitions or changing one of them:
    the changed definitions alone, what small models write for "the whole file" (measured:
    Qwen2.5-Coder-1.5B gave the fixed `is_leap_year` alone for a three-function module, which as
    the whole file deleted the other two). Each replaces the file's definition of the same name
    (decorators included), imports it lacks go after its last top-level import, the rest of the
    file stays as it was. None when the content is not such a fragment (it is then the whole
    file, as always)."""
    if not path.endswith(".py") or b"\x00" in old:
        return None
    return merge_definitions(old.decode("utf-8", "surrogateescape"), content, fragment=True)


def defined_names(content: str) -> list[str] | None:
    """The top-level functions and classes a Python text holds when it holds nothing else but
    imports (a block of changed definitions), in order; None for anything else."""
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):
        return None
    given = [node.name for node in tree.body if isinstance(node, _DEFINITIONS)]
    imports = sum(1 for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)))
    if not given or len(given) + imports != len(tree.body) or len(set(given)) != len(given):
        return None
    return given


def compare_definitions(text: str, content: str) -> tuple[list[str], list[str]] | None:
    """The top-level functions and classes of the Python text `content`, against the module
    `text`: those that differ from the module's definitions of the same names (by syntax tree:
    formatting and comments do not count), and those the module does not define, each in order.
    None when either does not parse, or `content` shares no definition with the module."""
    try:
        before, after = ast.parse(text), ast.parse(content)
    except (SyntaxError, ValueError):
        return None
    defined = {node.name: ast.dump(node) for node in before.body if isinstance(node, _DEFINITIONS)}
    given = [node for node in after.body if isinstance(node, _DEFINITIONS)]
    if not any(node.name in defined for node in given):
        return None
    return ([node.name for node in given if node.name in defined and ast.dump(node) != defined[node.name]],
            [node.name for node in given if node.name not in defined])


def merge_definitions(text: str, content: str, *, fragment: bool = False,
                      add: bool | Literal["only"] = False) -> str | None:
    """`text` (a Python module) with each top-level function or class that `content` gives
    replacing the module's definition of the same name, and the imports `content` adds that the
    module lacks; the rest of the module as it was. `content` must hold only such definitions
    (every one defined by the module) and imports, else None. `add`: definitions the module
    lacks are allowed (one at least must be the module's) and go at its end; `add="only"`: also
    when none is the module's (then they all go at its end). `fragment`: also
    None when it gives half of the module's definitions or more and changes none of them (then
    it is the whole file, meant to delete the others). Half or more with a change is still the
    changed definitions (measured: Qwen2.5-Coder-1.5B gave the fixed `average` alone for a
    two-function module, as the whole file; written whole, it deleted the function the tests
    import). A deliberate deletion goes through search_replace or diff."""
    try:
        before, after = ast.parse(text), ast.parse(content)
    except (SyntaxError, ValueError):
        return None
    defined = {node.name: node for node in before.body if isinstance(node, _DEFINITIONS)}
    given = [node for node in after.body if isinstance(node, _DEFINITIONS)]
    imports = [node for node in after.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if not given or len(given) + len(imports) != len(after.body) or len({n.name for n in given}) != len(given):
        return None
    if fragment and 2 * len(given) >= len(defined) and all(
            node.name in defined and ast.dump(node) == ast.dump(defined[node.name]) for node in given):
        return None  # half the module or more, changing none of it: a whole file that drops the others
    added = [node for node in given if node.name not in defined]
    if (added and not add) or (len(added) == len(given) and add != "only"):
        return None
    given = [node for node in given if node.name in defined]
    lines, new_lines = text.splitlines(keepends=True), content.splitlines(keepends=True)

    def span(node: ast.stmt) -> tuple[int, int]:  # 0-based, end exclusive; decorators included
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return first - 1, node.end_lineno or node.lineno

    def source(node: ast.stmt) -> list[str]:
        start, end = span(node)
        piece = new_lines[start:end]
        if piece and not piece[-1].endswith("\n"):
            piece[-1] += "\n"
        return piece

    edits = [(*span(defined[node.name]), source(node)) for node in given]
    present = {line.strip() for line in lines}
    missing = [line for node in imports for line in source(node) if line.strip() not in present]
    if missing:
        tops = [node for node in before.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        at = span(tops[-1])[1] if tops else 0
        first = before.body[0] if before.body else None
        if not tops and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            at = span(first)[1]  # after the module's docstring
        edits.append((at, at, missing))
    if added:
        tail = ["\n" if lines and lines[-1].endswith("\n") else "\n\n", "\n"]
        for node in added:
            tail += [*source(node), "\n", "\n"]
        edits.append((len(lines), len(lines), tail[:-2]))
    # From the bottom up, so each edit's line numbers are still the file's.
    for start, end, piece in sorted(edits, key=lambda edit: (edit[0], edit[1]), reverse=True):
        lines[start:end] = piece
    return "".join(lines)


#: The top-level statements a content of changed definitions may hold (see _merged_definitions).
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _check_whole(path: str, old: bytes, content: str) -> None:
    """`content` replaces the whole file: refused when it is the changed part alone
    (fragment_problem)."""
    if b"\x00" in old:
        return
    problem = fragment_problem(path, old.decode("utf-8", "surrogateescape"), content)
    if problem is not None:
        raise _ChangeFailed(f"content replaces the whole file, but yours {problem}: writing it would delete the "
                            "rest. Give the complete new file in content (every unchanged line too), or change "
                            "only the part that changes with search_replace")


def fragment_problem(path: str, old: str, content: str) -> str | None:
    """Why `content` cannot replace the whole of `old` (the file `path`), or None ("has N
    non-blank line(s) where PATH has M, and keeps K of them"): a content that is
    much shorter than the file and keeps few of its lines is the changed part alone (what small
    models write: measured, Qwen2.5-Coder-1.5B giving one function of a three-function module),
    and writing it would delete the rest. A deliberate rewrite that small goes through diff or
    search_replace. Files under FRAGMENT_MIN_LINES non-blank lines are not checked."""
    before = [line.strip() for line in old.splitlines() if line.strip()]
    if len(before) < FRAGMENT_MIN_LINES:
        return None
    after = [line.strip() for line in content.splitlines() if line.strip()]
    present = set(after)
    kept = sum(1 for line in before if line in present)
    if 2 * len(after) < len(before) and 2 * kept < len(before):
        return f"has {len(after)} non-blank line(s) where {path!r} has {len(before)}, and keeps {kept} of them"
    return None


def _new_text(change: FileChange, text: str, names: set[str]) -> str:
    """`names`: the paths the change's diff headers may name."""
    if change.content is not None:
        return change.content
    if change.diff is not None:
        return _apply_diff(text, change.diff, change.path, names)
    assert change.search_replace is not None
    return _apply_blocks(text, change.search_replace)


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise _ChangeFailed(f"the new text has a character that cannot be written as UTF-8 ({exc.reason} "
                            f"at position {exc.start})") from None


# ---------------------------------------------------------------------- lines


# Characters str.splitlines breaks at that are not line breaks in a source file.
_OTHER_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _splitlines_is_exact(text: str) -> bool:
    """True when only \\n and \\r\\n break lines in `text`, so str.splitlines (fast) agrees with us."""
    # Each `in` is a C-speed scan; one regex character class over the text is several times slower.
    if any(c in text for c in _OTHER_BREAKS):
        return False
    return "\r" not in text or text.count("\r") == text.count("\r\n")


class _Lines:
    """A text split into lines that keep their own endings, plus their bodies for matching."""

    __slots__ = ("_bodies", "_stripped", "eol", "lines")

    def __init__(self, text: str):
        self._bodies: list[str] | None = None
        if _splitlines_is_exact(text):
            self.lines = text.splitlines(keepends=True)
        else:
            parts = text.split("\n")
            last = parts.pop()
            self._bodies = [p[:-1] if p.endswith("\r") else p for p in parts]
            self.lines = [p + "\n" for p in parts]
            if last:
                self._bodies.append(last)
                self.lines.append(last)
        self.eol = _dominant_eol(text)
        self._stripped: list[str] | None = None

    @property
    def bodies(self) -> list[str]:
        """The lines without their endings (made on first use: a hunk found where its header says
        compares only its own few lines)."""
        if self._bodies is None:
            self._bodies = [_body(line) for line in self.lines]
        return self._bodies

    @property
    def stripped(self) -> list[str]:
        """Bodies without trailing whitespace (made on first use: only tolerant matching needs them)."""
        if self._stripped is None:
            self._stripped = [b.rstrip() for b in self.bodies]
        return self._stripped

    @property
    def final_newline(self) -> bool:
        return not self.lines or self.lines[-1].endswith("\n")


def _dominant_eol(text: str) -> str:
    """The line ending most lines have: the one new lines get."""
    if "\r" not in text:  # a one-character scan is the fastest; counting is slow and only CRLF files need it
        return "\n"
    return "\r\n" if text.count("\r\n") * 2 >= text.count("\n") else "\n"


def _body(line: str) -> str:
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def _without_eol(line: str) -> str:
    if line.endswith("\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith("\n") else line


def _shown_line(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# ---------------------------------------------------------------------- unified diffs

_HUNK_HEADER = re.compile(r"^@@ ")
_HUNK_KINDS = frozenset(" -+")
_BLANK_OR_MARKER = re.compile(r"^(\s*|\\.*)$")


@dataclass
class _Hunk:
    number: int
    header: str
    start: int                      # 0-based index where the old lines should begin
    old_raw: list[str]              # context and removed lines as the diff has them (ending included)
    ops: list[tuple[str, str]]      # (' ' | '-' | '+', line as the diff has it)
    old_no_eol: bool = False
    new_no_eol: bool = False

    @cached_property
    def old(self) -> list[str]:
        """Bodies of the context and removed lines (only a hunk not found at once needs them)."""
        return [_body(line) for line in self.old_raw]


def _apply_diff(text: str, diff: str, label: str, names: set[str]) -> str:
    hunks = _parse_diff(diff, label, names)
    file = _Lines(text)
    lines = file.lines
    out: list[str] = []
    messages: list[str] = []
    cursor = 0
    shift = 0   # how far the previous hunk was from its header's line: the next is expected as far
    touched_end = False
    last_hunk: _Hunk | None = None
    # Added lines are taken as they are when the diff's endings are the file's, or the file has
    # none to follow (empty, or one line without an ending); else they get the file's ending.
    as_is = (file.eol == "\n" and "\r" not in diff) or "\n" not in text
    for hunk in hunks:
        try:
            pos = _locate(file, hunk, hunk.start + shift, cursor)
        except _ChangeFailed as exc:
            messages.extend(exc.messages)
            continue
        shift = pos - hunk.start
        out.extend(lines[cursor:pos])
        index = pos
        for kind, line in hunk.ops:
            if kind == " ":
                out.append(lines[index])   # the file's own line: its ending and exact whitespace stay
                index += 1
            elif kind == "-":
                index += 1
            else:
                out.append(line if as_is else _body(line) + file.eol)
        cursor = index
        touched_end = cursor == len(lines)
        last_hunk = hunk
    if messages:
        raise _ChangeFailed(*messages)
    out.extend(lines[cursor:])
    if not file.final_newline:
        # The old last line (no ending) may now have lines after it: give it one.
        for i in range(len(out) - 1):
            if not out[i].endswith("\n"):
                out[i] += file.eol
    if out and touched_end and last_hunk is not None:
        if last_hunk.new_no_eol:
            out[-1] = _without_eol(out[-1])
        elif last_hunk.old_no_eol:
            if not out[-1].endswith("\n"):
                out[-1] += file.eol
        elif not file.final_newline:
            out[-1] = _without_eol(out[-1])  # the diff did not say: the file stays without one
    return "".join(out)


def _parse_diff(diff: str, label: str, names: set[str]) -> list[_Hunk]:
    from unidiff import PatchSet  # only patch mode needs it
    from unidiff.errors import UnidiffParseError

    if _splitlines_is_exact(diff):
        lines = diff.splitlines(keepends=True)
    else:
        lines = [part + "\n" for part in diff.split("\n")]
        lines[-1] = lines[-1][:-1]
        if not lines[-1]:
            lines.pop()
    first_hunk = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
    if first_hunk is None:
        raise _ChangeFailed("the diff has no hunk (a line like '@@ -12,7 +12,8 @@' followed by ' ' context, "
                            "'-' removed and '+' added lines)")
    skew = 0  # our line numbers minus the model's, for messages
    if not any(line.startswith("--- ") for line in lines[:first_hunk]):
        # Models often give bare hunks: add the file headers unidiff needs.
        lines = [f"--- a/{label}\n", f"+++ b/{label}\n", *lines[first_hunk:]]
        skew = 2 - first_hunk
        first_hunk = 2
    if not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    try:
        patch = PatchSet(lines)
    except UnidiffParseError as exc:
        raise _ChangeFailed(f"the diff is malformed ({exc}). Each hunk's header '@@ -start,count +start,count @@' "
                            "must count its lines exactly (old count = context + '-' lines, new count = context + "
                            "'+' lines) and every hunk line must start with ' ', '-' or '+'") from None
    if len(patch) != 1:
        listed = ", ".join(repr(p.path) for p in patch)
        raise _ChangeFailed(f"the diff changes {len(patch)} files ({listed}); give each file its own change "
                            "with its own diff")
    patched = patch[0]
    _check_names(patched, label, names)
    # unidiff silently drops lines a hunk has beyond its header's counts: find them.
    if sum(len(hunk) for hunk in patched) + len(patched) != len(lines) - first_hunk:
        _check_all_consumed(patched, lines, first_hunk, skew)
    hunks = []
    has_markers = "\n\\" in diff or diff.startswith("\\")
    for number, hunk in enumerate(patched, start=1):
        header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
        start = hunk.source_start if hunk.source_length == 0 else hunk.source_start - 1
        ops = [(line.line_type, line.value) for line in hunk]
        parsed = _Hunk(number, header, max(start, 0), [], ops)
        if has_markers or (ops and ops[-1][0] not in _HUNK_KINDS):
            # "\ No newline at end of file" markers, or blank lines unidiff keeps after a hunk.
            parsed.ops = []
            previous = ""
            for kind, value in ops:
                if kind == "\\":
                    parsed.old_no_eol |= previous in (" ", "-")
                    parsed.new_no_eol |= previous in (" ", "+")
                elif kind in _HUNK_KINDS:
                    parsed.ops.append((kind, value))
                    previous = kind
        parsed.old_raw = [value for kind, value in parsed.ops if kind != "+"]
        hunks.append(parsed)
    return hunks


def _check_all_consumed(patched: Any, lines: list[str], first_hunk: int, skew: int) -> None:
    consumed = {line.diff_line_no for hunk in patched for line in hunk}
    for number in range(first_hunk + 1, len(lines) + 1):
        text = lines[number - 1]
        if number in consumed or _HUNK_HEADER.match(text) or _BLANK_OR_MARKER.match(text):
            continue
        raise _ChangeFailed(f"line {number - skew} of the diff, {_shown_line(text.rstrip())}, is not inside any hunk: "
                            "a hunk has more lines than its @@ header counts; fix the counts")


def _check_names(patched: Any, label: str, names: set[str]) -> None:
    expected = {_norm(name) for name in names}
    for name in (patched.source_file, patched.target_file):
        if not name or name == "/dev/null":
            continue
        name = _norm(name)
        if name in expected or (name[:2] in ("a/", "b/") and name[2:] in expected):
            continue
        raise _ChangeFailed(f"the diff's header names {name!r} but this change is for {label!r}; "
                            "a change's diff must be for its own file")


def _norm(path: str) -> str:
    return posixpath.normpath(path.replace(os.sep, "/")).lstrip("/") if path else path


def _locate(file: _Lines, hunk: _Hunk, expected: int, cursor: int) -> int:
    """Where the hunk's old lines are: near `expected` first, else the one place they match."""
    count = len(hunk.old_raw)
    lines = file.lines
    total = len(lines)
    if count == 0:   # a pure insertion has nothing to match: its position is all there is
        if cursor <= expected <= total:
            return expected
        raise _ChangeFailed(f"hunk #{hunk.number} ({hunk.header}) inserts at line {expected}, but the file has "
                            f"{total} lines" + (" (or it overlaps the previous hunk)" if expected < cursor else ""))
    if cursor <= expected <= total - count:
        # The common case, checked without splitting the whole file into bodies: first as the
        # lines are (same endings), then ignoring line endings.
        if lines[expected:expected + count] == hunk.old_raw or all(
                _body(lines[expected + i]) == wanted for i, wanted in enumerate(hunk.old)):
            return expected
    for tolerant in (False, True):
        bodies = file.stripped if tolerant else file.bodies
        old = [b.rstrip() for b in hunk.old] if tolerant else hunk.old
        first = old[0]
        for offset in range(MAX_HUNK_OFFSET + 1):
            for pos in (expected + offset, expected - offset) if offset else (expected,):
                if cursor <= pos <= total - count and bodies[pos] == first and bodies[pos:pos + count] == old:
                    return pos
        places = [pos for pos in range(cursor, total - count + 1)
                  if bodies[pos] == first and bodies[pos:pos + count] == old]
        if len(places) == 1:
            return places[0]
        if places:
            shown = ", ".join(str(p + 1) for p in places[:5])
            raise _ChangeFailed(f"hunk #{hunk.number} ({hunk.header}) matches {len(places)} places (lines {shown}), "
                                f"none within {MAX_HUNK_OFFSET} lines of line {expected + 1} where its header "
                                "says; fix the @@ line numbers")
    raise _ChangeFailed(_mismatch(file, hunk, expected, cursor))


def _mismatch(file: _Lines, hunk: _Hunk, expected: int, cursor: int) -> str:
    head = f"hunk #{hunk.number} ({hunk.header}) does not apply: its context and '-' lines are not in the file"
    before = [pos for pos in range(0, min(cursor, len(file.bodies)))
              if file.bodies[pos:pos + len(hunk.old)] == hunk.old]
    if before:
        return (f"{head} after the previous hunk (they match at line {before[0] + 1}); hunks must be in file "
                "order and must not overlap")
    detail = ""
    if 0 <= expected < len(file.bodies):
        for i, wanted in enumerate(hunk.old):
            pos = expected + i
            if pos >= len(file.bodies):
                detail = f" At line {pos + 1} the file has already ended; the hunk expects {_shown_line(wanted)}."
                break
            if file.bodies[pos].rstrip() != wanted.rstrip():
                detail = (f" At line {pos + 1} the file has {_shown_line(file.bodies[pos])}; the hunk expects "
                          f"{_shown_line(wanted)}.")
                break
    elif expected >= len(file.bodies):
        detail = f" The file has only {len(file.bodies)} lines."
    return (f"{head} (looked near line {expected + 1}).{detail} Copy the context lines exactly from the current "
            "file, or use search_replace")


# ---------------------------------------------------------------------- search / replace


def _apply_blocks(text: str, blocks: list[SearchReplace]) -> str:
    messages = []
    for number, block in enumerate(blocks, start=1):
        try:
            text = _apply_block(text, block, number)
        except _ChangeFailed as exc:
            messages.extend(exc.messages)
    if messages:
        raise _ChangeFailed(*messages)
    return text


def _apply_block(text: str, block: SearchReplace, number: int) -> str:
    search = block.search
    name = f"search_replace block #{number}"
    if not search.strip():
        raise _ChangeFailed(f"{name} has an empty search text; to add text, search for the neighbouring lines "
                            "and repeat them in replace along with the new ones")
    at = text.find(search)
    if at >= 0:
        again = text.find(search, at + 1)
        if again >= 0:
            lines = [text.count("\n", 0, at) + 1, text.count("\n", 0, again) + 1]
            raise _ambiguous(name, lines, max(2, text.count(search)))  # count() skips overlaps
        replace = block.replace.replace("\r\n", "\n")
        if _dominant_eol(text) == "\r\n":
            replace = replace.replace("\n", "\r\n")
        return text[:at] + replace + text[at + len(search):]
    return _apply_block_by_lines(text, block, name)


def _apply_block_by_lines(text: str, block: SearchReplace, name: str) -> str:
    file = _Lines(text)
    wanted = [line.rstrip() for line in _block_lines(block.search)]
    count = len(wanted)
    stripped = file.stripped
    first = wanted[0]
    places = [pos for pos in range(len(stripped) - count + 1)
              if stripped[pos] == first and stripped[pos:pos + count] == wanted]
    indent: tuple[str, bool] | None = None  # (shift, True if the file is more indented than the search)
    if not places:
        loose = [line.strip() for line in wanted]
        for pos in range(len(stripped) - count + 1):
            if stripped[pos].strip() == loose[0] and [s.strip() for s in stripped[pos:pos + count]] == loose:
                shift = _uniform_shift(stripped[pos:pos + count], wanted)
                if shift is not None:
                    places.append(pos)
                    indent = shift
    if len(places) > 1:
        raise _ambiguous(name, [p + 1 for p in places], len(places), loosely=True)
    if not places:
        raise _ChangeFailed(_not_found(name, file, wanted))
    pos = places[0]
    new = _block_lines(block.replace)
    if indent is not None:
        new = [_reindent(line, *indent) for line in new]
    last_eol = file.lines[pos + count - 1][len(file.bodies[pos + count - 1]):]
    replaced = [line + file.eol for line in new]
    if replaced:
        replaced[-1] = new[-1] + last_eol  # keeps "no final newline" when the block ends the file
    return "".join(file.lines[:pos] + replaced + file.lines[pos + count:])


def _block_lines(text: str) -> list[str]:
    parts = text.replace("\r\n", "\n").split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def _uniform_shift(found: list[str], wanted: list[str]) -> tuple[str, bool] | None:
    """The one indentation difference between the file's lines and the search's, if uniform."""
    shift: tuple[str, bool] | None = None
    for have, want in zip(found, wanted, strict=True):
        if not have.strip():
            continue
        if have.endswith(want) and not have[:len(have) - len(want)].strip():
            candidate = (have[:len(have) - len(want)], True)
        elif want.endswith(have) and not want[:len(want) - len(have)].strip():
            candidate = (want[:len(want) - len(have)], False)
        else:
            return None
        if shift is None:
            shift = candidate
        elif candidate != shift:
            return None
    return shift


def _reindent(line: str, shift: str, add: bool) -> str:
    if not line.strip():
        return line
    if add:
        return shift + line
    return line[len(shift):] if line.startswith(shift) else line.lstrip(" \t")


def _ambiguous(name: str, lines: list[int], count: int, loosely: bool = False) -> _ChangeFailed:
    how = " (ignoring whitespace at line ends and indentation)" if loosely else ""
    shown = ", ".join(str(n) for n in lines[:5])
    return _ChangeFailed(f"{name} matches {count} places{how}, starting at lines {shown}; it must match exactly "
                         "one. Add surrounding lines to its search text (and to replace) so it is unique")


def _not_found(name: str, file: _Lines, wanted: list[str]) -> str:
    message = (f"{name} was not found: no place in the file matches its search text, exactly or ignoring "
               "whitespace at line ends, line endings and indentation. Copy the search text character for "
               "character from the current file")
    first = next((line.strip() for line in wanted if line.strip()), "")
    if first and len(file.bodies) <= 20_000:
        candidates = [body.strip() for body in file.bodies]
        close = difflib.get_close_matches(first, candidates, n=1, cutoff=0.6)
        if close:
            line = candidates.index(close[0]) + 1
            message += f" (its first line looks most like line {line}: {_shown_line(file.bodies[line - 1])})"
    return message


# ---------------------------------------------------------------------- the diff of the result


def _file_diff(planned: _Planned) -> str:
    """One file's part of the result diff, in git's format (so `git apply` takes it too)."""
    if planned.moved_to is not None:
        return ""  # a rename shows once, at its destination
    if planned.moved_from is not None:
        head = (f"diff --git a/{planned.moved_from} b/{planned.rel}\n"
                f"rename from {planned.moved_from}\nrename to {planned.rel}\n")
        return head + _unified(planned.before, planned.new, f"a/{planned.moved_from}", f"b/{planned.rel}")
    head = f"diff --git a/{planned.rel} b/{planned.rel}\n"
    git_mode = "100755" if (planned.mode or 0) & 0o111 else "100644"  # the only two modes git records
    if planned.old is None:
        head += f"new file mode {git_mode}\n"
    elif planned.new is None:
        head += f"deleted file mode {git_mode}\n"
    source = "/dev/null" if planned.old is None else f"a/{planned.rel}"
    target = "/dev/null" if planned.new is None else f"b/{planned.rel}"
    return head + _unified(planned.old, planned.new, source, target)


def _unified(before: bytes | None, after: bytes | None, source: str, target: str) -> str:
    a = before or b""
    b = after or b""
    if b"\x00" in a or b"\x00" in b:
        return f"Binary files {source} and {target} differ\n" if a != b else ""
    a_lines = _Lines(a.decode("utf-8", "surrogateescape")).lines
    b_lines = _Lines(b.decode("utf-8", "surrogateescape")).lines
    out = []
    for line in difflib.unified_diff(a_lines, b_lines, source, target):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


# ---------------------------------------------------------------------- writing


class _WriteFailed(Exception):
    pass


def _write_all(files: list[_Planned], resolver: PathResolver) -> None:
    """Stage every new content in a temporary file, then move them all into place."""
    staged: list[tuple[_Planned, str]] = []
    made_dirs: list[Path] = []
    try:
        for planned in files:
            _unchanged_since_read(planned)
            if planned.new is not None:
                if planned.old is None:  # only a new file can lack its directory
                    _make_parents(planned, resolver, made_dirs)
                staged.append((planned, _write_temp(planned.target, planned.new, planned.mode)))
    except BaseException as exc:  # also an interrupt: no temporary file may stay behind
        for _, temp in staged:
            _remove_quietly(temp)
        _remove_dirs(made_dirs)
        if not isinstance(exc, OSError | _WriteFailed | PathSecurityError):
            raise
        raise PatchError([FileError(planned.label, _reason(exc))]) from None

    done: list[_Planned] = []
    current = files[0] if files else None
    try:
        for planned, temp in staged:
            current = planned
            os.replace(temp, planned.target)
            done.append(planned)
        for planned in files:
            if planned.new is None:
                current = planned
                os.unlink(planned.target)
                done.append(planned)
    except BaseException as exc:  # also an interrupt: undo what was done, then let it go on
        moved = {id(planned) for planned in done}
        for planned, temp in staged:
            if id(planned) not in moved:
                _remove_quietly(temp)
        failures = _roll_back(done)
        _remove_dirs(made_dirs)
        if not isinstance(exc, OSError):
            raise
        label = current.label if current is not None else None
        errors = [FileError(label, _reason(exc))]
        if failures:
            errors += [FileError(p.label, f"could not be restored after the failure ({why})") for p, why in failures]
        raise PatchError(errors, partial=bool(failures)) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"could not be written ({exc.strerror or exc})"
    return str(exc)


def _unchanged_since_read(planned: _Planned) -> None:
    if planned.key is None:
        if os.path.lexists(planned.target):
            raise _WriteFailed(f"{planned.label!r} appeared while the patch was being applied; propose it again")
        return
    try:
        info = os.stat(planned.target, follow_symlinks=False)
    except FileNotFoundError:
        raise _WriteFailed(f"{planned.label!r} was deleted while the patch was being applied") from None
    if (info.st_ino, info.st_size, info.st_mtime_ns) != planned.key:
        raise _WriteFailed(f"{planned.label!r} changed while the patch was being applied; propose it again "
                           "against the current content")


def _make_parents(planned: _Planned, resolver: PathResolver, made: list[Path]) -> None:
    parent = planned.target.parent
    missing = []
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir()
        made.append(directory)
    if missing and resolver.resolve_write(planned.label) != planned.target:
        # A directory was swapped for a symlink between the check and now.
        raise _WriteFailed(f"{planned.label!r} no longer resolves to where it was checked")


def _write_temp(target: Path, data: bytes, mode: int | None) -> str:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temp = os.path.join(target.parent, f".agenter-{secrets.token_hex(6)}.tmp")
        try:
            # 0o666 lets the umask decide a new file's mode, as an ordinary create would.
            fd = os.open(temp, flags, 0o666 if mode is None else 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise _WriteFailed(f"no free temporary name beside {target.name!r}")
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except BaseException:
        _remove_quietly(temp)
        raise
    return temp


def _roll_back(done: list[_Planned]) -> list[tuple[_Planned, str]]:
    """Undo the moves already made, newest first; returns what could not be undone."""
    failures = []
    for planned in reversed(done):
        try:
            if planned.old is None:
                os.unlink(planned.target)
            else:
                os.replace(_write_temp(planned.target, planned.old, planned.mode), planned.target)
        except (OSError, _WriteFailed) as exc:
            failures.append((planned, str(exc)))
    return failures


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _remove_dirs(made: list[Path]) -> None:
    for directory in reversed(made):
        try:
            directory.rmdir()
        except OSError:
            pass
