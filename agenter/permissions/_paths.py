"""Where a path really is, and which protected class of files it belongs to.

Paths resolve relative to the working directory (or a directory a shell command moved to),
`~` expands against the given home, and symlinks are followed (realpath) so a link inside the
workspace cannot stand in for a file outside it. The protected classes are the targets of the
bypass-immune safety checks; see docs/permissions.md for the lists and why each is there.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from agenter.sandbox.paths import is_within, relative_to

__all__ = ["PROTECTED_PATHS", "Finding", "ProtectedPaths", "ResolvedPath", "Workspace"]

Access = Literal["read", "write"]

#: Device files every command may use; they are not "outside the workspace".
_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout",
                      "/dev/stderr", "/dev/tty", "/dev/full"})

#: Version-control internals (writes): the hooks run code on the next git command.
_GIT_DIRS = frozenset({".git"})
#: Agent and editor settings (writes): they grant permissions, add hooks or MCP servers, run tasks.
_AGENT_DIRS = frozenset({".claude", ".codex", ".gemini", ".cursor", ".vscode", ".idea", ".devcontainer",
                         ".continue", ".windsurf", ".agenter"})
_AGENT_FILES = frozenset({".mcp.json", ".claude.json", ".gitconfig", ".aider.conf.yml", ".cursorrules"})
#: Shell start-up files (writes): they run on every new shell.
_STARTUP_FILES = frozenset({".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
                            ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".cshrc", ".tcshrc",
                            ".login", ".logout", ".envrc", ".inputrc", "config.fish", "bash.bashrc"})
_STARTUP_DIRS_ABS = ("/etc/profile.d", "/etc/bash.bashrc", "/etc/profile", "/etc/zsh", "/etc/environment")
#: Credentials (reads and writes).
_CREDENTIAL_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".azure", ".kube", ".password-store", ".terraform.d"})
_CREDENTIAL_HOME = (".docker/config.json", ".config/gcloud", ".config/gh", ".config/hub", ".npmrc", ".pypirc",
                    ".yarnrc", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
                    ".m2/settings.xml", ".config/rclone", ".vault-token", ".boto", ".s3cfg")
_CREDENTIAL_FILES = frozenset({".netrc", "_netrc", ".pgpass", ".git-credentials", ".my.cnf", "id_rsa", "id_dsa",
                               "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", "credentials.json",
                               "service-account.json", ".htpasswd"})
_CREDENTIAL_GLOBS = ("*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk", "*.kdbx", "*.asc",
                     "*.gpg", ".env", ".env.*", "*.env")
#: Templates committed on purpose: not credentials.
_ENV_TEMPLATES = (".example", ".sample", ".template", ".dist", ".defaults", ".tmpl")


@dataclass(frozen=True)
class ProtectedPaths:
    """The file classes the safety checks protect, for backends that compile a policy into an
    agent program's own configuration (a sandbox profile, a policy file, an ignore file) rather
    than deciding each call through the gate. Names are folder or file names anywhere (in the
    workspace and the home); `credential_home` entries are relative to the home."""

    git_dirs: frozenset[str] = _GIT_DIRS
    agent_dirs: frozenset[str] = _AGENT_DIRS
    agent_files: frozenset[str] = _AGENT_FILES
    startup_files: frozenset[str] = _STARTUP_FILES
    credential_dirs: frozenset[str] = _CREDENTIAL_DIRS
    credential_home: tuple[str, ...] = _CREDENTIAL_HOME
    credential_files: frozenset[str] = _CREDENTIAL_FILES
    credential_globs: tuple[str, ...] = _CREDENTIAL_GLOBS
    #: Suffixes that make a `.env*` file a committed template, not a credential.
    env_templates: tuple[str, ...] = _ENV_TEMPLATES


#: What the bypass-immune safety checks protect (see docs/permissions.md).
PROTECTED_PATHS = ProtectedPaths()


@dataclass(frozen=True)
class Finding:
    """One safety check that fired: `check` is its id, `message` a phrase for the model."""

    check: str
    message: str
    path: str | None = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ResolvedPath:
    """A path as written, where it points lexically, and where it really is."""

    text: str
    lexical: str
    real: str
    inside: bool
    rel: str | None  # POSIX path relative to the workspace when inside it

    @property
    def shown(self) -> str:
        return self.rel if self.rel is not None else self.real




def _split(path: str) -> tuple[str, ...]:
    """PurePosixPath(path).parts, by str.split for the normalized paths the gate passes (a
    realpath or normpath: no empty or "." component); anything else goes to PurePosixPath."""
    if path in ("", "."):
        return ()
    if "//" in path or path.endswith(("/", "/.")) or "/./" in path or path.startswith("./"):
        return PurePosixPath(path).parts
    if path[0] == "/":
        return ("/", *path[1:].split("/"))
    return tuple(path.split("/"))


class Workspace:
    """The working directory, extra roots, and the home that `~` means.

    extra_roots: directories treated like the workspace (reads and writes), e.g. a private TMPDIR.
    read_roots: directories that may be read but not written (e.g. the run's tool-result folder).
    protected: extra gitignore-style patterns (relative to the workspace) whose writes are refused
        like agent settings.
    """

    def __init__(self, cwd: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None,
                 extra_roots: Iterable[str | os.PathLike[str]] = (),
                 read_roots: Iterable[str | os.PathLike[str]] = (),
                 protected: Iterable[str] = ()):
        self.given_cwd = os.path.abspath(os.fspath(cwd))
        self.cwd = os.path.realpath(self.given_cwd)
        self.home = os.path.abspath(os.fspath(home) if home is not None else os.path.expanduser("~"))
        self.real_home = os.path.realpath(self.home)
        self.extra_roots = [os.path.realpath(os.path.expanduser(os.fspath(r))) for r in extra_roots]
        self.read_roots = [os.path.realpath(os.path.expanduser(os.fspath(r))) for r in read_roots]
        patterns = [p for p in protected if p.strip()]
        self._protected_spec = None
        self.protected = patterns
        if patterns:
            import pathspec

            self._protected_spec = pathspec.GitIgnoreSpec.from_lines(patterns)

    def add_read_root(self, path: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(path))
        if real not in self.read_roots:
            self.read_roots.append(real)

    def add_root(self, path: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(path))
        if real not in self.extra_roots:
            self.extra_roots.append(real)

    # ------------------------------------------------------------------ resolution

    def resolve(self, text: str, base: str | None = None) -> ResolvedPath:
        """Resolve `text` against `base` (default: the workspace); `~` means the home."""
        expanded = text
        if text == "~" or text.startswith("~/"):
            expanded = self.home + text[1:]
        joined = os.path.join(base or self.given_cwd, expanded)
        lexical = os.path.normpath(joined)
        try:
            real = os.path.realpath(joined)
        except (OSError, ValueError):  # a symlink loop, a NUL byte: keep the lexical form
            real = lexical
        inside = is_within(real, self.cwd)
        rel = relative_to(real, self.cwd) if inside else None
        return ResolvedPath(text=text, lexical=lexical, real=real, inside=inside, rel=rel)

    def in_roots(self, path: ResolvedPath, access: Access) -> bool:
        """Inside the workspace or an extra root (or, for reads, a read root), or a device."""
        if path.inside or path.real in _DEVICES or path.real.startswith("/dev/fd/") \
                or path.real.startswith("/proc/self/fd/"):
            return True
        roots = self.extra_roots + (self.read_roots if access == "read" else [])
        return any(is_within(path.real, root) for root in roots)

    # ------------------------------------------------------------------ protected classes

    def findings(self, path: ResolvedPath, access: Access) -> list[Finding]:
        """The safety checks `path` trips when accessed this way."""
        found: list[Finding] = []
        shown = path.shown
        verb = "writes" if access == "write" else "reads"
        if not self.in_roots(path, access):
            found.append(Finding("outside-workspace",
                                 f"{verb} {shown!r}, which is outside the workspace", path.real))
        candidates = {path.real, path.lexical}
        for candidate in candidates:
            check = self._credential(candidate)
            if check:
                found.append(Finding("credentials", f"{verb} {shown!r}, which holds credentials ({check})",
                                     path.real))
                break
        if access == "write":
            for candidate in candidates:
                parts = self._parts(candidate)
                lowered = [p.casefold() for p in parts]
                if any(p in _GIT_DIRS for p in lowered):
                    found.append(Finding("git-internals",
                                         f"writes {shown!r}, inside .git/ (version-control internals)", path.real))
                    break
            for candidate in candidates:
                reason = self._agent_settings(candidate)
                if reason:
                    found.append(Finding("agent-settings", f"writes {shown!r}, {reason}", path.real))
                    break
            for candidate in candidates:
                if self._startup(candidate):
                    found.append(Finding("shell-startup", f"writes {shown!r}, a shell start-up file", path.real))
                    break
            if self._protected_spec is not None and path.rel is not None \
                    and self._protected_spec.match_file(path.rel):
                found.append(Finding("protected-path", f"writes {shown!r}, a path the policy protects", path.real))
        return found

    def _parts(self, absolute: str) -> tuple[str, ...]:
        """Components relative to the workspace when inside it, else absolute components."""
        for root in (self.cwd, self.given_cwd):
            if is_within(absolute, root):
                return _split(relative_to(absolute, root))
        return _split(absolute)

    def _home_rel(self, absolute: str) -> str | None:
        for home in (self.home, self.real_home):
            if is_within(absolute, home) and absolute != home:
                return relative_to(absolute, home)
        return None

    def _credential(self, absolute: str) -> str | None:
        parts = self._parts(absolute)
        if not parts:
            return None
        for part in parts:
            if part in _CREDENTIAL_DIRS:
                return f"{part}/"
        name = parts[-1]
        if name in _CREDENTIAL_FILES:
            return name
        home_rel = self._home_rel(absolute)
        if home_rel is not None:
            for entry in _CREDENTIAL_HOME:
                if home_rel == entry or home_rel.startswith(entry + "/"):
                    return f"~/{entry}"
        if name.startswith(".env") and name.endswith(_ENV_TEMPLATES):
            return None
        for pattern in _CREDENTIAL_GLOBS:
            if fnmatch.fnmatchcase(name, pattern):
                return f"matches {pattern}"
        return None

    def _agent_settings(self, absolute: str) -> str | None:
        parts = self._parts(absolute)
        for part in parts:
            if part in _AGENT_DIRS:
                return f"inside {part}/ (agent or editor settings)"
        if parts and parts[-1] in _AGENT_FILES:
            return f"an agent settings file ({parts[-1]})"
        return None

    def _startup(self, absolute: str) -> bool:
        name = os.path.basename(absolute)
        if name in _STARTUP_FILES:
            return True
        return any(is_within(absolute, p) for p in _STARTUP_DIRS_ABS)
