"""Which backends this machine can run, and the automatic choice among them.

`detect_backends()` looks at every registered backend, installed or not: whether what it needs is
there (its program, its Python packages), the program's path and version, whether credentials
are found, and its capabilities. Credentials are looked for by name only: an environment
variable that is set, a login file that exists. Their values are never read or printed.

`auto_backend()` is what `backend="auto"` means: the first backend of AUTO_ORDER that is installed
and finds credentials.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agenter._errors import ConfigurationError, RequirementError
from agenter.backends import backend_names, load_backend
from agenter.backends.base import BackendSettings
from agenter.host.requirements import Program, PythonPackage, distribution_version, find_program

__all__ = ["AUTO_ORDER", "CREDENTIALS", "BackendStatus", "Credentials", "auto_backend", "detect_backends",
           "detect_backends_async"]

#: backend="auto" takes the first of these that is installed and finds credentials: the agent
#: programs with agenter's deepest integration first, then the plain CLIs, then the model APIs.
AUTO_ORDER: tuple[str, ...] = (
    "claude-code", "codex", "claude-cli", "codex-cli", "gemini-cli", "opencode-cli", "aider-cli",
    "anthropic-sdk", "openai",
)

#: Seconds a program gets to print its version.
VERSION_TIMEOUT = 10.0

_PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY",
                  "DEEPSEEK_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "XAI_API_KEY", "AZURE_API_KEY",
                  "AWS_ACCESS_KEY_ID", "AWS_PROFILE")


@dataclass(frozen=True)
class Credentials:
    """Where a backend's credentials may be: any variable set, or any file existing (paths
    start with ~ or $VARIABLE; a variable that is unset skips its path)."""

    env: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def source(self, environ: dict[str, str] | None = None) -> str | None:
        """The first variable or file found (its name, never its value), or None."""
        environ = dict(os.environ if environ is None else environ)
        for name in self.env:
            if environ.get(name):
                return name
        for pattern in self.files:
            path = _expand(pattern, environ)
            if path is not None and path.is_file():
                return pattern
        return None


_CLAUDE = Credentials(env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                           "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
                      files=("$CLAUDE_CONFIG_DIR/.credentials.json", "~/.claude/.credentials.json"))
_CODEX = Credentials(env=("CODEX_API_KEY", "OPENAI_API_KEY"), files=("$CODEX_HOME/auth.json", "~/.codex/auth.json"))

#: Where each backend's credentials may be. A backend missing here has no way to tell (acp,
#: openhands: it depends on the agent or the model configured).
CREDENTIALS: dict[str, Credentials] = {
    "anthropic-sdk": Credentials(env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_PROFILE")),
    "claude-code": _CLAUDE,
    "claude-cli": _CLAUDE,
    "codex": _CODEX,
    "codex-cli": _CODEX,
    "gemini-cli": Credentials(env=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI",
                                   "GOOGLE_APPLICATION_CREDENTIALS"),
                              files=("$GEMINI_CLI_HOME/.gemini/oauth_creds.json", "~/.gemini/oauth_creds.json")),
    "opencode-cli": Credentials(env=_PROVIDER_KEYS,
                                files=("$XDG_DATA_HOME/opencode/auth.json", "~/.local/share/opencode/auth.json")),
    "aider-cli": Credentials(env=_PROVIDER_KEYS),
    "openai": Credentials(env=("OPENAI_API_KEY",)),
    "litellm": Credentials(env=_PROVIDER_KEYS),
}


@dataclass
class BackendStatus:
    """What this machine offers for one backend."""

    name: str
    installed: bool
    #: What is missing to run it (with how to install it), when not installed.
    problem: str | None = None
    #: The agent program, or the Python package the backend runs on.
    path: str | None = None
    version: str | None = None
    #: True/False: credentials found or not; None: this backend cannot tell.
    credentials: bool | None = None
    #: Where they were found: a variable's or a file's name, never a value.
    credentials_source: str | None = None
    #: Whether sandbox=True can be honoured here (the backend has a sandbox, and what it needs is there).
    sandbox: bool = False
    capabilities: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        """Installed, and credentials found (backend="auto" takes only these)."""
        return self.installed and self.credentials is True

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable": self.usable}


def detect_backends(names: Sequence[str] | None = None, *, versions: bool = True) -> list[BackendStatus]:
    """Every registered backend (or `names`), installed or not; see the module docstring.
    Programs are asked for their version concurrently (off the event loop when one is running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(detect_backends_async(names, versions=versions))
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, detect_backends_async(names, versions=versions)).result()


async def detect_backends_async(names: Sequence[str] | None = None, *, versions: bool = True) -> list[BackendStatus]:
    statuses = [_status(name) for name in (names or backend_names())]
    if versions:
        await asyncio.gather(*(_version(status) for status in statuses if status.installed))
    return statuses


def auto_backend(environ: dict[str, str] | None = None) -> str:
    """The backend backend="auto" picks: the first of AUTO_ORDER installed and with credentials.
    Raises RequirementError naming what each one lacks when none is."""
    lacking = []
    for status in detect_backends([n for n in AUTO_ORDER if n in backend_names()], versions=False):
        if status.installed and _credentials(status.name, environ)[0]:
            return status.name
        lacking.append(f"{status.name}: {status.problem or 'no credentials found'}")
    raise RequirementError("backend='auto' found no backend that is installed and has credentials:\n"
                           + "\n".join(f"  - {line}" for line in lacking), backend="auto", missing=lacking)


# ---------------------------------------------------------------------- one backend
def _status(name: str) -> BackendStatus:
    try:
        cls = load_backend(name)
    except (ImportError, ConfigurationError) as exc:
        return BackendStatus(name=name, installed=False, problem=f"cannot load it: {exc}")
    status = BackendStatus(name=name, installed=False, capabilities=cls.capabilities.names())
    try:
        options = cls.options_model()
    except Exception:  # noqa: BLE001 - a backend whose options have required fields (acp: the agent)
        status.problem = "needs options to tell (see its documentation)"
        return status
    unconfined = BackendSettings(model=None, tools=[], sandbox=False, options=options)
    requirements = list(cls.requirements(unconfined))
    problems = [p for r in requirements if (p := r.problem())]
    status.installed = not problems
    status.problem = "; ".join(problems) or None
    status.path, status.version = _where(cls, requirements)
    if status.installed and cls.capabilities.sandbox:
        confined = BackendSettings(model=None, tools=[], sandbox=True, options=options)
        status.sandbox = not any(r.problem() for r in cls.requirements(confined))
    status.credentials, status.credentials_source = _credentials(name)
    return status


def _where(cls: Any, requirements: list[Any]) -> tuple[str | None, str | None]:
    """The program's path (its version is asked later), or the main package's version."""
    locate = getattr(cls, "locate", None)
    if callable(locate):  # agent CLIs know where they look (a bundled claude, node_modules/.bin)
        return locate(cls.options_model()), None
    for requirement in requirements:
        if isinstance(requirement, Program):
            return find_program(requirement.name, requirement.path, requirement.env_path), None
    for requirement in requirements:
        if isinstance(requirement, PythonPackage) and requirement.distribution:
            return None, distribution_version(requirement.distribution)
    return None, None


def _credentials(name: str, environ: dict[str, str] | None = None) -> tuple[bool | None, str | None]:
    where = CREDENTIALS.get(name)
    if where is None:
        return None, None
    source = where.source(environ)
    return source is not None, source


async def _version(status: BackendStatus) -> None:
    """`<program> --version`, first line, when the backend runs a program."""
    if status.path is None or status.version is not None:
        return
    from agenter.host import run_process

    try:
        outcome = await run_process([status.path, "--version"], cwd=tempfile.gettempdir(), timeout=VERSION_TIMEOUT,
                                    merge_stderr=True, stdout_limit=4096)
    except OSError:
        return
    lines = [line.strip() for line in outcome.stdout.splitlines() if line.strip()]
    if outcome.returncode == 0 and lines:
        status.version = lines[0][:80]


def _expand(pattern: str, environ: dict[str, str]) -> Path | None:
    if pattern.startswith("$"):
        variable, _, rest = pattern[1:].partition("/")
        base = environ.get(variable)
        return Path(base, rest) if base else None
    if pattern.startswith("~/"):
        home = environ.get("HOME")
        return Path(home, pattern[2:]) if home else Path(pattern).expanduser()
    return Path(pattern)
