"""What agenter knows about the Codex program itself, shared by the codex (app-server) and
codex-cli (exec) backends: where npm keeps the native binary behind its node wrapper, starting
that binary directly, the `codex-linux-sandbox` link Codex's Linux sandbox needs, and a check
that the sandbox works on this machine (once per binary and process)."""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from agenter._errors import BackendError
from agenter.host import AgentProcess
from agenter.host.requirements import Credentials

__all__ = ["check_sandbox", "direct_program", "is_native", "native_codex_binary", "prepare_sandbox_bin"]

#: Where Codex's credentials may be (codex and codex-cli).
CREDENTIALS = Credentials(env=("CODEX_API_KEY", "OPENAI_API_KEY"), files=("$CODEX_HOME/auth.json", "~/.codex/auth.json"))


_NATIVE_TRIPLES = {
    ("linux", "x86_64"): ("codex-linux-x64", "x86_64-unknown-linux-musl"),
    ("linux", "aarch64"): ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("linux", "arm64"): ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("darwin", "x86_64"): ("codex-darwin-x64", "x86_64-apple-darwin"),
    ("darwin", "arm64"): ("codex-darwin-arm64", "aarch64-apple-darwin"),
}


def native_codex_binary(codex: str) -> Path | None:
    """The native Codex executable behind `codex` (npm installs a node wrapper script).

    The Linux sandbox re-executes this binary under the name `codex-linux-sandbox`; a link to
    the node wrapper would not work.
    """
    real = Path(os.path.realpath(codex))
    if is_native(real):
        return real
    system = platform.system().lower()
    found = _NATIVE_TRIPLES.get((system, platform.machine().lower()))
    if found is None:
        return None
    package, triple = found
    # <prefix>/node_modules/@openai/codex/bin/codex.js -> package root <prefix>/node_modules/@openai/codex
    package_root = real.parent.parent
    candidates = [
        package_root.parent / package / "vendor" / triple / "bin" / "codex",
        package_root / "node_modules" / "@openai" / package / "vendor" / triple / "bin" / "codex",
        package_root / "vendor" / triple / "bin" / "codex",
        package_root / "vendor" / triple / "codex" / "codex",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def direct_program(codex: str, env: MutableMapping[str, str]) -> str:
    """The program to start for `codex`: the native binary when `codex` is npm's node wrapper
    (bin/codex.js), else `codex` itself.

    The wrapper only finds the native binary and starts it with two variables that say where
    the package lives, staying alive in between; starting node costs about 0.1 s per start, on
    the way to the first request. Those variables are set here as the wrapper sets them for npm.
    """
    real = Path(os.path.realpath(codex))
    if real.name != "codex.js" or real.parent.name != "bin":
        return codex
    native = native_codex_binary(codex)
    if native is None:
        return codex
    for manager in ("NPM", "BUN", "PNPM", "VITE_PLUS"):
        env.pop(f"CODEX_MANAGED_BY_{manager}", None)
    env["CODEX_MANAGED_PACKAGE_ROOT"] = str(real.parent.parent)
    env["CODEX_MANAGED_BY_NPM"] = "1"
    return str(native)


def prepare_sandbox_bin(codex: str, bin_dir: Path, env: Mapping[str, str]) -> str | None:
    """Put a `codex-linux-sandbox` link to the native binary in bin_dir; return a problem or None.

    Codex's sandbox starts bubblewrap, which execs `codex-linux-sandbox` from PATH. Codex makes
    that alias itself only under a non-temporary CODEX_HOME, and a system bubblewrap (installed
    for other agents) is preferred over Codex's bundled one, so without this link every sandboxed
    command fails with "bwrap: execvp codex-linux-sandbox: No such file or directory".
    """
    if platform.system() != "Linux":
        return None
    native = native_codex_binary(codex)
    if native is None:
        if shutil.which("codex-linux-sandbox", path=env.get("PATH")):
            return None
        return (f"cannot find the native Codex binary behind {codex!r}, which Codex's Linux sandbox "
                "needs as `codex-linux-sandbox`")
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "codex-linux-sandbox"
    if not link.exists():
        link.symlink_to(native)
    return None


def is_native(path: Path) -> bool:
    """Whether `path` is an executable binary (ELF or Mach-O), not a script."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError:
        return False
    return magic in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\xfe\xed\xfa\xcf")


_sandbox_checks: dict[str, str | None] = {}


async def check_sandbox(codex: str, env: Mapping[str, str], workdir: Path | None, *, backend: str) -> None:
    """Run one command in Codex's sandbox, once per binary, so a machine where it cannot work
    (no user namespaces, no bubblewrap) fails now with a clear message, not command by command."""
    key = str(native_codex_binary(codex) or codex)
    if key not in _sandbox_checks:
        _sandbox_checks[key] = await _probe_sandbox(codex, env, workdir or Path(tempfile.gettempdir()))
    problem = _sandbox_checks[key]
    if problem:
        raise BackendError(
            "Codex's sandbox (workspace-write) cannot run on this machine; pass sandbox=False to "
            f"run Codex unconfined (danger-full-access). Sandbox check said: {problem}",
            backend=backend, kind="config")


async def _probe_sandbox(codex: str, env: Mapping[str, str], workdir: Path) -> str | None:
    probe_dir = workdir / "sandbox-check"
    probe_dir.mkdir(parents=True, exist_ok=True)
    command = [codex, "sandbox", "-c", 'sandbox_mode="workspace-write"', "--", "sh", "-c", "echo ok > probe"]
    process = await AgentProcess.start(command, cwd=probe_dir, env=env, stdin_pipe=False, stdout_pipe=False)
    try:
        code = await asyncio.wait_for(process.process.wait(), 30)
    except TimeoutError:
        return "the sandbox check did not finish within 30 s"
    finally:
        await process.terminate(grace=1.0)
    if code == 0 and (probe_dir / "probe").is_file():
        return None
    lines = [line for line in process.stderr_tail().splitlines() if "PATH aliases" not in line]
    return "\n".join(lines[-5:]) or f"exit code {code}"
