"""LiteLLMBackend: agenter's own agent (the harness, model_api/_harness) over litellm.acompletion,
for any model LiteLLM reaches (a "provider/model" string), and the context path of the completion
backends (`_completion.py`) for analysis and patch mode.

As on the openai backend (`model_api/_two_paths.py`), the path is chosen per session: the tool
loop in autonomous mode and with litellm_context="tools", the context path in analysis and patch
mode with litellm_context="prompt" (the default). Both send their requests through the one wire
(_wire.py). Only what is LiteLLM's is here: the options and what the harness reads of them, the
package, the checks of litellm_extra, and the import of LiteLLM with its price map kept offline.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any, ClassVar

from agenter._errors import ConfigurationError
from agenter.backends.base import BackendCapabilities, BackendOptions, BackendSettings
from agenter.backends.model_api._harness.loop import LoopConfig
from agenter.backends.model_api._harness.wire import ModelWire
from agenter.backends.model_api._two_paths import TwoPathBackend
from agenter.backends.model_api.litellm._options import LiteLLMOptions
from agenter.backends.model_api.litellm._wire import LiteLLMWire, model_facts
from agenter.host.requirements import MODEL_PROVIDER_KEYS, Credentials, PythonPackage, Requirement

#: Arguments the backend sets itself; litellm_extra may not override them.
OWN_ARGUMENTS = frozenset({"model", "messages", "stream", "stream_options", "response_format", "num_retries",
                           "max_retries", "timeout", "api_key", "api_base", "base_url", "drop_params",
                           "temperature", "max_tokens", "tools", "tool_choice", "stop", "reasoning_effort",
                           "thinking", "cache_control_injection_points"})
_SECRET_WORDS = ("key", "secret", "token", "password", "credential")


class LiteLLMBackend(TwoPathBackend[LiteLLMOptions]):
    """Any LiteLLM model: agenter's own agent with its sandboxed file tools and bash tool in every
    mode, or the context path in analysis and patch mode (see docs/backends/litellm.md)."""

    name: ClassVar[str] = "litellm"
    credentials: ClassVar[Credentials | None] = Credentials(env=MODEL_PROVIDER_KEYS)
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True,
        mcp=True, steering=True, pause=True)
    options_model: ClassVar[type[BackendOptions]] = LiteLLMOptions
    api_label: ClassVar[str] = "LiteLLM"
    context_option: ClassVar[str] = "litellm_context"

    def __init__(self, settings: BackendSettings[LiteLLMOptions]):
        super().__init__(settings)
        for name, value in self.options.litellm_extra.items():
            if isinstance(value, str) and any(word in name.lower() for word in _SECRET_WORDS):
                self.redact.add(value)

    # ------------------------------------------------------------------ class-level checks
    @classmethod
    def sdk_requirements(cls, settings: BackendSettings[Any]) -> list[Requirement]:
        return [PythonPackage(module="litellm", distribution="litellm", install="pip install 'agenter-sdk[litellm]'")]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        super().validate_settings(settings)
        options: LiteLLMOptions = settings.options
        if not settings.model:
            raise ConfigurationError("the litellm backend needs model=... (a LiteLLM model string such as "
                                     "'openai/gpt-5-mini' or 'ollama_chat/qwen2.5-coder')", parameter="model")
        clash = sorted(OWN_ARGUMENTS & set(options.litellm_extra))
        if clash:
            raise ConfigurationError(f"litellm_extra may not set {', '.join(clash)}: use the backend's own "
                                     "options (model, api_key, base_url, temperature, max_tokens, effort, thinking, "
                                     "...)", parameter="litellm_extra")

    @classmethod
    def loop_config(cls, options: LiteLLMOptions) -> LoopConfig:
        return LoopConfig(
            # 0: no limit is sent, the provider's default applies (as on the context path).
            max_tokens=options.max_tokens or 0, max_turns=options.litellm_max_turns_per_iteration,
            max_turns_option="litellm_max_turns_per_iteration", shell=options.litellm_shell,
            shell_option="litellm_shell", shell_sandbox=options.litellm_shell_sandbox,
            shell_timeout=options.litellm_shell_timeout, max_retries=options.max_retries,
            max_retry_wait=options.max_retry_wait, request_timeout=options.request_timeout,
            temperature=options.temperature, thinking=options.thinking, effort=options.effort,
            tool_calls=options.litellm_tool_calls, tool_calls_option="litellm_tool_calls",
            mcp_servers=tuple(options.mcp_servers), conversation_store=options.conversation_store)

    # ------------------------------------------------------------------ the wire (both paths)
    async def _open_wire(self) -> ModelWire:
        # LiteLLM fetches its price map from the network when imported unless told not to; use
        # the copy it ships (a user's own setting wins). The import is slow: off the event loop,
        # and so is the lookup of the model in its map.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        litellm: Any = await asyncio.to_thread(importlib.import_module, "litellm")
        # Otherwise LiteLLM prints a feedback banner on stdout with every error.
        litellm.suppress_debug_info = True
        options: LiteLLMOptions = self.options
        call: dict[str, Any] = {**options.litellm_extra, "timeout": options.request_timeout,
                                "drop_params": options.litellm_drop_params}
        if options.api_key is not None:
            key = options.api_key.get_secret_value()
            self.redact.add(key)
            call["api_key"] = key
        if options.base_url:
            call["api_base"] = options.base_url
        ceiling, caching = await asyncio.to_thread(model_facts, litellm, self.model)
        return LiteLLMWire(litellm, model=self.model, call=call, streaming=options.stream,
                           prompt_caching=caching and options.litellm_prompt_caching, output_limit=ceiling)
