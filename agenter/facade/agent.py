"""AutonomousCodingAgent: the one class most users touch."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError

from agenter._errors import BudgetExceededError, ConfigurationError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus
from agenter.backends import load_backend
from agenter.backends._protocol import BackendSettings
from agenter.tools import Tool, as_tool


class AutonomousCodingAgent:
    """Runs a coding agent on a repository and returns a verified result.

    `backend` picks the agent ("anthropic-sdk", "claude-code", "codex", "openhands", "acp");
    keyword arguments not listed here are that backend's own options and are checked against
    them (an unknown one is a ConfigurationError that lists the valid ones).
    """

    def __init__(self, backend: str = "anthropic-sdk", model: str | None = None,
                 tools: Sequence[Tool | Any] | None = None, validators: Sequence[Any] | None = None,
                 sandbox: bool = True, max_iterations: int = 5, budget: Budget | None = None,
                 raise_on_budget_exceeded: bool = False, **backend_options: Any):
        from agenter.validators import ValidatorChain, resolve_validators

        if not isinstance(backend, str):
            raise ConfigurationError("backend must be a name", parameter="backend")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise ConfigurationError(f"max_iterations must be a positive integer, got {max_iterations!r}",
                                     parameter="max_iterations")
        if not isinstance(sandbox, bool):
            raise ConfigurationError(f"sandbox must be True or False, got {sandbox!r}", parameter="sandbox")
        self.backend_name = backend
        self._backend_class = load_backend(backend)
        self.model = model
        try:
            self.tools = [as_tool(t) for t in (tools or [])]
        except Exception as exc:
            raise ConfigurationError(f"invalid tool: {exc}", parameter="tools") from exc
        self._validators = ValidatorChain(resolve_validators(validators))
        self.sandbox = sandbox
        self.budget = budget or Budget(max_iterations=max_iterations)
        self.raise_on_budget_exceeded = raise_on_budget_exceeded
        self.options = self._parse_options(backend_options)
        capabilities = self._backend_class.capabilities
        if self.tools and not capabilities.custom_tools:
            raise ConfigurationError(f"backend {backend!r} cannot run custom tools", parameter="tools")
        self._settings = BackendSettings(model=model, tools=self.tools, sandbox=sandbox,
                                         options=self.options)
        self._backend_class.check_settings(self._settings)

    @property
    def capabilities(self) -> Any:
        return self._backend_class.capabilities

    # ------------------------------------------------------------------ execution
    async def execute(self, request: CodingRequest | str, **request_fields: Any) -> CodingResult:
        """Run the request to the end and return its result."""
        result: CodingResult | None = None
        async with contextlib.aclosing(self._events(request, request_fields)) as events:
            async for event in events:
                if event.type is CodingEventType.SESSION_END:
                    result = event.data["_result"]
        assert result is not None
        self._raise_if_budget_exceeded(result)
        return result

    async def stream_execute(self, request: CodingRequest | str,
                             **request_fields: Any) -> AsyncIterator[CodingEvent]:
        """Yield events as they happen; SESSION_END is always last and carries the result.

        Stopping early (break, cancellation) ends the session and its backend when this
        generator is closed; use `contextlib.aclosing` to make that immediate.
        """
        async with contextlib.aclosing(self._events(request, request_fields)) as events:
            async for event in events:
                if event.type is CodingEventType.SESSION_END:
                    result: CodingResult = event.data.pop("_result")
                    yield event
                    self._raise_if_budget_exceeded(result)
                    return
                yield event

    def execute_sync(self, request: CodingRequest | str, **request_fields: Any) -> CodingResult:
        """For callers without an event loop (scripts, notebooks with a running loop too)."""
        coroutine = self.execute(request, **request_fields)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coroutine).result()

    # ------------------------------------------------------------------ internals
    def _raise_if_budget_exceeded(self, result: CodingResult) -> None:
        if self.raise_on_budget_exceeded and result.status is CodingStatus.BUDGET_EXCEEDED:
            raise BudgetExceededError(result.error or "budget exceeded",
                                      limit=result.exceeded_limit or "", result=result)

    async def _events(self, request: CodingRequest | str,
                      request_fields: dict[str, Any]) -> AsyncIterator[CodingEvent]:
        from agenter.session.loop import CodingSession

        request = self._check_request(request, request_fields)
        budget = request.budget or self.budget
        backend = self._backend_class(self._settings)
        session = CodingSession(backend, request, budget=budget, validators=self._validators,
                                backend_name=self.backend_name,
                                model=self.model or getattr(backend, "default_model", None),
                                secrets=self._secrets())
        async with contextlib.aclosing(session.run()) as events:
            async for event in events:
                if event.type is CodingEventType.SESSION_END:
                    event.data["_result"] = session.result
                yield event

    def _check_request(self, request: CodingRequest | str, fields: dict[str, Any]) -> CodingRequest:
        if isinstance(request, str):
            try:
                request = CodingRequest(prompt=request, **fields)
            except ValidationError as exc:
                raise ConfigurationError(f"invalid request: {exc}", parameter="request") from exc
        elif fields:
            request = request.model_copy(update=fields)
        if not isinstance(request, CodingRequest):
            raise ConfigurationError("request must be a CodingRequest or a prompt string",
                                     parameter="request")
        cwd = Path(request.cwd)
        if not cwd.is_dir():
            raise ConfigurationError(f"cwd {str(cwd)!r} is not a directory", parameter="cwd")
        request = request.model_copy(update={"cwd": cwd.resolve()})
        if request.output_type is not None:
            if not (isinstance(request.output_type, type) and issubclass(request.output_type, BaseModel)):
                raise ConfigurationError("output_type must be a pydantic model class",
                                         parameter="output_type")
            if not self._backend_class.capabilities.structured_output:
                raise ConfigurationError(
                    f"backend {self.backend_name!r} cannot return structured output",
                    parameter="output_type")
        return request

    def _parse_options(self, options: dict[str, Any]) -> Any:
        model_cls = self._backend_class.options_model
        try:
            return model_cls(**options)
        except ValidationError as exc:
            valid = sorted(model_cls.model_fields)
            first = exc.errors()[0]
            name = ".".join(str(p) for p in first["loc"]) or "options"
            if first["type"] == "extra_forbidden":
                raise ConfigurationError(
                    f"unknown option {name!r} for backend {self.backend_name!r}",
                    parameter=name, valid=valid or ["(none)"]) from None
            raise ConfigurationError(
                f"invalid value for option {name!r} of backend {self.backend_name!r}: {first['msg']}",
                parameter=name) from None

    def _secrets(self) -> list[str]:
        secrets = []
        for name in type(self.options).model_fields:
            value = getattr(self.options, name, None)
            if isinstance(value, SecretStr):
                secrets.append(value.get_secret_value())
        return secrets

    def __repr__(self) -> str:
        return f"AutonomousCodingAgent(backend={self.backend_name!r}, model={self.model!r})"
