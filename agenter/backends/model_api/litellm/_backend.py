"""LiteLLMBackend: a completion backend over litellm.acompletion (any "provider/model" string).

Only the call is here; the turns (analysis, patch proposals), retries and usage are in
agenter.backends.model_api._completion. LiteLLM's own retries are off (num_retries=0, max_retries=0) so
that every retry is a STATUS message. The cost is LiteLLM's price for the response when it
knows the model, else genai-prices' (through the ledger).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

from agenter._errors import ConfigurationError
from agenter.backends.base import BackendOptions, BackendSettings
from agenter.backends.model_api._completion import (
    Completion,
    CompletionBackend,
    Failure,
    OutputFormat,
    Piece,
    StreamIncomplete,
    chat_usage,
    openai_failure,
)
from agenter.backends.model_api.litellm._options import LiteLLMOptions
from agenter.host.requirements import MODEL_PROVIDER_KEYS, Credentials, PythonPackage, Requirement

#: Arguments the backend sets itself; litellm_extra may not override them.
OWN_ARGUMENTS = frozenset({"model", "messages", "stream", "stream_options", "response_format", "num_retries",
                           "max_retries", "timeout", "api_key", "api_base", "base_url", "drop_params",
                           "temperature", "max_tokens"})
_SECRET_WORDS = ("key", "secret", "token", "password", "credential")


class LiteLLMBackend(CompletionBackend[LiteLLMOptions]):
    """Any LiteLLM model in patch and analysis modes (see docs/backends/litellm.md)."""

    name: ClassVar[str] = "litellm"
    credentials: ClassVar[Credentials | None] = Credentials(env=MODEL_PROVIDER_KEYS)
    options_model: ClassVar[type[BackendOptions]] = LiteLLMOptions
    api_label: ClassVar[str] = "LiteLLM"

    def __init__(self, settings: BackendSettings[LiteLLMOptions]):
        super().__init__(settings)
        self._litellm: Any = None
        for name, value in self.options.litellm_extra.items():
            if isinstance(value, str) and any(word in name.lower() for word in _SECRET_WORDS):
                self.redact.add(value)

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
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
                                     "options (model, api_key, base_url, temperature, max_tokens, ...)",
                                     parameter="litellm_extra")

    # ------------------------------------------------------------------ client
    async def _open_client(self) -> None:
        # LiteLLM fetches its price map from the network when imported unless told not to; use
        # the copy it ships (a user's own setting wins). The import is slow: off the event loop.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        self._litellm = await asyncio.to_thread(importlib.import_module, "litellm")
        # Otherwise LiteLLM prints a feedback banner on stdout with every error.
        self._litellm.suppress_debug_info = True
        if self.options.api_key is not None:
            self.redact.add(self.options.api_key.get_secret_value())

    def _classify_failure(self, exc: BaseException) -> Failure | None:
        return openai_failure(exc)  # LiteLLM's exceptions subclass openai's

    # ------------------------------------------------------------------ one request
    async def _stream_completion(self, messages: list[dict[str, str]],
                                 output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        litellm = self._litellm
        assert litellm is not None
        options = self.options
        params: dict[str, Any] = dict(options.litellm_extra)
        params.update(model=self.model, messages=messages, num_retries=0, max_retries=0,
                      timeout=options.request_timeout, drop_params=options.litellm_drop_params)
        if options.api_key is not None:
            params["api_key"] = options.api_key.get_secret_value()
        if options.base_url:
            params["api_base"] = options.base_url
        if options.temperature is not None:
            params["temperature"] = options.temperature
        if options.max_tokens:
            params["max_tokens"] = options.max_tokens
        if output is not None and output.mode == "json_schema":
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": output.name, "schema": output.schema, "strict": True}}
        elif output is not None and output.mode == "json_object":
            params["response_format"] = {"type": "json_object"}
        if not options.stream:
            response = await litellm.acompletion(**params)
            choice = response.choices[0] if response.choices else None
            message = getattr(choice, "message", None)
            usage = chat_usage(getattr(response, "usage", None))
            hidden = getattr(response, "_hidden_params", None) or {}
            cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
            yield Completion(text=getattr(message, "content", None) or "",
                             reasoning=getattr(message, "reasoning_content", None) or "",
                             refusal=getattr(message, "refusal", None) or None, usage=usage,
                             cost=float(cost) if isinstance(cost, int | float) else self._cost(response.usage),
                             finish_reason=getattr(choice, "finish_reason", None), model=None)
            return
        stream = await litellm.acompletion(**params, stream=True, stream_options={"include_usage": True})
        text: list[str] = []
        reasoning: list[str] = []
        finish: str | None = None
        raw_usage: Any = None
        try:
            async for chunk in stream:
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    raw_usage = usage
                for choice in getattr(chunk, "choices", None) or []:
                    delta = getattr(choice, "delta", None)
                    if delta is not None:
                        thought = getattr(delta, "reasoning_content", None)
                        if thought:
                            reasoning.append(thought)
                            yield Piece(thought, reasoning=True)
                        content = getattr(delta, "content", None)
                        if content:
                            text.append(content)
                            yield Piece(content)
                    if getattr(choice, "finish_reason", None):
                        finish = choice.finish_reason
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # noqa: BLE001 - the response is complete or already failed
                    pass
        if finish is None:
            raise StreamIncomplete("the stream ended without a finish_reason")
        yield Completion(text="".join(text), reasoning="".join(reasoning), usage=chat_usage(raw_usage),
                         cost=self._cost(raw_usage), finish_reason=finish)

    def _cost(self, usage: Any) -> float | None:
        """LiteLLM's price for the response, or None when it does not know the model."""
        if usage is None:
            return None
        details = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
        try:
            prompt_cost, completion_cost = self._litellm.cost_per_token(
                model=self.model, prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0), cache_read_input_tokens=cached)
        except Exception:  # noqa: BLE001 - an unmapped model: the ledger prices it (or notes it)
            return None
        return float(prompt_cost) + float(completion_cost)

