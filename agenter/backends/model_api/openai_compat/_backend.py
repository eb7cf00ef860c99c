"""OpenAICompatBackend: agenter's own agent (the harness, model_api/_harness) over the OpenAI Chat
Completions or Responses API, and the context path of the completion backends (`_completion.py`)
for analysis and patch mode.

Two ways to run one backend, chosen per session by the mode and `openai_context`:
- the tool loop (HarnessBackend): autonomous mode, and analysis and patch mode with
  openai_context="tools" (read-only: only the tools that read are offered);
- the context path (CompletionBackend): analysis and patch mode with openai_context="prompt", the
  default, which shows the model a repository map and the files and asks for one answer (what
  small local models manage: measured with Qwen2.5-Coder-1.5B).

Both send their requests through the same wire (_wire.py). The class inherits both bases and
picks one's `_connect` and `_turn` per session; their other methods have distinct names. On the
context path the instance's `capabilities` are the completion backends' (no tool loop, no file
read by the agent, no conversation kept): the session reads them from the instance, so patch
mode shows the files and repeats the task in its retry prompts, as it does for litellm.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar
from urllib.parse import urlparse

from agenter._errors import ConfigurationError
from agenter.backends.base import BackendCapabilities, BackendMessage, BackendSettings, SessionSpec
from agenter.backends.model_api._completion import (
    Completion,
    CompletionBackend,
    Failure,
    OutputFormat,
    Piece,
    StreamIncomplete,
)
from agenter.backends.model_api._harness.loop import HarnessBackend, LoopConfig
from agenter.backends.model_api._harness.wire import BlockDone, Delta, ModelWire, WireRequest, WireResponse
from agenter.backends.model_api.openai_compat._options import OpenAIOptions
from agenter.backends.model_api.openai_compat._wire import ChatWire, ResponsesWire, make_client
from agenter.host.requirements import Credentials, PythonPackage, Requirement

MISSING_KEY = ("no OpenAI API key: set OPENAI_API_KEY or pass api_key=... (a local server given by base_url "
               "needs none)")
#: What the context path can do (the completion backends' capabilities).
CONTEXT_CAPABILITIES = CompletionBackend.capabilities


class OpenAICompatBackend(HarnessBackend[OpenAIOptions], CompletionBackend[OpenAIOptions]):
    """Any OpenAI-compatible API: agenter's own agent with its sandboxed file tools and bash tool
    in every mode, or the context path in analysis and patch mode (see docs/backends/openai.md)."""

    name: ClassVar[str] = "openai"
    credentials: ClassVar[Credentials | None] = Credentials(env=("OPENAI_API_KEY",))
    auto_rank: ClassVar[int | None] = 90
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True)
    options_model: ClassVar[type[OpenAIOptions]] = OpenAIOptions
    price_provider: ClassVar[str | None] = "openai"
    api_label: ClassVar[str] = "OpenAI-compatible API"
    permission_kinds: ClassVar[frozenset[str]] = HarnessBackend.permission_kinds

    def __init__(self, settings: BackendSettings[OpenAIOptions]):
        super().__init__(settings)
        self._context_path = False
        self._choose_path(settings.mode)

    def _choose_path(self, mode: str) -> None:
        """The context path or the tool loop for sessions in `mode` (set when built, from the
        agent's mode, for what the session reads before connecting; again at connect)."""
        self._context_path = _uses_context(mode, self.options)
        # The session reads the capabilities of the backend it runs (patch mode's retry prompts).
        self.capabilities = CONTEXT_CAPABILITIES if self._context_path else type(self).capabilities  # type: ignore[misc]

    @property
    def context_path(self) -> bool:
        """Whether this session runs on the context path (else on the tool loop)."""
        return self._context_path

    # ------------------------------------------------------------------ class-level checks
    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs: list[Requirement] = [PythonPackage(module="openai", distribution="openai",
                                                  install="pip install 'agenter-sdk[openai]'")]
        if _uses_context(settings.mode, settings.options):
            return needs  # no bash tool: no sandbox to build for it
        return [*needs, *super().requirements(settings)]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        options: OpenAIOptions = settings.options
        CompletionBackend.validate_settings(settings)
        if _uses_context(settings.mode, options):
            if settings.tools:
                raise ConfigurationError(
                    f"custom tools run in agenter's own agent, not on the context path of {settings.mode} mode: "
                    "pass openai_context='tools' to let the model call them", parameter="tools")
        else:
            super().validate_settings(settings)
        if not settings.model:
            raise ConfigurationError("the openai backend needs model=... (the model name the server knows)",
                                     parameter="model")
        if _api_key(options) is None and not _base_url(options):
            raise ConfigurationError(MISSING_KEY, parameter="api_key")

    @classmethod
    def loop_config(cls, options: OpenAIOptions) -> LoopConfig:
        return LoopConfig(
            # 0: no limit is sent, the server's default applies (as on the context path).
            max_tokens=options.max_tokens or 0, max_turns=options.openai_max_turns_per_iteration,
            max_turns_option="openai_max_turns_per_iteration", shell=options.openai_shell,
            shell_option="openai_shell", shell_sandbox=options.openai_shell_sandbox,
            shell_timeout=options.openai_shell_timeout, max_retries=options.max_retries,
            max_retry_wait=options.max_retry_wait, request_timeout=options.request_timeout,
            temperature=options.temperature, effort=options.effort, tool_calls=options.openai_tool_calls,
            tool_calls_option="openai_tool_calls")

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        self._choose_path(spec.mode)
        if not self._context_path:
            await HarnessBackend._connect(self, spec)
            return
        if self.settings.tools:
            raise ConfigurationError(
                f"custom tools run in agenter's own agent, not on the context path of {spec.mode} mode: "
                "pass openai_context='tools' to let the model call them", parameter="tools")
        if spec.resume_session_id:
            raise ConfigurationError(
                f"the openai backend's context path ({spec.mode} mode with openai_context='prompt') keeps no "
                "conversation to resume", parameter="resume")
        await CompletionBackend._connect(self, spec)

    def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self._context_path:
            return CompletionBackend._turn(self, prompt)
        return HarnessBackend._turn(self, prompt)

    # ------------------------------------------------------------------ the wire (both paths)
    async def _open_wire(self) -> ModelWire:
        # The first import of openai takes a while on a busy machine: off the event loop.
        await asyncio.to_thread(importlib.import_module, "openai")
        options = self.options
        key = _api_key(options)
        if key is None and not _base_url(options):
            raise ConfigurationError(MISSING_KEY, parameter="api_key")
        if key is not None:
            self.redact.add(key)
        wire = ResponsesWire if options.openai_wire == "responses" else ChatWire
        return wire(make_client(options, key), model=self.model, official=self._official(), streaming=options.stream,
                    extra_body=options.openai_extra_body)

    def _official(self) -> bool:
        """The OpenAI API itself (some parameters differ from compatible servers')."""
        url = _base_url(self.options)
        return not url or (urlparse(url).hostname or "").endswith("api.openai.com")

    # ------------------------------------------------------------------ the context path's hooks
    async def _open_client(self) -> None:
        self._wire = await self._open_wire()

    def _classify_failure(self, exc: BaseException) -> Failure | None:
        wire = self._wire
        return wire.failure(exc) if wire is not None else None

    async def _stream_completion(self, messages: list[dict[str, str]],
                                 output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        wire = self._wire
        assert isinstance(wire, ChatWire | ResponsesWire)
        options = self.options
        request = WireRequest(
            system="\n\n".join(m["content"] for m in messages if m["role"] == "system"),
            messages=[{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"],
            max_tokens=options.max_tokens or 0, temperature=options.temperature, effort=options.effort)
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
        yield _completion(response, "".join(reasoning))


def _uses_context(mode: str, options: Any) -> bool:
    """Whether a session in `mode` runs on the context path."""
    return mode in ("analysis", "patch") and getattr(options, "openai_context", "prompt") == "prompt"


def _completion(response: WireResponse, reasoning: str) -> Completion:
    """A wire's response as the context path reads it (a usage of 0 tokens: none reported, the
    context path estimates it)."""
    refused = response.stop == "refusal" and response.stop_detail != "content_filter"
    text = response.text()
    finish = "length" if response.stop == "max_tokens" else response.stop_detail
    return Completion(text="" if refused else text, reasoning=reasoning,
                      refusal=(text or "The model refused the request.") if refused else None,
                      usage=response.usage if response.usage.total_tokens else None, finish_reason=finish)


def _api_key(options: OpenAIOptions) -> str | None:
    if options.api_key is not None:
        return options.api_key.get_secret_value()
    return os.environ.get("OPENAI_API_KEY") or None


def _base_url(options: OpenAIOptions) -> str | None:
    return options.base_url or os.environ.get("OPENAI_BASE_URL") or None
