"""AutonomousCodingAgent: the one class most users touch."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import AsyncGenerator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr, ValidationError

from agenter._compat import OPTIONS_017, deprecated
from agenter._errors import ConfigurationError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, suggestion
from agenter.backends import BackendCapabilities, BackendClass, BackendSettings, load_backend
from agenter.backends.capabilities import Mode, check_mode
from agenter.facade._config import AgentConfig
from agenter.tools import Tool, as_tool

if TYPE_CHECKING:
    from agenter.facade.session import AgentSession


class AutonomousCodingAgent:
    """Runs a coding agent on a repository and returns a verified result.

    `backend` picks the agent: a registered name ("anthropic-sdk", "claude-code", "codex",
    "openhands", "acp", ...) or a backend class; None (the default) is "anthropic-sdk" (or, as
    in agenter 0.1.7 and deprecated, the ACA_DEFAULT_BACKEND environment variable's backend).
    Keyword arguments not listed here are that
    backend's own options and are checked against them (an unknown one is a ConfigurationError
    that lists the valid ones). Everything the backend needs from the machine (its extra, its
    program, a Python version) is checked here, before anything runs.

    `log_dir` writes a transcript of every run there (JSONL, see docs/sessions.md);
    `tracer_provider` sends OpenTelemetry spans to that provider instead of the global one
    (docs/observability.md). `session(...)` keeps one agent conversation for many requests.

    `on_ask="pause"` (backends with the pause capability: agenter's own agent, claude-code) makes a call that
    needs approval nobody can give now (no `on_permission`, or no answer in time) pause the run
    instead of denying the call: the result is PAUSED with the calls and a handle, and
    `approve(handle)` continues it, in this process or another (docs/approvals.md). An
    `on_permission` that returns "defer" pauses the run the same way.
    """

    def __init__(self, backend: str | type[BackendClass] | Sequence[Any] | None = None,
                 model: str | None = None,
                 tools: Sequence[Tool | Any] | None = None, validators: Sequence[Any] | None = None,
                 sandbox: bool = True, max_iterations: int | None = None, budget: Budget | None = None,
                 raise_on_budget_exceeded: bool = False, mode: Mode = "autonomous",
                 permissions: Any = None, on_permission: Callable[..., Any] | None = None,
                 permission_timeout: float | None = 60.0, log_dir: str | os.PathLike[str] | None = None,
                 tracer_provider: Any = None, on_ask: str = "deny", **backend_options: Any):
        from agenter.validators import ValidatorChain, resolve_validators

        if backend is None:
            backend = default_backend()
        if isinstance(backend, str) and backend == "auto":
            from agenter.backends.registry import auto_backend

            backend = auto_backend(sandbox=sandbox, model=model, mode=mode)
        self._backend_class: type[Any]
        if isinstance(backend, list | tuple):
            # A fallback chain: a backend made of backends (the session is unchanged).
            from agenter.backends.fallback import fallback_chain

            if not backend:
                raise ConfigurationError("a fallback chain needs at least one backend", parameter="backend")
            self._backend_class = fallback_chain(*backend)
            self.backend_name = str(self._backend_class.name)
        elif isinstance(backend, str):
            self._backend_class = load_backend(backend)
            self.backend_name = backend
        elif isinstance(backend, type) and hasattr(backend, "options_model") and hasattr(backend, "capabilities"):
            self._backend_class = backend
            self.backend_name = str(backend.name) if hasattr(backend, "name") else backend.__name__
        else:
            raise ConfigurationError("backend must be a backend name or a backend class", parameter="backend")
        if not isinstance(sandbox, bool):
            raise ConfigurationError(f"sandbox must be True or False, got {sandbox!r}", parameter="sandbox")
        self.budget = self._budget(budget, max_iterations)
        self.model = model
        try:
            self.tools = [as_tool(t) for t in (tools or [])]
        except Exception as exc:
            raise ConfigurationError(f"invalid tool: {exc}", parameter="tools") from exc
        self._validators = ValidatorChain(resolve_validators(validators))
        self._validator_names = list(validators) if isinstance(validators, list | tuple) and all(
            isinstance(v, str) for v in validators) else None
        self.sandbox = sandbox
        self.raise_on_budget_exceeded = raise_on_budget_exceeded
        self.options = self._parse_options(backend_options)
        if self.tools and not self.capabilities.custom_tools:
            raise ConfigurationError(f"backend {self.backend_name!r} cannot run custom tools", parameter="tools")
        policy = None
        self._write_policy = None  # patch mode: what judges the files agenter writes for the agent
        if permissions is not None:
            from agenter.permissions import PermissionPolicy

            policy = PermissionPolicy.coerce(permissions)
            self._write_policy = policy
            if mode in ("analysis", "patch"):
                policy = policy.with_mode("plan")  # the agent itself only reads
        elif mode in ("analysis", "patch"):
            from agenter.permissions import PermissionPolicy

            policy = PermissionPolicy(mode="plan")
        self.permissions = policy
        self.on_ask = self._on_ask(on_ask)
        self._settings = BackendSettings(model=model, tools=self.tools, sandbox=sandbox, options=self.options,
                                         permissions=policy, on_permission=on_permission,
                                         permission_timeout=permission_timeout, mode=mode, on_ask=self.on_ask)
        self._backend_class.check_settings(self._settings)
        check_mode(mode, self.capabilities, self.backend_name)
        self.mode: Mode = mode
        if log_dir is not None and not isinstance(log_dir, str | os.PathLike):
            raise ConfigurationError(f"log_dir must be a directory path, got {log_dir!r}", parameter="log_dir")
        self.log_dir = Path(log_dir).expanduser() if log_dir is not None else None
        if self.log_dir is not None and self.log_dir.exists() and not self.log_dir.is_dir():
            raise ConfigurationError(f"log_dir {str(self.log_dir)!r} is not a directory", parameter="log_dir")
        self.tracer_provider = tracer_provider

    def _on_ask(self, on_ask: object) -> str:
        """on_ask, checked: "pause" needs a backend that can pause a run."""
        if on_ask not in ("deny", "pause"):
            raise ConfigurationError(f"on_ask must be 'deny' or 'pause', got {on_ask!r}", parameter="on_ask",
                                     valid=["deny", "pause"])
        if on_ask == "pause" and not self.capabilities.pause:
            raise ConfigurationError(f"on_ask='pause' needs a backend that can pause a run; {self.backend_name} cannot "
                                     f"(backends that can: {', '.join(pausing_backends())})", parameter="on_ask")
        return str(on_ask)

    @staticmethod
    def _budget(budget: Budget | None, max_iterations: int | None) -> Budget:
        if max_iterations is not None and (not isinstance(max_iterations, int) or max_iterations < 1):
            raise ConfigurationError(f"max_iterations must be a positive integer, got {max_iterations!r}",
                                     parameter="max_iterations")
        if budget is None:
            return Budget() if max_iterations is None else Budget(max_iterations=max_iterations)
        if not isinstance(budget, Budget):
            raise ConfigurationError("budget must be a Budget", parameter="budget")
        if max_iterations is None or max_iterations == budget.max_iterations:
            return budget
        if "max_iterations" in budget.model_fields_set:
            raise ConfigurationError(
                f"max_iterations={max_iterations} contradicts budget.max_iterations={budget.max_iterations}; "
                "give it once", parameter="max_iterations")
        return budget.model_copy(update={"max_iterations": max_iterations})

    @property
    def capabilities(self) -> BackendCapabilities:
        return self._backend_class.capabilities

    # ------------------------------------------------------------------ execution
    async def execute(self, request: CodingRequest | str, **request_fields: Any) -> CodingResult:
        """Run the request to the end and return its result (a session of one request)."""
        result: CodingResult | None = None
        async with contextlib.aclosing(self._one_request(request, request_fields)) as events:
            async for event in events:
                if event.type is CodingEventType.SESSION_END:
                    result = event.result
        assert result is not None  # SESSION_END is always last
        return result

    async def stream_execute(self, request: CodingRequest | str,
                             **request_fields: Any) -> AsyncGenerator[CodingEvent, None]:
        """Yield events as they happen; SESSION_END is always last and carries the result.

        Stopping early (break, cancellation) ends the session and its backend when this
        generator is closed; use `contextlib.aclosing` to make that immediate.
        """
        async with contextlib.aclosing(self._one_request(request, request_fields)) as events:
            async for event in events:
                yield event

    def open_session(self, cwd: str | os.PathLike[str], *, session_budget: Budget | None = None,
                     resume_session_id: str | None = None, **options: Any) -> AgentSession:
        """agenter 0.1.7's name for `session()`, in both of its forms: `session = await
        agent.open_session(cwd, session_budget=...)` (opened; `await session.close()` ends it) and
        `async with agent.open_session(cwd) as session:`. `session_budget` is session()'s
        `budget` and `resume_session_id` its `resume` (both deprecated)."""
        if session_budget is not None:
            if options.get("budget") is not None:
                raise ConfigurationError("session_budget= is agenter 0.1.7's name of budget=; pass only budget=",
                                         parameter="session_budget")
            deprecated("open_session(session_budget=...)", "agent.session(cwd, budget=...)")
            options["budget"] = session_budget
        if resume_session_id is not None:
            if options.get("resume") is not None:
                raise ConfigurationError("resume_session_id= is agenter 0.1.7's name of resume=; pass only resume=",
                                         parameter="resume_session_id")
            deprecated("open_session(resume_session_id=...)", "agent.session(cwd, resume=...)")
            options["resume"] = resume_session_id
        return self.session(cwd, **options)

    def session(self, cwd: str | os.PathLike[str], *, system_prompt: str | None = None,
                allowed_write_paths: list[str] | None = None, output_type: type[BaseModel] | None = None,
                resume: str | os.PathLike[str] | None = None, budget: Budget | None = None,
                log_dir: str | os.PathLike[str] | None = None) -> AgentSession:
        """One agent conversation for many requests: `async with agent.session(cwd=...) as s:`,
        then `await s.execute(...)` or `s.stream_execute(...)` as often as needed.

        The working directory, instructions, allowed paths, output type and resume are fixed for
        the session; each request has its own budget (or the agent's), and `budget` here bounds
        the whole session (its iterations only when given explicitly). `log_dir` defaults to the
        agent's. Nothing runs until the session opens.
        """
        from agenter.facade.session import AgentSession

        if budget is not None and not isinstance(budget, Budget):
            raise ConfigurationError("budget must be a Budget", parameter="budget")
        config = self._config()
        template, origin = config.check_request(CodingRequest(
            prompt="(session)", cwd=Path(cwd), system_prompt=system_prompt,
            allowed_write_paths=allowed_write_paths, output_type=output_type,
            resume=Path(resume) if isinstance(resume, os.PathLike) else resume), {})
        return AgentSession(config, template, budget=budget, resumed_from=origin,
                            log_dir=Path(log_dir) if log_dir is not None else self.log_dir)

    def execute_sync(self, request: CodingRequest | str, **request_fields: Any) -> CodingResult:
        """For callers without an event loop (scripts, notebooks with a running loop too)."""
        return _run_sync(self.execute(request, **request_fields))

    # ------------------------------------------------------------------ paused runs
    async def approve(self, handle: str, decisions: Any = None) -> CodingResult:
        """Continue a paused run (`result.resume_handle`) with a person's answers, and return its
        result: PAUSED again if a later call asks and nobody can answer, else as any run ends.

        `decisions`: "allow" (the default), "deny" or "always" for every call that needs
        approval, or a dict of call ids (`result.pending[i].id`) to those answers (a pending call
        left out is decided as usual). "always" also allows the same tool on the same target for
        the rest of the run. The agent must be of the backend that paused (its settings are this
        agent's; the request, its budget and what was spent come from the paused run); the run
        is found in this agent's conversation store. A handle is used once. ConfigurationError
        (one line) for an unknown or used handle or a call that is not pending; StoreError when
        the store cannot be reached (the run stays paused). See docs/approvals.md.
        """
        result: CodingResult | None = None
        async with contextlib.aclosing(self.stream_approve(handle, decisions)) as events:
            async for event in events:
                if event.type is CodingEventType.SESSION_END:
                    result = event.result
        assert result is not None  # SESSION_END is always last
        return result

    async def stream_approve(self, handle: str, decisions: Any = None) -> AsyncGenerator[CodingEvent, None]:
        """`approve`, yielding the continued run's events (SESSION_END last, with the result).
        The handle and the answers are checked before the first event."""
        from agenter.facade.session import approve_paused

        async with contextlib.aclosing(approve_paused(self._config(), handle, decisions)) as events:
            async for event in events:
                yield event

    def approve_sync(self, handle: str, decisions: Any = None) -> CodingResult:
        """`approve` for callers without an event loop."""
        return _run_sync(self.approve(handle, decisions))

    # ------------------------------------------------------------------ internals
    def _config(self) -> AgentConfig:
        """What a session of this agent runs with, as the agent is now (the planner gives a copy
        of the agent other validators)."""
        return AgentConfig(backend_class=self._backend_class, backend_name=self.backend_name,
                           settings=self._settings, model=self.model, validators=self._validators,
                           budget=self.budget, mode=self.mode,
                           raise_on_budget_exceeded=self.raise_on_budget_exceeded,
                           log_dir=self.log_dir, tracer_provider=self.tracer_provider,
                           write_policy=self._write_policy, description=self._description())

    def _description(self) -> dict[str, Any]:
        """The agent as a paused run's record keeps it (see AgentConfig.description): what can
        be written as JSON without a secret. Custom tools, validator objects and on_permission
        cannot; `agenter approve` builds the agent without them."""
        from pydantic_core import to_jsonable_python

        from agenter.host.redact import Redactor

        redact = Redactor(extra=self.options.secrets())
        options: dict[str, Any] = {}
        for name in sorted(self.options.model_fields_set):
            value = getattr(self.options, name, None)
            try:
                data = to_jsonable_python(value)
            except Exception:  # noqa: BLE001 - an option that is no JSON is left out
                continue
            if not isinstance(value, SecretStr) and redact.data(data) == data:
                options[name] = data
        policy = self._write_policy
        permissions = None if policy is None else {
            "rules": [str(rule) for rule in policy.rules], "mode": policy.mode,
            "allowed_mcp_servers": list(policy.allowed_mcp_servers), "extra_roots": list(policy.extra_roots),
            "read_roots": list(policy.read_roots), "protected_paths": list(policy.protected_paths)}
        return {"backend": self.backend_name, "model": self.model, "sandbox": self.sandbox, "mode": self.mode,
                "on_ask": self.on_ask, "permission_timeout": self._settings.permission_timeout,
                "permissions": permissions, "validators": self._validator_names, "options": options,
                "log_dir": str(self.log_dir) if self.log_dir is not None else None}

    async def _one_request(self, request: CodingRequest | str,
                           fields: dict[str, Any]) -> AsyncGenerator[CodingEvent, None]:
        """The request, checked, run as a session of its own (facade/session.py)."""
        from agenter.facade.session import one_request

        config = self._config()
        checked, origin = config.check_request(request, fields)
        async with contextlib.aclosing(one_request(config, checked, resumed_from=origin)) as events:
            async for event in events:
                yield event

    def _parse_options(self, options: dict[str, Any]) -> Any:
        model_cls = self._backend_class.options_model
        try:
            return model_cls(**options)
        except ValidationError as exc:
            valid = sorted(model_cls.model_fields)
            first = exc.errors()[0]
            name = ".".join(str(p) for p in first["loc"]) or "options"
            if first["type"] == "extra_forbidden":
                if name in OPTIONS_017:
                    raise ConfigurationError(
                        f"unknown option {name!r}: it was agenter 0.1.7's; today {OPTIONS_017[name]}",
                        parameter=name) from None
                raise ConfigurationError(
                    f"unknown option {name!r} for backend {self.backend_name!r}"
                    + suggestion(name, valid, own=_arguments(), owner="AutonomousCodingAgent"),
                    parameter=name, valid=valid or ["(none)"],
                    valid_label=f"options of {self.backend_name}") from None
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigurationError(
                f"invalid value for option {name!r} of backend {self.backend_name!r}: {message}",
                parameter=name) from None

    def __repr__(self) -> str:
        # The model that runs (a backend's default when none was given), not only the argument.
        model = self.model or self._backend_class.model_for(self._settings)
        return f"AutonomousCodingAgent(backend={self.backend_name!r}, model={model!r})"


#: The environment variable agenter 0.1.7 read for the default backend (still read, deprecated).
DEFAULT_BACKEND_VARIABLE = "ACA_DEFAULT_BACKEND"


def default_backend() -> str:
    """The backend when none is named: "anthropic-sdk", or ACA_DEFAULT_BACKEND's (agenter 0.1.7's
    variable, honoured with a DeprecationWarning; a name that is not a backend is an error)."""
    from agenter.backends import backend_names

    chosen = os.environ.get(DEFAULT_BACKEND_VARIABLE, "").strip()
    if not chosen:
        return "anthropic-sdk"
    deprecated(f"the {DEFAULT_BACKEND_VARIABLE} environment variable",
               f"AutonomousCodingAgent(backend={chosen!r}) (or `agenter run --backend {chosen}`)")
    if chosen != "auto" and chosen not in backend_names():
        raise ConfigurationError(f"{DEFAULT_BACKEND_VARIABLE}={chosen!r} names no backend",
                                 parameter=DEFAULT_BACKEND_VARIABLE, valid=backend_names())
    return chosen


def pausing_backends() -> list[str]:
    """The registered backends that can pause a run (their capabilities declare it)."""
    from agenter.backends import backend_names

    names = []
    for name in backend_names():
        try:
            if load_backend(name).capabilities.pause:
                names.append(name)
        except Exception:  # noqa: BLE001 - a backend that cannot load is not one
            continue
    return names


def _run_sync(coroutine: Any) -> Any:
    """Run `coroutine` to its end without an event loop of the caller's (in a thread when one runs)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _arguments() -> list[str]:
    """AutonomousCodingAgent's own keyword arguments, for the did-you-mean of a mistyped one."""
    code = AutonomousCodingAgent.__init__.__code__
    return list(code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount])
