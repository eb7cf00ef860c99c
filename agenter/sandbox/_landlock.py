"""Landlock confinement for one shell command, and the launcher that applies it.

Landlock is the Linux kernel's own unprivileged sandbox (5.13+): a process restricts itself, and
everything it starts, to an allow-list of file hierarchies, TCP ports (ABI 4+) and IPC scopes
(ABI 6+). It needs no package, no setuid helper and no user namespace. The restriction must be
made by the process that will exec the command, so agenter starts this module as a tiny launcher
(`python -I -S -c "...import _landlock; _landlock.main(...)" DIR --cwd DIR --tmpdir DIR ... --
bash -c COMMAND`, see `confine.LANDLOCK_LAUNCHER`; `python -I -S _landlock.py ARGS` works too):
only the standard library is imported here (no agenter, no site-packages), so it starts in
about 15 ms and works from any environment.

The launcher stays as the command's parent, marked a child subreaper: a grandchild that calls
setsid() and drops agenter's process mark is re-parented to it, not to init, and is killed when
the command ends or the launcher is told to stop (SIGTERM/SIGINT/SIGHUP). In the forked child it
builds the rules, sets no_new_privs, installs a seccomp filter when the network is off, drops
every capability (root in the sandbox is not root), applies the ruleset and execs the command.

What the rules allow (see `grants` and docs/sandbox.md):
- read and execute: the whole filesystem except the `private` paths (the home's credential files,
  the temporary folders of the machine, the user's runtime folder); Landlock cannot deny a
  sub-path of an allowed tree, so the tree is granted entry by entry around each private path;
  listing directories (names only) is allowed everywhere;
- write (create, remove, rename, truncate): the workspace (unless read-only), the writable roots
  (unless read-only), the command's private TMPDIR and /dev/shm; /dev/null, /dev/zero, /dev/full,
  /dev/random and /dev/urandom can be opened for writing;
- network off: TCP bind/connect denied by Landlock (ABI 4+) and every socket family but AF_UNIX
  and AF_NETLINK refused by the seccomp filter (UDP, raw, packet, vsock, ... included), with
  io_uring off (it could open sockets past the filter);
- signals to, and abstract Unix sockets of, processes outside the sandbox denied (ABI 6+).

Limits: the kernel must offer ABI 3 (Linux 6.2: truncate is controlled from ABI 3 on; before it,
truncate(2) of any file the user owns would be allowed); x86-64 and arm64 only (the seccomp
filter and the syscall numbers). A path Unix socket (ssh-agent, docker.sock) can be connected
to: Landlock cannot yet restrict that.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import sys

try:  # the signal module without its enum wrappers (5 ms of the launcher's start-up)
    import _signal as signal
except ImportError:  # pragma: no cover - other Pythons
    import signal

#: Syscall numbers of Landlock (the same on x86-64 and arm64).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
#: The lowest ABI used: truncate(2) is controlled from ABI 3 (Linux 6.2) on.
MIN_ABI = 3

# Filesystem access rights (LANDLOCK_ACCESS_FS_*).
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
#: Rights that apply to a file (a rule on a non-directory may hold only these).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE
#: TCP rights (LANDLOCK_ACCESS_NET_*, ABI 4) and IPC scopes (LANDLOCK_SCOPE_*, ABI 6).
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
#: Device files a command may open for writing (none of them reaches data).
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# prctl options.
_PR_SET_PDEATHSIG, _PR_SET_SECCOMP, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 22, 36, 38
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_SECCOMP_MODE_FILTER = 2

#: Per machine: audit arch of seccomp, socket(2), and whether x32 syscall numbers exist.
_ARCH = {"x86_64": (0xC000003E, 41, True), "aarch64": (0xC00000B7, 198, False),
         "arm64": (0xC00000B7, 198, False)}
_IO_URING_SETUP = 425
#: Socket families a command keeps with the network off: local IPC and the kernel's own.
_AF_UNIX, _AF_NETLINK = 1, 16
_EACCES = 13

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# prctl's arguments 2-5 are unsigned longs: the kernel reads whole registers (and wants 0s).
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def machine_supported() -> bool:
    """Landlock's syscall numbers and the seccomp filter are known for this machine."""
    return sys.platform.startswith("linux") and os.uname().machine in _ARCH


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (too old, or disabled at boot)."""
    if not machine_supported():
        return 0
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _fs_rights(version: int) -> int:
    """Every filesystem right the kernel of this ABI knows (all are handled, so all are denied
    unless a rule grants them)."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _norm(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def grants(private: list[str], root: str = "/") -> list[str]:
    """The paths under `root` to grant, so that all of it is covered except the `private` paths:
    every directory on the way to a private path is opened up entry by entry, every other entry
    is granted whole. Symlinks are skipped (their targets are granted where they live); an entry
    that cannot be listed is left out (less access, never more)."""
    closed = {_norm(p) for p in private}
    found: list[str] = []
    stack = [_norm(root)]
    while stack:
        path = stack.pop()
        if path in closed:
            continue
        if not any(_within(p, path) for p in closed):
            found.append(path)
            continue
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
            except OSError:
                continue
            stack.append(entry.path)
    return found


def private_paths(spec: dict) -> list[str]:
    """The paths no read rule may cover wholesale: the hidden credentials (and where their links
    lead), the machine's temporary and runtime folders, and /dev (granted device by device)."""
    found: list[str] = ["/dev"]
    for path in list(spec.get("hidden", ())) + list(spec.get("private", ())):
        found.append(_norm(path))
        real = os.path.realpath(path)
        if real != "/":
            found.append(real)
    return found


class _Ruleset:
    def __init__(self, version: int, network: bool):
        self.version = version
        self.fs = _fs_rights(version)
        fields = [self.fs]
        if version >= 4:
            fields.append(0 if network else _NET_BIND_TCP | _NET_CONNECT_TCP)
        if version >= 6:
            fields.append(_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
        attr = ctypes.create_string_buffer(struct.pack(f"={len(fields)}Q", *fields))
        self.fd = _check(_libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(len(fields) * 8),
                                       ctypes.c_uint32(0)), "landlock_create_ruleset")

    def allow(self, path: str, rights: int, *, strict: bool = False) -> None:
        """Grant `rights` beneath `path` (file rights only on a non-directory). A path that is
        gone is skipped unless `strict` (the workspace must be there)."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            if strict:
                raise
            return
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= FILE_RIGHTS
            rights &= self.fs
            if not rights:
                return
            attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd))
            result = _libc.syscall(_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH), attr,
                                   ctypes.c_uint32(0))
            if result < 0 and strict:
                _check(result, f"landlock_add_rule({path})")
        finally:
            os.close(fd)

    def restrict(self) -> None:
        _check(_libc.syscall(_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)), "landlock_restrict_self")
        os.close(self.fd)


def build(spec: dict, version: int) -> _Ruleset:
    """The ruleset of one command (see the module docstring). A hidden path inside the workspace
    (the workspace is the home) or a readable or writable root is left out of its rules too, so
    that root is then granted entry by entry: new entries at its top level cannot be made."""
    ruleset = _Ruleset(version, bool(spec.get("network")))
    everything = ruleset.fs
    private = private_paths(spec)
    ruleset.allow("/", READ_DIR)
    for path in grants(private):
        ruleset.allow(path, READ)
    read_only = bool(spec.get("read_only"))
    hidden = private_paths({"hidden": spec.get("hidden", ())})
    for root in spec.get("readable", ()):
        for path in grants(hidden, root):
            ruleset.allow(path, READ | READ_DIR)
    if not os.path.isdir(spec["cwd"]):
        raise OSError(f"the workspace {spec['cwd']} is not a directory")
    for path in grants(hidden, spec["cwd"]):
        ruleset.allow(path, READ | READ_DIR if read_only else everything)
    if not read_only:
        for root in spec.get("writable", ()):
            for path in grants(hidden, root):
                ruleset.allow(path, everything)
    ruleset.allow(spec["tmpdir"], everything, strict=True)
    ruleset.allow("/dev/shm", everything)
    for device in WRITABLE_DEVICES:
        ruleset.allow(device, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV)
    return ruleset


def seccomp_program(machine: str | None = None) -> bytes:
    """The classic-BPF filter for a command without network: socket(2) only for AF_UNIX and
    AF_NETLINK (EACCES otherwise), io_uring_setup(2) refused, and any other syscall ABI on this
    kernel (32-bit, x32) ends the process, so it cannot reach socket(2) by another number."""
    arch, socket_nr, x32 = _ARCH[machine or os.uname().machine]
    allow, kill, refuse = 0x7FFF0000, 0x80000000, 0x00050000 | _EACCES
    load, equal, at_least, ret = 0x20, 0x15, 0x35, 0x06
    # Instructions (code, jump-if-true, jump-if-false, k); a jump names a label, "" goes on.
    code: list[tuple[int, str, str, int]] = [(load, "", "", 4), (equal, "", "kill", arch), (load, "", "", 0)]
    if x32:
        code.append((at_least, "kill", "", 0x40000000))
    code += [(equal, "socket", "", socket_nr), (equal, "refuse", "", _IO_URING_SETUP), (ret, "", "", allow)]
    labels = {"socket": len(code)}
    code += [(load, "", "", 16), (equal, "allow", "", _AF_UNIX), (equal, "allow", "", _AF_NETLINK)]
    labels["refuse"] = len(code)
    code.append((ret, "", "", refuse))
    labels["allow"] = len(code)
    code.append((ret, "", "", allow))
    labels["kill"] = len(code)
    code.append((ret, "", "", kill))

    def jump(label: str, pc: int) -> int:
        return labels[label] - pc - 1 if label else 0

    return b"".join(struct.pack("=HBBI", op, jump(jt, pc), jump(jf, pc), k) for pc, (op, jt, jf, k) in enumerate(code))


def _install_seccomp() -> None:
    program = seccomp_program()

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = Prog(len(program) // 8, program)
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp filter")


def _drop_capabilities() -> None:
    """No capability survives into the command (it matters when agenter runs as root): the
    bounding and ambient sets are emptied, then the permitted, effective and inheritable sets;
    with no_new_privs the exec cannot give any back."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: nothing to drop then
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0))
    data = ctypes.create_string_buffer(24)
    _check(_libc.capset(header, data), "capset")


def confine_self(spec: dict) -> None:
    """Apply everything to this process (the forked child, just before its exec)."""
    version = abi()
    if version < MIN_ABI:
        raise OSError(f"the kernel's Landlock ABI is {version}; {MIN_ABI} or newer is needed")
    ruleset = build(spec, version)
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if not spec.get("network"):
        _install_seccomp()
    _drop_capabilities()
    ruleset.restrict()


# ---------------------------------------------------------------------------- the launcher
class _Stop(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _descendants() -> list[int]:
    """This process's live descendants (children first), from /proc's children lists."""
    found: list[int] = []
    queue = [os.getpid()]
    while queue:
        pid = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            found += kids
            queue += kids
    return found


def _end_all() -> None:
    """SIGKILL every descendant and reap them; orphans of killed ones come to us (subreaper),
    so repeat until there is no child left."""
    while True:
        for pid in _descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _exit_like(status: int) -> None:
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        os._exit(code)
    _die_by(-code)


def _die_by(signum: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def _child(spec: dict, argv: list[str], parent: int) -> None:
    try:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        confine_self(spec)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)
        os.environ["TMPDIR"] = spec["tmpdir"]
        os.execvp(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - nothing may run unconfined
        os.write(2, f"agenter sandbox (landlock): cannot run the command: {exc}\n".encode(errors="replace"))
    os._exit(126)


#: The launcher's options: a path list each (repeat the option), or a flag.
_LISTS = ("--hidden", "--private", "--readable", "--writable")
_PATHS = ("--cwd", "--tmpdir")
_FLAGS = ("--network", "--read-only")


def command_line(spec: dict, argv: list[str]) -> list[str]:
    """The launcher's arguments for `spec` (the keys of `build`) and the command to run."""
    args: list[str] = []
    for option in _PATHS:
        args += [option, str(spec[option[2:]])]
    for option in _LISTS:
        for path in spec.get(option[2:], ()):
            args += [option, str(path)]
    args += [option for option in _FLAGS if spec.get(option[2:].replace("-", "_"))]
    return [*args, "--", *argv]


def parse(args: list[str]) -> tuple[dict, list[str]]:
    """The inverse of `command_line` (json and argparse would cost the launcher 10-40 ms)."""
    spec: dict = {option[2:]: [] for option in _LISTS}
    i = 0
    while i < len(args) and args[i] != "--":
        option = args[i]
        if option in _FLAGS:
            spec[option[2:].replace("-", "_")] = True
            i += 1
            continue
        if i + 1 >= len(args) or option not in _LISTS + _PATHS:
            raise ValueError(f"bad launcher argument {option!r}")
        if option in _LISTS:
            spec[option[2:]].append(args[i + 1])
        else:
            spec[option[2:]] = args[i + 1]
        i += 2
    argv = args[i + 1:]
    if not argv or "cwd" not in spec or "tmpdir" not in spec:
        raise ValueError("usage: _landlock.py --cwd DIR --tmpdir DIR [options] -- PROGRAM [ARGS...]")
    return spec, argv


def main(args: list[str]) -> None:
    try:
        spec, argv = parse(args)
    except ValueError as exc:
        os.write(2, f"agenter sandbox (landlock): {exc}\n".encode(errors="replace"))
        os._exit(2)
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    parent = os.getpid()
    try:
        pid = os.fork()
        if pid == 0:
            _child(spec, argv, parent)
        while True:
            done, status = os.waitpid(-1, 0)
            if done == pid:
                break
    except _Stop as stop:
        _end_all()
        _die_by(stop.signum)
    try:
        _end_all()
    except _Stop:
        _end_all()
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
