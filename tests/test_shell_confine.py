"""The bash tool's OS sandbox (agenter.sandbox.confine), with the real shell and no mocks.

Every behaviour test runs for each mechanism this machine has: Landlock (kernel ABI 3+) and
bubblewrap (when `bwrap` is installed); the other is skipped. Commands go through `run_shell`,
the bash tool's own runner, so the process handling is the one the agent uses. Seatbelt cannot
run here: its profile is checked as text. The last tests build and run the default agent
through the facade on a PATH without bwrap.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenter.backends.model_api._harness.shell import ShellResult, run_shell, shell_env
from agenter.sandbox import _landlock
from agenter.sandbox._seatbelt import profile, sandbox_exec_argv
from agenter.sandbox.confine import (
    Confinement,
    ShellSandboxAvailable,
    choose_mechanism,
    landlock_abi,
    unavailable_reason,
)
from agenter.testing import reply, text, tool_call

HAVE_LANDLOCK = landlock_abi() >= _landlock.MIN_ABI and _landlock.machine_supported()
HAVE_BWRAP = shutil.which("bwrap") is not None and sys.platform.startswith("linux")
KEY_MATERIAL = "FAKE-PRIVATE-KEY-MATERIAL-5e1d"
MECHANISMS = [
    pytest.param("landlock", marks=pytest.mark.skipif(not HAVE_LANDLOCK, reason="no Landlock ABI 3+ here")),
    pytest.param("bubblewrap", marks=pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")),
]


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workspace, a sibling folder, a TMPDIR and a fake HOME with an SSH key and a git config."""
    paths = {name: tmp_path / name for name in ("ws", "sibling", "tmp", "home")}
    for path in paths.values():
        path.mkdir()
    paths["tmp"].chmod(0o700)
    (paths["home"] / ".ssh").mkdir()
    (paths["home"] / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_MATERIAL}\n")
    (paths["home"] / ".gitconfig").write_text("[user]\n\tname = Test\n")
    monkeypatch.setenv("HOME", str(paths["home"]))
    return paths


def confinement(mechanism: str, place: dict[str, Path], **kwargs: Any) -> Confinement:
    # The fake home is under /tmp, which neither mechanism lets a command read: grant it like a
    # real home (readable), with its credentials hidden.
    kwargs.setdefault("readable", (str(place["home"]),))
    kwargs.setdefault("hidden", (str(place["home"] / ".ssh"),))
    return Confinement(cwd=place["ws"], mechanism=mechanism, program=shutil.which("bwrap") or "bwrap",  # type: ignore[arg-type]
                       tmpdir=str(place["tmp"]), **kwargs)


def run(command: str, conf: Confinement, timeout: float = 30) -> ShellResult:
    return asyncio.run(run_shell(command, cwd=conf.cwd, timeout=timeout, sandbox=conf, env=shell_env()))


def alive_with(token: str) -> list[int]:
    """Processes whose command line holds `token` (a leak check that sees through PID namespaces)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline and Path(f"/proc/{entry}/stat").read_text().split()[2] != "Z":
                found.append(int(entry))
    return found


@pytest.fixture
def listener() -> Iterator[dict[str, Any]]:
    """A TCP listener and a UDP socket on 127.0.0.1 that record what reaches them."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.settimeout(0.2)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    got: dict[str, Any] = {"tcp": [], "udp": [], "tcp_port": tcp.getsockname()[1], "udp_port": udp.getsockname()[1]}
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = tcp.accept()
                conn.settimeout(2)
                got["tcp"].append(conn.recv(100))
                conn.close()
            except OSError:
                pass
            try:
                got["udp"].append(udp.recv(100))
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.set()
        thread.join(5)
        tcp.close()
        udp.close()


# ---------------------------------------------------------------------------- behaviour, per mechanism
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_writes_land_only_in_the_workspace_and_tmpdir(mechanism: str, place: dict[str, Path]) -> None:
    result = run('echo in > inside.txt; mkdir -p d/e && mv inside.txt d/e/; echo t > "$TMPDIR/t" && cat "$TMPDIR/t";'
                 f' touch "$HOME/x"; touch /etc/agenter-x; touch {place["sibling"]}/x; touch /tmp/agenter-x-{os.getpid()};'
                 ' echo done', confinement(mechanism, place))
    assert (place["ws"] / "d" / "e" / "inside.txt").read_text() == "in\n"
    assert result.text.splitlines()[0] == "t" and result.text.endswith("done"), result.text
    # bubblewrap's /tmp is a fresh tmpfs, so its touch there works (and is thrown away).
    assert result.text.count("touch: cannot touch") == (4 if mechanism == "landlock" else 3), result.text
    assert not (place["home"] / "x").exists() and not Path("/etc/agenter-x").exists()
    assert not (place["sibling"] / "x").exists() and not Path(f"/tmp/agenter-x-{os.getpid()}").exists()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_home_credentials_cannot_be_read(mechanism: str, place: dict[str, Path]) -> None:
    result = run('cat ~/.ssh/id_rsa; cp ~/.ssh/id_rsa stolen; cat ~/.gitconfig', confinement(mechanism, place))
    assert KEY_MATERIAL not in result.text and not (place["ws"] / "stolen").exists()
    assert "name = Test" in result.text  # the rest of the home stays readable (toolchains live there)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_read_only_blocks_workspace_writes(mechanism: str, place: dict[str, Path]) -> None:
    (place["ws"] / "keep.txt").write_text("kept\n")
    result = run('cat keep.txt; echo x > new.txt; rm keep.txt; echo t > "$TMPDIR/t" && echo tmp-ok',
                 confinement(mechanism, place, read_only=True))
    assert "kept" in result.text and "tmp-ok" in result.text
    assert not (place["ws"] / "new.txt").exists() and (place["ws"] / "keep.txt").exists()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_no_network_unless_allowed(mechanism: str, place: dict[str, Path], listener: dict[str, Any]) -> None:
    command = (f'echo tcp > /dev/tcp/127.0.0.1/{listener["tcp_port"]} && echo tcp-sent; '
               f'echo udp > /dev/udp/127.0.0.1/{listener["udp_port"]} && echo udp-sent')
    cut = run(command, confinement(mechanism, place))
    time.sleep(0.5)
    assert "tcp-sent" not in cut.text and listener["tcp"] == [] and listener["udp"] == [], cut.text
    if mechanism == "landlock":
        assert "udp-sent" not in cut.text  # the seccomp filter refuses the socket itself
    allowed = run(command, confinement(mechanism, place, network=True))
    deadline = time.monotonic() + 5
    while (not listener["tcp"] or not listener["udp"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "tcp-sent" in allowed.text and listener["tcp"] == [b"tcp\n"] and listener["udp"] == [b"udp\n"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_children_die_with_the_command(mechanism: str, place: dict[str, Path]) -> None:
    """Background children, one in a new session and one that also dropped agenter's process mark
    are all gone when the command returns; and when it times out."""
    token = str(uuid.uuid4().int)[:9]  # digits: it is the fraction of a sleep time
    conf = confinement(mechanism, place)
    spawn = (f'sleep 300.{token}1 & setsid sleep 300.{token}2 & '
             f'(env -u AGENTER_PROCESS_MARK setsid sleep 300.{token}3 > /dev/null 2>&1 &); ')
    try:
        result = run(spawn + "sleep 0.3; echo started", conf)
        assert "started" in result.text
        assert alive_with(token) == []
        timed = run(spawn + "sleep 0.3; echo started; wait", conf, timeout=1.5)
        assert "timed out" in timed.text and alive_with(token) == []
    finally:
        for pid in alive_with(token):
            os.kill(pid, 9)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.skipif(os.geteuid() != 0, reason="only root has capabilities to lose")
def test_root_has_no_capabilities_inside(mechanism: str, place: dict[str, Path]) -> None:
    """Run as root, a command keeps no capability: it cannot remount the read-only filesystem
    writable (bubblewrap without --cap-drop ALL let it) and write outside the workspace."""
    probe = Path(f"/var/tmp/agenter-remount-probe-{uuid.uuid4().hex}")
    try:
        result = run(f"grep CapEff /proc/self/status; mount -o remount,bind,rw / && touch {probe} && echo WROTE",
                     confinement(mechanism, place))
        assert "CapEff:\t0000000000000000" in result.text and "WROTE" not in result.text, result.text
        assert not probe.exists()
    finally:
        probe.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- Landlock's own
landlock_only = pytest.mark.skipif(not HAVE_LANDLOCK, reason="no Landlock ABI 3+ here")


@landlock_only
def test_landlock_keeps_agenter_out_of_reach(place: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """No capability (even as root), no signal to or /proc/PID/environ of agenter's process, no
    read of the machine's /tmp, and a read of /dev/null and a write to /dev/stderr still work."""
    me = os.getpid()
    result = run(f'grep CapEff /proc/self/status; cat /proc/{me}/environ | head -c 50; kill -0 {me} && echo signalled; '
                 'cat /dev/null && echo err > /dev/stderr',
                 confinement("landlock", place))
    assert "CapEff:\t0000000000000000" in result.text
    assert "signalled" not in result.text and "PATH=" not in result.text and "err" in result.text


@pytest.mark.skipif(landlock_abi() < 6, reason="abstract Unix sockets are scoped from Landlock ABI 6")
def test_landlock_abstract_unix_sockets_outside_are_out_of_reach(place: dict[str, Path]) -> None:
    name = f"agenter-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + name)
    server.listen()
    try:
        probe = f"import socket; socket.socket(socket.AF_UNIX).connect(chr(0) + {name!r}); print('CONNECTED')"
        python = os.path.realpath(sys.executable)
        unconfined = asyncio.run(run_shell(f'{python} -I -c "{probe}"', cwd=place["ws"], timeout=30, sandbox=None,
                                           env=shell_env()))
        assert "CONNECTED" in unconfined.text  # the control: the probe works
        result = run(f'{python} -I -c "{probe}"', confinement("landlock", place, network=True))
        assert "CONNECTED" not in result.text and "PermissionError" in result.text, result.text
    finally:
        server.close()


@landlock_only
def test_landlock_workspace_that_is_the_home(place: dict[str, Path]) -> None:
    """Landlock cannot deny a sub-path of a granted tree: a workspace holding a hidden path is
    granted entry by entry, so the key stays unreadable and unwritable there too."""
    home = place["home"]
    (home / "proj").mkdir()
    conf = Confinement(cwd=home, mechanism="landlock", tmpdir=str(place["tmp"]), hidden=(str(home / ".ssh"),))
    result = run("cat .ssh/id_rsa; echo x >> .ssh/id_rsa; echo y > .ssh/new; echo ok > proj/a && cat proj/a", conf)
    assert KEY_MATERIAL not in result.text and "ok" in result.text
    assert not (home / ".ssh" / "new").exists() and "x" not in (home / ".ssh" / "id_rsa").read_text()


@landlock_only
def test_landlock_launcher_refuses_to_run_unconfined(place: dict[str, Path]) -> None:
    """A workspace that is gone makes the launcher fail, not run the command unconfined."""
    conf = confinement("landlock", place)
    argv = conf.argv(f"touch {place['sibling']}/x")
    argv[argv.index("--cwd") + 1] = str(place["ws"] / "missing")
    done = subprocess.run(argv, cwd=place["ws"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 126 and "cannot run the command" in done.stderr
    assert not (place["sibling"] / "x").exists()


def test_landlock_launcher_arguments_round_trip() -> None:
    spec = {"cwd": "/w", "tmpdir": "/t", "hidden": ["/h/.ssh", "/h/.aws"], "private": ["/tmp"],
            "readable": ["/r"], "writable": [], "network": False, "read_only": True}
    args = _landlock.command_line(spec, ["bash", "-c", "echo -- --cwd"])
    parsed, argv = _landlock.parse(args)
    assert argv == ["bash", "-c", "echo -- --cwd"]
    assert parsed == {**{k: v for k, v in spec.items() if k != "network"}}
    with pytest.raises(ValueError, match="usage"):
        _landlock.parse(["--cwd", "/w", "--", "true"])


def test_landlock_grants_go_around_private_paths(tmp_path: Path) -> None:
    (tmp_path / "a" / "secret").mkdir(parents=True)
    (tmp_path / "a" / "open").mkdir()
    (tmp_path / "a" / "file").write_text("x")
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "link").symlink_to(tmp_path / "a" / "secret")
    found = sorted(_landlock.grants([str(tmp_path / "a" / "secret")], str(tmp_path)))
    assert found == sorted(str(tmp_path / p) for p in ("a/file", "a/open", "b"))
    assert _landlock.grants([], str(tmp_path)) == [str(tmp_path)]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_program_shape(machine: str) -> None:
    """Each instruction is 8 bytes, the jumps stay inside the program and it ends in a return."""
    program = _landlock.seccomp_program(machine)
    assert len(program) % 8 == 0
    count = len(program) // 8
    for pc in range(count):
        code, jt, jf, _ = __import__("struct").unpack_from("=HBBI", program, pc * 8)
        if code == 0x15 or code == 0x35:
            assert pc + 1 + max(jt, jf) < count
    assert __import__("struct").unpack_from("=HBBI", program, (count - 1) * 8)[0] == 0x06


# ---------------------------------------------------------------------------- choosing, and Seatbelt
def test_choice_and_what_to_do() -> None:
    if HAVE_LANDLOCK:
        assert choose_mechanism() == "landlock"
    if sys.platform != "darwin":
        assert choose_mechanism("seatbelt") is None
    assert ShellSandboxAvailable("seatbelt").problem() == unavailable_reason("seatbelt")
    assert "macOS" in unavailable_reason("seatbelt") and "sandbox=False" in unavailable_reason("seatbelt")
    assert "no shell sandbox named 'firejail'" in unavailable_reason("firejail")
    if sys.platform.startswith("linux"):
        reason = unavailable_reason()
        assert "apt-get install bubblewrap" in reason and "anthropic_shell=False" in reason and "\n" not in reason


def seatbelt_conf(**kwargs: Any) -> Confinement:
    kwargs.setdefault("hidden", ("/Users/me/.ssh", "/Users/me/.netrc"))
    return Confinement(cwd=Path('/Users/me/my "odd" project'), mechanism="seatbelt", tmpdir="/private/var/t/agenter/tmp",
                       writable=("/Users/me/extra",), readable=("/private/var/t/agenter/tool-results",), **kwargs)


def test_seatbelt_profile_text() -> None:
    text, params = profile(seatbelt_conf())
    lines = text.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    names = dict(params)
    assert names["WORKSPACE"] == '/Users/me/my "odd" project' and '"odd"' not in text  # paths only as parameters
    assert names["HIDDEN_0"] == "/Users/me/.ssh" and names["WRITABLE_0"] == "/Users/me/extra"
    # Order decides under either reading of precedence: read all, deny temp, re-allow, hide last.
    read_all = lines.index("(allow file-read*)")
    hide = next(i for i, line in enumerate(lines) if line.startswith("(deny file-read* file-write*"))
    assert hide == len(lines) - 1 and read_all < hide
    assert '(subpath (param "HIDDEN_0")) (subpath (param "HIDDEN_1"))' in lines[hide]
    assert '(allow file-write* (subpath (param "WORKSPACE")) (subpath (param "WRITABLE_0")))' in lines
    assert "(allow network*)" not in lines and "(allow network-outbound (remote unix-socket))" in lines
    assert "com.apple.dnssd.service" not in text and "(allow mach-lookup (global-name" in text


def test_seatbelt_profile_read_only_and_network() -> None:
    text, params = profile(seatbelt_conf(read_only=True, network=True))
    assert '(allow file-write* (subpath (param "WORKSPACE"))' not in text and "WRITABLE_0" not in dict(params)
    assert '(allow file-write* (subpath (param "TMPDIR")))' in text
    assert "(allow network*)" in text and "com.apple.dnssd.service" in text


def test_seatbelt_command_line() -> None:
    argv = sandbox_exec_argv(seatbelt_conf(), "ls -la")
    assert argv[:3] == ["/usr/bin/sandbox-exec", "-p", profile(seatbelt_conf())[0]]
    assert argv[-5:] == ["/usr/bin/env", "TMPDIR=/private/var/t/agenter/tmp", "bash", "-c", "ls -la"]
    defines = [argv[i + 1] for i, a in enumerate(argv) if a == "-D"]
    assert 'WORKSPACE=/Users/me/my "odd" project' in defines and "HIDDEN_1=/Users/me/.netrc" in defines


# ---------------------------------------------------------------------------- the default agent, no bwrap
def path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with only what the run needs (bash and the core tools), and no bwrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("bash", "env", "touch", "cat", "echo", "ls", "setsid", "sleep", "python3"):
        found = os.path.realpath(sys.executable) if name == "python3" else shutil.which(name)
        if found and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(found)
    return str(bin_dir)


AGENT_SCRIPT = textwrap.dedent('''
    import json, shutil, sys
    from agenter import AutonomousCodingAgent
    assert shutil.which("bwrap") is None
    agent = AutonomousCodingAgent(**json.loads(sys.argv[1]))
    if len(sys.argv) > 2:
        result = agent.execute_sync("Do the task.", cwd=sys.argv[2])
        print(json.dumps({"status": str(result.status)}))
    else:
        print("built")
''')


def run_agent_without_bwrap(tmp_path: Path, options: dict[str, Any], *cwd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path_without_bwrap(tmp_path), "PYTHONPATH": str(Path(__file__).parents[1])}
    return subprocess.run([sys.executable, "-c", AGENT_SCRIPT, json.dumps(options), *cwd], env=env,
                          capture_output=True, text=True, timeout=120)


@landlock_only
def test_default_agent_builds_without_bwrap(tmp_path: Path) -> None:
    built = run_agent_without_bwrap(tmp_path, {})
    assert built.returncode == 0 and built.stdout.strip() == "built", built.stderr
    # Forcing bubblewrap there is a RequirementError that says what to do.
    forced = run_agent_without_bwrap(tmp_path, {"anthropic_shell_sandbox": "bubblewrap"})
    assert forced.returncode != 0 and "RequirementError" in forced.stderr
    assert "bubblewrap (bwrap) is not on PATH" in forced.stderr and "anthropic_shell=False" in forced.stderr


@landlock_only
@pytest.mark.agent
def test_agent_runs_bash_confined_without_bwrap(scripted_model_server: Any, tmp_path: Path) -> None:
    """The default agent (sandbox=True, default backend and options) on a PATH without bwrap: the
    model's bash command writes in the workspace, and its write next to it fails."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    server = scripted_model_server([
        reply(tool_call("bash", {"command": f"echo in > inside.txt; python3 -c \"open('{outside}/escaped', 'w')\"; echo exit=$?"})),
        reply(text("done")),
    ])
    options = {"base_url": server.base_url, "api_key": "sk-test-0123456789"}
    done = run_agent_without_bwrap(tmp_path, options, str(repo))
    assert done.returncode == 0, done.stderr
    assert (repo / "inside.txt").read_text() == "in\n" and not (outside / "escaped").exists()
    content = server.model_requests[1].body["messages"][-1]["content"]
    result = next(b for b in content if b.get("type") == "tool_result")
    assert "Permission denied" in json.dumps(result) and "exit=1" in json.dumps(result)
