"""TwoPathBackend: a model API run two ways, chosen per session by the mode and one option of the
backend (`context_option`: `openai_context`, `litellm_context`), written once for the backends
that keep both (openai, litellm):

- the tool loop (HarnessBackend): autonomous mode, and analysis and patch mode with the option
  "tools" (read-only: only the tools that read are offered);
- the context path (CompletionBackend, `_completion.py`): analysis and patch mode with the option
  "prompt", the default, which shows the model a repository map and the files and asks for one
  answer (what small local models manage).

Both send their requests through the same wire (a `ContextWire`: a ModelWire whose `stream` also
takes the context path's JSON format), so there is one request builder and one failure reading.
The class inherits both bases and picks one's `_connect` and `_turn` per session; their other
methods have distinct names. On the context path the instance's `capabilities` are the
completion backends' (no tool loop, no file read by the agent, no conversation kept): the session
reads them from the instance, so patch mode shows the files and repeats the task in its retry
prompts.

A subclass declares what HarnessBackend asks for (`loop_config`, `_open_wire`, its class facts),
its package in `sdk_requirements`, and `context_option`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from agenter._errors import ConfigurationError
from agenter._types import Usage
from agenter.backends.base import BackendMessage, BackendSettings, SessionSpec
from agenter.backends.model_api._completion import (
    Completion,
    CompletionBackend,
    CompletionOptions,
    Failure,
    OutputFormat,
    Piece,
    StreamIncomplete,
)
from agenter.backends.model_api._harness.loop import HarnessBackend
from agenter.backends.model_api._harness.wire import BlockDone, Delta, ModelWire, WireRequest, WireResponse
from agenter.backends.model_api._harness.wire import Piece as WirePiece
from agenter.host.requirements import Requirement

__all__ = ["CONTEXT_CAPABILITIES", "ContextWire", "TwoPathBackend"]

OptionsT = TypeVar("OptionsT", bound=CompletionOptions)

#: What the context path can do (the completion backends' capabilities).
CONTEXT_CAPABILITIES = CompletionBackend.capabilities


class ContextWire(ModelWire, Protocol):
    """A wire the context path can use too: its stream takes the context path's JSON format
    (json_schema with its name, json_object, or the prompt only) instead of the request's schema."""

    def stream(self, request: WireRequest, *, output: OutputFormat | None = None) -> AsyncGenerator[WirePiece, None]:
        ...


class TwoPathBackend(HarnessBackend[OptionsT], CompletionBackend[OptionsT]):
    """agenter's own agent, or the context path in analysis and patch mode (see the module)."""

    #: The option that chooses the path in analysis and patch mode ("prompt" or "tools").
    context_option: ClassVar[str] = "context"

    def __init__(self, settings: BackendSettings[OptionsT]):
        super().__init__(settings)
        self._context_path = False
        self._choose_path(settings.mode)

    def _choose_path(self, mode: str) -> None:
        """The context path or the tool loop for sessions in `mode` (set when built, from the
        agent's mode, for what the session reads before connecting; again at connect)."""
        self._context_path = self.uses_context(mode, self.options)
        # The session reads the capabilities of the backend it runs (patch mode's retry prompts).
        capabilities = CONTEXT_CAPABILITIES if self._context_path else type(self).capabilities
        if self._context_path and self.options.proposal_format == "files":
            capabilities = dataclasses.replace(capabilities, patch_files=True)
        self.capabilities = capabilities  # type: ignore[misc]

    @property
    def context_path(self) -> bool:
        """Whether this session runs on the context path (else on the tool loop)."""
        return self._context_path

    @classmethod
    def uses_context(cls, mode: str, options: Any) -> bool:
        """Whether a session in `mode` runs on the context path."""
        return mode in ("analysis", "patch") and getattr(options, cls.context_option, "prompt") == "prompt"

    # ------------------------------------------------------------------ class-level checks
    @classmethod
    def sdk_requirements(cls, settings: BackendSettings[Any]) -> list[Requirement]:
        """The provider's package (both paths need it)."""
        return []

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs = cls.sdk_requirements(settings)
        if cls.uses_context(settings.mode, settings.options):
            return needs  # no bash tool: no sandbox to build for it
        return [*needs, *super().requirements(settings)]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        CompletionBackend.validate_settings(settings)
        if cls.uses_context(settings.mode, settings.options):
            cls._refuse_tools_on_context(settings, settings.mode)
        else:
            super().validate_settings(settings)  # the tool loop's (HarnessBackend)

    @classmethod
    def _refuse_tools_on_context(cls, settings: BackendSettings[Any], mode: str) -> None:
        """What only the agent runs (custom tools, MCP servers) is refused on the context path,
        where the model calls no tool."""
        mcp_servers = getattr(settings.options, "mcp_servers", ())
        for what, given, parameter in (("custom tools", settings.tools, "tools"),
                                       ("MCP servers", mcp_servers, "mcp_servers")):
            if given:
                raise ConfigurationError(
                    f"{what} run in agenter's own agent, not on the context path of {mode} mode: "
                    f"pass {cls.context_option}='tools' to let the model call them", parameter=parameter)
        if settings.on_ask == "pause":
            raise ConfigurationError(
                f"on_ask='pause' pauses agenter's own agent, not the context path of {mode} mode (the model "
                f"calls no tool there): pass {cls.context_option}='tools' for the agent", parameter="on_ask")

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        self._choose_path(spec.mode)
        if not self._context_path:
            await HarnessBackend._connect(self, spec)
            return
        self._refuse_tools_on_context(self.settings, spec.mode)
        if spec.resume_session_id:
            raise ConfigurationError(
                f"the {self.name} backend's context path ({spec.mode} mode with {self.context_option}='prompt') "
                "keeps no conversation to resume", parameter="resume")
        await CompletionBackend._connect(self, spec)

    def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self._context_path:
            return CompletionBackend._turn(self, prompt)
        return HarnessBackend._turn(self, prompt)

    # ------------------------------------------------------------------ usage of a request in flight
    def _request_in_flight(self, estimate: Usage) -> None:
        """The wire's word on the request in flight before its response streams (httpx's
        request trace): its prompt's estimate once its body has reached the server, so that a
        request cancelled while the model works counts what a paid API bills for it; nothing
        (Usage()) when the server answered with an error status. The context path counts its
        own estimate of its prompt, the one its running figures continue."""
        if self._context_path:
            if estimate.total_tokens:
                self.request_sent()
            else:
                self.ledger.running(Usage())
            return
        self.ledger.running(estimate)

    # ------------------------------------------------------------------ the context path's hooks
    async def _open_client(self) -> None:
        self._wire = await self._open_wire()

    def _classify_failure(self, exc: BaseException) -> Failure | None:
        wire = self._wire
        return wire.failure(exc) if wire is not None else None

    async def _stream_completion(self, messages: list[dict[str, str]],
                                 output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        wire: ContextWire | None = self._wire  # type: ignore[assignment]
        assert wire is not None
        options: Any = self.options
        request = WireRequest(
            system="\n\n".join(m["content"] for m in messages if m["role"] == "system"),
            messages=[{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"],
            max_tokens=options.max_tokens or 0, temperature=options.temperature,
            effort=getattr(options, "effort", None), thinking=getattr(options, "thinking", None))
        reasoning: list[str] = []
        response: WireResponse | None = None
        async with contextlib.aclosing(wire.stream(request, output=output)) as pieces:
            async for piece in pieces:
                if isinstance(piece, Delta):
                    yield Piece(piece.text, reasoning=piece.thinking)
                elif isinstance(piece, BlockDone) and piece.block.get("type") == "thinking":
                    reasoning.append(str(piece.block.get("thinking") or ""))
                elif isinstance(piece, WireResponse):
                    response = piece
        if response is None:
            raise StreamIncomplete("the response stream ended before the response was complete")
        yield completion_of(response, "".join(reasoning))


def completion_of(response: WireResponse, reasoning: str) -> Completion:
    """A wire's response as the context path reads it (a usage of 0 tokens: none reported, the
    context path estimates it)."""
    refused = response.stop == "refusal" and response.stop_detail != "content_filter"
    text = response.text()
    finish = "length" if response.stop == "max_tokens" else response.stop_detail
    return Completion(text="" if refused else text, reasoning=reasoning,
                      refusal=(text or "The model refused the request.") if refused else None,
                      usage=response.usage if response.usage.total_tokens else None, finish_reason=finish,
                      cost=response.cost)
