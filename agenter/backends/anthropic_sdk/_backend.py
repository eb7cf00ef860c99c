"""AnthropicSDKBackend: agenter's own tool-use loop over the Anthropic Messages API (streaming).

One execute() call is one iteration: the prompt is appended to the conversation as a user
turn, then the model and the tools take turns until the model stops asking for tools (or
refuses, or returns its final_result). The conversation is kept for the next execute() call.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import ssl
import random
import re
import uuid
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

from pydantic import ValidationError

from agenter._errors import BackendError, ConfigurationError
from agenter._types import Usage
from agenter.backends._prompts import (
    AUTONOMOUS_CONTRACT,
    REFUSAL_TOOL_DESCRIPTION,
    REFUSAL_TOOL_NAME,
    REFUSAL_TOOL_SCHEMA,
    STRUCTURED_OUTPUT_TOOL_NAME,
    output_schema,
)
from agenter.host import redact
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    ModifiedFiles,
    Refusal,
    SessionSpec,
)
from agenter.backends.anthropic_sdk._conversation import (
    CACHE_MARK,
    SKIPPED_RESULT,
    StreamAccumulator,
    append_user_content,
    close_open_tool_uses,
    tool_result,
    with_cache_marks,
)
from agenter.backends.anthropic_sdk._file_tools import (
    FILE_TOOL_DEFINITIONS,
    FILE_TOOL_NAMES,
    MAX_OUTPUT_CHARS,
    TEXT_EDITOR_TOOL_DEFINITION,
    TEXT_EDITOR_TOOL_NAME,
    FileToolbox,
    ToolOutcome,
)
from agenter.backends.anthropic_sdk._options import DEFAULT_BEDROCK_MODEL, DEFAULT_MODEL, AnthropicSDKOptions

MAX_CUTOFF_NUDGES = 3
CUTOFF_NUDGE = ("Your last response was cut off at the output limit. Continue where you stopped, "
                "in smaller steps (for example, write a large file in several edits).")
STRUCTURED_NUDGE = (f"You have not called the {STRUCTURED_OUTPUT_TOOL_NAME} tool yet. Call it now with "
                    "the result; the task is not finished until it is accepted.")
EVENT_TEXT_LIMIT = 4000
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# Output-token ceilings per model family (substring match, most specific first), for the
# one-time max_tokens escalation after a cut-off response.
_MODEL_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("sonnet-5", 128000), ("opus-5", 128000), ("haiku-5", 128000), ("fable-5", 128000),
    ("mythos-5", 128000), ("opus-4-5", 64000), ("opus-4-6", 64000), ("opus-4-7", 64000),
    ("opus-4-8", 64000), ("opus-4-1", 32000), ("opus-4-0", 32000), ("opus-4", 32000),
    ("sonnet-4", 64000), ("haiku-4", 64000), ("3-7-sonnet", 64000), ("3-5-haiku", 8192),
    ("3-5-sonnet", 8192), ("3-haiku", 4096),
)

SYSTEM_PROMPT = """\
You are an autonomous coding agent. You work in the repository at {cwd} (the working directory).

How to work:
- Inspect before you change: list directories, glob, grep and read the files that matter.
- Make complete, working changes with the file tools. Paths are relative to the working directory.
- Keep the existing style of the code. Do not create files the task does not need.
- There is no shell: you cannot run programs or tests. Validators check your changes after you stop,
  and their findings come back to you as a new message if something must be fixed.
- When the work is done, stop calling tools and reply with a short summary of what you changed.

{contract}"""


def model_output_limit(model: str) -> int | None:
    for fragment, limit in _MODEL_OUTPUT_LIMITS:
        if fragment in model:
            return limit
    return None


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


class _StreamIncomplete(Exception):
    """The response stream ended before message_stop (the connection dropped)."""


class AnthropicSDKBackend(BaseBackend):
    """The default backend: Claude through the Anthropic SDK with agenter's sandboxed file tools."""

    name: ClassVar[str] = "anthropic-sdk"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        custom_tools=True, structured_output=True, resume=True, sandbox=True
    )
    options_model: ClassVar[type[AnthropicSDKOptions]] = AnthropicSDKOptions

    def __init__(self, settings: BackendSettings):
        super().__init__(settings)
        self.options: AnthropicSDKOptions = self._coerce_options(settings.options)
        default_model = DEFAULT_BEDROCK_MODEL if self.options.bedrock else DEFAULT_MODEL
        self.model: str = settings.model or default_model
        self._client: Any | None = None
        self._spec: SessionSpec | None = None
        self._toolbox: FileToolbox | None = None
        self._messages: list[dict[str, Any]] = []
        self._tool_definitions: list[dict[str, Any]] = []
        self._system_blocks: list[dict[str, Any]] = []
        self._custom_tools = {tool.name: tool for tool in settings.tools}
        self._max_tokens = self.options.max_tokens
        self._escalated = False
        self._settled_usage = Usage()  # usage of finished requests, cost included
        self._pending_results: list[dict[str, Any]] | None = None
        self._tracked = ModifiedFiles()
        self._cost_unknown_noted = False
        self._price_known = True
        self._api_key: str | None = None

    # ------------------------------------------------------------------ configuration

    @staticmethod
    def _coerce_options(options: Any) -> AnthropicSDKOptions:
        if isinstance(options, AnthropicSDKOptions):
            return options
        if options is None:
            return AnthropicSDKOptions()
        try:
            return AnthropicSDKOptions.model_validate(options.model_dump(exclude_unset=True))
        except ValidationError as exc:
            raise ConfigurationError(f"invalid anthropic-sdk options: {exc}") from None

    @classmethod
    def check_settings(cls, settings: BackendSettings) -> None:
        options = cls._coerce_options(settings.options)
        reserved = {REFUSAL_TOOL_NAME, STRUCTURED_OUTPUT_TOOL_NAME, TEXT_EDITOR_TOOL_NAME, *FILE_TOOL_NAMES}
        seen: set[str] = set()
        for tool in settings.tools:
            if not _TOOL_NAME.match(tool.name):
                raise ConfigurationError(
                    f"tool name {tool.name!r} is not valid for the Anthropic API "
                    "(letters, digits, '_' and '-', at most 64 characters)", parameter="tools")
            if tool.name in reserved:
                raise ConfigurationError(
                    f"tool name {tool.name!r} is reserved by the anthropic-sdk backend", parameter="tools")
            if tool.name in seen:
                raise ConfigurationError(f"two tools are named {tool.name!r}", parameter="tools")
            seen.add(tool.name)
        if options.bedrock:
            import importlib.util

            if importlib.util.find_spec("boto3") is None or importlib.util.find_spec("botocore") is None:
                raise ConfigurationError(
                    "bedrock=True needs boto3: pip install 'agenter-sdk[bedrock]'", parameter="bedrock")

    # ------------------------------------------------------------------ lifecycle

    async def connect(self, spec: SessionSpec) -> None:
        from agenter.usage import is_known_model
        from agenter.sandbox.paths import PathResolver

        self._spec = spec
        resolver = PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox)
        self._toolbox = FileToolbox(resolver)
        # The first imports of anthropic and of the price table take seconds on a busy machine:
        # do them off the event loop so the session's other tasks (and timers) keep running.
        await asyncio.to_thread(importlib.import_module, "anthropic")
        self._price_known = await asyncio.to_thread(is_known_model, self.model, self._price_provider)
        self._client = self._make_client()
        self._session_id = uuid.uuid4().hex
        self._messages = []
        self._system_blocks = [{"type": "text", "text": self._system_prompt(spec)}]
        self._tool_definitions = self._build_tool_definitions(spec)
        if self.options.prompt_caching:
            self._system_blocks[-1]["cache_control"] = dict(CACHE_MARK)
            self._tool_definitions[-1] = {**self._tool_definitions[-1], "cache_control": dict(CACHE_MARK)}

    async def disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # closing must never mask the session's outcome
                pass

    def _make_client(self) -> Any:
        import anthropic

        options = self.options
        common: dict[str, Any] = {"max_retries": 0, "timeout": options.request_timeout}
        if options.base_url:
            common["base_url"] = options.base_url
        if options.bedrock:
            secret = lambda value: value.get_secret_value() if value is not None else None  # noqa: E731
            return anthropic.AsyncAnthropicBedrock(
                aws_region=options.aws_region, aws_profile=options.aws_profile,
                aws_access_key=secret(options.aws_access_key), aws_secret_key=secret(options.aws_secret_key),
                aws_session_token=secret(options.aws_session_token), **common)
        api_key = options.api_key.get_secret_value() if options.api_key else os.environ.get("ANTHROPIC_API_KEY")
        if not api_key and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            raise ConfigurationError(
                "no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key=...", parameter="api_key")
        self._api_key = api_key
        # Loading the trust store costs ~150 ms; build it once per process, not per session.
        http_client = anthropic.DefaultAsyncHttpxClient(verify=_shared_ssl_context())
        return anthropic.AsyncAnthropic(api_key=api_key, http_client=http_client, **common)

    def _system_prompt(self, spec: SessionSpec) -> str:
        parts = [SYSTEM_PROMPT.format(cwd=spec.cwd, contract=AUTONOMOUS_CONTRACT)]
        if self.settings.sandbox:
            parts.append("Sandbox: you can only read and write files inside the working directory, "
                         "never inside .git/. A refused path comes back as a tool error.")
        if spec.allowed_write_paths is not None:
            allowed = ", ".join(spec.allowed_write_paths) or "(none: read only)"
            parts.append(f"Writes are limited to paths matching: {allowed}")
        if spec.output_type is not None:
            parts.append(f"When you are done, call the {STRUCTURED_OUTPUT_TOOL_NAME} tool with the result. "
                         "The turn ends when the result is accepted.")
        if spec.system_prompt:
            parts.append(spec.system_prompt)
        return "\n\n".join(parts)

    def _build_tool_definitions(self, spec: SessionSpec) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        if self.options.use_anthropic_tools:
            tools.append(dict(TEXT_EDITOR_TOOL_DEFINITION))
        else:
            tools.extend(dict(definition) for definition in FILE_TOOL_DEFINITIONS)
        for tool in self.settings.tools:
            tools.append({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
        tools.append({"name": REFUSAL_TOOL_NAME, "description": REFUSAL_TOOL_DESCRIPTION,
                      "input_schema": REFUSAL_TOOL_SCHEMA})
        if spec.output_type is not None:
            tools.append({
                "name": STRUCTURED_OUTPUT_TOOL_NAME,
                "description": "Return the final result of the task. Call it once, when the work is done.",
                "input_schema": output_schema(spec.output_type),
            })
        return tools

    # ------------------------------------------------------------------ one iteration

    async def execute(self, prompt: str) -> AsyncIterator[BackendMessage]:
        if self._client is None or self._spec is None:
            raise BackendError("anthropic-sdk backend is not connected", backend=self.name)
        from agenter.sandbox.workspace import WorkspaceSnapshot

        self._start_turn()
        self._tracked = ModifiedFiles()
        before = await asyncio.to_thread(WorkspaceSnapshot.take, self._spec.cwd)
        append_user_content(self._messages, [{"type": "text", "text": prompt}])
        try:
            if not self._cost_unknown_noted:
                self._cost_unknown_noted = True
                if not self._price_known:
                    yield BackendMessage(MessageType.STATUS, content=(
                        f"no price known for model {self.model!r}: its cost is recorded as 0"))
            async for message in self._tool_loop():
                yield message
        finally:
            # Invariant: every tool_use is answered, also when cancelled or failing mid-turn.
            close_open_tool_uses(self._messages, self._pending_results)
            self._pending_results = None
            self._modified = self._tracked | before.changes_since()

    async def _tool_loop(self) -> AsyncIterator[BackendMessage]:
        assert self._spec is not None
        cutoffs = 0
        nudged_for_result = False
        for _ in range(self.options.max_turns_per_iteration):
            response = StreamAccumulator()
            async for message in self._request_with_retries(response):
                yield message
            content = response.content()
            if content:
                self._messages.append({"role": "assistant", "content": content})
            if response.stop_reason == "model_context_window_exceeded":
                yield BackendMessage(MessageType.ERROR, is_error=True, content=(
                    "the conversation no longer fits the model's context window; ending this iteration"))
                return
            if response.stop_reason == "refusal":
                reason = response.text().strip() or "The model declined the request (stop_reason=refusal)."
                self._refusal = Refusal(reason=reason, category="refusal")
                return
            results: list[dict[str, Any]] = []
            self._pending_results = results
            turn_ended = False
            input_errors = response.input_errors()
            for block in content:
                if block["type"] != "tool_use":
                    continue
                if turn_ended:
                    results.append(tool_result(block["id"], SKIPPED_RESULT, is_error=True))
                    continue
                async for message in self._run_tool(block, results, input_errors.get(block["id"])):
                    yield message
                turn_ended = self._refusal is not None or self._structured is not None
            self._pending_results = None
            follow_up: list[dict[str, Any]] = list(results)
            if turn_ended:
                append_user_content(self._messages, follow_up)
                return
            if response.stop_reason == "max_tokens":
                cutoffs += 1
                if cutoffs > MAX_CUTOFF_NUDGES:
                    append_user_content(self._messages, follow_up)
                    yield BackendMessage(MessageType.ERROR, content=(
                        f"the model's responses were cut off at the output limit {cutoffs} times; "
                        "ending this iteration"), is_error=True)
                    return
                note = self._escalate_max_tokens()
                follow_up.append({"type": "text", "text": CUTOFF_NUDGE})
                yield BackendMessage(MessageType.STATUS, content="response cut off at max_tokens; "
                                     f"asking the model to continue{note}")
            elif not results:
                if self._spec.output_type is not None and self._structured is None and not nudged_for_result:
                    nudged_for_result = True
                    follow_up.append({"type": "text", "text": STRUCTURED_NUDGE})
                else:
                    return
            append_user_content(self._messages, follow_up)
        yield BackendMessage(MessageType.STATUS, content=(
            f"stopped after {self.options.max_turns_per_iteration} model responses in this iteration "
            "(max_turns_per_iteration)"))

    def _escalate_max_tokens(self) -> str:
        if self._escalated:
            return ""
        self._escalated = True
        ceiling = model_output_limit(self.model)
        if ceiling is None or self._max_tokens >= ceiling:
            return ""
        self._max_tokens = min(ceiling, self._max_tokens * 2)
        return f" (max_tokens raised to {self._max_tokens})"

    # ------------------------------------------------------------------ tools

    async def _run_tool(self, block: dict[str, Any], results: list[dict[str, Any]],
                        input_error: str | None) -> AsyncIterator[BackendMessage]:
        assert self._spec is not None and self._toolbox is not None
        name, arguments, tool_id = block["name"], block.get("input") or {}, block["id"]
        if input_error:
            outcome = ToolOutcome(f"Could not run {name}: {input_error}. Call it again with a JSON object.",
                                  is_error=True)
        elif name == REFUSAL_TOOL_NAME:
            reason = str(arguments.get("reason") or "No reason given.")
            category = arguments.get("category")
            self._refusal = Refusal(reason=reason, category=str(category) if category else None)
            outcome = ToolOutcome("Refusal recorded. Stop here.")
        elif name == STRUCTURED_OUTPUT_TOOL_NAME and self._spec.output_type is not None:
            outcome = self._accept_structured(arguments)
        elif self.options.use_anthropic_tools and name == TEXT_EDITOR_TOOL_NAME:
            outcome = await asyncio.to_thread(self._toolbox.run_text_editor, arguments)
        elif not self.options.use_anthropic_tools and name in FILE_TOOL_NAMES:
            outcome = await asyncio.to_thread(self._toolbox.run, name, arguments)
        elif name in self._custom_tools:
            outcome = await self._run_custom_tool(name, arguments)
        else:
            outcome = ToolOutcome(f"Unknown tool {name!r}.", is_error=True)
        self._tracked = self._tracked | ModifiedFiles(written=outcome.written, deleted=outcome.deleted)
        content = _truncate(outcome.content, MAX_OUTPUT_CHARS)
        results.append(tool_result(tool_id, content, is_error=outcome.is_error))
        yield BackendMessage(MessageType.TOOL_RESULT, content=_truncate(content, EVENT_TEXT_LIMIT),
                             tool_name=name, tool_call_id=tool_id, is_error=outcome.is_error)

    def _accept_structured(self, arguments: dict[str, Any]) -> ToolOutcome:
        assert self._spec is not None and self._spec.output_type is not None
        try:
            self._structured = self._spec.output_type.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}" for error in exc.errors()
            )
            return ToolOutcome(f"The result does not match the schema: {problems}. "
                               f"Call {STRUCTURED_OUTPUT_TOOL_NAME} again with corrected input.", is_error=True)
        return ToolOutcome("Result accepted.")

    async def _run_custom_tool(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            return ToolOutcome(await self._custom_tools[name].run(arguments))
        except asyncio.CancelledError:
            raise
        except ValidationError as exc:
            return ToolOutcome(f"Invalid arguments for {name}: {exc}", is_error=True)
        except Exception as exc:
            return ToolOutcome(self._redact(f"{name} failed: {type(exc).__name__}: {exc}"), is_error=True)

    # ------------------------------------------------------------------ requests

    def _request_params(self) -> dict[str, Any]:
        messages = with_cache_marks(self._messages) if self.options.prompt_caching else self._messages
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._max_tokens,
            "system": self._system_blocks,
            "tools": self._tool_definitions,
            "messages": messages,
        }
        if self.options.temperature is not None:
            params["temperature"] = self.options.temperature
        thinking = self.options.thinking
        if isinstance(thinking, int):
            params["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        elif thinking is not None:
            params["thinking"] = {"type": thinking}
        if self.options.effort is not None:
            params["output_config"] = {"effort": self.options.effort}
        return params

    async def _request_with_retries(self, response: StreamAccumulator) -> AsyncIterator[BackendMessage]:
        """One model response, streamed; retried on overload, rate limits, 5xx and dropped streams."""
        import anthropic

        attempt = 0
        while True:
            try:
                async for message in self._stream_once(response):
                    yield message
                return
            except anthropic.APIStatusError as exc:
                status = exc.status_code
                if status in (401, 403):
                    hint = "check your AWS credentials" if self.options.bedrock else "check ANTHROPIC_API_KEY"
                    raise BackendError(f"authentication failed ({status}): {hint}",
                                       backend=self.name, status_code=status) from None
                error_type = _error_type(exc.body)
                should_retry = (exc.response.headers.get("x-should-retry") if exc.response is not None else None)
                retryable = (status in _RETRYABLE_STATUS or status >= 500 or error_type in _RETRYABLE_ERROR_TYPES)
                if should_retry == "false":
                    retryable = False
                summary = f"{status} {error_type or ''}".strip()
                if not retryable or attempt >= self.options.max_retries:
                    detail = self._redact(_error_message(exc))
                    tried = f" after {attempt + 1} attempts" if retryable else ""
                    raise BackendError(f"Anthropic API error {summary}{tried}: {detail}",
                                       backend=self.name, status_code=status) from None
                delay = self._retry_delay(attempt, exc.response.headers if exc.response is not None else None)
            except (anthropic.APIConnectionError, _StreamIncomplete) as exc:
                summary = "a dropped connection" if isinstance(exc, _StreamIncomplete) else "a connection error"
                if attempt >= self.options.max_retries:
                    raise BackendError(f"Anthropic API unreachable after {attempt + 1} attempts "
                                       f"({self._redact(str(exc)) or type(exc).__name__})",
                                       backend=self.name) from None
                delay = self._retry_delay(attempt, None)
            attempt += 1
            yield BackendMessage(MessageType.STATUS, content=(
                f"retrying after {summary} (retry {attempt}/{self.options.max_retries}, waiting {delay:.1f}s)"))
            await asyncio.sleep(delay)

    async def _stream_once(self, response: StreamAccumulator) -> AsyncIterator[BackendMessage]:
        import anthropic

        assert self._client is not None
        response.reset()  # a retry starts the response from scratch
        try:
            stream = await self._client.messages.create(**self._request_params(), stream=True)
            async with stream:
                async for event in stream:
                    usage_before = response.usage
                    completed = response.feed(event)
                    if response.usage is not usage_before:
                        self._publish_usage(response.usage)
                    if completed is not None:
                        message = _block_message(completed)
                        if message is not None:
                            yield message
        except Exception as exc:
            if not isinstance(exc, anthropic.APIError) and _is_transport_error(exc):
                raise _StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        finally:
            # Tokens of a dropped or cancelled response were still spent: keep them counted.
            self._settled_usage = self._usage
        if not response.finished:
            raise _StreamIncomplete("the response stream ended before message_stop")

    def _publish_usage(self, request_usage: Usage) -> None:
        """Session usage = finished requests + this request so far (cost priced per request)."""
        from agenter.usage import estimate_cost

        cost = estimate_cost(self.model, request_usage, self._price_provider)
        if cost is None:
            cost = 0.0
        self._usage = self._settled_usage + request_usage.model_copy(update={"cost_usd": cost})

    @property
    def _price_provider(self) -> str:
        return "aws" if self.options.bedrock else "anthropic"

    def _retry_delay(self, attempt: int, headers: Any) -> float:
        cap = self.options.max_retry_wait
        if headers is not None:
            for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
                value = headers.get(name)
                if value is None:
                    continue
                try:
                    return min(cap, max(0.0, float(value) * scale))
                except ValueError:
                    if name == "retry-after":
                        try:
                            import time

                            return min(cap, max(0.0, parsedate_to_datetime(value).timestamp() - time.time()))
                        except (TypeError, ValueError):
                            pass
        backoff = min(8.0, 0.5 * 2 ** attempt) * (1 - 0.25 * random.random())
        return min(cap, backoff)

    def _redact(self, text: str) -> str:
        extra = {"ANTHROPIC_API_KEY": self._api_key} if self._api_key else None
        return redact(text, extra)

    # ------------------------------------------------------------------ introspection (tests, debugging)

    @property
    def default_model(self) -> str:
        """The model used when none was chosen (read by the session for its events)."""
        return self.model

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (the messages sent to the API, without cache marks)."""
        return self._messages


def _block_message(block: Any) -> BackendMessage | None:
    if block.type == "text" and block.text:
        return BackendMessage(MessageType.TEXT, content=block.text)
    if block.type == "thinking" and block.thinking:
        return BackendMessage(MessageType.THINKING, content=block.thinking)
    if block.type == "tool_use" and block.complete:
        return BackendMessage(MessageType.TOOL_CALL, content="", tool_name=block.tool_name,
                              tool_input=block.tool_input, tool_call_id=block.tool_id)
    return None


def _error_type(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return error.get("type")
        return body.get("type") if body.get("type") != "error" else None
    return None


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
        return str(body["error"]["message"])
    return str(getattr(exc, "message", None) or exc)


def _is_transport_error(exc: BaseException) -> bool:
    """httpx transport failures (a dropped stream) that the SDK lets through while iterating."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        module = type(current).__module__ or ""
        if module.startswith(("httpx", "httpcore", "h11")) or isinstance(current, (ConnectionError, EOFError)):
            return True
        current = current.__cause__ or current.__context__
    return False


@functools.lru_cache(maxsize=1)
def _shared_ssl_context() -> ssl.SSLContext:
    """The system trust store (honours SSL_CERT_FILE / SSL_CERT_DIR), shared by all sessions."""
    return ssl.create_default_context()
