"""OpenAICompatBackend: agenter's own agent (the harness, model_api/_harness) over the OpenAI Chat
Completions or Responses API, and the context path of the completion backends (`_completion.py`)
for analysis and patch mode.

Two ways to run one backend, chosen per session by the mode and `openai_context` (written once
for openai and litellm in `model_api/_two_paths.py`):
- the tool loop (HarnessBackend): autonomous mode, and analysis and patch mode with
  openai_context="tools" (read-only: only the tools that read are offered);
- the context path (CompletionBackend): analysis and patch mode with openai_context="prompt", the
  default, which shows the model a repository map and the files and asks for one answer (what
  small local models manage: measured with Qwen2.5-Coder-1.5B).

Both send their requests through the same wire (_wire.py). Only what is OpenAI's is here: the
options and what the harness reads of them, the key and base URL, and which wire.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any, ClassVar
from urllib.parse import urlparse

from agenter._errors import ConfigurationError
from agenter.backends.base import BackendCapabilities, BackendSettings
from agenter.backends.model_api._harness.loop import LoopConfig
from agenter.backends.model_api._harness.wire import ModelWire
from agenter.backends.model_api._two_paths import TwoPathBackend
from agenter.backends.model_api.openai_compat._options import OpenAIOptions
from agenter.backends.model_api.openai_compat._wire import ChatWire, ResponsesWire, make_client
from agenter.host.requirements import Credentials, PythonPackage, Requirement

MISSING_KEY = ("no OpenAI API key: set OPENAI_API_KEY or pass api_key=... (a local server given by base_url "
               "needs none)")


class OpenAICompatBackend(TwoPathBackend[OpenAIOptions]):
    """Any OpenAI-compatible API: agenter's own agent with its sandboxed file tools and bash tool
    in every mode, or the context path in analysis and patch mode (see docs/backends/openai.md)."""

    name: ClassVar[str] = "openai"
    credentials: ClassVar[Credentials | None] = Credentials(env=("OPENAI_API_KEY",))
    auto_rank: ClassVar[int | None] = 90
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True,
        mcp=True, steering=True, pause=True)
    options_model: ClassVar[type[OpenAIOptions]] = OpenAIOptions
    price_provider: ClassVar[str | None] = "openai"
    api_label: ClassVar[str] = "OpenAI-compatible API"
    context_option: ClassVar[str] = "openai_context"

    # ------------------------------------------------------------------ class-level checks
    @classmethod
    def sdk_requirements(cls, settings: BackendSettings[Any]) -> list[Requirement]:
        return [PythonPackage(module="openai", distribution="openai", install="pip install 'agenter-sdk[openai]'")]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        options: OpenAIOptions = settings.options
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
            tool_calls_option="openai_tool_calls", mcp_servers=tuple(options.mcp_servers),
            conversation_store=options.conversation_store)

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
                    extra_body=options.openai_extra_body, on_request=self._request_in_flight)

    def _official(self) -> bool:
        """The OpenAI API itself (some parameters differ from compatible servers')."""
        url = _base_url(self.options)
        return not url or (urlparse(url).hostname or "").endswith("api.openai.com")


def _api_key(options: OpenAIOptions) -> str | None:
    if options.api_key is not None:
        return options.api_key.get_secret_value()
    return os.environ.get("OPENAI_API_KEY") or None


def _base_url(options: OpenAIOptions) -> str | None:
    return options.base_url or os.environ.get("OPENAI_BASE_URL") or None
