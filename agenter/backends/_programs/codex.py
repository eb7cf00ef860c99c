"""What agenter knows about the Codex program itself, shared by the codex (app-server) and
codex-cli (exec) backends: how it is installed, where its credentials are, where npm keeps the
native binary behind its node wrapper, starting that binary directly, the `codex-linux-sandbox`
link Codex's Linux sandbox needs, and a check that the sandbox works on this machine (once per
binary and process); the settings both write into its config (agenter's model provider entry,
the workspace-write sandbox) and TOML values for them; and what both read back from it (token
usage, line counts of a file change)."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from agenter._errors import BackendError
from agenter._types import Usage
from agenter.backends._edits import diff_counts, line_count
from agenter.host import AgentProcess
from agenter.host.requirements import Credentials

__all__ = ["API_KEY_ENV_VAR", "CREDENTIALS", "INSTALL", "KEY_VARIABLES", "PROVIDER_NAME", "change_lines",
           "check_sandbox", "direct_program", "env_api_key", "is_native", "native_codex_binary", "provider_entry",
           "sandbox_bin", "sandbox_config", "token_usage", "toml_key", "toml_value"]

#: How Codex is installed (named when it is missing).
INSTALL = "npm install -g @openai/codex"
#: The variables Codex takes an API key from (its own names); the first one set is used.
KEY_VARIABLES = ("CODEX_API_KEY", "OPENAI_API_KEY")
#: Where Codex's credentials may be (codex and codex-cli).
CREDENTIALS = Credentials(env=KEY_VARIABLES, files=("$CODEX_HOME/auth.json", "~/.codex/auth.json"))
#: Name of the model provider entry agenter adds to Codex's config, and the variable that carries
#: its key (Codex reads the key from the variable the entry names, never from the config).
PROVIDER_NAME = "agenter"
API_KEY_ENV_VAR = "AGENTER_CODEX_API_KEY"


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


def sandbox_bin(codex: str, bin_dir: Path, env: Mapping[str, str], *, backend: str) -> Path | None:
    """Put a `codex-linux-sandbox` link to the native binary in bin_dir; return bin_dir, to go
    first on Codex's PATH (None: no link is needed, off Linux or when PATH has one). BackendError
    (kind config) naming the fix when there is no native binary to link to.

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
        raise BackendError(f"Codex's sandbox cannot run: cannot find the native Codex binary behind {codex!r}, "
                           "which Codex's Linux sandbox needs as `codex-linux-sandbox`. Pass program_path "
                           "pointing at a standard npm install of @openai/codex, or sandbox=False.",
                           backend=backend, kind="config")
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "codex-linux-sandbox"
    if not link.exists():
        link.symlink_to(native)
    return bin_dir


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


# ---------------------------------------------------------------------------------- its config
def env_api_key(env: Mapping[str, str]) -> str | None:
    """The API key Codex itself would take from `env` (KEY_VARIABLES), or None."""
    return next((env[name] for name in KEY_VARIABLES if env.get(name)), None)


def provider_entry(base_url: str, wire_api: str, *, max_retries: int | None, env_key: bool = True) -> dict[str, Any]:
    """agenter's model provider entry (`model_providers.<PROVIDER_NAME>`): the endpoint, the API it
    speaks, the variable carrying its key (`env_key`: False for a server that needs none), and the
    retries of a request and of a broken stream."""
    entry: dict[str, Any] = {"name": PROVIDER_NAME, "base_url": base_url, "wire_api": wire_api}
    if env_key:
        entry["env_key"] = API_KEY_ENV_VAR
    if max_retries is not None:
        entry["request_max_retries"] = entry["stream_max_retries"] = max_retries
    return entry


def sandbox_config(sandbox: bool, network_access: bool) -> dict[str, Any]:
    """Codex's sandbox settings: workspace-write (sandbox=True) or danger-full-access. Writable
    are the workspace and the run's own TMPDIR, not all of /tmp; `network_access` for commands."""
    return {"sandbox_mode": "workspace-write" if sandbox else "danger-full-access",
            "sandbox_workspace_write": {"exclude_slash_tmp": True, "exclude_tmpdir_env_var": False,
                                        "network_access": network_access}}


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    """One TOML key: bare when it may be, else quoted."""
    return key if _BARE_KEY.match(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """One TOML value, for config.toml or a `-c key=value` override (strings as JSON strings,
    which TOML basic strings accept). TypeError for what TOML cannot hold (None, objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


# ---------------------------------------------------------------------------------- what it says
def token_usage(raw: Any) -> Usage:
    """Codex's token usage (snake_case in `exec --json` and its rollout, camelCase from the
    app-server) as agenter's Usage. Codex counts cached input and cache writes inside its input
    tokens; agenter counts them apart. Anything but an object counts nothing."""
    figures = raw if isinstance(raw, Mapping) else {}

    def number(snake: str, camel: str) -> int:
        value = figures.get(snake, figures.get(camel))
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    cached = number("cached_input_tokens", "cachedInputTokens")
    cache_write = number("cache_write_input_tokens", "cacheWriteInputTokens")
    return Usage(input_tokens=max(number("input_tokens", "inputTokens") - cached - cache_write, 0),
                 output_tokens=number("output_tokens", "outputTokens"),
                 cache_read_tokens=cached, cache_write_tokens=cache_write)


def change_lines(kind: Any, text: Any) -> tuple[int, int]:
    """Lines added and removed by one file of a Codex file change, as Codex reports each kind:
    an added file by its text, a deleted one by what it held, an update (any other kind) by its
    unified diff. Text that is not a string counts none."""
    if kind == "add":
        return line_count(text), 0
    if kind == "delete":
        return 0, line_count(text)
    return diff_counts(text) if isinstance(text, str) else (0, 0)
