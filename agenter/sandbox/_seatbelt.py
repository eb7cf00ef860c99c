"""The macOS Seatbelt profile of one confined command (`sandbox-exec -p PROFILE -D ...`).

The profile text is fixed but for how many paths of each kind there are; the paths themselves go
in as `-D NAME=VALUE` parameters, read with `(param "NAME")`, so no path is ever quoted into the
profile (a quote or a backslash in a folder name cannot change it). Rules are ordered so that the
more specific one also comes later, which decides under either reading of Seatbelt's precedence
(the later rule wins; the more specific rule wins): read everything, then not the machine's
temporary folders, then the readable roots, workspace and TMPDIR again, then never the hidden
credential paths.

Limits: this is proven by its text only (tests/test_shell_confine.py); no Mac runs the tests of
this project. `sandbox-exec` is deprecated by Apple but still shipped and used (Codex, Claude Code).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenter.sandbox.confine import Confinement

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
#: Device files a command may write to (none of them reaches data).
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/dtracehelper")
#: Mach services a command may call: user and group look-ups always; DNS, certificate trust and
#: network configuration only with the network. Anything else (the keychain, launchd) is denied.
MACH_ALWAYS = ("com.apple.system.opendirectoryd.libinfo",)
MACH_NETWORK = ("com.apple.dnssd.service", "com.apple.trustd.agent", "com.apple.SystemConfiguration.configd")

_BASE = """(version 1)
(deny default)
(allow process-exec process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
(allow user-preference-read)
(allow ipc-posix-sem ipc-posix-shm)
(allow pseudo-tty)
(allow file-read*)"""


def _names(prefix: str, paths: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    return [(f"{prefix}_{i}", path) for i, path in enumerate(paths)]


def _subpaths(params: list[tuple[str, str]]) -> str:
    return " ".join(f'(subpath (param "{name}"))' for name, _ in params)


def _literals(values: tuple[str, ...]) -> str:
    return " ".join(f'(literal "{value}")' for value in values)


def _global_names(values: tuple[str, ...]) -> str:
    return " ".join(f'(global-name "{value}")' for value in values)


def profile(conf: Confinement) -> tuple[str, list[tuple[str, str]]]:
    """The profile text and its parameters (name, path), for paths already resolved."""
    private = _names("PRIVATE", conf.private_paths())
    readable = _names("READABLE", conf.readable)
    writable = [] if conf.read_only else _names("WRITABLE", conf.writable)
    hidden = _names("HIDDEN", conf.hidden)
    own = [("WORKSPACE", str(conf.cwd)), ("TMPDIR", conf.tmpdir or "")]
    lines = [_BASE, f"(allow mach-lookup {_global_names(MACH_ALWAYS)})"]
    if private:
        lines.append(f"(deny file-read* {_subpaths(private)})")
    lines.append(f'(allow file-read* {_subpaths(readable + own)})')
    lines.append('(allow file-write* (subpath (param "TMPDIR")))')
    if not conf.read_only:
        lines.append(f"(allow file-write* {_subpaths(own[:1] + writable)})")
    lines.append(f"(allow file-write-data file-ioctl {_literals(WRITABLE_DEVICES)})")
    if conf.network:
        lines += ["(allow network*)", f"(allow mach-lookup {_global_names(MACH_NETWORK)})"]
    else:
        lines += ["(allow network* (local unix-socket))", "(allow network-outbound (remote unix-socket))"]
    if hidden:
        lines.append(f"(deny file-read* file-write* {_subpaths(hidden)})")
    return "\n".join(lines) + "\n", private + readable + writable + hidden + own


def sandbox_exec_argv(conf: Confinement, command: str) -> list[str]:
    """`sandbox-exec -p PROFILE -D NAME=PATH ... env TMPDIR=... bash -c command`."""
    if conf.tmpdir is None:
        raise ValueError("a Seatbelt confinement needs a tmpdir")
    text, params = profile(conf)
    args = [SANDBOX_EXEC, "-p", text]
    for name, path in params:
        args += ["-D", f"{name}={path}"]
    return [*args, "/usr/bin/env", f"TMPDIR={conf.tmpdir}", "bash", "-c", command]
