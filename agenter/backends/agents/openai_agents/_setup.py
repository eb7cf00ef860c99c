"""How the SDK's agent is built: the OpenAI client and model, its settings, the function tools,
the output type, and the run configuration. Imports the SDK (only imported when the backend
connects).

The model is the SDK's own model class over an `AsyncOpenAI` client made from `base_url` and
`api_key`: `OpenAIResponsesModel` (the default, as in the SDK for OpenAI) or
`OpenAIChatCompletionsModel` (`openai_agents_wire="chat"`, for any compatible server). The
client's retries are the `max_retries` option. Tracing is off for every run
(`RunConfig(tracing_disabled=True)`): the SDK's default exporter would send each run to
api.openai.com; the process-wide setting is left alone, so an application's own runs keep
theirs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, AgentOutputSchema, FunctionTool, ModelSettings, RunConfig
from agents.exceptions import UserError
from agents.models.default_models import get_default_model, get_default_model_settings
from openai import AsyncOpenAI

from agenter.backends._prompts import REFUSAL_TOOL_NAME
from agenter.backends.agents.openai_agents._options import OpenAIAgentsOptions

__all__ = ["ApprovalCheck", "ToolHandler", "agent", "client", "default_model", "function_tool", "model", "run_config",
           "warm"]

#: A tool's handler: (call id, arguments as the model sent them) -> the text the model reads.
ToolHandler = Callable[[str, Any], Awaitable[str]]
#: Whether a call waits for a person: (the SDK's run context, the arguments, the call id) -> bool.
ApprovalCheck = Callable[[Any, dict[str, Any], str], Awaitable[bool]]
#: The agent's name in the SDK's run items.
AGENT_NAME = "agenter"


def default_model() -> str:
    """The SDK's default model (OPENAI_DEFAULT_MODEL, else its built-in one)."""
    return get_default_model()


def client(options: OpenAIAgentsOptions, api_key: str) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=api_key, base_url=options.base_url or None, max_retries=options.max_retries,
                       timeout=options.request_timeout)


def warm(openai_client: AsyncOpenAI, wire: str) -> None:
    """Blocking (run it in a thread): what the first run would otherwise do on the event loop,
    where it blocked every task for seconds on a busy machine (the session's time budget too):
    the SDK builds its trace provider, the client imports its API resources on first use
    (openai.resources), builds the pydantic
    models of the stream's events on first use (openai sets defer_build), and evaluates the type
    hints of the request's parameters and builds a TypeAdapter for the event union once (cached
    by openai). The last two go through openai's private helpers: should a later openai move
    them, only the head start is lost."""
    import typing

    if wire == "chat":
        from openai.types.chat import ChatCompletionChunk, completion_create_params

        _ = openai_client.chat.completions
        models: list[Any] = [ChatCompletionChunk]
        params: Any = completion_create_params.CompletionCreateParamsStreaming
        request: dict[str, Any] = {"model": "m", "stream": True, "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "o"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
        event_type: Any = ChatCompletionChunk
    else:
        from openai.types.responses import Response, ResponseStreamEvent, response_create_params

        _ = openai_client.responses
        union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
        models = [Response, *typing.get_args(union)]
        params = response_create_params.ResponseCreateParamsStreaming
        request = {"model": "m", "stream": True, "instructions": "i", "input": [
            {"role": "user", "content": "u"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "o"}],
            "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": False}]}
        event_type = ResponseStreamEvent
    for event_model in models:
        event_model.model_rebuild()
    # Every run asks for the SDK's trace provider (also with tracing off for the run); its first
    # use builds the exporter's HTTP client, whose TLS context takes a second to load.
    from agents.tracing import get_trace_provider

    get_trace_provider()
    with contextlib.suppress(Exception):
        from openai._models import construct_type
        from openai._utils import maybe_transform

        maybe_transform(request, params)
        for sample in _SAMPLE_EVENTS[wire]:
            construct_type(type_=event_type, value=sample)


_MESSAGE = {"id": "m", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "t", "annotations": []}]}
_CALL = {"id": "f", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "status": "completed"}
#: Stream events whose parsing builds (and caches) the TypeAdapters of everything a turn receives.
_SAMPLE_EVENTS: dict[str, list[dict[str, Any]]] = {
    "responses": [
        {"type": "response.output_text.delta", "delta": "x", "item_id": "m", "output_index": 0, "content_index": 0},
        {"type": "response.output_item.done", "item": _CALL, "output_index": 0},
        {"type": "response.completed", "response": {
            "id": "r", "object": "response", "created_at": 0, "model": "m", "status": "completed",
            "output": [_MESSAGE, _CALL], "tools": [{"type": "function", "name": "f", "parameters": {}}],
            "parallel_tool_calls": True, "tool_choice": "auto", "text": {"format": {"type": "text"}},
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}},
    ],
    "chat": [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [
        {"index": 0, "delta": {"content": "x", "tool_calls": [
            {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}],
}


def model(options: OpenAIAgentsOptions, name: str, openai_client: AsyncOpenAI) -> Any:
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel

    if options.openai_agents_wire == "chat":
        return OpenAIChatCompletionsModel(name, openai_client)
    return OpenAIResponsesModel(name, openai_client)


def model_settings(options: OpenAIAgentsOptions, name: str) -> ModelSettings:
    """The SDK's defaults for the model (reasoning settings for GPT-5 models), with ours on top."""
    ours: dict[str, Any] = {"temperature": options.temperature, "max_tokens": options.max_tokens}
    if options.effort is not None:
        from openai.types.shared import Reasoning

        ours["reasoning"] = Reasoning(effort=options.effort)
    if options.openai_agents_wire == "chat":
        ours["include_usage"] = True  # compatible servers send usage only when asked
    return get_default_model_settings(name).resolve(ModelSettings(**ours))


def function_tool(name: str, description: str, schema: dict[str, Any], handler: ToolHandler,
                  needs_approval: ApprovalCheck) -> FunctionTool:
    """A function tool whose calls go to `handler`, each first to `needs_approval` (the SDK asks
    it before running any call of a model response; True stops the run there with the call as
    an interruption). Not strict: agenter's schemas have optional fields, and strict mode would
    make every one of them required."""

    async def invoke(context: Any, arguments: str) -> str:
        try:
            parsed: Any = json.loads(arguments) if arguments else {}
        except ValueError:
            parsed = arguments
        return await handler(str(getattr(context, "tool_call_id", "") or ""), parsed)

    return FunctionTool(name=name, description=description, params_json_schema=schema, on_invoke_tool=invoke,
                        strict_json_schema=False, needs_approval=needs_approval)


def output_schema(output_type: type[Any]) -> AgentOutputSchema:
    """The SDK's structured output for `output_type`: strict where the schema allows it (the API
    then guarantees the shape), else not."""
    try:
        return AgentOutputSchema(output_type, strict_json_schema=True)
    except UserError:
        return AgentOutputSchema(output_type, strict_json_schema=False)


def agent(*, instructions: str, tools: list[Any], mcp_servers: list[Any], model: Any, settings: ModelSettings,
          output_type: type[Any] | None) -> Agent[Any]:
    return Agent(name=AGENT_NAME, instructions=instructions, tools=tools, mcp_servers=mcp_servers, model=model,
                 model_settings=settings, output_type=output_schema(output_type) if output_type else None,
                 # The refusal tool ends the run (its reply is the final output).
                 tool_use_behavior={"stop_at_tool_names": [REFUSAL_TOOL_NAME]})


def run_config() -> RunConfig:
    return RunConfig(tracing_disabled=True, workflow_name="agenter")
