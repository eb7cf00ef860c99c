"""Everything Codex needs before it starts: the program, the API key, its config.toml, and a
Linux sandbox that works."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agenter._errors import BackendError
from agenter.backends._programs.codex import (
    API_KEY_ENV_VAR,
    INSTALL,
    PROVIDER_NAME,
    env_api_key,
    is_native,
    native_codex_binary,
    provider_entry,
    sandbox_config,
    toml_key,
    toml_value,
)
from agenter.backends.agents.codex._options import CodexOptions
from agenter.backends.agents.codex._tools_server import SERVER_NAME, TOKEN_ENV_VAR
from agenter.backends.base import BackendSettings
from agenter.host import AgentProcess, Program, PythonPackage, Requirement

log = logging.getLogger("agenter.backends.agents.codex")

INSTALL_HINT = (f"Install it with `{INSTALL}` (or add @openai/codex to your project's package.json), "
                "or pass program_path=...")
TOOLS_EXTRA = "pip install 'agenter-sdk[codex]'"

#: Where agenter's provider entry points unless base_url says otherwise.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
MISSING_KEY = ("the codex backend has no API key for the model provider: set OPENAI_API_KEY (or "
               "CODEX_API_KEY) or pass api_key=... (any value for a server that needs none); to use "
               "your own Codex login instead, pass codex_home=")
#: Codex features that reach services agenter never uses (plugin sync, apps, browser, image
#: generation) or that would make a dead model server hang instead of fail.
DISABLED_FEATURES = (
    "plugins", "apps", "remote_plugin", "browser_use", "browser_use_external", "computer_use",
    "image_generation", "goals", "unbounded_connection_retries",
)
#: Environment variables hidden from the commands Codex runs (Codex matches them case-insensitively).
SECRET_ENV_PATTERNS = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*", "AGENTER_*")


# ---------------------------------------------------------------------------------- requirements
def requirements(settings: BackendSettings[CodexOptions]) -> list[Requirement]:
    """The codex program (program_path, node_modules/.bin here or above, PATH); with custom
    tools, the MCP SDK 2.x and uvicorn that serve them."""
    needs: list[Requirement] = [Program(name="codex", install=INSTALL, path=settings.options.program_path,
                                        env_path=search_path(Path.cwd(), os.environ))]
    if settings.tools:
        needs += [PythonPackage(module="mcp", distribution="mcp", min_major=2, install=TOOLS_EXTRA),
                  PythonPackage(module="uvicorn", distribution="uvicorn", install=TOOLS_EXTRA)]
    return needs


def search_path(cwd: Path, env: Mapping[str, str]) -> str:
    """Where `codex` is looked for: node_modules/.bin of cwd and its parents (a project's pinned
    version first), of the process's directory, then PATH."""
    dirs = [str(directory / "node_modules" / ".bin")
            for base in _unique([cwd, Path.cwd()]) for directory in [base, *base.parents]]
    return os.pathsep.join([*dirs, env.get("PATH", "")])


def _unique(paths: list[Path]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        resolved = path.resolve()
        if resolved not in seen:
            seen.append(resolved)
    return seen


def find_codex(program_path: str | None, cwd: Path, env: Mapping[str, str], *, backend: str) -> str:
    """The codex program: program_path, then node_modules/.bin of cwd (and of the process cwd),
    then PATH. Raises BackendError with install instructions when there is none."""
    if program_path:
        candidate = Path(program_path).expanduser()
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.resolve())
        found = shutil.which(program_path, path=env.get("PATH"))
        if found:
            return found
        raise BackendError(f"program_path {program_path!r} is not an executable program. {INSTALL_HINT}",
                           backend=backend, kind="missing_program")
    found = shutil.which("codex", path=search_path(cwd, env))
    if found:
        return found
    raise BackendError(f"The Codex CLI (`codex`) was not found. {INSTALL_HINT}", backend=backend,
                       kind="missing_program")


# ---------------------------------------------------------------------------------- the API key
def uses_own_provider(options: CodexOptions) -> bool:
    """Whether Codex talks to the model through agenter's provider entry (which needs a key),
    rather than a provider or login of the user's own codex_home."""
    if options.codex_model_provider:
        return False
    return bool(options.base_url or options.codex_home is None or options.api_key)


def api_key(options: CodexOptions, env: Mapping[str, str]) -> str | None:
    """api_key, else CODEX_API_KEY or OPENAI_API_KEY from env."""
    if options.api_key is not None:
        return options.api_key.get_secret_value()
    return env_api_key(env)


def model_server(options: CodexOptions) -> str:
    """The model server, as error messages name it."""
    if uses_own_provider(options):
        return f"the model server {options.base_url or DEFAULT_BASE_URL}"
    return f"the model provider {options.codex_model_provider or 'configured'!r} of codex_home"


def configured_model(options: CodexOptions) -> str | None:
    """The model chosen by config (overrides, then codex_home's config.toml), known before Codex
    starts; None leaves it to Codex (learnt at thread/start)."""
    model = options.codex_config_overrides.get("model")
    if isinstance(model, str) and model:
        return model
    if options.codex_home is None:
        return None
    import tomllib

    try:
        with open(Path(options.codex_home).expanduser() / "config.toml", "rb") as handle:
            model = tomllib.load(handle).get("model")
    except (OSError, ValueError):
        return None
    return model if isinstance(model, str) and model else None


# ---------------------------------------------------------------------------------- a seeded CODEX_HOME
#: Bump when what a template holds changes, so old templates are not used.
_TEMPLATE_FORMAT = 2
#: Written last into a finished template: a directory without it is not one.
_TEMPLATE_MARKER = ".agenter-template"


def template_dir(codex: str) -> Path:
    """Where the CODEX_HOME template for this Codex binary lives ($XDG_CACHE_HOME/agenter, by
    default ~/.cache/agenter)."""
    native = native_codex_binary(codex) or Path(os.path.realpath(codex))
    stat = native.stat()
    key = f"{_TEMPLATE_FORMAT}\0{native}\0{stat.st_size}\0{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "agenter" / f"codex-home-{digest}"


async def seed_home(codex: str, home: Path, env: Mapping[str, str]) -> bool:
    """Fill a new, empty private CODEX_HOME from a template of this Codex binary; whether it did.

    Codex sets up a CODEX_HOME it has not seen before (its state databases and their
    migrations) before it answers `initialize`: about 0.3 s of every cold start, since every
    session has a home of its own. The template is a home Codex set up once
    (no config.toml, no thread, no key), built at first use and copied per session. Any
    problem leaves the home empty: Codex then sets it up itself, as without a template.
    """
    if not is_native(Path(os.path.realpath(codex))):
        return False  # a wrapper of the user's own: it may not be Codex as we know it
    try:
        template = template_dir(codex)
        if not _is_template(template):
            await asyncio.wait_for(_build_template(codex, template, env), 20)
        if not _is_template(template):
            return False
        await asyncio.to_thread(_copy_template, template, home)
    except Exception as exc:  # noqa: BLE001 - a slower start, never a failed one
        log.debug("codex: CODEX_HOME not seeded from a template: %s", exc)
        for entry in list(home.iterdir()) if home.is_dir() else []:
            with contextlib.suppress(OSError):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        return False
    return True


def _is_template(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    # Only a directory of ours (not a link, not another user's) that was finished.
    return (not path.is_symlink() and path.is_dir() and info.st_uid == os.getuid()
            and (path / _TEMPLATE_MARKER).is_file())


def _copy_template(template: Path, home: Path) -> None:
    def skip(directory: str, names: list[str]) -> set[str]:
        # The marker is ours; tmp/ holds the building process's own helper links.
        return {_TEMPLATE_MARKER, "tmp"} & set(names) if Path(directory) == template else set()

    shutil.copytree(template, home, symlinks=True, dirs_exist_ok=True, ignore=skip)


async def _build_template(codex: str, template: Path, env: Mapping[str, str]) -> None:
    """Let Codex set up a home (initialize, then exit), and keep it as the template. Built in a
    directory of its own and renamed into place, so a concurrent build or a crash leaves no
    half-made template."""
    template.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    building = Path(tempfile.mkdtemp(prefix=f".{template.name}-", dir=template.parent))
    try:
        config = {"check_for_update_on_startup": False, "analytics": {"enabled": False},
                  "features": {name: False for name in DISABLED_FEATURES},
                  "skills": {"bundled": {"enabled": False}}}
        (building / "config.toml").write_text(render_toml(config))
        build_env = {k: v for k, v in env.items() if k not in (API_KEY_ENV_VAR, TOKEN_ENV_VAR)}
        build_env["CODEX_HOME"] = str(building)
        process = await AgentProcess.start([codex, "app-server"], cwd=building, env=build_env, stdin_pipe=True)
        try:
            stdin, stdout = process.process.stdin, process.process.stdout
            if stdin is None or stdout is None:
                return
            request = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"clientInfo": {"name": "agenter", "title": "agenter", "version": "0"}}}
            stdin.write(json.dumps(request).encode() + b"\n")
            await stdin.drain()
            answered = False
            while not answered:
                line = await stdout.readline()
                if not line:
                    return
                answered = json.loads(line).get("id") == 1  # not JSON: no template
            stdin.close()  # Codex exits at the end of its input, its databases closed
            if not await process.wait_exit(10) or process.returncode != 0:
                return
        finally:
            await process.terminate(grace=2.0)
        (building / "config.toml").unlink()
        (building / _TEMPLATE_MARKER).write_text(f"{_TEMPLATE_FORMAT}\n")
        with contextlib.suppress(OSError):  # another process finished one first: keep theirs
            os.rename(building, template)
    finally:
        shutil.rmtree(building, ignore_errors=True)


# ---------------------------------------------------------------------------------- config.toml
def render_toml(config: Mapping[str, Any]) -> str:
    """A config dict as a TOML document: scalars first, then one [table] per nested mapping."""
    lines: list[str] = []
    _render_table(config, [], lines)
    return "\n".join(lines).strip() + "\n"


def _render_table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(toml_key(p) for p in path) + "]")
    for key, value in scalars.items():
        lines.append(f"{toml_key(key)} = {toml_value(value)}")
    for key, value in tables.items():
        _render_table(value, [*path, key], lines)


def config_overrides(config: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The same settings as `-c dotted.key=value` arguments (used with the user's own CODEX_HOME)."""
    args: list[str] = []
    for key, value in config.items():
        dotted = f"{prefix}.{toml_key(key)}" if prefix else toml_key(key)
        if isinstance(value, Mapping) and value:
            args.extend(config_overrides(value, dotted))
        else:
            args.extend(["-c", f"{dotted}={toml_value(value)}"])
    return args


def merge_dotted(config: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Apply {"a.b.c": v} (or nested dicts) onto config in place."""
    for key, value in overrides.items():
        parts = key.split(".")
        target = config
        for part in parts[:-1]:
            existing = target.get(part)
            if not isinstance(existing, dict):
                existing = target[part] = {}
            target = existing
        if isinstance(value, Mapping) and isinstance(target.get(parts[-1]), dict):
            merge_dotted(target[parts[-1]], value)
        else:
            target[parts[-1]] = value


def codex_config(options: CodexOptions, *, model: str | None, sandbox: bool, tools_url: str | None) -> dict[str, Any]:
    """Codex's configuration for one session (written to a private config.toml, or passed as -c
    overrides with the user's own codex_home)."""
    # approval_policy goes with thread/start: Codex's config file no longer accepts "untrusted".
    config: dict[str, Any] = {
        **sandbox_config(sandbox, options.codex_network_access),
        "check_for_update_on_startup": False,
        "web_search": "disabled",
        # Commands the model runs must not see API keys or the tools server's token.
        "shell_environment_policy": {
            "inherit": "all",
            "ignore_default_excludes": False,
            "exclude": list(SECRET_ENV_PATTERNS),
        },
        "features": {name: False for name in DISABLED_FEATURES},
        "analytics": {"enabled": False},
        "agents": {"enabled": False},  # no sub-agents: one thread per session
        # Codex's own skills (image generation, OpenAI docs, skill installer, ...) serve its app,
        # not a headless task; unpacking them into every new CODEX_HOME (and deleting them after)
        # is a good part of a cold start.
        "skills": {"bundled": {"enabled": False}},
    }
    if model:
        config["model"] = model
    if options.codex_reasoning_effort:
        config["model_reasoning_effort"] = options.codex_reasoning_effort
    if options.codex_model_provider:
        config["model_provider"] = options.codex_model_provider
    elif uses_own_provider(options):
        provider = provider_entry(options.base_url or DEFAULT_BASE_URL, options.codex_wire_api,
                                  max_retries=options.max_retries)
        if options.codex_stream_idle_timeout is not None:
            provider["stream_idle_timeout_ms"] = int(options.codex_stream_idle_timeout * 1000)
        config["model_provider"] = PROVIDER_NAME
        config["model_providers"] = {PROVIDER_NAME: provider}
    servers: dict[str, Any] = {server.name: server.to_config() for server in options.mcp_servers}
    if tools_url is not None:
        # The user handed these tools to agenter: Codex may call them without asking.
        servers[SERVER_NAME] = {"url": tools_url, "bearer_token_env_var": TOKEN_ENV_VAR,
                                "default_tools_approval_mode": "approve"}
    if servers:
        config["mcp_servers"] = servers
    merge_dotted(config, copy.deepcopy(options.codex_config_overrides))
    return config
