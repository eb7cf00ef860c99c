"""How to run one `bash -c COMMAND` confined, with whatever this machine offers.

One set of facts (`Confinement`: the workspace, the writable and readable extra roots, the
credential paths to hide, read-only or not, network or not, a private TMPDIR) and one entry point,
`Confinement.argv(command)`. The mechanism is chosen once per session by `choose_mechanism`:

- ``landlock`` (Linux 6.2+, ABI 3+, x86-64/arm64): the kernel's own sandbox plus a seccomp filter,
  applied by the launcher `_landlock.py` in the command's parent; no package, no user namespace;
- ``bubblewrap`` (Linux, the `bwrap` program and unprivileged user namespaces): mount and PID
  namespaces, used when Landlock is not there;
- ``seatbelt`` (macOS): `sandbox-exec -p PROFILE` with the profile of `_seatbelt.py` (proven by
  its text only: no Mac runs these tests).

Anywhere else there is no mechanism and `ShellSandboxAvailable` names what to do. What each one
covers, exactly, is in docs/sandbox.md.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from agenter.host.requirements import Requirement
from agenter.sandbox.paths import is_within

__all__ = ["MECHANISMS", "Confinement", "Mechanism", "ShellSandboxAvailable", "choose_mechanism",
           "landlock_abi", "unavailable_reason", "unusable_hint"]

Mechanism = Literal["landlock", "bubblewrap", "seatbelt"]
#: In order of choice; "auto" takes the first this machine has.
MECHANISMS: tuple[Mechanism, ...] = ("landlock", "bubblewrap", "seatbelt")
#: The Landlock launcher (standard library only, so `python -I -S` can run it), imported rather
#: than run as a script so that its compiled bytecode is used (compiling it costs 5-15 ms).
LANDLOCK_LAUNCHER = ("import sys; sys.path.append(sys.argv.pop(1)); import _landlock; "
                     "_landlock.main(sys.argv[1:])")
_LAUNCHER_DIR = str(Path(__file__).parent)
#: What to do when no mechanism is there (one line, the end of every such message).
_WHAT_TO_DO = ("install bubblewrap (apt-get install bubblewrap; Fedora: dnf install bubblewrap), or pass "
               "sandbox=False (commands run unconfined), or anthropic_shell=False (no bash tool)")


@dataclass(frozen=True)
class Confinement:
    """Where a confined command may write and read, and whether it has the network.

    cwd: the workspace (writable, or read-only when read_only).
    writable: further directories it may write (the policy's extra roots).
    readable: directories it may read even where the machine's temporary folders are private
        (the tool-results folder, the policy's read roots).
    hidden: files and folders of the home it may not read (credentials, shell histories);
        one that is or contains the workspace is never hidden.
    tmpdir: the command's TMPDIR, writable even when read_only (Landlock, Seatbelt; bubblewrap
        mounts a fresh /tmp instead).
    mechanism, program: how (see the module docstring) and, for bubblewrap, the bwrap path.
    """

    cwd: Path
    network: bool = False
    read_only: bool = False
    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = field(default=())
    program: str = "bwrap"
    mechanism: Mechanism = "bubblewrap"
    tmpdir: str | None = None

    def argv(self, command: str) -> list[str]:
        """The command line that runs `bash -c command` confined."""
        if self.mechanism == "landlock":
            return self._landlock_argv(command)
        if self.mechanism == "seatbelt":
            from agenter.sandbox._seatbelt import sandbox_exec_argv

            return sandbox_exec_argv(self._with_real_paths(), command)
        return self._bubblewrap_argv(command)

    def hidden_paths(self) -> list[str]:
        """The hidden paths that are there and do not hold the workspace."""
        cwd = str(self.cwd)
        return [p for p in self.hidden if not is_within(cwd, p) and os.path.lexists(p)]

    def private_paths(self) -> list[str]:
        """Folders other programs share that a command may not read (Landlock, Seatbelt): the
        machine's temporary folders and the user's runtime folder (registry logins such as
        podman's auth.json live there); the workspace, TMPDIR and readable roots are granted
        back. bubblewrap gets the same by mounting a fresh /tmp."""
        found = ["/tmp", "/var/tmp", tempfile.gettempdir()]
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        found.append(runtime)
        found = [os.path.normpath(p) for p in found if p and os.path.isdir(p)]
        return list(dict.fromkeys(found + [os.path.realpath(p) for p in found]))

    def _landlock_argv(self, command: str) -> list[str]:
        from agenter.sandbox._landlock import command_line

        if self.tmpdir is None:
            raise ValueError("a Landlock confinement needs a tmpdir")
        spec = {"cwd": str(self.cwd), "tmpdir": self.tmpdir, "hidden": self.hidden_paths(),
                "private": self.private_paths(), "readable": [p for p in self.readable if os.path.isdir(p)],
                "writable": [p for p in self.writable if os.path.isdir(p)], "network": self.network,
                "read_only": self.read_only}
        return [sys.executable, "-I", "-S", "-c", LANDLOCK_LAUNCHER, _LAUNCHER_DIR,
                *command_line(spec, ["bash", "-c", command])]

    def _bubblewrap_argv(self, command: str) -> list[str]:
        """bubblewrap: binds only paths that exist; hidden paths last, so no bind above (the
        workspace may be the home itself) uncovers them."""
        cwd = str(self.cwd)
        # --cap-drop ALL: run by root, bwrap would leave the command every capability, and with
        # CAP_SYS_ADMIN `mount -o remount,bind,rw /` makes the whole read-only bind writable.
        args = [self.program, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--cap-drop", "ALL"]
        if not self.network:
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for path in self.readable:
            if os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += ["--ro-bind" if self.read_only else "--bind", cwd, cwd]
        for path in self.writable:
            if os.path.isdir(path) and not self.read_only:
                args += ["--bind", path, path]
        for path in self.hidden_paths():
            if not os.path.exists(path):
                continue  # a dangling link has nothing to hide
            args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
        args += ["--setenv", "TMPDIR", "/tmp", "--chdir", cwd, "--", "bash", "-c", command]
        return args

    def _with_real_paths(self) -> Confinement:
        """Seatbelt matches resolved paths (/tmp is /private/tmp on macOS)."""
        def real(paths: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys(os.path.realpath(p) for p in paths))

        return replace(self, cwd=Path(os.path.realpath(self.cwd)), writable=real(self.writable),
                       readable=real(self.readable), hidden=real(tuple(self.hidden_paths())),
                       tmpdir=os.path.realpath(self.tmpdir) if self.tmpdir else None)


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI (0: none, or not a machine the launcher knows)."""
    if not sys.platform.startswith("linux"):
        return 0
    from agenter.sandbox import _landlock

    return _landlock.abi()


def _landlock_problem() -> str | None:
    if not sys.platform.startswith("linux"):
        return "Landlock is Linux only"
    from agenter.sandbox._landlock import MIN_ABI

    version = landlock_abi()
    if version == 0:
        return (f"this kernel has no Landlock for {os.uname().machine} (Linux 6.2+ with Landlock enabled "
                "is needed; x86-64 and arm64)")
    if version < MIN_ABI:
        return f"this kernel's Landlock ABI is {version}; {MIN_ABI} or newer (Linux 6.2+) is needed"
    if not sys.executable or not os.access(sys.executable, os.X_OK):
        return "no Python interpreter to run the Landlock launcher (sys.executable is empty)"
    return None


def _problem(mechanism: Mechanism) -> str | None:
    """Why `mechanism` cannot be used here, or None."""
    if mechanism == "landlock":
        return _landlock_problem()
    if mechanism == "bubblewrap":
        if not sys.platform.startswith("linux"):
            return "bubblewrap is Linux only"
        return None if shutil.which("bwrap") else "bubblewrap (bwrap) is not on PATH"
    if sys.platform != "darwin":
        return "Seatbelt is macOS only"
    return None if os.path.exists("/usr/bin/sandbox-exec") else "/usr/bin/sandbox-exec is missing"


def choose_mechanism(prefer: str = "auto") -> Mechanism | None:
    """The mechanism to use: `prefer` when it is one and works here, else (auto) the first of
    MECHANISMS this machine has; None when there is none."""
    candidates = MECHANISMS if prefer == "auto" else tuple(m for m in MECHANISMS if m == prefer)
    for mechanism in candidates:
        if _problem(mechanism) is None:
            return mechanism
    return None


def unavailable_reason(prefer: str = "auto") -> str:
    """One line: why no mechanism can be used, and what to do."""
    if prefer != "auto":
        if prefer not in MECHANISMS:
            return f"no shell sandbox named {prefer!r} (one of auto, {', '.join(MECHANISMS)}): {_WHAT_TO_DO}"
        return (f"the {prefer} sandbox for the bash tool: {_problem(prefer)}; pass anthropic_shell_sandbox='auto', "
                "or sandbox=False (commands run unconfined), or anthropic_shell=False (no bash tool)")
    if sys.platform == "darwin":
        why = _problem("seatbelt")
        return f"a sandbox for the bash tool: {why}; pass sandbox=False or anthropic_shell=False"
    if sys.platform.startswith("linux"):
        return f"a sandbox for the bash tool: {_landlock_problem()}, and bubblewrap (bwrap) is not on PATH: {_WHAT_TO_DO}"
    return (f"a sandbox for the bash tool: none on {sys.platform} (Landlock or bubblewrap on Linux, Seatbelt on macOS): "
            "pass sandbox=False or anthropic_shell=False")


def unusable_hint(mechanism: str) -> str:
    """What to do when the chosen mechanism fails to run `true` (probed at connect)."""
    if mechanism == "bubblewrap":
        return ("Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), or pass "
                "anthropic_shell=False (no bash tool) or sandbox=False.")
    return (f"Pass anthropic_shell_sandbox= another mechanism ({', '.join(m for m in MECHANISMS if m != mechanism)}), "
            "or anthropic_shell=False (no bash tool) or sandbox=False.")


@dataclass(frozen=True)
class ShellSandboxAvailable(Requirement):
    """A mechanism for the bash tool's sandbox (probed when the facade is built)."""

    prefer: str = "auto"

    def problem(self) -> str | None:
        return None if choose_mechanism(self.prefer) else unavailable_reason(self.prefer)
