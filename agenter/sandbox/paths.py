"""Path confinement for tools that touch the filesystem on a model's behalf.

Every path a model names goes through a PathResolver before a file is opened. With
``sandbox=True`` the resolver only hands back paths whose *real* location (all symlinks
followed) is inside the working directory, never inside ``.git/``, and, for writes, only
where ``allowed_write_paths`` permits. Refusals raise PathSecurityError with a message
written for the model to read and correct itself.

Limit (time of check / time of use): the check runs on the filesystem as it is at call
time. A process that swaps a directory for a symlink between the check and the open can
still redirect the access. The resolver narrows that window by returning the fully resolved
path (so the caller opens no symlink it did not check) and ``open_for_write`` refuses a
final-component symlink with O_NOFOLLOW, but it is not a kernel sandbox: confine hostile
processes with the OS (containers, the agent's own sandbox), not with this class.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import IO

from agenter._errors import PathSecurityError

__all__ = ["PathResolver"]

_MAX_SHOWN = 200


def _shown(path: str) -> str:
    """The path as quoted in an error message: printable and short."""
    text = path if len(path) <= _MAX_SHOWN else path[:_MAX_SHOWN] + "..."
    return repr(text)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class PathResolver:
    """Turns model-supplied paths into safe absolute paths, or refuses them.

    cwd: the working directory; resolved once (it may itself be a symlink).
    allowed_write_paths: gitignore-style patterns, matched against the path relative to
        cwd, that writes must match. None = anywhere in cwd; [] = nowhere.
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
            raise PathSecurityError(f"Refused: {_shown(text)} is the working directory itself, not a file")
        if self.allowed_write_paths is not None:
            self._check_allowed_write(text, real)
        return Path(real)

    def relative(self, abs_path: str | os.PathLike[str]) -> str:
        """POSIX path of `abs_path` relative to cwd ('.' for cwd); absolute if outside it."""
        text = os.fspath(abs_path)
        candidate = os.path.abspath(os.path.join(self._cwd_str, text))
        for root in (self._cwd_str, self.given_cwd):
            if _is_within(candidate, root):
                return PurePosixPath(Path(os.path.relpath(candidate, root))).as_posix()
        real = os.path.realpath(candidate)
        if _is_within(real, self._cwd_str):
            return PurePosixPath(Path(os.path.relpath(real, self._cwd_str))).as_posix()
        return Path(candidate).as_posix()

    def is_allowed_write(self, path: str | os.PathLike[str]) -> bool:
        """True when resolve_write(path) would succeed."""
        try:
            self.resolve_write(path)
        except PathSecurityError:
            return False
        return True

    def open_for_write(self, path: str | os.PathLike[str], mode: str = "w", *,
                       encoding: str | None = "utf-8", make_parents: bool = True) -> IO:
        """Resolve `path` for writing and open it without following a final symlink.

        Creates missing parent directories (inside the sandbox) when make_parents is True.
        """
        target = self.resolve_write(path)
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
            # The parents now exist: re-check that none of them was swapped for a symlink out.
            target = self.resolve_write(path)
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_APPEND if "a" in mode else os.O_TRUNC
        try:
            fd = os.open(target, flags, 0o666)
        except OSError as exc:
            raise PathSecurityError(
                f"Refused: could not open {_shown(os.fspath(path))} for writing safely ({exc.strerror})"
            ) from exc
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding=encoding)

    # ------------------------------------------------------------------ internals

    def _normalize_pattern(self, pattern: str) -> str:
        """Let users write "./src/" or an absolute path under cwd; gitignore syntax has neither."""
        negate = "!" if pattern.startswith("!") else ""
        body = pattern[len(negate):]
        for root in (self._cwd_str, self.given_cwd):
            prefix = root.rstrip("/") + "/"
            if body.startswith(prefix):
                return f"{negate}/{body[len(prefix):]}"
        while body.startswith("./"):
            body = "/" + body[2:].lstrip("/")
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
        return text

    def _resolve(self, path: str | os.PathLike[str]) -> str:
        text = self._text(path)
        # No "~" expansion, no backslash translation: both are ordinary characters on POSIX.
        joined = os.path.join(self._cwd_str, text)
        try:
            real = os.path.realpath(joined)
        except OSError as exc:  # symlink loop on some Python versions / ELOOP
            raise PathSecurityError(f"Refused: {_shown(text)} could not be resolved ({exc})") from exc
        if not self.sandbox:
            return real
        if not _is_within(real, self._cwd_str):
            lexical = os.path.normpath(joined)
            if _is_within(lexical, self._cwd_str):
                raise PathSecurityError(
                    f"Refused: {_shown(text)} goes through a symlink that resolves outside the working "
                    "directory; use paths inside the working directory"
                )
            raise PathSecurityError(
                f"Refused: {_shown(text)} resolves outside the working directory; "
                "use a path relative to the working directory"
            )
        rel_parts = Path(os.path.relpath(real, self._cwd_str)).parts
        if any(part.casefold() == ".git" for part in rel_parts):
            raise PathSecurityError(
                f"Refused: {_shown(text)} is inside .git/ (version-control internals are off limits)"
            )
        return real

    def _check_allowed_write(self, text: str, real: str) -> None:
        if not self.allowed_write_paths:
            raise PathSecurityError(
                f"Refused: writing {_shown(text)} is not allowed: no files may be written in this session"
            )
        patterns = ", ".join(self.allowed_write_paths)
        if not _is_within(real, self._cwd_str):
            raise PathSecurityError(
                f"Refused: {_shown(text)} is outside the working directory, and writes are limited to: {patterns}"
            )
        rel = Path(os.path.relpath(real, self._cwd_str)).as_posix()
        assert self._write_spec is not None
        if not self._write_spec.match_file(rel):
            raise PathSecurityError(
                f"Refused: writing {_shown(rel)} is not allowed; writes are limited to: {patterns}"
            )
