"""Shell command lines split into the simple commands they would run.

A command line is judged by what it runs, not by its text: `parse_shell` walks pipelines, lists
(`&&`, `||`, `;`, `&`), subshells, brace groups, loops, `$( )`, backticks and process
substitution, and looks through wrappers (`env A=1`, `sudo`, `nohup`, `timeout`, `xargs`, ...)
and nested scripts (`bash -c '...'`, `sh -c`, `eval`, `su -c`, `find -exec`, a shell fed a
here-document). bashlex (a port of bash's own grammar) does the parsing; what it cannot parse
(`[[ ]]`, `case`, `$(( ))`, unbalanced quotes) falls back to a conservative split on operators,
and the result says so (`parsed=False`), so nothing built on it is auto-allowed.

Words keep what can be known before the command runs: `~` and `$HOME` are expanded against the
given home; any other expansion leaves the word marked `dynamic`.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Redirect", "ShellScript", "SimpleCommand", "Word", "parse_shell", "unquote"]

_MAX_DEPTH = 6

#: Shells whose `-c` argument (or here-document) is a script we parse in turn.
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish", "busybox"})
_PRIVILEGED = frozenset({"sudo", "doas", "su", "pkexec", "run0"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
# A here-document operator with a quoted delimiter (bashlex cannot parse those: it is rewritten).
_QUOTED_HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"])([A-Za-z0-9_.\-]+)\2")
_HEREDOC_OP = re.compile(r"<<-?[ \t]*(['\"]?)([A-Za-z0-9_.\-]+)\1")


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal.

    dynamic: the word holds an expansion whose value is unknown until it runs ($VAR, $(...),
    `~user`); its `text` is then the word as written, not a value to trust.
    """

    text: str
    dynamic: bool = False

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Redirect:
    """A redirection: `op` is the operator (`>`, `>>`, `<`, `&>`, `<<`, ...); `target` the file
    word, or None for a duplication onto a file descriptor (`2>&1`)."""

    op: str
    target: Word | None
    fd: int | None = None

    @property
    def writes(self) -> bool:
        return self.target is not None and (">" in self.op) and not self.op.startswith("<<")

    @property
    def reads(self) -> bool:
        return self.target is not None and self.op in ("<", "<>")


@dataclass
class SimpleCommand:
    """One command the line would run.

    words: the command and its arguments, wrappers removed (for `sudo env A=1 rm x`: `rm x`).
    prefix: what was removed in front: assignments and wrapper commands with their options.
    pipeline, stage: which pipeline it belongs to and its position in it (0 = first).
    parent: index (in ShellScript.commands) of the command that carries this one (its `$( )`
        word, its `-c` script, its `-exec` clause), or None.
    via: how it is carried: "" (top level), "$()", "<()", "-c", "eval", "heredoc", "-exec".
    wrapper: True for a carrier whose whole job is running commands that are listed separately
        (`bash -c '...'`, `eval ...`); rules still see it, path checks look at what it carries.
    dynamic_args: more arguments are added when it runs (`xargs cmd`, `find -exec cmd {} +`).
    privileged: it runs under sudo/doas/su.
    """

    words: tuple[Word, ...]
    prefix: tuple[Word, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    pipeline: int = -1
    stage: int = 0
    parent: int | None = None
    via: str = ""
    wrapper: bool = False
    dynamic_args: bool = False
    privileged: bool = False
    assignments: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The command name without its directory ('' when there is none)."""
        return os.path.basename(self.words[0].text) if self.words else ""

    @property
    def args(self) -> tuple[Word, ...]:
        return self.words[1:]

    def text(self, with_prefix: bool = False) -> str:
        words = (*self.prefix, *self.words) if with_prefix else self.words
        return " ".join(w.text for w in words)


@dataclass
class ShellScript:
    """A parsed command line: every simple command it would run, outermost first in text order.

    parsed: False when bashlex could not parse (part of) it and a conservative split was used;
    `error` then says why.
    """

    source: str
    commands: list[SimpleCommand] = field(default_factory=list)
    parsed: bool = True
    error: str | None = None

    @property
    def pipelines(self) -> dict[int, list[int]]:
        """Pipeline id → indices of its commands in stage order (single commands included)."""
        groups: dict[int, list[int]] = {}
        for index, command in enumerate(self.commands):
            groups.setdefault(command.pipeline, []).append(index)
        for indices in groups.values():
            indices.sort(key=lambda i: self.commands[i].stage)
        return groups


def parse_shell(source: str, *, home: str | None = None, cwd: str | None = None) -> ShellScript:
    """Split `source` into the simple commands it runs. Never raises."""
    builder = _Builder(home=home, cwd=cwd)
    script = ShellScript(source=source)
    builder.script = script
    builder.parse(source, parent=None, via="", depth=0)
    # What a privileged carrier runs is privileged too (`sudo bash -c '...'`, `su -c '...'`).
    for command in script.commands:  # parents come before their children
        if command.parent is not None:
            carrier = script.commands[command.parent]
            if carrier.privileged or carrier.name in _PRIVILEGED:
                command.privileged = True
    return script


# ---------------------------------------------------------------------------------------------


class _Builder:
    def __init__(self, home: str | None, cwd: str | None):
        self.home = home
        self.cwd = cwd
        self.script = ShellScript(source="")
        self._pipeline_ids = 0
        self._quoted_heredocs: set[str] = set()
        self._text = ""

    # ------------------------------------------------------------------ entry points

    def parse(self, source: str, *, parent: int | None, via: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            self._fail("commands nested too deeply to follow")
            self._fallback(source, parent=parent, via=via, depth=depth)
            return
        if not source.strip():
            return
        try:
            import bashlex  # imported here: parsing tables cost ~0.1 s, only when shell is judged
        except ImportError:  # pragma: no cover - bashlex is a dependency; stay safe without it
            self._fail("bashlex is not installed")
            self._fallback(source, parent=parent, via=via, depth=depth)
            return
        text, quoted = self._unquote_heredocs(source)
        try:
            trees = bashlex.parse(text)
        except Exception as exc:  # noqa: BLE001 - bashlex raises ParsingError, NotImplementedError, ...
            self._fail(f"could not parse: {type(exc).__name__}: {exc}")
            self._fallback(source, parent=parent, via=via, depth=depth)
            return
        self._quoted_heredocs |= quoted
        outer_text = self._text
        self._text = text  # word positions refer to this text
        try:
            for tree in trees:
                self._node(tree, parent=parent, via=via, depth=depth, redirects=())
        finally:
            self._text = outer_text

    def _fail(self, why: str) -> None:
        self.script.parsed = False
        if self.script.error is None:
            self.script.error = why

    @staticmethod
    def _unquote_heredocs(source: str) -> tuple[str, set[str]]:
        """bashlex rejects `<<'EOF'`; the body is never expanded by us anyway, so drop the quotes
        and remember which delimiters were quoted (their bodies are not expanded by bash)."""
        quoted: set[str] = set()

        def strip(match: re.Match[str]) -> str:
            quoted.add(match.group(3))
            return f"<<{match.group(1)}{match.group(3)}"

        return _QUOTED_HEREDOC.sub(strip, source), quoted

    # ------------------------------------------------------------------ tree walk

    def _node(self, node: Any, *, parent: int | None, via: str, depth: int,
              redirects: tuple[Redirect, ...], pipeline: int | None = None, stage: int = 0) -> None:
        kind = getattr(node, "kind", None)
        if kind == "command":
            self._command(node, parent=parent, via=via, depth=depth, outer_redirects=redirects,
                          pipeline=pipeline, stage=stage)
        elif kind == "pipeline":
            pid = self._new_pipeline()
            position = 0
            for part in node.parts:
                if getattr(part, "kind", None) in ("pipe", "reservedword"):
                    continue
                self._node(part, parent=parent, via=via, depth=depth, redirects=redirects,
                           pipeline=pid, stage=position)
                position += 1
        elif kind == "list":
            for part in node.parts:
                if getattr(part, "kind", None) != "operator":
                    self._node(part, parent=parent, via=via, depth=depth, redirects=redirects)
        elif kind == "compound":
            inner_redirects = redirects + tuple(
                r for r in (self._redirect(x, parent, depth) for x in getattr(node, "redirects", []) or [])
                if r is not None
            )
            for part in node.list:
                self._node(part, parent=parent, via=via, depth=depth, redirects=inner_redirects,
                           pipeline=pipeline, stage=stage)
        elif kind in ("for", "while", "until", "if"):
            for part in node.parts:
                if getattr(part, "kind", None) == "word":
                    # loop words (`for f in $(ls)`) can hold substitutions
                    self._word(part, parent=parent, depth=depth)
                elif getattr(part, "kind", None) not in ("reservedword", "operator"):
                    self._node(part, parent=parent, via=via, depth=depth, redirects=redirects)
        elif kind == "function":
            body = getattr(node, "body", None)
            if body is not None:
                self._node(body, parent=parent, via=via, depth=depth, redirects=redirects)
        elif kind in ("reservedword", "operator", "pipe", None):
            return
        else:  # an unknown node kind: do not pretend we understood it
            self._fail(f"unsupported shell construct {kind!r}")

    def _new_pipeline(self) -> int:
        self._pipeline_ids += 1
        return self._pipeline_ids

    def _command(self, node: Any, *, parent: int | None, via: str, depth: int,
                 outer_redirects: tuple[Redirect, ...], pipeline: int | None, stage: int) -> None:
        # Reserve this command's index first, so commands inside its words ($( ), <( )) can name
        # it as their parent; they are appended after it.
        index = len(self.script.commands)
        placeholder = SimpleCommand(words=())
        self.script.commands.append(placeholder)
        words: list[Word] = []
        assignments: list[str] = []
        redirects: list[Redirect] = list(outer_redirects)
        heredocs: list[str] = []
        for part in node.parts:
            kind = getattr(part, "kind", None)
            if kind == "assignment":
                word = self._word(part, parent=index, depth=depth)
                if not words:
                    assignments.append(word.text)
                else:
                    words.append(word)
            elif kind == "word":
                words.append(self._word(part, parent=index, depth=depth))
            elif kind == "redirect":
                redirect = self._redirect(part, index, depth)
                if redirect is not None:
                    redirects.append(redirect)
                body = self._heredoc_body(part, index)
                if body is not None:
                    heredocs.append(body)
        pid = pipeline if pipeline is not None else self._new_pipeline()
        command = SimpleCommand(words=tuple(words), redirects=tuple(redirects), pipeline=pid, stage=stage,
                                parent=parent, via=via,
                                prefix=tuple(Word(a, dynamic=False) for a in assignments),
                                assignments=tuple(assignments))
        self._expand(index, command, depth=depth, heredocs=heredocs)

    def _heredoc_body(self, redirect: Any, index: int) -> str | None:
        heredoc = getattr(redirect, "heredoc", None)
        if heredoc is None:
            return None
        value: str = getattr(heredoc, "value", "") or ""
        delimiter = getattr(getattr(redirect, "output", None), "word", None)
        lines = value.split("\n")
        if lines and delimiter and lines[-1].strip() == delimiter:
            lines = lines[:-1]
        body = "\n".join(lines)
        if delimiter not in self._quoted_heredocs and ("$(" in body or "`" in body):
            # An unquoted here-document expands $( ) and backticks: those commands run too.
            self._fail("a here-document runs command substitutions")
            self._fallback_substitutions(body, parent=index)
        return body

    def _fallback_substitutions(self, body: str, parent: int) -> None:
        for match in re.finditer(r"\$\(([^()]*)\)|`([^`]*)`", body):
            inner = match.group(1) if match.group(1) is not None else match.group(2)
            self._fallback(inner, parent=parent, via="$()", depth=_MAX_DEPTH)

    def _redirect(self, node: Any, parent: int | None, depth: int) -> Redirect | None:
        op = str(getattr(node, "type", ""))
        output = getattr(node, "output", None)
        fd = getattr(node, "input", None)
        fd = fd if isinstance(fd, int) else None
        if op in ("<<", "<<-"):
            return Redirect(op=op, target=None, fd=fd)
        if output is None or isinstance(output, int):
            return Redirect(op=op, target=None, fd=fd)
        if getattr(output, "kind", None) != "word":
            return Redirect(op=op, target=None, fd=fd)
        target = self._word(output, parent=parent, depth=depth)
        if op == "<<<":  # a here-string: text, not a file
            return Redirect(op=op, target=None, fd=fd)
        if (op in (">&", "<&") and target.text.isdigit()) or target.text == "-":
            return Redirect(op=op, target=None, fd=fd)
        return Redirect(op=op, target=target, fd=fd)

    def _word(self, node: Any, *, parent: int | None, depth: int) -> Word:
        # bashlex's own quote removal mishandles words that mix quoting styles ('it'\''s'), so
        # the word is unquoted here from its source text.
        pos = getattr(node, "pos", None)
        raw = self._text[pos[0]:pos[1]] if pos and 0 <= pos[0] <= pos[1] <= len(self._text) else None
        text: str = unquote(raw) if raw else (getattr(node, "word", "") or "")
        dynamic = False
        for part in getattr(node, "parts", []) or []:
            kind = getattr(part, "kind", None)
            if kind == "tilde":
                value = getattr(part, "value", "")
                if value == "~" and self.home is not None and text.startswith("~"):
                    text = self.home + text[1:]
                elif value == "~+" and self.cwd is not None and text.startswith("~+"):
                    text = self.cwd + text[2:]
                else:
                    dynamic = True
            elif kind == "parameter":
                value = getattr(part, "value", "")
                if value == "HOME" and self.home is not None:
                    text = text.replace("${HOME}", self.home).replace("$HOME", self.home)
                else:
                    dynamic = True
            elif kind in ("commandsubstitution", "processsubstitution"):
                dynamic = True
                inner = getattr(part, "command", None)
                if inner is not None:
                    sub_via = "$()" if kind == "commandsubstitution" else "<()"
                    self._node(inner, parent=parent, via=sub_via, depth=depth + 1, redirects=())
            else:
                dynamic = True
        return Word(text=text, dynamic=dynamic)

    # ------------------------------------------------------------------ wrappers and nested scripts

    def _expand(self, index: int, command: SimpleCommand, *, depth: int, heredocs: list[str]) -> None:
        """Strip wrappers off `command`, store it at `index`, and parse what it carries."""
        words = list(command.words)
        prefix = list(command.prefix)
        privileged = command.privileged
        dynamic_args = command.dynamic_args
        while words:
            stripped = _strip_wrapper(words)
            if stripped is None:
                break
            taken, rest, flags = stripped
            prefix.extend(taken)
            words = rest
            privileged = privileged or "privileged" in flags
            dynamic_args = dynamic_args or "dynamic_args" in flags
        # Leading assignments left after wrappers (`env A=1 cmd`, `sudo A=1 cmd`).
        assignments = list(command.assignments)
        while words and _ASSIGNMENT.match(words[0].text) and len(words) > 1:
            assignments.append(words[0].text)
            prefix.append(words.pop(0))
        command = replace(command, words=tuple(words), prefix=tuple(prefix), privileged=privileged,
                          dynamic_args=dynamic_args, assignments=tuple(assignments))
        self.script.commands[index] = command
        if not words:
            return
        name = command.name
        script = _inline_script(command)
        if script is not None:
            body, carrier = script
            if body is None:
                return  # a dynamic script (`bash -c "$X"`): unknown, judged as the command itself
            command.wrapper = True
            self.parse(body, parent=index, via=carrier, depth=depth + 1)
            return
        if name in SHELLS and heredocs and _reads_script_from_stdin(command):
            command.wrapper = True
            for body in heredocs:
                self.parse(body, parent=index, via="heredoc", depth=depth + 1)
            return
        if name == "find":
            for inner in _find_exec_commands(command):
                child = len(self.script.commands)
                self.script.commands.append(inner)
                inner.parent = index
                inner.pipeline = self._new_pipeline()
                self._expand(child, inner, depth=depth + 1, heredocs=[])

    # ------------------------------------------------------------------ fallback

    def _fallback(self, source: str, *, parent: int | None, via: str, depth: int) -> None:
        """Split on operators, honouring quotes where possible; every piece is a command."""
        text = source.replace("\n", " ; ").replace("`", " ; ").replace("$(", " ; ( ")
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split = True
            lexer.commenters = ""
            tokens = list(lexer)
        except ValueError:
            tokens = [t.strip("'\"") for t in re.split(r"(\|\||&&|[;&|()<>]+)|\s+", text) if t]
        pid = self._new_pipeline()
        stage = 0
        current: list[str] = []
        redirects: list[Redirect] = []
        pending_redirect: str | None = None

        def flush() -> None:
            nonlocal current, redirects
            if current or redirects:
                words = tuple(Word(self._fallback_word(t), dynamic="$" in t or "`" in t) for t in current)
                index = len(self.script.commands)
                command = SimpleCommand(words=words, redirects=tuple(redirects), pipeline=pid, stage=stage,
                                        parent=parent, via=via)
                self.script.commands.append(command)
                if words and depth < _MAX_DEPTH:
                    self._expand(index, command, depth=_MAX_DEPTH, heredocs=[])
            current, redirects = [], []

        for token in tokens:
            if pending_redirect is not None:
                if pending_redirect.startswith("<<") or (
                        pending_redirect in (">&", "<&") and (token.isdigit() or token == "-")):
                    redirects.append(Redirect(op=pending_redirect, target=None))
                else:
                    redirects.append(Redirect(op=pending_redirect,
                                              target=Word(self._fallback_word(token), dynamic="$" in token)))
                pending_redirect = None
                continue
            if token and set(token) <= set(";&|()<>"):
                if "<" in token or ">" in token:
                    pending_redirect = token
                    continue
                flush()
                if token in ("|", "|&"):
                    stage += 1
                else:
                    pid = self._new_pipeline()
                    stage = 0
                continue
            current.append(token)
        flush()

    def _fallback_word(self, token: str) -> str:
        if self.home is not None and (token == "~" or token.startswith("~/")):
            return self.home + token[1:]
        if self.home is not None:
            token = token.replace("${HOME}", self.home).replace("$HOME", self.home)
        return token


# ---------------------------------------------------------------------------------------------
# Quote removal.

_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
           "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def unquote(raw: str) -> str:
    """A shell word's text after quote removal: '...', "...", backslashes, $'...', $"..."."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        char = raw[i]
        if char == "\\":
            if i + 1 < n and raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
        elif char == "'":
            end = raw.find("'", i + 1)
            end = n if end < 0 else end
            out.append(raw[i + 1:end])
            i = end + 1
        elif char == "$" and raw.startswith("$'", i):
            j = i + 2
            while j < n and raw[j] != "'":
                if raw[j] == "\\" and j + 1 < n:
                    out.append(_ANSI_C.get(raw[j + 1], "\\" + raw[j + 1]))
                    j += 2
                else:
                    out.append(raw[j])
                    j += 1
            i = j + 1
        elif char == "$" and raw.startswith('$"', i):
            i += 1  # $"..." is "..." (translated)
        elif char == '"':
            j = i + 1
            while j < n and raw[j] != '"':
                if raw[j] == "\\" and j + 1 < n and raw[j + 1] in '"\\$`\n':
                    if raw[j + 1] != "\n":
                        out.append(raw[j + 1])
                    j += 2
                elif raw.startswith("$(", j):
                    end = _matching_paren(raw, j + 1)
                    out.append(raw[j:end + 1])
                    j = end + 1
                else:
                    out.append(raw[j])
                    j += 1
            i = j + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _matching_paren(text: str, start: int) -> int:
    """Index of the ')' closing the '(' at `start` (quotes inside skipped), or the last index."""
    depth = 0
    i = start
    quote: str | None = None
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote == '"':
                i += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "\\":
            i += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text) - 1


# ---------------------------------------------------------------------------------------------
# Wrappers: commands that run another command given in their arguments.

#: Options (of each wrapper) that take a separate value.
_WRAPPER_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "sudo": frozenset({"-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C",
                       "--close-from", "-D", "--chdir", "-r", "--role", "-t", "--type", "-T",
                       "--command-timeout", "-U", "--other-user", "-R", "--chroot"}),
    "doas": frozenset({"-u", "-C"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "xargs": frozenset({"-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "--max-lines", "-n",
                        "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}),
    "exec": frozenset({"-a"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "nohup": frozenset(),
    "command": frozenset(),
    "builtin": frozenset(),
    "setsid": frozenset(),
    "chronic": frozenset(),
    "unbuffer": frozenset(),
    "caffeinate": frozenset(),
    "pkexec": frozenset({"--user"}),
    "run0": frozenset({"-u", "--user", "-D", "--chdir"}),
}


def _strip_wrapper(words: list[Word]) -> tuple[list[Word], list[Word], set[str]] | None:
    """(wrapper words, the wrapped command, flags) when words[0] is a wrapper with a command."""
    head = words[0]
    if head.dynamic:
        return None
    name = os.path.basename(head.text)
    if name not in _WRAPPER_VALUE_OPTIONS:
        return None
    flags: set[str] = set()
    if name in _PRIVILEGED:
        flags.add("privileged")
    if name == "xargs":
        flags.add("dynamic_args")
    value_options = _WRAPPER_VALUE_OPTIONS[name]
    i = 1
    while i < len(words):
        text = words[i].text
        if text == "--":
            i += 1
            break
        if name == "env" and _ASSIGNMENT.match(text):
            i += 1
            continue
        if name == "timeout" and not text.startswith("-"):
            i += 1  # the duration
            break
        if name == "nice" and re.fullmatch(r"-\d+", text):
            i += 1
            continue
        if not text.startswith("-") or text == "-":
            break
        if name == "command" and text in ("-v", "-V"):
            return None  # `command -v x` looks x up; it runs nothing
        if name == "sudo" and text in ("-l", "--list", "-e", "--edit", "-v", "--validate", "-k", "-K"):
            return None
        if text in value_options:
            i += 2
            continue
        if name == "xargs" and (text.startswith("-I") or text.startswith("-i") or text.startswith("-L")
                                or text.startswith("-n") or text.startswith("-P")):
            i += 1
            continue
        i += 1
    rest = words[i:]
    if not rest:
        if name == "xargs":  # xargs with no command runs echo
            return words, [Word("echo")], flags
        return None  # `env`, `sudo -i`: the wrapper itself is the command
    return words[:i], rest, flags


def _short_cluster_has(text: str, letter: str) -> bool:
    return text.startswith("-") and not text.startswith("--") and letter in text[1:]


def _inline_script(command: SimpleCommand) -> tuple[str | None, str] | None:
    """(script text or None if dynamic, carrier) for `bash -c S`, `su -c S`, `eval ...`, `watch S`."""
    name = command.name
    args = list(command.args)
    if name in SHELLS:
        if name == "busybox":
            if not args or os.path.basename(args[0].text) not in SHELLS:
                return None
            args = args[1:]
        i = 0
        has_c = False
        while i < len(args):
            text = args[i].text
            if text == "--":
                i += 1
                break
            if text in ("-o", "+o", "--rcfile", "--init-file", "-O", "+O"):
                i += 2
                continue
            if text.startswith("-") or text.startswith("+"):
                if _short_cluster_has(text, "c") or text == "--command":
                    has_c = True
                i += 1
                continue
            break
        if not has_c or i >= len(args):
            return None
        script = args[i]
        return (None if script.dynamic else script.text), "-c"
    if name == "su":
        for i, word in enumerate(args):
            if word.text in ("-c", "--command") and i + 1 < len(args):
                script = args[i + 1]
                return (None if script.dynamic else script.text), "-c"
            if word.text.startswith("--command="):
                return word.text.split("=", 1)[1], "-c"
        return None
    if name == "eval":
        if not args:
            return None
        if any(w.dynamic for w in args):
            return None, "eval"
        return " ".join(w.text for w in args), "eval"
    if name == "watch":
        i = 0
        while i < len(args) and args[i].text.startswith("-"):
            i += 2 if args[i].text in ("-n", "--interval", "-q", "--equexit") else 1
        rest = args[i:]
        if not rest:
            return None
        if any(w.dynamic for w in rest):
            return None, "watch"
        return " ".join(w.text for w in rest), "watch"
    return None


def _reads_script_from_stdin(command: SimpleCommand) -> bool:
    """True for `bash`, `sh -s`, `bash -e -`: a shell that takes its script from stdin."""
    for word in command.args:
        text = word.text
        if text == "-" or text == "--":
            return True
        if text.startswith("-") or text.startswith("+"):
            continue
        return False  # a script file operand
    return True


def _find_exec_commands(command: SimpleCommand) -> list[SimpleCommand]:
    """The commands in `find ... -exec cmd {} ;` clauses, with `{}` standing for a path under
    each search root."""
    args = list(command.args)
    roots: list[Word] = []
    for word in args:
        if word.text.startswith("-") or word.text in ("(", "!", ")"):
            break
        roots.append(word)
    if not roots:
        roots = [Word(".")]
    found: list[SimpleCommand] = []
    i = 0
    while i < len(args):
        text = args[i].text
        if text in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            inner: list[Word] = []
            while j < len(args) and args[j].text not in (";", "+"):
                inner.append(args[j])
                j += 1
            # `{}` (one path, or with `+` several) is always under a root: root/{} stands for them.
            if inner:
                for root in roots:
                    words = tuple(
                        Word(w.text.replace("{}", root.text.rstrip("/") + "/{}"), dynamic=w.dynamic or root.dynamic)
                        if "{}" in w.text else w
                        for w in inner
                    )
                    found.append(SimpleCommand(words=words, via="-exec"))
            i = j + 1
            continue
        i += 1
    return found
