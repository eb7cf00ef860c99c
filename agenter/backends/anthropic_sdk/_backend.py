"""AnthropicSDKBackend: agenter's own tool-use loop over the Anthropic Messages API (streaming).

One turn is one iteration: the prompt is appended to the conversation as a user turn, then the
model and the tools take turns until the model stops asking for tools (or refuses, or returns its
final_result). The conversation is kept for the next turn.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import ssl
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

from agenter._errors import ConfigurationError
from agenter.backends._prompts import (
    REFUSAL_TOOL_DESCRIPTION,
    REFUSAL_TOOL_NAME,
    REFUSAL_TOOL_SCHEMA,
    STRUCTURED_OUTPUT_TOOL_NAME,
    output_schema,
)
from agenter.backends.anthropic_sdk._conversation import (
    CACHE_MARK,
    SKIPPED_RESULT,
    StreamAccumulator,
    StreamedBlock,
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
)
from agenter.backends.anthropic_sdk._options import DEFAULT_BEDROCK_MODEL, DEFAULT_MODEL, AnthropicSDKOptions
from agenter.backends.anthropic_sdk._retry import RetryPolicy, StreamIncomplete, is_transport_error
from agenter.backends.base import (
    BackendCapabilities,
    BackendMessage,
    BackendSettings,
    BaseBackend,
    MessageType,
    SessionSpec,
    ToolReply,
)
from agenter.host.requirements import PythonPackage, Requirement

MAX_CUTOFF_NUDGES = 3
CUTOFF_NUDGE = ("Your last response was cut off at the output limit. Continue where you stopped, "
                "in smaller steps (for example, write a large file in several edits).")
STRUCTURED_NUDGE = (f"You have not called the {STRUCTURED_OUTPUT_TOOL_NAME} tool yet. Call it now with "
                    "the result; the task is not finished until it is accepted.")
EVENT_TEXT_LIMIT = 4000

# Output-token ceilings per model family (substring match, most specific first), for the
# one-time max_tokens escalation after a cut-off response.
_MODEL_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("sonnet-5", 128000), ("opus-5", 128000), ("haiku-5", 128000), ("fable-5", 128000),
    ("mythos-5", 128000), ("opus-4-5", 64000), ("opus-4-6", 64000), ("opus-4-7", 64000),
    ("opus-4-8", 64000), ("opus-4-1", 32000), ("opus-4-0", 32000), ("opus-4", 32000),
    ("sonnet-4", 64000), ("haiku-4", 64000), ("3-7-sonnet", 64000), ("3-5-haiku", 8192),
    ("3-5-sonnet", 8192), ("3-haiku", 4096),
)

#: How this backend's model works with its tools; the shared instructions follow it.
TOOL_GUIDANCE = """\
You are an autonomous coding agent. You work in the repository at {cwd} (the working directory).

How to work:
- Inspect before you change: list directories, glob, grep and read the files that matter.
- Make complete, working changes with the file tools. Paths are relative to the working directory.
- Keep the existing style of the code. Do not create files the task does not need.
- There is no shell: you cannot run programs or tests. Validators check your changes after you stop,
  and their findings come back to you as a new message if something must be fixed.
- When the work is done, stop calling tools and reply with a short summary of what you changed."""


def model_output_limit(model: str) -> int | None:
    for fragment, limit in _MODEL_OUTPUT_LIMITS:
        if fragment in model:
            return limit
    return None


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


class AnthropicSDKBackend(BaseBackend[AnthropicSDKOptions]):
    """The default backend: Claude through the Anthropic SDK with agenter's sandboxed file tools."""

    name: ClassVar[str] = "anthropic-sdk"
    # No shell: the model cannot run programs (validators run after the turn instead).
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        text_completion=True, streaming=True, structured_output=True, native_tool_loop=True,
        custom_tools=True, filesystem_read=True, filesystem_edit=True, sandbox=True, resume=True)
    options_model: ClassVar[type[AnthropicSDKOptions]] = AnthropicSDKOptions
    reserved_tool_names: ClassVar[frozenset[str]] = frozenset({TEXT_EDITOR_TOOL_NAME, *FILE_TOOL_NAMES})
    price_provider: ClassVar[str | None] = "anthropic"

    def __init__(self, settings: BackendSettings[AnthropicSDKOptions]):
        super().__init__(settings)
        bedrock = self.options.anthropic_bedrock
        self.model: str = settings.model or (DEFAULT_BEDROCK_MODEL if bedrock else DEFAULT_MODEL)
        self.ledger.model = self.model
        if bedrock:
            self.ledger.provider = "aws"  # genai-prices' Bedrock prices
        self._client: Any | None = None
        self._toolbox: FileToolbox | None = None
        self._messages: list[dict[str, Any]] = []
        self._tool_definitions: list[dict[str, Any]] = []
        self._system_blocks: list[dict[str, Any]] = []
        self._custom_tools = {tool.name: tool for tool in settings.tools}
        self._max_tokens = self.options.max_tokens
        self._escalated = False
        self._pending_results: list[dict[str, Any]] | None = None
        self._retry = RetryPolicy(
            max_retries=self.options.max_retries, max_wait=self.options.max_retry_wait, backend=self.name,
            auth_hint="check your AWS credentials" if bedrock else "check ANTHROPIC_API_KEY", redact=self.redact)

    @classmethod
    def requirements(cls, settings: BackendSettings[Any]) -> Sequence[Requirement]:
        needs: list[Requirement] = [PythonPackage(module="anthropic", distribution="anthropic",
                                                  install="pip install agenter-sdk")]
        if getattr(settings.options, "anthropic_bedrock", False):
            bedrock = "pip install 'agenter-sdk[bedrock]'"
            needs += [PythonPackage(module="boto3", distribution="boto3", install=bedrock),
                      PythonPackage(module="botocore", distribution="botocore", install=bedrock)]
        return needs

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (the messages sent to the API, without cache marks)."""
        return self._messages

    # ------------------------------------------------------------------ lifecycle
    async def _connect(self, spec: SessionSpec) -> None:
        from agenter.sandbox.paths import PathResolver
        from agenter.usage import is_known_model

        if spec.resume_session_id:
            # Resume here means the retries of one run share a conversation; it lives in memory.
            raise ConfigurationError(
                f"the {self.name} backend cannot resume session {spec.resume_session_id!r}: its "
                "conversation lives only as long as one run", parameter="resume")
        self._toolbox = FileToolbox(PathResolver(spec.cwd, spec.allowed_write_paths, sandbox=self.settings.sandbox))
        # The first imports of anthropic and of the price table take seconds on a busy machine:
        # do them off the event loop so the session's other tasks (and timers) keep running.
        await asyncio.to_thread(importlib.import_module, "anthropic")
        await asyncio.to_thread(is_known_model, self.model, self.ledger.provider)
        self._client = self._make_client()
        self._session_id = uuid.uuid4().hex
        self._system_blocks = [{"type": "text", "text": self._system_prompt()}]
        self._tool_definitions = self._build_tool_definitions(spec)
        if self.options.anthropic_prompt_caching:
            self._system_blocks[-1]["cache_control"] = dict(CACHE_MARK)
            self._tool_definitions[-1] = {**self._tool_definitions[-1], "cache_control": dict(CACHE_MARK)}

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - closing must never mask the session's outcome
                pass

    def _make_client(self) -> Any:
        import anthropic

        options = self.options
        common: dict[str, Any] = {"max_retries": 0, "timeout": options.request_timeout}
        if options.base_url:
            common["base_url"] = options.base_url
        if options.anthropic_bedrock:
            def secret(value: Any) -> str | None:
                return value.get_secret_value() if value is not None else None

            return anthropic.AsyncAnthropicBedrock(
                aws_region=options.anthropic_aws_region, aws_profile=options.anthropic_aws_profile,
                aws_access_key=secret(options.anthropic_aws_access_key),
                aws_secret_key=secret(options.anthropic_aws_secret_key),
                aws_session_token=secret(options.anthropic_aws_session_token), **common)
        api_key = options.api_key.get_secret_value() if options.api_key else os.environ.get("ANTHROPIC_API_KEY")
        if not api_key and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            raise ConfigurationError(
                "no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key=...", parameter="api_key")
        self.redact.add(api_key)
        # Loading the trust store costs ~150 ms; build it once per process, not per session.
        http_client = anthropic.DefaultAsyncHttpxClient(verify=_shared_ssl_context())
        return anthropic.AsyncAnthropic(api_key=api_key, http_client=http_client, **common)

    def _system_prompt(self) -> str:
        shared = self.instructions(refusal_tool=REFUSAL_TOOL_NAME, output_channel="tool")
        return TOOL_GUIDANCE.format(cwd=self.cwd) + "\n\n" + shared

    def _build_tool_definitions(self, spec: SessionSpec) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        if self.options.anthropic_text_editor:
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

    # ------------------------------------------------------------------ one turn
    async def _turn(self, prompt: str) -> AsyncIterator[BackendMessage]:
        append_user_content(self._messages, [{"type": "text", "text": prompt}])
        try:
            async for message in self._tool_loop():
                yield message
        finally:
            # Invariant: every tool_use is answered, also when cancelled or failing mid-turn.
            close_open_tool_uses(self._messages, self._pending_results)
            self._pending_results = None

    def _turn_ended(self) -> bool:
        return self.refusal() is not None or self.structured_output() is not None

    async def _tool_loop(self) -> AsyncIterator[BackendMessage]:
        cutoffs = 0
        nudged_for_result = False
        limit = self.options.anthropic_max_turns_per_iteration
        for _ in range(limit):
            response = StreamAccumulator()
            async for message in self._respond(response):
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
                self.refuse({"reason": reason, "category": "refusal"})
                return
            results: list[dict[str, Any]] = []
            self._pending_results = results
            input_errors = response.input_errors()
            for block in content:
                if block["type"] != "tool_use":
                    continue
                if self._turn_ended():
                    results.append(tool_result(block["id"], SKIPPED_RESULT, is_error=True))
                    continue
                async for message in self._call(block, results, input_errors.get(block["id"])):
                    yield message
            self._pending_results = None
            follow_up: list[dict[str, Any]] = list(results)
            if self._turn_ended():
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
                if self.spec.output_type is not None and not nudged_for_result:
                    nudged_for_result = True
                    follow_up.append({"type": "text", "text": STRUCTURED_NUDGE})
                else:
                    return
            append_user_content(self._messages, follow_up)
        yield BackendMessage(MessageType.STATUS, content=(
            f"stopped after {limit} model responses in this iteration (anthropic_max_turns_per_iteration)"))

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
    async def _call(self, block: dict[str, Any], results: list[dict[str, Any]],
                    input_error: str | None) -> AsyncIterator[BackendMessage]:
        """Run one tool_use block: a TOOL_CALL message first (every tool run is reported, and
        only tools that run), then the call, then its TOOL_RESULT."""
        name, arguments, tool_id = block["name"], block.get("input") or {}, block["id"]
        yield BackendMessage(MessageType.TOOL_CALL, tool_name=name, tool_input=arguments, tool_call_id=tool_id)
        if input_error:
            reply = ToolReply(f"Could not run {name}: {input_error}. Call it again with a JSON object.",
                              is_error=True)
        else:
            reply = await self._dispatch(name, arguments)
        content = _truncate(reply.text, MAX_OUTPUT_CHARS)
        results.append(tool_result(tool_id, content, is_error=reply.is_error))
        yield BackendMessage(MessageType.TOOL_RESULT, content=_truncate(content, EVENT_TEXT_LIMIT),
                             tool_name=name, tool_call_id=tool_id, is_error=reply.is_error)

    async def _dispatch(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        toolbox = self._toolbox
        assert toolbox is not None
        if name == REFUSAL_TOOL_NAME:
            return self.refuse(arguments)
        if name == STRUCTURED_OUTPUT_TOOL_NAME and self.spec.output_type is not None:
            return self.accept_output(arguments)
        if name in self._custom_tools:
            return await self.run_tool(self._custom_tools[name], arguments)
        editor = self.options.anthropic_text_editor
        if editor and name == TEXT_EDITOR_TOOL_NAME:
            outcome = await self.in_thread_named(name, toolbox.run_text_editor, arguments)
        elif not editor and name in FILE_TOOL_NAMES:
            # A tracked thread: a turn cancelled meanwhile waits for it before its last snapshot.
            outcome = await self.in_thread_named(name, toolbox.run, name, arguments)
        else:
            return ToolReply(f"Unknown tool {name!r}.", is_error=True)
        self.track(written=sorted(outcome.written), deleted=sorted(outcome.deleted))
        return ToolReply(outcome.content, outcome.is_error)

    # ------------------------------------------------------------------ requests
    def _request_params(self) -> dict[str, Any]:
        options = self.options
        messages = with_cache_marks(self._messages) if options.anthropic_prompt_caching else self._messages
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._max_tokens,
            "system": self._system_blocks,
            "tools": self._tool_definitions,
            "messages": messages,
        }
        if options.temperature is not None:
            params["temperature"] = options.temperature
        thinking = options.thinking
        if isinstance(thinking, int):
            params["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        elif thinking is not None:
            params["thinking"] = {"type": thinking}
        if options.effort is not None:
            params["output_config"] = {"effort": options.effort}
        return params

    async def _respond(self, response: StreamAccumulator) -> AsyncIterator[BackendMessage]:
        """One model response, streamed; failed attempts are retried as the policy says."""
        attempt = 0
        while True:
            try:
                async for message in self._stream_once(response):
                    yield message
                return
            except Exception as exc:
                retry = self._retry.decide(exc, attempt)
                if retry is None:
                    raise
            attempt += 1
            yield BackendMessage(MessageType.STATUS, content=(
                f"retrying after {retry.summary} (retry {attempt}/{self.options.max_retries}, "
                f"waiting {retry.delay:.1f}s)"))
            await asyncio.sleep(retry.delay)

    async def _stream_once(self, response: StreamAccumulator) -> AsyncIterator[BackendMessage]:
        import anthropic

        assert self._client is not None
        response.reset()  # a retry starts the response from scratch
        settled = False
        try:
            stream = await self._client.messages.create(**self._request_params(), stream=True)
            async with stream:
                async for event in stream:
                    usage_before = response.usage
                    completed = response.feed(event)
                    if response.finished and not settled:
                        # Priced once, when the response is complete (message_stop).
                        self.ledger.settle(response.usage)
                        settled = True
                    elif response.usage is not usage_before:
                        # Budgets see the tokens as they arrive, at estimated per-token rates.
                        self.ledger.running(response.usage)
                    if completed is not None:
                        message = _block_message(completed)
                        if message is not None:
                            yield message
        except Exception as exc:
            if not isinstance(exc, anthropic.APIError) and is_transport_error(exc):
                raise StreamIncomplete(str(exc) or type(exc).__name__) from exc
            raise
        finally:
            if not settled:
                # Dropped, failed or cancelled: the tokens streamed so far were still spent.
                self.ledger.abandon_running()
        if not response.finished:
            raise StreamIncomplete("the response stream ended before message_stop")


def _block_message(block: StreamedBlock) -> BackendMessage | None:
    """Text and thinking as each block completes. Tool calls are reported when they run."""
    if block.type == "text" and block.text:
        return BackendMessage(MessageType.TEXT, content=block.text)
    if block.type == "thinking" and block.thinking:
        return BackendMessage(MessageType.THINKING, content=block.thinking)
    return None


@functools.lru_cache(maxsize=1)
def _shared_ssl_context() -> ssl.SSLContext:
    """The system trust store (honours SSL_CERT_FILE / SSL_CERT_DIR), shared by all sessions."""
    return ssl.create_default_context()
