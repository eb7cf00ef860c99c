"""OpenAICompatBackend: a completion backend over the OpenAI Chat Completions or Responses API.

Only the wire is here; the turns (analysis, patch proposals), retries and usage are in
agenter.backends.model_api._completion. The client's own retries are off (max_retries=0) so that every
retry is a STATUS message and a stream dropped mid-response is retried too.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar
from urllib.parse import urlparse

from agenter._errors import ConfigurationError
from agenter._types import Usage
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
from agenter.backends.model_api.openai_compat._options import OpenAIOptions
from agenter.host.requirements import Credentials, PythonPackage, Requirement

MISSING_KEY = ("no OpenAI API key: set OPENAI_API_KEY or pass api_key=... (a local server given by base_url "
               "needs none)")
#: Sent as the key to a server given by base_url when none is configured (the client needs one).
NO_KEY = "no-key"


class OpenAICompatBackend(CompletionBackend[OpenAIOptions]):
    """Any OpenAI-compatible API in patch and analysis modes (see docs/backends/openai.md)."""

    name: ClassVar[str] = "openai"
    credentials: ClassVar[Credentials | None] = Credentials(env=("OPENAI_API_KEY",))
    auto_rank: ClassVar[int | None] = 90
    options_model: ClassVar[type[BackendOptions]] = OpenAIOptions
    price_provider: ClassVar[str | None] = "openai"
    api_label: ClassVar[str] = "OpenAI-compatible API"

    def __init__(self, settings: BackendSettings[OpenAIOptions]):
        super().__init__(settings)
        self._client: Any | None = None

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        return [PythonPackage(module="openai", distribution="openai", install="pip install 'agenter-sdk[openai]'")]

    @classmethod
    def validate_settings(cls, settings: BackendSettings[Any]) -> None:
        super().validate_settings(settings)
        options: OpenAIOptions = settings.options
        if not settings.model:
            raise ConfigurationError("the openai backend needs model=... (the model name the server knows)",
                                     parameter="model")
        if _api_key(options) is None and not _base_url(options):
            raise ConfigurationError(MISSING_KEY, parameter="api_key")

    # ------------------------------------------------------------------ client
    async def _open_client(self) -> None:
        # The first import of openai takes a while on a busy machine: off the event loop.
        await asyncio.to_thread(importlib.import_module, "openai")
        import openai

        options = self.options
        key = _api_key(options)
        if key is None:
            if not _base_url(options):
                raise ConfigurationError(MISSING_KEY, parameter="api_key")
            key = NO_KEY
        else:
            self.redact.add(key)
        # httpx's request trace says when a request's body has been written: from then on its
        # prompt counts, also when the request is cancelled before the model answers.
        http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [self._trace_request]})
        self._client = openai.AsyncOpenAI(api_key=key, base_url=options.base_url or None, max_retries=0,
                                          timeout=options.request_timeout, http_client=http)

    async def _trace_request(self, request: Any) -> None:
        request.extensions["trace"] = self._trace

    async def _trace(self, event: str, info: Any) -> None:
        if event.endswith(".send_request_body.complete"):
            self.request_sent()

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _classify_failure(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, ResponseFailed):  # the Responses stream reports failures as events
            return Failure(str(exc), status=_failed_status(exc.code), error_type=exc.code or None)
        return openai_failure(exc)

    def _official(self) -> bool:
        """The OpenAI API itself (some parameters differ from compatible servers')."""
        url = _base_url(self.options)
        return not url or (urlparse(url).hostname or "").endswith("api.openai.com")

    # ------------------------------------------------------------------ one request
    def _stream_completion(self, messages: list[dict[str, str]],
                           output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        if self.options.openai_wire == "responses":
            return self._responses(messages, output)
        return self._chat(messages, output)

    def _common(self) -> dict[str, Any]:
        options = self.options
        params: dict[str, Any] = {"model": self.model}
        if options.temperature is not None:
            params["temperature"] = options.temperature
        if options.openai_extra_body:
            params["extra_body"] = dict(options.openai_extra_body)
        return params

    async def _chat(self, messages: list[dict[str, str]],
                    output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        client = self._client
        assert client is not None
        options = self.options
        params = self._common()
        params["messages"] = messages
        if options.max_tokens:
            # OpenAI's newer models take only max_completion_tokens; compatible servers know max_tokens.
            params["max_completion_tokens" if self._official() else "max_tokens"] = options.max_tokens
        if output is not None and output.mode == "json_schema":
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": output.name, "schema": output.schema, "strict": True}}
        elif output is not None and output.mode == "json_object":
            params["response_format"] = {"type": "json_object"}
        if not options.stream:
            response = await client.chat.completions.create(**params)
            choice = response.choices[0] if response.choices else None
            message = choice.message if choice is not None else None
            yield Completion(text=(message.content or "") if message else "",
                             reasoning=_reasoning(message) if message else "",
                             refusal=getattr(message, "refusal", None) if message else None,
                             usage=chat_usage(response.usage), finish_reason=choice.finish_reason if choice else None,
                             model=response.model)
            return
        stream = await client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
        text: list[str] = []
        reasoning: list[str] = []
        refusal: list[str] = []
        finish: str | None = None
        usage: Usage | None = None
        model: str | None = None
        try:
            async for chunk in stream:
                model = model or chunk.model
                if chunk.usage is not None:
                    usage = chat_usage(chunk.usage)
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is not None:
                        thought = _reasoning(delta)
                        if thought:
                            reasoning.append(thought)
                            yield Piece(thought, reasoning=True)
                        if delta.content:
                            text.append(delta.content)
                            yield Piece(delta.content)
                        if getattr(delta, "refusal", None):
                            refusal.append(delta.refusal)
                    if choice.finish_reason:
                        finish = choice.finish_reason
        finally:
            await stream.close()
        if finish is None:
            raise StreamIncomplete("the stream ended without a finish_reason")
        yield Completion(text="".join(text), reasoning="".join(reasoning), refusal="".join(refusal) or None,
                         usage=usage, finish_reason=finish, model=model)

    async def _responses(self, messages: list[dict[str, str]],
                         output: OutputFormat | None) -> AsyncIterator[Piece | Completion]:
        client = self._client
        assert client is not None
        options = self.options
        params = self._common()
        instructions = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        if instructions:
            params["instructions"] = instructions
        params["input"] = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
        if options.max_tokens:
            params["max_output_tokens"] = options.max_tokens
        if self._official():
            params["store"] = False
        if output is not None and output.mode == "json_schema":
            params["text"] = {"format": {"type": "json_schema", "name": output.name, "schema": output.schema,
                                         "strict": True}}
        elif output is not None and output.mode == "json_object":
            params["text"] = {"format": {"type": "json_object"}}
        if not options.stream:
            response = await client.responses.create(**params)
            yield _responses_completion(response, None)
            return
        stream = await client.responses.create(**params, stream=True)
        text: list[str] = []
        final: Any = None
        try:
            async for event in stream:
                kind = event.type
                if kind == "response.output_text.delta":
                    text.append(event.delta)
                    yield Piece(event.delta)
                elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
                    yield Piece(event.delta, reasoning=True)
                elif kind in ("response.completed", "response.incomplete"):
                    final = event.response
                elif kind == "response.failed":
                    raise ResponseFailed(event.response.error)
                elif kind == "error":
                    raise ResponseFailed(event)
        finally:
            await stream.close()
        if final is None:
            raise StreamIncomplete("the stream ended before response.completed")
        yield _responses_completion(final, "".join(text))


class ResponseFailed(Exception):
    """A Responses stream that ended with response.failed or an error event."""

    def __init__(self, error: Any):
        self.code = str(getattr(error, "code", "") or "")
        super().__init__(str(getattr(error, "message", "") or self.code or "the response failed"))


def _api_key(options: OpenAIOptions) -> str | None:
    if options.api_key is not None:
        return options.api_key.get_secret_value()
    return os.environ.get("OPENAI_API_KEY") or None


def _base_url(options: OpenAIOptions) -> str | None:
    return options.base_url or os.environ.get("OPENAI_BASE_URL") or None


def _reasoning(item: Any) -> str:
    """Reasoning text compatible servers send beside the content (reasoning_content, reasoning)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(item, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def responses_usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    total = int(getattr(usage, "input_tokens", 0) or 0)
    details = getattr(usage, "input_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(input_tokens=max(total - cached, 0), output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                 cache_read_tokens=cached)


def _responses_completion(response: Any, streamed: str | None) -> Completion:
    text = streamed if streamed else (getattr(response, "output_text", "") or "")
    reasoning: list[str] = []
    refusal: list[str] = []
    for item in getattr(response, "output", None) or []:
        if getattr(item, "type", None) == "reasoning":
            for part in (getattr(item, "summary", None) or []) + (getattr(item, "content", None) or []):
                if getattr(part, "text", None):
                    reasoning.append(part.text)
        elif getattr(item, "type", None) == "message":
            for part in getattr(item, "content", None) or []:
                if getattr(part, "type", None) == "refusal" and getattr(part, "refusal", None):
                    refusal.append(part.refusal)
    finish = "stop"
    if getattr(response, "status", None) == "incomplete":
        details = getattr(response, "incomplete_details", None)
        reason = getattr(details, "reason", None)
        finish = "length" if reason in (None, "max_output_tokens") else str(reason)
    return Completion(text=text, reasoning="\n".join(reasoning), refusal="".join(refusal) or None,
                      usage=responses_usage(getattr(response, "usage", None)), finish_reason=finish,
                      model=getattr(response, "model", None))


def _failed_status(code: str) -> int:
    if code in ("rate_limit_exceeded",):
        return 429
    if code in ("server_error", "vector_store_timeout", ""):
        return 500
    return 400
