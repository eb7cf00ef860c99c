"""AnthropicSDKBackend: agenter's own agent (the harness, model_api/_harness) over the Anthropic
Messages API, streamed; Claude on AWS Bedrock with anthropic_bedrock=True.

Only what is Anthropic's is here and in _wire.py/_events.py: the options and what the harness
reads of them, the packages it needs, and the client and wire. The loop, the tools and the
conversation are the harness's.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from typing import Any, ClassVar

from agenter.backends.base import BackendCapabilities, BackendSettings
from agenter.backends.model_api._harness.loop import HarnessBackend, LoopConfig
from agenter.backends.model_api._harness.wire import ModelWire
from agenter.backends.model_api.anthropic_sdk._options import DEFAULT_BEDROCK_MODEL, DEFAULT_MODEL, AnthropicSDKOptions
from agenter.backends.model_api.anthropic_sdk._wire import AnthropicWire, make_client
from agenter.host.requirements import Credentials, PythonPackage, Requirement


class AnthropicSDKBackend(HarnessBackend[AnthropicSDKOptions]):
    """The default backend: Claude through the Anthropic SDK with agenter's sandboxed file tools
    and a bash tool (confined by Landlock, bubblewrap or Seatbelt with sandbox=True)."""

    name: ClassVar[str] = "anthropic-sdk"
    credentials: ClassVar[Credentials | None] = Credentials(
        env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_PROFILE",
             "AWS_BEARER_TOKEN_BEDROCK"))
    auto_rank: ClassVar[int | None] = 80
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, shell=True, sandbox=True, resume=True,
        mcp=True, steering=True, pause=True)
    options_model: ClassVar[type[AnthropicSDKOptions]] = AnthropicSDKOptions
    price_provider: ClassVar[str | None] = "anthropic"

    def __init__(self, settings: BackendSettings[AnthropicSDKOptions]):
        super().__init__(settings)
        bedrock = self.options.anthropic_bedrock
        self.model: str = settings.model or (DEFAULT_BEDROCK_MODEL if bedrock else DEFAULT_MODEL)
        self.ledger.model = self.model
        if bedrock:
            self.ledger.provider = "aws"  # genai-prices' Bedrock prices

    @classmethod
    def model_for(cls, settings: BackendSettings[Any]) -> str | None:
        return settings.model or (DEFAULT_BEDROCK_MODEL if getattr(settings.options, "anthropic_bedrock", False)
                                  else DEFAULT_MODEL)

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs: list[Requirement] = [PythonPackage(module="anthropic", distribution="anthropic",
                                                  install="pip install agenter-sdk")]
        if getattr(settings.options, "anthropic_bedrock", False):
            bedrock = "pip install 'agenter-sdk[bedrock]'"
            needs += [PythonPackage(module="boto3", distribution="boto3", install=bedrock),
                      PythonPackage(module="botocore", distribution="botocore", install=bedrock)]
        return [*needs, *super().requirements(settings)]

    @classmethod
    def loop_config(cls, options: AnthropicSDKOptions) -> LoopConfig:
        return LoopConfig(
            max_tokens=options.max_tokens, max_turns=options.anthropic_max_turns_per_iteration,
            max_turns_option="anthropic_max_turns_per_iteration", shell=options.anthropic_shell,
            shell_option="anthropic_shell", shell_sandbox=options.anthropic_shell_sandbox,
            shell_timeout=options.anthropic_shell_timeout, text_editor=options.anthropic_text_editor,
            max_retries=options.max_retries, max_retry_wait=options.max_retry_wait,
            request_timeout=options.request_timeout, temperature=options.temperature, thinking=options.thinking,
            effort=options.effort, mcp_servers=tuple(options.mcp_servers),
            conversation_store=options.conversation_store)

    async def _open_wire(self) -> ModelWire:
        # The first import of anthropic takes seconds on a busy machine: off the event loop.
        await asyncio.to_thread(importlib.import_module, "anthropic")
        options = self.options
        client = make_client(options, self.redact.add)
        return AnthropicWire(client, model=self.model, prompt_caching=options.anthropic_prompt_caching,
                             bedrock=options.anthropic_bedrock, key_given=options.api_key is not None)
