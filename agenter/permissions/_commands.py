"""What one simple command does: which paths it reads or writes, whether it changes anything,
destructive git forms, and downloaders and interpreters (for `curl ... | sh`).

Known commands are described by small tables; anything else is "unknown": every operand may be
read or written, and it is never read-only. The tables err towards "not read-only": a command
judged read-only here is auto-allowed in the default mode.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agenter.permissions._shell import SHELLS, SimpleCommand, Word

__all__ = ["CommandInfo", "Operand", "describe", "destructive_git", "is_downloader", "is_interpreter",
           "runs_stdin_as_code"]

AccessKind = Literal["read", "write", "unknown"]

#: Directories whose programs are the standard ones (so `/usr/bin/ls` is `ls`, `./ls` is not).
_STANDARD_DIRS = frozenset({"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"})
#: Environment assignments that do not change which program runs or what it executes.
_SAFE_ASSIGNMENT = re.compile(r"^(LC_\w+|LANG|LANGUAGE|TZ|TERM|NO_COLOR|FORCE_COLOR|CLICOLOR\w*|COLUMNS|LINES|"
                              r"GREP_COLORS?|CI|PYTHONDONTWRITEBYTECODE|PYTHONUNBUFFERED)\+?=")
_DEVICE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})

_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "http", "https", "xh", "aria2c", "lwp-download", "lwp-request"})
_INTERPRETERS = SHELLS | frozenset({"python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node",
                                    "nodejs", "deno", "bun", "php", "pwsh", "powershell", "lua", "tclsh",
                                    "Rscript", "osascript", "source", ".", "eval", "exec"})


@dataclass(frozen=True)
class Operand:
    """A path the command touches: `access` is read, write, or unknown (could be either)."""

    word: Word
    access: AccessKind
    recursive_delete: bool = False


@dataclass
class CommandInfo:
    """read_only: changes nothing (output only to the terminal or /dev/null).
    file_edit: changes only files it names, the way an edit tool would (mkdir, cp, sed -i, `>`).
    cd: for cd/pushd/popd, the new directory word (None = unknown, e.g. `cd -`).
    """

    operands: list[Operand] = field(default_factory=list)
    read_only: bool = False
    file_edit: bool = False
    changes_dir: bool = False
    cd: Word | None = None


# ---------------------------------------------------------------------------------------------
# Option parsing shared by the tables.


def _parse(args: Sequence[Word], short_values: str = "", long_values: frozenset[str] = frozenset(),
           ) -> tuple[list[tuple[str, Word | None]], list[Word]]:
    """Options (name, value) and operands, getopt style: `-abc`, `-n5`, `-n 5`, `--x=v`, `--x v`, `--`."""
    options: list[tuple[str, Word | None]] = []
    operands: list[Word] = []
    i = 0
    end = False
    while i < len(args):
        word = args[i]
        text = word.text
        if end or text == "-" or not text.startswith("-"):
            operands.append(word)
            i += 1
            continue
        if text == "--":
            end = True
            i += 1
            continue
        if text.startswith("--"):
            name, eq, value = text.partition("=")
            if eq:
                options.append((name, Word(value, word.dynamic)))
            elif name in long_values and i + 1 < len(args):
                options.append((name, args[i + 1]))
                i += 1
            else:
                options.append((name, None))
            i += 1
            continue
        j = 1
        while j < len(text):
            letter = text[j]
            if letter in short_values:
                rest = text[j + 1:]
                if rest:
                    options.append(("-" + letter, Word(rest, word.dynamic)))
                elif i + 1 < len(args):
                    options.append(("-" + letter, args[i + 1]))
                    i += 1
                else:
                    options.append(("-" + letter, None))
                break
            options.append(("-" + letter, None))
            j += 1
        i += 1
    return options, operands


def _has(options: list[tuple[str, Word | None]], *names: str) -> bool:
    return any(name in names for name, _ in options)


def _values(options: list[tuple[str, Word | None]], *names: str) -> list[Word]:
    return [value for name, value in options if name in names and value is not None]


def _looks_like_path(word: Word) -> bool:
    text = word.text
    if not text or text == "-" or "://" in text:
        return False
    if ":" in text and not text.startswith(("/", ".", "~")):
        return False  # host:path, HEAD:file, key:value
    return True


# ---------------------------------------------------------------------------------------------
# Command tables. A handler gets the arguments and returns (operands, kind) where kind is
# "read_only", "file_edit" or "other".

Kind = Literal["read_only", "file_edit", "other"]
Handler = Callable[[Sequence[Word]], tuple[list[Operand], Kind]]


def _reads(words: Sequence[Word]) -> list[Operand]:
    return [Operand(w, "read") for w in words if _looks_like_path(w)]


def _writes(words: Sequence[Word], recursive: bool = False) -> list[Operand]:
    return [Operand(w, "write", recursive) for w in words if _looks_like_path(w)]


def _simple_reader(short_values: str = "", long_values: Sequence[str] = (),
                   writers: Sequence[str] = ()) -> Handler:
    """All operands are read; options named in `writers` take an output file (then not read-only)."""
    long_set = frozenset(long_values) | frozenset(w for w in writers if w.startswith("--"))
    short = short_values + "".join(w[1] for w in writers if len(w) == 2)

    def handler(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
        options, operands = _parse(args, short, long_set)
        outputs = _values(options, *writers)
        if outputs:
            return _reads(operands) + _writes(outputs), "file_edit"
        return _reads(operands), "read_only"

    return handler


def _no_access(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    return [], "read_only"


def _pattern_first(short_values: str, long_values: Sequence[str], pattern_options: Sequence[str],
                   file_options: Sequence[str] = (), unsafe: Sequence[str] = ()) -> Handler:
    """grep-like: the first operand is a pattern unless one was given by option."""
    long_set = frozenset(long_values)

    def handler(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
        options, operands = _parse(args, short_values, long_set)
        reads = _reads(_values(options, *file_options))
        if not _has(options, *pattern_options):
            operands = operands[1:]
        kind: Kind = "other" if _has(options, *unsafe) else "read_only"
        return reads + _reads(operands), kind

    return handler


def _two_operand_writer(short_values: str = "") -> Handler:
    """uniq/xxd style: `cmd [in [out]]`: a second operand is written."""

    def handler(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
        options, operands = _parse(args, short_values)
        if len(operands) >= 2:
            return _reads(operands[:1]) + _writes(operands[1:]), "file_edit"
        return _reads(operands), "read_only"

    return handler


_SED_ADDRESS = r"(?:\d+|\$|/(?:[^/\\]|\\.)*/)(?:,(?:\d+|\$|/(?:[^/\\]|\\.)*/|[+~]\d+))?!?"
_SED_SAFE = re.compile(
    rf"^\s*(?:{_SED_ADDRESS})?\s*(?:[pdq=lnNPDgGhHxQ{{}}]|s/(?:[^/\\]|\\.)*/(?:[^/\\]|\\.)*/[gpiImM0-9]*"
    rf"|y/(?:[^/\\]|\\.)*/(?:[^/\\]|\\.)*/)?\s*$"
)


def _sed_script_safe(script: str) -> bool:
    """True when every sed command only prints or substitutes (no w/W/e/r/R, no s///w or s///e)."""
    return all(_SED_SAFE.match(part) for part in re.split(r"[;\n]", script))


def _sed(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, operands = _parse(args, "efl", frozenset({"--expression", "--file", "--line-length"}))
    scripts = _values(options, "-e", "--expression")
    script_files = _values(options, "-f", "--file")
    in_place = any(name in ("-i", "--in-place") or name.startswith("--in-place") for name, _ in options)
    if not scripts and not script_files and operands:
        scripts, operands = [operands[0]], operands[1:]
    safe = not script_files and all(not s.dynamic and _sed_script_safe(s.text) for s in scripts)
    if in_place:
        return _reads(script_files) + _writes(operands), "file_edit" if safe else "other"
    return _reads(script_files) + _reads(operands), "read_only" if safe else "other"


def _jq(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    words = list(args)
    reads: list[Word] = []
    rest: list[Word] = []
    i = 0
    has_filter_file = False
    while i < len(words):
        text = words[i].text
        if text in ("--arg", "--argjson"):
            i += 3
            continue
        if text in ("--slurpfile", "--rawfile"):
            if i + 2 < len(words):
                reads.append(words[i + 2])
            i += 3
            continue
        if text in ("-f", "--from-file"):
            if i + 1 < len(words):
                reads.append(words[i + 1])
            has_filter_file = True
            i += 2
            continue
        if text in ("-L", "--indent"):
            i += 2
            continue
        if text in ("-i", "--inplace"):
            return _reads(reads) + _writes([w for w in words if not w.text.startswith("-")][1:]), "file_edit"
        if text.startswith("-") and text != "-":
            i += 1
            continue
        rest.append(words[i])
        i += 1
    if not has_filter_file:
        rest = rest[1:]
    return _reads(reads + rest), "read_only"


def _find(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    roots: list[Word] = []
    for word in args:
        if word.text.startswith("-") or word.text in ("(", "!", ")"):
            break
        roots.append(word)
    texts = {w.text for w in args}
    if not roots:
        roots = [Word(".")]
    if "-delete" in texts:
        return _writes(roots), "other"
    if texts & {"-fprint", "-fprint0", "-fprintf", "-fls"}:
        return _reads(roots), "other"
    # -exec clauses are listed as commands of their own and judged there.
    return _reads(roots), "read_only"


def _fd(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, operands = _parse(args, "edtxXSEc", frozenset({"--extension", "--type", "--exec", "--exec-batch",
                                                             "--size", "--exclude", "--max-depth", "--changed-within"}))
    kind: Kind = "other" if _has(options, "-x", "-X", "--exec", "--exec-batch") else "read_only"
    return _reads(operands[1:]), kind


def _cd(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    _, operands = _parse(args)
    return _reads(operands[:1]), "read_only"


def _writer(short_values: str = "", long_values: Sequence[str] = (), recursive_flags: Sequence[str] = (),
            kind: Kind = "file_edit", skip_first: bool = False, reads: Sequence[str] = ()) -> Handler:
    long_set = frozenset(long_values)

    def handler(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
        options, operands = _parse(args, short_values, long_set)
        recursive = _has(options, *recursive_flags)
        if skip_first and not any(name == "--reference" for name, _ in options):
            operands = operands[1:]
        extra = _reads(_values(options, *reads))
        return extra + _writes(operands, recursive=recursive), kind

    return handler


def _copier(short_values: str, long_values: Sequence[str], kind: Kind) -> Handler:
    """cp/install/rsync/scp: sources read, the last operand (or -t DIR) written."""
    long_set = frozenset(long_values) | {"--target-directory"}

    def handler(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
        options, operands = _parse(args, short_values + "t", long_set)
        target = _values(options, "-t", "--target-directory")
        if target:
            return _reads(operands) + _writes(target), kind
        if len(operands) < 2:
            return _writes(operands), kind
        return _reads(operands[:-1]) + _writes(operands[-1:]), kind

    return handler


def _mv(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, operands = _parse(args, "tS", frozenset({"--target-directory", "--suffix"}))
    return _writes(operands + _values(options, "-t", "--target-directory")), "file_edit"


def _ln(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, operands = _parse(args, "tS", frozenset({"--target-directory", "--suffix"}))
    target = _values(options, "-t", "--target-directory")
    if target:
        return _writes(target), "other"
    if len(operands) == 1:
        return _writes([Word(os.path.basename(operands[0].text.rstrip("/")) or ".", operands[0].dynamic)]), "other"
    return _writes(operands[-1:]), "other"


def _dd(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    found: list[Operand] = []
    for word in args:
        key, eq, value = word.text.partition("=")
        if eq and key == "if":
            found += _reads([Word(value, word.dynamic)])
        elif eq and key == "of":
            found += _writes([Word(value, word.dynamic)])
    return found, "other"


def _tar(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    words = list(args)
    if words and not words[0].text.startswith("-") and re.fullmatch(r"[A-Za-z]+", words[0].text):
        words[0] = Word("-" + words[0].text, words[0].dynamic)  # old style: `tar xzf a.tgz`
    options, operands = _parse(words, "fCTXbHIKLNgV", frozenset({"--file", "--directory", "--files-from",
                                                                 "--exclude-from", "--use-compress-program"}))
    archive = _values(options, "-f", "--file")
    directory = _values(options, "-C", "--directory") or [Word(".")]
    if _has(options, "-x", "--extract", "--get"):
        return _reads(archive) + _writes(directory), "other"
    if _has(options, "-c", "--create", "-r", "--append", "-u", "--update"):
        return _writes(archive) + _reads(operands), "other"
    return _reads(archive), "other"


def _unzip(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, operands = _parse(args, "dx", frozenset())
    target = _values(options, "-d") or [Word(".")]
    if _has(options, "-l", "-t", "-v", "-Z", "-p"):
        return _reads(operands[:1]), "other"
    return _reads(operands[:1]) + _writes(target), "other"


def _curl(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, _ = _parse(args, "odFTKHAXeEbcruUwxyYzC", frozenset({
        "--output", "--output-dir", "--data", "--data-binary", "--data-raw", "--data-urlencode", "--form",
        "--upload-file", "--config", "--header", "--user-agent", "--request", "--referer", "--cert", "--cacert",
        "--key", "--cookie", "--cookie-jar", "--user", "--proxy", "--url", "--write-out", "--dump-header",
        "--netrc-file"}))
    found = _writes(_values(options, "-o", "--output", "--output-dir", "--cookie-jar", "-c", "--dump-header"))
    if _has(options, "-O", "--remote-name", "-J", "--remote-header-name"):
        found += _writes([Word(".")])
    found += _reads(_values(options, "-T", "--upload-file", "-K", "--config", "--cert", "-E", "--key",
                            "--cacert", "--netrc-file"))
    # Uploads name files with @ (`-d @.env`, `-F file=@key.pem`): reading them sends them away.
    for value in _values(options, "-d", "--data", "--data-binary", "--data-urlencode", "-F", "--form", "-H",
                         "--header"):
        text = value.text
        at = text.find("@")
        if at >= 0 and (at == 0 or text[at - 1] in "=") and text[at + 1:]:
            found += _reads([Word(text[at + 1:].split(";")[0], value.dynamic)])
    return found, "other"


def _wget(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, _ = _parse(args, "OPoaiU", frozenset({"--output-document", "--directory-prefix", "--output-file",
                                                   "--append-output", "--input-file", "--post-file", "--body-file",
                                                   "--user-agent", "--header"}))
    found = _writes(_values(options, "-O", "--output-document", "-P", "--directory-prefix", "-o", "--output-file",
                            "-a", "--append-output"))
    if not _has(options, "-O", "--output-document"):
        found += _writes(_values(options, "-P", "--directory-prefix") or [Word(".")])
    found += _reads(_values(options, "-i", "--input-file", "--post-file", "--body-file"))
    return found, "other"


def _patch(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    options, operands = _parse(args, "idpoBDFrVYzg", frozenset({"--input", "--directory", "--strip", "--output"}))
    directory = _values(options, "-d", "--directory") or [Word(".")]
    return (_reads(_values(options, "-i", "--input")) + _writes(directory, recursive=False)
            + _writes(operands[:1]) + _writes(_values(options, "-o", "--output"))), "other"


_GIT_READ_ONLY = frozenset({"status", "diff", "log", "show", "blame", "annotate", "shortlog", "describe", "rev-parse",
                            "rev-list", "ls-files", "ls-tree", "ls-remote", "cat-file", "grep", "show-ref",
                            "for-each-ref", "name-rev", "merge-base", "count-objects", "whatchanged", "version",
                            "help", "check-ignore", "check-attr", "var", "cherry", "range-diff", "verify-commit",
                            "verify-tag", "diff-tree", "diff-files", "diff-index", "show-branch"})
_GIT_GLOBAL_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env",
                                "--super-prefix", "--list-cmds"})
_GIT_VALUE_OPTIONS: dict[str, tuple[str, frozenset[str]]] = {
    "commit": ("mFCctu", frozenset({"--message", "--file", "--author", "--date", "--reuse-message", "--fixup",
                                    "--reedit-message", "--squash", "--template", "--trailer", "--cleanup"})),
    "log": ("n", frozenset({"--author", "--grep", "--since", "--until", "--format", "--pretty", "--max-count"})),
    "push": ("o", frozenset({"--push-option", "--repo", "--receive-pack", "--exec"})),
    "tag": ("mFu", frozenset({"--message", "--file", "--local-user", "--sort", "--format", "--contains"})),
    "branch": ("tu", frozenset({"--track", "--set-upstream-to", "--contains", "--merged", "--no-merged",
                                "--points-at", "--sort", "--format"})),
    "checkout": ("bB", frozenset()),
    "switch": ("cC", frozenset()),
    "stash": ("m", frozenset({"--message"})),
    "grep": ("eABCm", frozenset({"--max-count"})),
    "clone": ("obcu", frozenset({"--origin", "--branch", "--config", "--depth", "--reference", "--template"})),
    "worktree": ("b", frozenset({"--reason"})),
}


@dataclass(frozen=True)
class _Git:
    globals_: list[tuple[str, Word | None]]
    sub: str
    options: list[tuple[str, Word | None]]
    operands: list[Word]


def _split_git(args: Sequence[Word]) -> _Git | None:
    words = list(args)
    globals_: list[tuple[str, Word | None]] = []
    i = 0
    while i < len(words) and words[i].text.startswith("-"):
        text = words[i].text
        name, eq, value = text.partition("=")
        if eq:
            globals_.append((name, Word(value, words[i].dynamic)))
        elif text in _GIT_GLOBAL_VALUES and i + 1 < len(words):
            globals_.append((text, words[i + 1]))
            i += 1
        else:
            globals_.append((text, None))
        i += 1
    if i >= len(words) or words[i].dynamic:
        return None
    sub = words[i].text
    short, long_ = _GIT_VALUE_OPTIONS.get(sub, ("", frozenset()))
    options, operands = _parse(words[i + 1:], short, long_)
    return _Git(globals_, sub, options, operands)


def _git_read_only(git: _Git) -> bool:
    if _has(git.globals_, "-c", "--config-env", "--exec-path"):
        return False  # -c core.pager=..., core.fsmonitor=... run commands
    if _has(git.options, "--output", "-O", "--open-files-in-pager", "--ext-diff"):
        return False
    sub, options, operands = git.sub, git.options, git.operands
    if sub in _GIT_READ_ONLY:
        return True
    if sub == "branch":
        changing = {"-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-f", "--force",
                    "-u", "--set-upstream-to", "--unset-upstream", "--edit-description", "-t", "--track"}
        return (not operands and not _has(options, *changing)) or _has(options, "-l", "--list")
    if sub == "tag":
        return _has(options, "-l", "--list", "-v", "--verify") or (not operands and not options)
    if sub == "remote":
        return not operands or operands[0].text in ("show", "get-url") or (not operands and _has(options, "-v"))
    if sub == "stash":
        return bool(operands) and operands[0].text in ("list", "show")
    if sub == "config":
        if _has(options, "--get", "--get-all", "--get-regexp", "--list", "-l", "--get-urlmatch"):
            return True
        setting = {"--unset", "--unset-all", "--add", "--replace-all", "--rename-section", "--remove-section",
                   "-e", "--edit"}
        return len(operands) == 1 and not _has(options, *setting)
    if sub == "reflog":
        return not operands or operands[0].text == "show"
    if sub in ("worktree", "submodule", "notes"):
        return bool(operands) and operands[0].text in ("list", "status", "show")
    return False


def _git(args: Sequence[Word]) -> tuple[list[Operand], Kind]:
    git = _split_git(args)
    found = _reads(_values(git.globals_ if git else [], "-C", "--git-dir", "--work-tree"))
    if git is None:
        return found, "other"
    if _git_read_only(git):
        return found + _reads(git.operands), "read_only"
    found += [Operand(w, "unknown") for w in git.operands if _looks_like_path(w)]
    found += _reads(_values(git.options, "-F", "--file", "--template"))
    return found, "other"


_TABLE: dict[str, Handler] = {
    # read-only, every operand a file read
    **{name: _simple_reader() for name in ("cat", "tac", "nl", "wc", "realpath", "readlink", "md5sum", "sha1sum",
                                           "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum",
                                           "sum", "rev", "less", "more", "most", "comm", "cmp", "expand",
                                           "unexpand", "file", "df", "paste", "fold", "fmt")},
    "head": _simple_reader("nc", ("--lines", "--bytes")),
    "tail": _simple_reader("ncs", ("--lines", "--bytes", "--pid", "--sleep-interval")),
    "ls": _simple_reader("ITwp", ("--ignore", "--hide", "--width", "--format", "--sort", "--time-style")),
    "du": _simple_reader("dBt", ("--max-depth", "--block-size", "--threshold", "--exclude")),
    "stat": _simple_reader("c", ("--format", "--printf")),
    "strings": _simple_reader("nt", ("--bytes", "--radix")),
    "od": _simple_reader("AjNtw", ("--address-radix", "--skip-bytes", "--read-bytes", "--format")),
    "hexdump": _simple_reader("nse", ()),
    "cut": _simple_reader("bcdf", ("--bytes", "--characters", "--delimiter", "--fields", "--output-delimiter")),
    "column": _simple_reader("csoNRHW", ("--separator", "--output-separator", "--table-columns")),
    "join": _simple_reader("aejot12", ()),
    "diff": _simple_reader("UCxXIFL", ("--unified", "--context", "--exclude", "--exclude-from", "--label",
                                        "--ignore-matching-lines")),
    "tree": _simple_reader("LPIH", ("--charset", "--filelimit", "--timefmt", "--sort"), writers=("-o",)),
    "sort": _simple_reader("ktSTy", ("--key", "--field-separator", "--buffer-size", "--temporary-directory"),
                           writers=("-o", "--output")),
    "shuf": _simple_reader("nei", ("--head-count", "--input-range", "--random-source"),
                           writers=("-o", "--output")),
    "uniq": _two_operand_writer("fsw"),
    "xxd": _two_operand_writer("lscgo"),
    **{name: _pattern_first("efmABCdD", ("--regexp", "--file", "--max-count", "--after-context",
                                         "--before-context", "--context", "--label", "--include", "--exclude",
                                         "--exclude-dir", "--exclude-from", "--devices", "--directories",
                                         "--binary-files", "--color", "--colour"),
                            ("-e", "--regexp", "-f", "--file"), ("-f", "--file", "--exclude-from"))
       for name in ("grep", "egrep", "fgrep")},
    "rg": _pattern_first("efgtTmABCjMrE", ("--regexp", "--file", "--glob", "--iglob", "--type", "--type-not",
                                           "--max-count", "--after-context", "--before-context", "--context",
                                           "--threads", "--max-columns", "--replace", "--encoding", "--pre",
                                           "--pre-glob", "--type-add", "--ignore-file", "--max-depth", "--sort",
                                           "--sortr", "--max-filesize", "--colors", "--color"),
                         ("-e", "--regexp", "-f", "--file"), ("-f", "--file", "--ignore-file"),
                         unsafe=("--pre",)),
    **{name: _pattern_first("ABCGmg", ("--after", "--before", "--context", "--file-search-regex", "--max-count",
                                       "--depth", "--ignore", "--ignore-dir"), ("-g",))
       for name in ("ag", "ack")},
    "sed": _sed,
    "jq": _jq,
    "yq": _jq,
    "find": _find,
    "fd": _fd,
    "fdfind": _fd,
    "git": _git,
    # read-only, no file operands
    **{name: _no_access for name in ("echo", "printf", "true", "false", ":", "test", "[", "pwd", "which",
                                     "whereis", "type", "whoami", "id", "groups", "uname", "cal", "uptime",
                                     "printenv", "nproc", "arch", "sleep", "seq", "expr", "factor", "tty",
                                     "locale", "getconf", "dirs", "ps", "pgrep", "free", "lscpu", "basename",
                                     "dirname", "tr", "env", "set", "wait", "exit", "return", "shift", "read",
                                     "let", "break", "continue", "hash", "yes")},
    "cd": _cd,
    "pushd": _cd,
    # change files they name (accept-edits may auto-allow these)
    "mkdir": _writer("m", ("--mode", "--context")),
    "touch": _writer("dtr", ("--date", "--reference", "--time"), reads=("-r", "--reference")),
    "rm": _writer("", (), recursive_flags=("-r", "-R", "--recursive")),
    "rmdir": _writer(),
    "tee": _writer(),
    "truncate": _writer("sr", ("--size", "--reference")),
    "mv": _mv,
    "cp": _copier("S", ("--suffix", "--backup"), "file_edit"),
    # change things, never auto-allowed outside bypass
    "unlink": _writer(kind="other"),
    "shred": _writer("nsz", ("--iterations", "--size"), kind="other"),
    "chmod": _writer("", ("--reference",), recursive_flags=("-R", "--recursive"), kind="other", skip_first=True),
    "chown": _writer("", ("--reference", "--from"), recursive_flags=("-R", "--recursive"), kind="other",
                     skip_first=True),
    "chgrp": _writer("", ("--reference",), recursive_flags=("-R", "--recursive"), kind="other", skip_first=True),
    "install": _copier("mogtS", ("--mode", "--owner", "--group", "--suffix"), "other"),
    "rsync": _copier("efT", ("--rsh", "--exclude", "--include", "--filter", "--temp-dir"), "other"),
    "scp": _copier("cFiJloPS", (), "other"),
    "ln": _ln,
    "dd": _dd,
    "tar": _tar,
    "unzip": _unzip,
    "curl": _curl,
    "wget": _wget,
    "patch": _patch,
}


def _version_query(command: SimpleCommand) -> bool:
    return len(command.words) == 2 and command.words[1].text in ("--version", "-V", "version", "--help")


def command_name(command: SimpleCommand) -> str | None:
    """The command's name if it is a known program name (bare, or in a standard bin directory)."""
    if not command.words:
        return None
    head = command.words[0]
    if head.dynamic:
        return None
    directory = os.path.dirname(head.text)
    if directory and directory not in _STANDARD_DIRS:
        return None
    return os.path.basename(head.text)


def describe(command: SimpleCommand) -> CommandInfo:
    """Operands, redirect targets and read-only/file-edit judgement for one simple command."""
    info = CommandInfo()
    name = command_name(command)
    if not command.words:  # only assignments and/or redirections (`> file` truncates it)
        kind: Kind = "read_only"
        operands: list[Operand] = []
    elif name is not None and name in _TABLE:
        operands, kind = _TABLE[name](command.args)
    elif name is not None and _version_query(command):
        operands, kind = [], "read_only"
    else:
        kind = "other"
        operands = []
        for word in command.args:
            text = word.text
            if text.startswith("-"):
                key, eq, value = text.partition("=")
                if eq and value:
                    word = Word(value, word.dynamic)
                else:
                    continue
            if _looks_like_path(word):
                operands.append(Operand(word, "unknown"))
    writes_files = False
    for redirect in command.redirects:
        if redirect.target is None:
            continue
        if redirect.writes:
            operands.append(Operand(redirect.target, "write"))
            if redirect.target.text not in _DEVICE_TARGETS:
                writes_files = True
        elif redirect.reads:
            operands.append(Operand(redirect.target, "read"))
    info.operands = operands
    guarded = (not command.privileged
               and all(_SAFE_ASSIGNMENT.match(a) for a in command.assignments)
               and (command.words == () or name is not None))
    static = all(not o.word.dynamic for o in operands) and not (command.dynamic_args and operands)
    if command.dynamic_args and name not in ("echo", "printf") and kind != "other":
        static = False  # xargs cmd: the files come from stdin
    info.read_only = guarded and static and kind == "read_only" and not writes_files
    recursive = any(o.recursive_delete for o in operands)
    info.file_edit = guarded and static and kind in ("read_only", "file_edit") and not recursive
    if name in ("cd", "pushd", "popd"):
        info.changes_dir = True
        targets = [o.word for o in operands if o.access == "read"]
        if name == "popd" or (targets and targets[0].text == "-"):
            info.cd = None
        elif targets:
            info.cd = targets[0]
        else:
            info.cd = Word("~")
    return info


# ---------------------------------------------------------------------------------------------


def destructive_git(command: SimpleCommand) -> str | None:
    """A phrase naming what a destructive git command does, or None."""
    # The basename, not command_name: /opt/git/bin/git force-pushes as well as git does.
    if not command.words or os.path.basename(command.words[0].text) != "git":
        return None
    git = _split_git(command.args)
    if git is None:
        return None
    sub, options, operands = git.sub, git.options, git.operands
    names = {name for name, _ in options}
    if sub == "push":
        if names & {"-f", "--force", "--force-with-lease", "--force-if-includes", "--mirror"}:
            return "force-pushes, overwriting history on the remote (git push --force)"
        if names & {"-d", "--delete", "--prune"}:
            return "deletes branches or tags on the remote (git push --delete)"
        refspecs = operands[1:]
        if any(r.text.startswith("+") for r in refspecs):
            return "force-pushes a +refspec, overwriting history on the remote"
        if any(r.text.startswith(":") for r in refspecs):
            return "deletes a branch on the remote (git push :branch)"
    elif sub == "reset" and "--hard" in names:
        return "discards uncommitted changes (git reset --hard)"
    elif sub == "clean" and names & {"-f", "--force"} and not names & {"-n", "--dry-run"}:
        extra = " and ignored files" if names & {"-x", "-X"} else ""
        return f"deletes untracked files{extra} for good (git clean -f)"
    elif sub == "branch":
        deleting = bool(names & {"-d", "--delete"})
        if "-D" in names or (deleting and names & {"-f", "--force"}):
            return "force-deletes a branch (git branch -D)"
        if names & {"-M", "-C"}:
            return "overwrites an existing branch (git branch -M/-C)"
    elif sub in ("filter-branch", "filter-repo"):
        return f"rewrites the repository's history (git {sub})"
    elif sub == "rebase":
        if not names & {"--abort", "--quit", "--continue", "--skip", "--show-current-patch", "--edit-todo"}:
            return "rewrites commit history (git rebase)"
    elif sub == "reflog" and operands and operands[0].text in ("expire", "delete"):
        return "deletes reflog entries, the record that lets lost commits be recovered"
    elif sub == "stash" and operands and operands[0].text in ("drop", "clear"):
        return "deletes stashed changes (git stash drop/clear)"
    elif sub == "update-ref" and "-d" in names:
        return "deletes a ref (git update-ref -d)"
    return None


def _basename(command: SimpleCommand) -> str:
    return os.path.basename(command.words[0].text) if command.words and not command.words[0].dynamic else ""


def is_downloader(command: SimpleCommand) -> bool:
    return _basename(command) in _DOWNLOADERS


def is_interpreter(command: SimpleCommand) -> bool:
    name = _basename(command)
    return name in _INTERPRETERS or bool(re.fullmatch(r"python\d(\.\d+)?|pypy\d?(\.\d+)?|perl\d?|ruby\d?", name))


#: Options that hand an interpreter its code on the command line (stdin is then data).
_CODE_OPTIONS = {"python": ("-c", "-m"), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p", "--print"),
                 "php": ("-r",), "lua": ("-e",), "shell": ("-c",)}


def runs_stdin_as_code(command: SimpleCommand) -> bool:
    """True when an interpreter would run what it reads on stdin: `sh`, `bash -s`, `python -`,
    `python` with no script; not `python -m json.tool`, `python x.py`, `sh -c '...'`."""
    if not is_interpreter(command):
        return False
    name = _basename(command)
    if name in ("eval", "exec"):
        return False
    if name in ("source", "."):
        return bool(command.args) and command.args[0].text in ("/dev/stdin", "-", "/proc/self/fd/0")
    family = ("shell" if name in SHELLS else "python" if name.startswith(("python", "pypy"))
              else "node" if name in ("node", "nodejs", "deno", "bun") else re.sub(r"\d.*$", "", name))
    code_options = _CODE_OPTIONS.get(family, ())
    for word in command.args:
        text = word.text
        if text == "-" or text == "--":
            return True
        if text.startswith("-") and family == "shell" and not text.startswith("--") and "c" in text[1:]:
            return False
        if text in code_options or any(text.startswith(o) and len(o) == 2 and len(text) > 2 for o in code_options):
            return False
        if text.startswith("-") or (family == "node" and text == "run"):
            continue
        return False  # a script file
    return True
