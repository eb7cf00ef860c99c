"""Which backends this machine can run, and the automatic choice among them.

`detect_backends()` looks at every registered backend, installed or not: whether what it needs is
there (its program, its Python packages), the program's path and version, whether credentials
are found, and its capabilities. Credentials are looked for by name only: an environment
variable that is set, a login file that exists. Their values are never read or printed.

`auto_backend()` is what `backend="auto"` means: the first backend, in the order of their
`auto_rank`, that is installed, finds credentials and passes the checks the facade applies when
an agent is built with its defaults (a backend that needs `model=` is not chosen without one).

What is known of each backend is declared on its class (`credentials`, `auto_rank`, `locate`,
`requirements`); this module only reads it.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agenter._errors import ConfigurationError, RequirementError
from agenter.backends import backend_names, load_backend
from agenter.backends.base import BackendSettings
from agenter.host.requirements import Credentials, PythonPackage, distribution_version

__all__ = ["BackendStatus", "Credentials", "auto_backend", "auto_order", "credentials_of", "detect_backends",
           "detect_backends_async"]

#: Seconds a program gets to print its version.
VERSION_TIMEOUT = 10.0


def auto_order() -> tuple[str, ...]:
    """The backends backend="auto" tries, in order: each registered backend that declares an
    `auto_rank` (the agent programs with agenter's deepest integration first, then the plain
    CLIs, then the model APIs)."""
    ranked = []
    for name in backend_names():
        try:
            rank = load_backend(name).auto_rank
        except (ImportError, ConfigurationError):
            continue
        if rank is not None:
            ranked.append((rank, name))
    return tuple(name for _, name in sorted(ranked))


def credentials_of(name: str) -> Credentials | None:
    """Where a registered backend's credentials may be (None: it cannot tell)."""
    try:
        return load_backend(name).credentials
    except (ImportError, ConfigurationError):
        return None


def __getattr__(name: str) -> object:
    # The tables this module held before each backend declared its own facts.
    if name == "AUTO_ORDER":
        return auto_order()
    if name == "CREDENTIALS":
        return {backend: found for backend in backend_names() if (found := credentials_of(backend)) is not None}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    #: Why an agent built with this backend and only its defaults would be refused although it
    #: is installed (a required model=, a mode it cannot run); None: it would be built.
    blocked: str | None = None

    @property
    def usable(self) -> bool:
        """Installed, credentials found, and buildable with the defaults (backend="auto" takes
        only these)."""
        return self.installed and self.credentials is True and self.blocked is None

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


def auto_backend(environ: dict[str, str] | None = None, *, sandbox: bool = True, model: str | None = None,
                 mode: str = "autonomous") -> str:
    """The backend backend="auto" picks: the first of auto_order() installed, with credentials,
    and buildable with the agent's own settings (sandbox, model, mode) as the facade checks them.
    Raises RequirementError naming what each one lacks when none is."""
    lacking = []
    for status in detect_backends(list(auto_order()), versions=False):
        found = _credentials(status.name, environ)[0]
        blocked = _default_problem(load_backend(status.name), sandbox=sandbox, model=model, mode=mode) \
            if status.installed and found else None
        if status.installed and found and blocked is None:
            return status.name
        lacking.append(f"{status.name}: {status.problem or blocked or 'no credentials found'}")
    raise RequirementError("backend='auto' found no backend that is installed, has credentials and can run "
                           "with these settings:\n" + "\n".join(f"  - {line}" for line in lacking),
                           backend="auto", missing=lacking)


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
    status.path, status.version = _where(cls, options, requirements)
    if status.installed and cls.capabilities.sandbox:
        confined = BackendSettings(model=None, tools=[], sandbox=True, options=options)
        status.sandbox = not any(r.problem() for r in cls.requirements(confined))
    status.credentials, status.credentials_source = _credentials(name)
    if status.installed and status.credentials is not False:
        # What the facade checks when an agent is built with the defaults (a required model=,
        # the default mode). Without credentials the check would only repeat that.
        status.blocked = _default_problem(cls)
    return status


def _default_problem(cls: Any, *, sandbox: bool = False, model: str | None = None,
                     mode: str = "autonomous") -> str | None:
    """Why an agent built with this backend and these settings (nothing else set) would be
    refused (None: it would be built): the facade's own checks, settings then mode. The listing
    asks unconfined (whether sandbox=True works is its own column)."""
    from agenter.backends.capabilities import check_mode

    settings = BackendSettings(model=model, tools=[], sandbox=sandbox, options=cls.options_model(), mode=mode)
    try:
        cls.check_settings(settings)
        check_mode(mode, cls.capabilities, cls.name)
    except ConfigurationError as exc:  # RequirementError included
        return "; ".join(line.strip(" -") for line in str(exc).splitlines() if line.strip()).replace(":;", ":")
    return None


def _where(cls: Any, options: Any, requirements: list[Any]) -> tuple[str | None, str | None]:
    """The program's path (its version is asked later), or the main package's version."""
    path = cls.locate(options)
    if path is not None:
        return path, None
    for requirement in requirements:
        if isinstance(requirement, PythonPackage) and requirement.distribution:
            return None, distribution_version(requirement.distribution)
    return None, None


def _credentials(name: str, environ: dict[str, str] | None = None) -> tuple[bool | None, str | None]:
    where = credentials_of(name)
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

