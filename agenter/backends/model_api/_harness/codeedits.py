"""Text tool-call mode: the code blocks of a reply that made no call, read as file edits.

Why: measured on the real-model benchmark (Qwen2.5-Coder-1.5B-Instruct on llama.cpp's server,
tools described in the prompt with a worked example), the model answered a bug-fix task with the
fixed function in a ```python block and no call, four replies in a row, a nudge in between; the
code was right, and nothing was written. Aider asks small models for exactly this (a file's path,
then its content in a fenced block) and applies it. So, in text mode, a reply that holds no call
(and no malformed one) has its code blocks read as edits by these rules, and by nothing else:

1. labelled: the line before the block (at most one blank line between) holds only a relative
   path (bare, in backticks or bold, as a heading, or with a colon after it), or is a sentence
   that ends with a path in backticks ("Here's the updated `calc.py` file:"). The block is that
   file's new content; for a Python file that exists and a block of only top-level functions
   and classes (and imports), those the file defines replace the file's own, new ones go at its
   end, and the rest of the file stays (`agenter.tools.patch.merge_definitions`). A block much
   shorter than the file it would replace whole (patch mode's fragment check) is not written:
   the model is told why.
2. unlabelled Python that shares top-level functions or classes with one file only, among those
   the task names and those the model has read in this run, and changes one of them or adds one
   (a block that repeats them is a quote): a block of only definitions (and imports) replaces
   those definitions and adds the new ones at the file's end; a whole module (other statements
   too) is the file's new content, unless much shorter than the file (the check of 1), when it
   changes a definition or a module-level constant the file assigns (`X = ...`). A block of
   only definitions that no file or several files share: nothing is written, the model is told
   which.
3. any other block is text (an example, an explanation, a shell command), and so is a block that
   leaves its file as it is (a final answer that shows the code).

Each edit is a write_file call with the file's whole new content: the permission gate, the
sandbox's path check, allowed_write_paths and the events see it as any other call, and it
replaces the block (and its path line) in the stored reply, so the conversation shows the model
its edit as a call. Pure: the caller gives `read(path)` (the file's text, None when it does not
exist or cannot be read) and the candidate files.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agenter.tools.patch import compare_definitions, defined_names, fragment_problem, merge_definitions

from .textcalls import _FENCE_OPEN, _fence_extent

__all__ = ["CodeEdit", "CodeEdits", "code_edits"]

#: A path line: optional heading marks or "File:", then the path bare, in backticks or in bold,
#: then an optional colon. The path: relative, no spaces, a file name with an extension.
_LABEL = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]+)?(?:(?i:file)[ \t]*:[ \t]*)?(?P<q>`|\*\*|)"
    r"(?P<path>(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+)(?P=q)[ \t]*:?[ \t]*$")
#: A sentence that ends with a path in backticks, then optionally "file" and a colon or a full
#: stop ("Here's the updated `cipher.py` file:", "The file's path is `units.py`."). Measured: told
#: to put the path on the line before its block, the model wrote the second, five times.
_SENTENCE_LABEL = re.compile(
    r"^[^`\n]*(?:`[^`\n]*`[^`\n]*)*?`(?P<path>(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+)`"
    r"(?:[ \t]+file)?[ \t]*[:.]?[ \t]*$")


@dataclass(frozen=True)
class CodeEdit:
    """One block read as an edit: `path`'s whole new `content`, what it does (for the model and
    the status line), and the span of the reply it replaces (the path line included)."""

    path: str
    content: str
    how: str
    start: int
    end: int


@dataclass
class CodeEdits:
    """What a reply's code blocks amount to: the edits, and why other blocks were not applied
    (told to the model; empty when every block was plain text)."""

    edits: list[CodeEdit] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: Python blocks that repeat a file's definitions as they are (a quote, not an edit).
    quotes: int = 0


def _label(text: str, fence_start: int) -> tuple[str, int] | None:
    """The path on the line right before the fence at `fence_start` (at most one blank line
    between), and where that line starts."""
    if fence_start == 0:
        return None
    end = fence_start - 1
    line_start = text.rfind("\n", 0, end) + 1
    if not text[line_start:end].strip() and line_start > 0:  # one blank line
        end = line_start - 1
        line_start = text.rfind("\n", 0, end) + 1
    line = text[line_start:end]
    match = _LABEL.match(line) or _SENTENCE_LABEL.match(line)
    if match is None:
        return None
    path = match.group("path")
    if path.startswith(".") and "/" not in path and path.count(".") == 1:
        return None  # ".py": a language, not a file
    return path, line_start


def code_edits(text: str, *, read: Callable[[str], str | None], candidates: Sequence[str]) -> CodeEdits:
    """The edits the code blocks of `text` (a reply that made no call) amount to, by the rules
    of the module docstring. `candidates`: the files an unlabelled block may apply to."""
    found = CodeEdits()
    taken: dict[str, str] = {}  # path -> its content after this reply's earlier edits
    pos = 0
    while True:
        opening = _FENCE_OPEN.search(text, pos)
        if opening is None:
            return found
        end, body_start, body_end, closed = _fence_extent(text, opening)
        pos = end
        if not closed:
            continue  # cut off: not an edit
        body = text[body_start:body_end]
        label = _label(text, opening.start())
        def current(path: str) -> str | None:
            return taken[path] if path in taken else read(path)

        if label is not None:
            start = label[1]
            edit = _labelled(*_as_named(label[0], current, candidates), body, found)
        else:
            start = opening.start()
            edit = _unlabelled(body, current, candidates, found)
        if edit is not None and edit[1] == current(edit[0]):
            found.quotes += 1  # the file as it is (a final answer that shows it)
            continue
        if edit is None:
            continue
        path, content, how = edit
        taken[path] = content
        found.edits.append(CodeEdit(path, content, how, start, end))


def _as_named(path: str, read: Callable[[str], str | None], candidates: Sequence[str]) -> tuple[str, str | None]:
    """`path` and its text, or the one candidate file it names but for case and that file's text:
    a path that starts a line gets a capital as a sentence does (measured: "Roman.py" for
    roman.py, refused as a new file). Each file is read once."""
    old = read(path)
    if old is None:
        same = [name for name in dict.fromkeys(candidates) if name.lower() == path.lower() and name != path]
        if len(same) == 1 and (text := read(same[0])) is not None:
            return same[0], text
    return path, old


def _labelled(path: str, old: str | None, body: str, found: CodeEdits) -> tuple[str, str, str] | None:
    if path.startswith("/") or ".." in path.split("/"):
        found.problems.append(f"the block after the line {path} was not written: that path leads outside the "
                              "repository")
        return None
    if old is None:
        return path, body, f"writes {path} (a new file)"
    if path.endswith(".py"):
        merged = merge_definitions(old, body, add="only")
        if merged is not None:
            compared = compare_definitions(old, body) or ([], defined_names(body) or [])
            return path, merged, f"{_verb(*compared)} in {path}"
    problem = fragment_problem(path, old, body)
    if problem is not None:
        found.problems.append(f"the block after the line {path} was not written: as the whole file it {problem}, "
                              "so it would delete the rest. Give the whole file, or only the functions you "
                              "change, or change the part with edit_file")
        return None
    return path, body, f"replaces the whole of {path}"


def _unlabelled(body: str, read: Callable[[str], str | None], candidates: Sequence[str],
                found: CodeEdits) -> tuple[str, str, str] | None:
    # (path, its text, the definitions the block changes, those it adds)
    holders: list[tuple[str, str, list[str], list[str]]] = []
    names = defined_names(body)
    for path in dict.fromkeys(candidates):
        old = read(path) if path.endswith(".py") else None
        if old is not None and (compared := compare_definitions(old, body)) is not None:
            changed, added = compared
            if names is None:  # a whole module: its constants count as its functions do
                changed = changed + _changed_assignments(old, body)
            holders.append((path, old, changed, added))
    if len(holders) == 1:
        path, old, changed, added = holders[0]
        if not changed and not added:
            found.quotes += 1  # the file's own definitions, quoted
            return None
        what = ", ".join(changed + [f"adds {name}" for name in added])
        if names is not None:  # definitions (and imports) alone: they replace the file's
            merged = merge_definitions(old, body, add=True)
            return None if merged is None else (path, merged, f"{_verb(changed, added)} in {path}")
        problem = fragment_problem(path, old, body)
        if problem is not None:
            found.problems.append(f"the block that changes {what} was not written: as the whole of {path} it "
                                  f"{problem}. Give the whole file, or only the functions you change")
            return None
        return path, body, f"replaces the whole of {path} ({_verb(changed, added)})"
    if names is None and not holders:
        return None  # a script, an example: text
    shown = names or []
    where = ("no file the task names or you have read defines any of them" if not holders
             else "several files define them: " + ", ".join(holder[0] for holder in holders))
    found.problems.append(f"the block that defines {', '.join(shown)} was not written: {where}. Put the "
                          "file's path on the line before the block")
    return None


def _changed_assignments(old: str, body: str) -> list[str]:
    """The module-level names that both the module `old` and the Python text `body` assign (one
    plain name, `X = ...` or `X: T = ...`) and that `body` assigns differently, by syntax tree.
    Measured: on its retry of the leap-year task the model gave the whole module with the table
    of month lengths it had broken on its first attempt put right and every function as the file
    had it; read as a quote, the fix was dropped."""
    def assigned(text: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for node in ast.parse(text).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                found[targets[0].id] = ast.dump(node)
        return found
    before, after = assigned(old), assigned(body)  # both parse: compare_definitions read them
    return [name for name, dumped in after.items() if name in before and before[name] != dumped]


def _verb(changed: Sequence[str], added: Sequence[str]) -> str:
    parts = ([f"replaces {', '.join(changed)}"] if changed else []) + ([f"adds {', '.join(added)}"] if added else [])
    return " and ".join(parts)
