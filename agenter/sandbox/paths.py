"""Path confinement for tools that touch the filesystem on a model's behalf.

Every path a model names goes through a PathResolver before a file is opened. With
``sandbox=True`` the resolver only hands back paths whose *real* location (all symlinks
followed) is inside the working directory, never inside ``.git/``, and, for writes, only
where ``allowed_write_paths`` permits. Refusals raise PathSecurityError with a message
written for the model to read and correct itself.

Limit (time of check / time of use): the check runs on the filesystem as it is at call
time. A process that swaps a directory for a symlink between the check and the open can
still redirect the access. The resolver narrows that window by returning the fully resolved
path (so the caller opens no symlink it did not check), and ``open_for_read`` and
``open_for_write`` refuse a final-component symlink with O_NOFOLLOW, but it is not a kernel
sandbox: confine hostile processes with the OS (containers, the agent's own sandbox), not
with this class.

Hostile input is refused before it reaches the OS: paths longer than PATH_MAX, with a name
longer than NAME_MAX or nested deeper than MAX_PATH_DEPTH, symlink chains too deep to resolve,
and (when opening) anything that is not a regular file, so a FIFO or a device can never block
or feed a caller.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

from agenter._errors import PathSecurityError

__all__ = ["MAX_PATH_DEPTH", "NAME_MAX", "PATH_MAX", "PathResolver", "is_within", "open_regular", "read_text_capped",
           "relative_to", "shown_path"]

#: Linux limits, in bytes: a whole path (the count includes the final NUL) and one name in it.
#: Longer input is refused with a clear message instead of failing in the kernel.
PATH_MAX = 4096
NAME_MAX = 255
#: Folder levels a path may go below the working directory. The kernel has no such limit, but
#: Python's own tree walkers before 3.12 (os.walk, shutil.rmtree, Path.rglob) recurse once per
#: level under a default recursion limit of 1000, so a deeper tree crashes them.
MAX_PATH_DEPTH = 256

_SHOWN_HEAD = 100
_SHOWN_TAIL = 60

# Flags for every open of a model-named file: never block on a FIFO (the lstat/fstat checks
# then refuse it), never follow a final symlink (the resolved path has none, so one there was
# planted after the check), never make a terminal the controlling one, never leak to children.
_SAFE_OPEN_FLAGS = (os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
                    | getattr(os, "O_CLOEXEC", 0))

_KINDS = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFLNK: "a symbolic link"}


def shown_path(path: str | os.PathLike[str]) -> str:
    """The path as quoted in a message: printable, and shortened in the middle when long."""
    text = os.fspath(path)
    if len(text) > _SHOWN_HEAD + _SHOWN_TAIL + 3:
        text = f"{text[:_SHOWN_HEAD]}...{text[-_SHOWN_TAIL:]}"
    return repr(text)


def open_regular(path: str | os.PathLike[str], flags: int, *, shown: str | None = None,
                 mode: int = 0o666) -> int:
    """A descriptor on `path` opened with `flags`, only if it is a regular file.

    Checked twice: lstat before the open (so a FIFO or device is never opened at all) and
    fstat on the descriptor (in case the file was swapped in between; O_NONBLOCK keeps that
    open from blocking). A final symlink is not followed. Raises PathSecurityError for
    special files, IsADirectoryError for directories, and OSError as os.open does.
    """
    return _open_regular(path, flags, shown, mode)[0]


def _open_regular(path: str | os.PathLike[str], flags: int, shown: str | None = None,
                  mode: int = 0o666) -> tuple[int, os.stat_result]:
    """open_regular, with the descriptor's fstat (its size saves a read)."""
    try:
        _require_regular(os.lstat(path).st_mode, path, shown)
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
    fd = os.open(path, flags | _SAFE_OPEN_FLAGS, mode)
    try:
        st = os.fstat(fd)
        _require_regular(st.st_mode, path, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_text_capped(path: str | os.PathLike[str], limit: int) -> str | None:
    """A regular file's text (UTF-8, undecodable bytes replaced), at most `limit` bytes read;
    a longer file is cut there and marked truncated. None when it is not a readable regular file
    (missing, a directory, a FIFO or device, a final symlink). Plain os.read: callers read every
    changed file of a run, so no file object per file, and one read when the file holds exactly
    the size fstat gave (asked for one byte more, so a file that grew since is read on)."""
    try:
        fd, st = _open_regular(path, os.O_RDONLY)
    except (OSError, PathSecurityError):
        return None
    chunks: list[bytes] = []
    try:
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            if len(chunks) == 1 and len(chunk) == st.st_size < limit + 1:
                break  # all of it: the size fstat gave, and one more byte was asked for
    except OSError:
        return None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > limit:
        return data[:limit].decode("utf-8", "replace") + "\n[... truncated by agenter]"
    return data.decode("utf-8", "replace")


def _require_regular(mode: int, path: str | os.PathLike[str], shown: str | None = None) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(path))
    kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
    label = shown_path(shown if shown is not None else path)
    raise PathSecurityError(f"Refused: {label} is {kind}, not a regular file; "
                            "only regular files are read or written")


def is_within(path: str, root: str) -> bool:
    """Whether normalized absolute `path` is `root` or below it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def relative_to(path: str, root: str) -> str:
    """`path` relative to `root`, both normalized absolute paths with `path` within `root`
    (`is_within`): a slice, where os.path.relpath would normalize both again ("." for root)."""
    if path == root:
        return "."
    return path[len(root.rstrip(os.sep)) + 1:]



class PathResolver:
    """Turns model-supplied paths into safe absolute paths, or refuses them.

    cwd: the working directory; resolved once (it may itself be a symlink).
    allowed_write_paths: gitignore-style patterns, matched against the path relative to
        cwd, that writes must match. None = anywhere in cwd; [] = nowhere. A pattern with no
        slash but a trailing one is anchored at cwd (`*.py`: the top-level Python files, as in
        agenter 0.1.7; `**/*.py` for any depth); a `!` exclusion applies at any depth.
    sandbox: False disables confinement (paths still resolve relative to cwd, NUL bytes
        are still refused, and allowed_write_paths still applies when given).
    """

    def __init__(self, cwd: str | os.PathLike[str], allowed_write_paths: Iterable[str] | None = None,
                 sandbox: bool = True):
        self.given_cwd = os.path.abspath(os.fspath(cwd))
        self.cwd = Path(os.path.realpath(self.given_cwd))
        self._cwd_str = str(self.cwd)
        self.sandbox = sandbox
        if isinstance(allowed_write_paths, str):
            allowed_write_paths = [allowed_write_paths]
        self.allowed_write_paths: list[str] | None = (
            None if allowed_write_paths is None else [p for p in allowed_write_paths if p.strip()]
        )
        self._write_spec = None
        if self.allowed_write_paths:
            import pathspec  # light, but only needed when patterns are given

            self._write_spec = pathspec.GitIgnoreSpec.from_lines(
                [self._normalize_pattern(p) for p in self.allowed_write_paths]
            )

    # ------------------------------------------------------------------ public API

    def resolve_read(self, path: str | os.PathLike[str]) -> Path:
        """Absolute real path for reading `path` (a file or a directory)."""
        return Path(self._resolve(path))

    def resolve_write(self, path: str | os.PathLike[str]) -> Path:
        """Absolute real path for writing `path`; the file may not exist yet."""
        text = self._text(path)
        real = self._resolve(text)
        if real == self._cwd_str:
            raise PathSecurityError(f"Refused: {shown_path(text)} is the working directory itself, not a file")
        if self.allowed_write_paths is not None:
            self._check_allowed_write(text, real)
        return Path(real)

    def relative(self, abs_path: str | os.PathLike[str]) -> str:
        """POSIX path of `abs_path` relative to cwd ('.' for cwd); absolute if outside it."""
        text = os.fspath(abs_path)
        candidate = os.path.abspath(os.path.join(self._cwd_str, text))
        for root in (self._cwd_str, self.given_cwd):
            if is_within(candidate, root):
                return relative_to(candidate, root)
        try:
            real = os.path.realpath(candidate)
        except (OSError, RecursionError, ValueError):  # see _resolve; outside is the safe answer
            return Path(candidate).as_posix()
        if is_within(real, self._cwd_str):
            return relative_to(real, self._cwd_str)
        return Path(candidate).as_posix()

    def is_allowed_write(self, path: str | os.PathLike[str]) -> bool:
        """True when resolve_write(path) would succeed."""
        try:
            self.resolve_write(path)
        except PathSecurityError:
            return False
        return True

    def open_for_read(self, path: str | os.PathLike[str]) -> BinaryIO:
        """Resolve `path` for reading and open it in binary mode, only if it is a regular file.

        Never blocks and never follows a final symlink: a FIFO, socket or device raises
        PathSecurityError without being opened, a directory IsADirectoryError.
        """
        target = self.resolve_read(path)
        fd = open_regular(target, os.O_RDONLY, shown=self._text(path))
        return os.fdopen(fd, "rb")

    def open_for_write(self, path: str | os.PathLike[str], mode: str = "w", *,
                       encoding: str | None = "utf-8", make_parents: bool = True) -> IO:
        """Resolve `path` for writing and open it without following a final symlink.

        Creates missing parent directories (inside the sandbox) when make_parents is True.
        Refuses anything that exists and is not a regular file (FIFO, device, socket).
        """
        target = self.resolve_write(path)
        if make_parents and _make_dirs(target.parent):
            # Parents were made: re-check that none of them was swapped for a symlink out.
            target = self.resolve_write(path)
        flags = os.O_WRONLY | os.O_CREAT
        flags |= os.O_APPEND if "a" in mode else os.O_TRUNC
        try:
            fd = open_regular(target, flags, shown=os.fspath(path))
        except PathSecurityError:
            raise
        except OSError as exc:
            raise PathSecurityError(
                f"Refused: could not open {shown_path(os.fspath(path))} for writing safely ({exc.strerror})"
            ) from exc
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding=encoding)

    # ------------------------------------------------------------------ internals

    def _normalize_pattern(self, pattern: str) -> str:
        """The pattern as GitIgnoreSpec reads it, never matching more than the user wrote.

        "./src/" and an absolute path under cwd mean the anchored "/src/" (gitignore syntax has
        neither). A pattern without a slash (but a trailing one) is anchored too: gitignore
        would match `*.py` or `src/` at any depth, where agenter 0.1.7 and a reader of
        `allowed_write_paths=["*.py"]` mean the top level, and an allow-list must not grow
        silently (`**/*.py` asks for any depth). An exclusion keeps gitignore's any-depth
        reading, so anchoring never lets more through.
        """
        negate = "!" if pattern.startswith("!") else ""
        body = pattern[len(negate):]
        for root in (self._cwd_str, self.given_cwd):
            prefix = root.rstrip("/") + "/"
            if body.startswith(prefix):
                return f"{negate}/{body[len(prefix):]}"
        while body.startswith("./"):
            body = "/" + body[2:].lstrip("/")
        if not negate and "/" not in body.rstrip("/"):
            body = "/" + body
        return negate + body

    @staticmethod
    def _text(path: str | os.PathLike[str]) -> str:
        if isinstance(path, bytes):
            raise PathSecurityError("Refused: paths must be text, not bytes")
        try:
            text = os.fspath(path)
        except TypeError:
            raise PathSecurityError(f"Refused: a path must be a string, got {type(path).__name__}") from None
        if "\x00" in text:
            raise PathSecurityError("Refused: the path contains a NUL byte")
        if text == "":
            raise PathSecurityError("Refused: the path is empty")
        try:
            encoded = os.fsencode(text)
        except UnicodeError:
            raise PathSecurityError(
                f"Refused: {shown_path(text)} is not a valid file name (it contains an unpaired surrogate)"
            ) from None
        if len(encoded) >= PATH_MAX:
            raise PathSecurityError(
                f"Refused: the path {shown_path(text)} is {len(encoded)} bytes long; "
                f"paths are limited to {PATH_MAX - 1} bytes (PATH_MAX)"
            )
        longest = max(encoded.split(b"/"), key=len)
        if len(longest) > NAME_MAX:
            raise PathSecurityError(
                f"Refused: {shown_path(text)} contains a name of {len(longest)} bytes; a file or "
                f"folder name is limited to {NAME_MAX} bytes (NAME_MAX)"
            )
        return text

    def _resolve(self, path: str | os.PathLike[str]) -> str:
        text = self._text(path)
        # No "~" expansion, no backslash translation: both are ordinary characters on POSIX.
        joined = os.path.join(self._cwd_str, text)
        try:
            real = os.path.realpath(joined)
        except OSError as exc:  # symlink loop on some Python versions / ELOOP
            raise PathSecurityError(f"Refused: {shown_path(text)} could not be resolved ({exc.strerror or exc})") from exc
        except RecursionError:
            # Python 3.11's realpath recurses once per symlink in a chain; the kernel gives up
            # after 40 (ELOOP), so a chain this long could never be opened anyway.
            raise PathSecurityError(
                f"Refused: {shown_path(text)} goes through too many levels of symbolic links"
            ) from None
        if len(os.fsencode(real)) >= PATH_MAX:
            raise PathSecurityError(
                f"Refused: {shown_path(text)} is longer than {PATH_MAX - 1} bytes (PATH_MAX) once "
                "joined to the working directory and resolved; use a shorter path"
            )
        depth = real.count(os.sep)
        if is_within(real, self._cwd_str):
            depth -= self._cwd_str.rstrip(os.sep).count(os.sep)
        if depth > MAX_PATH_DEPTH:
            raise PathSecurityError(
                f"Refused: {shown_path(text)} is nested {depth} folders deep; paths are limited to "
                f"{MAX_PATH_DEPTH} levels"
            )
        if not self.sandbox:
            return real
        if not is_within(real, self._cwd_str):
            lexical = os.path.normpath(joined)
            if is_within(lexical, self._cwd_str):
                raise PathSecurityError(
                    f"Refused: {shown_path(text)} goes through a symlink that resolves outside the working "
                    "directory; use paths inside the working directory"
                )
            raise PathSecurityError(
                f"Refused: {shown_path(text)} resolves outside the working directory; "
                "use a path relative to the working directory"
            )
        rel_parts = PurePosixPath(relative_to(real, self._cwd_str)).parts
        if any(part.casefold() == ".git" for part in rel_parts):
            raise PathSecurityError(
                f"Refused: {shown_path(text)} is inside .git/ (version-control internals are off limits)"
            )
        return real

    def _check_allowed_write(self, text: str, real: str) -> None:
        if not self.allowed_write_paths:
            raise PathSecurityError(
                f"Refused: writing {shown_path(text)} is not allowed: no files may be written in this session"
            )
        patterns = ", ".join(self.allowed_write_paths)
        if not is_within(real, self._cwd_str):
            raise PathSecurityError(
                f"Refused: {shown_path(text)} is outside the working directory, and writes are limited to: {patterns}"
            )
        rel = relative_to(real, self._cwd_str)
        assert self._write_spec is not None
        if not self._write_spec.match_file(rel):
            raise PathSecurityError(
                f"Refused: writing {shown_path(rel)} is not allowed; writes are limited to: {patterns}"
            )


def _make_dirs(directory: Path) -> bool:
    """mkdir -p without recursion (Path.mkdir and os.makedirs recurse once per missing level);
    whether any folder was missing."""
    missing: list[Path] = []
    current = directory
    while not os.path.lexists(current):
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise
    return bool(missing)
