"""GeminiBackend: agenter's own agent (the harness, model_api/_harness) over the Gemini API,
streamed through the google-genai SDK; Gemini on Vertex AI with gemini_vertex=True.

Only what is Gemini's is here and in _wire.py/_events.py: the options and what the harness reads
of them, the package it needs, and the client and wire. The loop, the tools and the
conversation are the harness's.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from agenter.backends.base import BackendCapabilities, BackendSettings
from agenter.backends.model_api._harness.loop import HarnessBackend, LoopConfig
from agenter.backends.model_api._harness.wire import ModelWire
from agenter.backends.model_api.gemini._options import DEFAULT_MODEL, GeminiOptions
from agenter.backends.model_api.gemini._wire import GeminiWire, make_client
from agenter.host.requirements import Credentials, PythonPackage, Requirement

#: Function names the Gemini API takes: a letter or '_' first, at most 64 characters.
_TOOL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")


class GeminiBackend(HarnessBackend[GeminiOptions]):
    """Gemini through the google-genai SDK with agenter's sandboxed file tools and a bash tool
    (confined by Landlock, bubblewrap or Seatbelt with sandbox=True)."""

    name: ClassVar[str] = "gemini"
    credentials: ClassVar[Credentials | None] = Credentials(env=("GEMINI_API_KEY", "GOOGLE_API_KEY"))
    # After the Gemini CLI (50) that takes the same key, and after the other model APIs.
    auto_rank: ClassVar[int | None] = 100
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True,
        mcp=True, steering=True, pause=True)
    options_model: ClassVar[type[GeminiOptions]] = GeminiOptions
    price_provider: ClassVar[str | None] = "google"
    tool_name_pattern: ClassVar[re.Pattern[str]] = _TOOL_NAME

    def __init__(self, settings: BackendSettings[GeminiOptions]):
        super().__init__(settings)
        self.model: str = settings.model or DEFAULT_MODEL
        self.ledger.model = self.model

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        package = PythonPackage(module="google.genai", distribution="google-genai", min_major=2,
                                install="pip install 'agenter-sdk[gemini]'")
        return [package, *super().requirements(settings)]

    @classmethod
    def loop_config(cls, options: GeminiOptions) -> LoopConfig:
        return LoopConfig(
            max_tokens=options.max_tokens, max_turns=options.gemini_max_turns_per_iteration,
            max_turns_option="gemini_max_turns_per_iteration", shell=options.gemini_shell,
            shell_option="gemini_shell", shell_sandbox=options.gemini_shell_sandbox,
            shell_timeout=options.gemini_shell_timeout, max_retries=options.max_retries,
            max_retry_wait=options.max_retry_wait, request_timeout=options.request_timeout,
            temperature=options.temperature, thinking=options.thinking, effort=options.effort,
            mcp_servers=tuple(options.mcp_servers), conversation_store=options.conversation_store)

    async def _open_wire(self) -> ModelWire:
        # The first import of google.genai takes seconds on a busy machine: off the event loop.
        await asyncio.to_thread(importlib.import_module, "google.genai")
        options = self.options
        client, http = make_client(options, self.redact.add)
        return GeminiWire(client, http, model=self.model, include_thoughts=options.gemini_include_thoughts,
                          vertex=options.gemini_vertex)
