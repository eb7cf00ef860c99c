"""AgentConfig: what a session runs with, taken from its agent when the session is made.

`AutonomousCodingAgent` checks its arguments when it is built; a session (of one request, as
`execute()` runs, or of many) reads only this frozen snapshot, never the agent. So
`facade/session.py` does not import `facade/agent.py`, and a change to the agent's attributes
after a session was made does not reach into that session.

The request checks live here too: a one-shot request and each request of a session are
checked the same way, against the same backend.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agenter._errors import BudgetExceededError, ConfigurationError
from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus
from agenter.backends import BackendCapabilities, BackendSettings
from agenter.backends.capabilities import Mode
from agenter.host.redact import Redactor

if TYPE_CHECKING:
    from agenter.validators import ValidatorChain

__all__ = ["AgentConfig"]


@dataclass(frozen=True)
class AgentConfig:
    """An agent's checked configuration, as a session needs it.

    `model` is the model the agent was asked for (None: the backend's default); `settings` is
    what the backend is built with. `log_dir` is where transcripts go (None: none are written);
    `tracer_provider` is the OpenTelemetry provider given to the agent (None: the global one).
    """

    backend_class: type[Any]
    backend_name: str
    settings: BackendSettings[Any]
    model: str | None
    validators: ValidatorChain
    budget: Budget
    mode: Mode
    raise_on_budget_exceeded: bool = False
    log_dir: Path | None = None
    tracer_provider: Any = None
    #: Patch mode: the user's permission policy, which judges the files agenter writes for the
    #: agent (the agent itself runs under its plan mode; None: only the safety checks).
    write_policy: Any = None
    #: The agent as a paused run's record describes it (JSON data: backend, model, options
    #: without secrets, ...), so `agenter approve` can build the same agent in another process.
    description: dict[str, Any] = field(default_factory=dict)

    @property
    def capabilities(self) -> BackendCapabilities:
        return self.backend_class.capabilities

    def new_backend(self) -> Any:
        """A backend for one session (not connected)."""
        return self.backend_class(self.settings)

    def redactor(self) -> Redactor:
        """A redactor for one session: the backend's secret options, and the secret-looking
        environment variables as they are now (read when it is made, so made per session)."""
        return Redactor(extra=self.settings.options.secrets())

    def versions(self) -> dict[str, str]:
        """agenter's version and those of the backend's Python packages, for transcripts."""
        from agenter._version import __version__
        from agenter.host.requirements import PythonPackage, distribution_version

        versions = {"agenter": __version__}
        try:
            requirements = list(self.backend_class.requirements(self.settings))
        except Exception:  # noqa: BLE001 - versions are informative only
            requirements = []
        for requirement in requirements:
            if isinstance(requirement, PythonPackage):
                name = requirement.distribution or requirement.module
                version = distribution_version(name)
                if version:
                    versions[name] = version
        return versions

    def raise_if_budget_exceeded(self, result: CodingResult, budget: Budget | None = None,
                                 spent: CodingResult | None = None) -> None:
        """BudgetExceededError for a BUDGET_EXCEEDED result when the agent was built to raise.

        `budget` is the one the run was held to (default: the agent's) and `spent` the figures
        measured against it (default: the result's own); they give the error's `limit_value`
        and `actual_value`."""
        if self.raise_on_budget_exceeded and result.status is CodingStatus.BUDGET_EXCEEDED:
            limit = result.exceeded_limit or ""
            judged = budget or self.budget
            figures = spent or result
            limit_value = {"tokens": judged.max_tokens, "cost": judged.max_cost_usd,
                           "time": judged.max_time_seconds, "iterations": judged.max_iterations}.get(limit)
            actual_value = {"tokens": figures.total_tokens, "cost": figures.total_cost_usd,
                            "time": figures.duration_seconds, "iterations": figures.iterations}.get(limit)
            raise BudgetExceededError(result.error or "budget exceeded", limit=limit, result=result,
                                      limit_value=limit_value, actual_value=actual_value)

    def check_request(self, request: CodingRequest | str,
                      fields: dict[str, Any]) -> tuple[CodingRequest, dict[str, Any] | None]:
        """The request checked, its resume resolved to the agent's session id, and where that
        id came from (a transcript or the caller). ConfigurationError names what to fix."""
        if isinstance(request, str):
            data: dict[str, Any] = {"prompt": request, **fields}
        elif isinstance(request, CodingRequest):
            _refuse_a_second_value(request, fields)
            data = {name: getattr(request, name) for name in CodingRequest.model_fields}
            data.update(fields)
        else:
            raise ConfigurationError("request must be a CodingRequest or a prompt string", parameter="request")
        if "cwd" not in data:
            raise ConfigurationError("the request needs cwd: the repository the agent works in", parameter="cwd")
        if isinstance(data.get("budget"), dict):
            data["budget"] = Budget(**data["budget"])
        checked = CodingRequest(**data)
        cwd = Path(checked.cwd)
        if not cwd.is_dir():
            raise ConfigurationError(f"cwd {str(cwd)!r} is not a directory", parameter="cwd")
        if not os.access(cwd, os.W_OK | os.X_OK):
            raise ConfigurationError(f"cwd {str(cwd)!r} is not writable by this process, so the agent could "
                                     "not change any file", parameter="cwd")
        checked = checked.model_copy(update={"cwd": cwd.resolve()})
        if checked.output_type is not None:
            if not (isinstance(checked.output_type, type) and issubclass(checked.output_type, BaseModel)):
                raise ConfigurationError("output_type must be a pydantic model class", parameter="output_type")
            if not self.capabilities.structured_output:
                raise ConfigurationError(f"backend {self.backend_name!r} cannot return structured output",
                                         parameter="output_type")
        if checked.resume is not None:
            if not self.capabilities.resume:
                raise ConfigurationError(f"backend {self.backend_name!r} cannot resume an earlier session",
                                         parameter="resume")
            from agenter.session.transcript import resolve_resume

            # A transcript is read now: one that cannot be resumed fails here, not in the run.
            session_id, origin = resolve_resume(checked.resume, self.backend_name)
            return checked.model_copy(update={"resume": session_id}), origin
        return checked, None


def _refuse_a_second_value(request: CodingRequest, fields: dict[str, Any]) -> None:
    """`execute(CodingRequest(cwd=d1), cwd=d2)`: a field the request sets, given again with another
    value, is a ConfigurationError (it silently ran in d2); the same value, or a field the request
    left at its default, is fine."""
    for name in sorted(set(fields) & request.model_fields_set):
        given, held = fields[name], getattr(request, name)
        if held is None or held == CodingRequest.model_fields[name].default:
            continue  # set to its default (None: not given): nothing to contradict
        if name == "cwd" and isinstance(given, str | os.PathLike):
            same = Path(given).expanduser().resolve() == Path(held).expanduser().resolve()
        else:
            same = bool(given == held)
        if not same:
            raise ConfigurationError(
                f"{name} is given twice, {held!r} in the CodingRequest and {given!r} as an argument: "
                "pass it once", parameter=name)
