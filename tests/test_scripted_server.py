"""The scripted model server, exercised with the real anthropic and openai SDKs as clients."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import anthropic
import httpx
import openai
import pytest

from agenter.testing import (
    ModelRequest,
    ScriptedModelServer,
    disconnect,
    hang,
    http_error,
    refusal_reply,
    reply,
    text,
    thinking,
    tool_call,
)

USER = [{"role": "user", "content": "hello"}]
WRITE_TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
}


def claude(server: ScriptedModelServer, **kwargs) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", **kwargs)


def gpt(server: ScriptedModelServer, **kwargs) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="test", **kwargs)


# -- Anthropic Messages ---------------------------------------------------------------------


async def test_anthropic_streamed_text_turn(scripted_model_server):
    server = scripted_model_server([reply(text("Hello from the scripted model, streamed in pieces."))])
    async with claude(server).messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
        pieces = [event.text async for event in stream if event.type == "text"]
        message = await stream.get_final_message()
    assert len(pieces) > 1
    assert message.content[0].text == "Hello from the scripted model, streamed in pieces."
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-test"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


async def test_anthropic_streamed_tool_use_with_input_json_deltas(scripted_model_server):
    content = "def add(a, b):\n    return a + b\n" * 3
    server = scripted_model_server(
        [
            reply(
                thinking("I should write the file."),
                text("Writing it."),
                tool_call("write_file", {"path": "m.py", "content": content}),
            )
        ]
    )
    async with claude(server).messages.stream(
        model="claude-test", max_tokens=64, messages=USER, tools=[WRITE_TOOL]
    ) as stream:
        partial_json = [event.partial_json async for event in stream if event.type == "input_json"]
        message = await stream.get_final_message()
    assert len([p for p in partial_json if p]) > 2
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert message.content[0].signature
    tool_use = message.content[2]
    assert tool_use.id.startswith("toolu_") and tool_use.name == "write_file"
    assert tool_use.input == {"path": "m.py", "content": content}
    assert message.stop_reason == "tool_use"


async def test_anthropic_json_mode_and_explicit_ids(scripted_model_server):
    server = scripted_model_server(
        [
            reply(
                tool_call("write_file", {"path": "a"}, id="toolu_fixed"),
                stop_reason="max_tokens",
                usage={"output_tokens": 7},
            )
        ]
    )
    message = await claude(server).messages.create(model="claude-test-small", max_tokens=8, messages=USER)
    assert message.content[0].id == "toolu_fixed"
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 7
    assert message.usage.cache_read_input_tokens == 0


async def test_generated_tool_ids_are_unique(scripted_model_server):
    server = scripted_model_server([reply(tool_call("a"), tool_call("a"))] * 2)
    client = claude(server)
    ids = []
    for _ in range(2):
        message = await client.messages.create(model="m", max_tokens=8, messages=USER)
        ids += [block.id for block in message.content]
    assert len(set(ids)) == 4


async def test_refusal_stop_reason(scripted_model_server):
    server = scripted_model_server([refusal_reply("No."), refusal_reply("No.")])
    message = await claude(server).messages.create(model="m", max_tokens=8, messages=USER)
    assert message.stop_reason == "refusal"
    completion = await gpt(server).chat.completions.create(model="gpt-4o", messages=USER)
    assert completion.choices[0].message.refusal == "No."


async def test_count_tokens_is_answered_without_consuming_the_script(scripted_model_server):
    server = scripted_model_server([reply(text("first"))])
    client = claude(server)
    count = await client.messages.count_tokens(model="m", messages=USER, system="be brief")
    assert count.input_tokens > 0
    message = await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert message.content[0].text == "first"
    models = await client.models.list()
    assert models.data[0].type == "model"
    assert [r.kind for r in server.requests] == ["count_tokens", "model", "models"]


async def test_http_500_then_success_is_retried_by_the_sdk(scripted_model_server):
    server = scripted_model_server([http_error(500, "boom"), reply(text("recovered"))])
    message = await claude(server, max_retries=2).messages.create(model="m", max_tokens=8, messages=USER)
    assert message.content[0].text == "recovered"
    assert [r.status for r in server.model_requests] == [500, 200]


async def test_http_529_overloaded_in_anthropic_error_shape(scripted_model_server):
    server = scripted_model_server([http_error(529, "Overloaded")])
    with pytest.raises(anthropic.APIStatusError) as caught:
        await claude(server, max_retries=0).messages.create(model="m", max_tokens=8, messages=USER)
    assert caught.value.status_code == 529
    assert caught.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert caught.value.response.headers["request-id"].startswith("req_")


async def test_http_error_with_a_custom_body_is_sent_as_it_is(scripted_model_server):
    # A provider's exact answer, beyond what error_type can say: OpenAI's insufficient_quota.
    body = {"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                      "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
    server = scripted_model_server([http_error(429, body=body), http_error(400, body=[{"error": {"code": 400}}])])
    with pytest.raises(openai.RateLimitError) as caught:
        await gpt(server, max_retries=0).chat.completions.create(model="m", messages=USER)
    assert caught.value.body == body["error"] and caught.value.code == "insufficient_quota"
    with pytest.raises(anthropic.BadRequestError) as bad:
        await claude(server, max_retries=0).messages.create(model="m", max_tokens=8, messages=USER)
    assert bad.value.body == [{"error": {"code": 400}}]  # any JSON, whatever the wire
    assert [r.status for r in server.model_requests] == [429, 400]


async def test_disconnect_mid_stream_is_a_client_error(scripted_model_server):
    server = scripted_model_server([disconnect(after_events=3, reply=reply(text("a long answer " * 20)))])
    with pytest.raises(Exception) as caught:
        async with claude(server, max_retries=0).messages.stream(model="m", max_tokens=8, messages=USER) as stream:
            async for _ in stream:
                pass
    assert_dropped(caught)
    assert server.model_requests[0].status is None


async def test_hang_makes_the_client_time_out_and_stop_does_not_block(scripted_model_server):
    server = scripted_model_server([hang()])
    with pytest.raises(anthropic.APITimeoutError):
        await claude(server, max_retries=0, timeout=0.3).messages.create(model="m", max_tokens=8, messages=USER)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 1.0


async def test_hang_mid_stream_stalls_after_some_events(scripted_model_server):
    server = scripted_model_server([hang(after_events=2)])
    received = []
    with pytest.raises(Exception) as caught:
        stream = await gpt(server, max_retries=0, timeout=0.5).chat.completions.create(
            model="gpt-4o", messages=USER, stream=True
        )
        async for chunk in stream:
            received.append(chunk)
    assert len(received) == 2
    assert (
        isinstance(caught.value, openai.APITimeoutError)
        or "timed out" in str(caught.value).lower()
        or "Timeout" in type(caught.value).__name__
    )


def test_stop_closes_open_keep_alive_and_half_sent_connections():
    server = ScriptedModelServer([hang()]).start()
    idle = socket.create_connection(("127.0.0.1", server.port))
    half = socket.create_connection(("127.0.0.1", server.port))
    half.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    hung = httpx.Client(base_url=server.base_url, timeout=5)
    started = time.monotonic()
    import threading

    outcome = []
    thread = threading.Thread(
        target=lambda: outcome.append(_swallow(lambda: hung.post("/v1/messages", json={"messages": []}))), daemon=True
    )
    thread.start()
    server.wait_for_requests(1)
    server.stop()
    thread.join(2)
    assert time.monotonic() - started < 2.0
    assert outcome and isinstance(outcome[0], httpx.HTTPError)
    for sock in (idle, half):
        sock.close()
    hung.close()


def assert_dropped(caught: pytest.ExceptionInfo) -> None:
    """The SDKs surface a dropped stream as their own error or their HTTP library's."""
    assert isinstance(caught.value, (anthropic.APIError, openai.APIError)) or "peer closed" in str(caught.value)


def _swallow(call):
    try:
        return call()
    except Exception as exc:
        return exc


async def test_delay_waits_before_answering(scripted_model_server):
    server = scripted_model_server([reply(text("late"), delay=0.3)])
    started = time.monotonic()
    message = await claude(server).messages.create(model="m", max_tokens=8, messages=USER)
    assert message.content[0].text == "late" and time.monotonic() - started >= 0.3


async def test_callback_handler_sees_the_request_and_can_fall_through(scripted_model_server):
    seen: list[ModelRequest] = []

    def handler(request: ModelRequest):
        seen.append(request)
        if request.last_user_text == "echo":
            return reply(text(f"echo from {request.wire} model={request.model} tools={request.tool_names}"))
        return None  # fall through to the script

    server = scripted_model_server([reply(text("scripted"))], handler=handler)
    client = claude(server)
    echoed = await client.messages.create(
        model="m1", max_tokens=8, messages=[{"role": "user", "content": "echo"}], tools=[WRITE_TOOL], system="sys"
    )
    assert echoed.content[0].text == "echo from anthropic model=m1 tools=['write_file']"
    scripted = await client.messages.create(model="m1", max_tokens=8, messages=USER)
    assert scripted.content[0].text == "scripted"
    assert seen[0].system == "sys" and seen[0].stream is False and seen[1].index == 1
    assert seen[0].headers.get("Anthropic-Version") and "anthropic-version" in seen[0].headers


async def test_handler_sees_tool_results(scripted_model_server):
    results = []
    server = scripted_model_server(
        [reply(tool_call("write_file", {"path": "a"}, id="toolu_1"))],
        handler=lambda request: results.append(request.tool_results) or None,
        default=reply(text("done")),
    )
    client = claude(server)
    await client.messages.create(model="m", max_tokens=8, messages=USER)
    history = USER + [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"path": "a"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "written"}]},
    ]
    await client.messages.create(model="m", max_tokens=8, messages=history)
    assert results[-1] == [{"id": "toolu_1", "output": "written", "is_error": False}]


def test_request_log_records_every_request():
    with ScriptedModelServer([reply(text("hi"))]) as server:
        with httpx.Client(base_url=server.base_url) as client:
            answer = client.post(
                "/v1/messages?beta=true",
                json={"model": "claude-test", "max_tokens": 5, "messages": USER, "stream": True, "extra": 1},
                headers={"anthropic-beta": "a,b", "X-Claude-Code-Session-Id": "s1", "anthropic-version": "2023-06-01"},
            )
            assert answer.status_code == 200
            assert "event: message_stop" in answer.text
            missing = client.get("/v1/unknown")
            assert missing.status_code == 404
        log = server.requests
    assert [(r.method, r.path, r.kind) for r in log] == [
        ("POST", "/v1/messages", "model"),
        ("GET", "/v1/unknown", "other"),
    ]
    first = log[0]
    assert first.query == {"beta": ["true"]}
    assert first.headers["x-claude-code-session-id"] == "s1"
    assert first.headers.get("Anthropic-Beta") == "a,b"
    assert first.body["extra"] == 1 and first.wire == "anthropic" and first.status == 200
    assert first.model_request.stream is True
    assert server.model_requests == [first]
    assert server.remaining == 0


async def test_anthropic_cache_control_reports_cache_reads_for_repeated_prefixes(scripted_model_server):
    server = scripted_model_server(default=reply(text("ok")))
    client = claude(server)
    system = [{"type": "text", "text": "You are a careful coder. " * 200, "cache_control": {"type": "ephemeral"}}]
    first = await client.messages.create(model="m", max_tokens=8, system=system, messages=USER)
    second = await client.messages.create(
        model="m", max_tokens=8, system=system, messages=[{"role": "user", "content": "something else"}]
    )
    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 1000
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert 0 < second.usage.input_tokens < 20


async def test_script_exhausted_answers_500_and_is_not_retried(scripted_model_server):
    server = scripted_model_server([reply(text("only one"))])
    client = claude(server)
    await client.messages.create(model="m", max_tokens=8, messages=USER)
    with pytest.raises(anthropic.InternalServerError, match="script is exhausted"):
        await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert len(server.model_requests) == 2


async def test_default_reply_answers_after_the_script(scripted_model_server):
    server = scripted_model_server([reply(text("one"))], default=reply(text("again")))
    client = claude(server)
    texts = [(await client.messages.create(model="m", max_tokens=8, messages=USER)).content[0].text for _ in range(3)]
    assert texts == ["one", "again", "again"]


async def test_async_context_manager():
    async with ScriptedModelServer([reply(text("hi"))]) as server:
        message = await claude(server).messages.create(model="m", max_tokens=8, messages=USER)
        assert message.content[0].text == "hi"
    assert not server.running


# -- OpenAI Responses -----------------------------------------------------------------------

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
    },
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
]


async def test_responses_stream_with_function_call_and_custom_tool(scripted_model_server):
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    server = scripted_model_server(
        [
            reply(
                thinking("plan"),
                text("Running it."),
                tool_call("shell", {"command": ["ls"]}),
                tool_call("apply_patch", patch),
            )
        ]
    )
    stream = await gpt(server).responses.create(model="gpt-5", input="go", tools=RESPONSES_TOOLS, stream=True)
    kinds, completed = [], None
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.completed":
            completed = event.response
    assert kinds[:2] == ["response.created", "response.in_progress"]
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.function_call_arguments.delta",
    ):
        assert kind in kinds
    assert kinds[-1] == "response.completed"
    reasoning, message, call, custom = completed.output
    assert reasoning.type == "reasoning" and message.content[0].text == "Running it."
    assert call.type == "function_call" and json.loads(call.arguments) == {"command": ["ls"]}
    assert call.call_id.startswith("call_")
    assert custom.type == "custom_tool_call" and custom.input == patch
    usage = completed.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0


async def test_responses_json_and_automatic_prefix_cache(scripted_model_server):
    server = scripted_model_server(default=reply(text("ok")))
    client = gpt(server)
    long_instructions = "Follow the rules. " * 100
    first = await client.responses.create(model="gpt-5", instructions=long_instructions, input="a")
    second = await client.responses.create(model="gpt-5", instructions=long_instructions, input="b")
    assert first.output_text == "ok" and first.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens_details.cached_tokens > 400
    models = await client.models.list()
    assert "gpt-5" in [model.id for model in models.data]


async def test_responses_faults(scripted_model_server):
    server = scripted_model_server([http_error(429, "slow down"), disconnect(after_events=4)])
    client = gpt(server, max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        await client.responses.create(model="gpt-5", input="go")
    assert caught.value.body["message"] == "slow down"
    with pytest.raises(Exception) as caught:
        stream = await client.responses.create(model="gpt-5", input="go", stream=True)
        async for _ in stream:
            pass
    assert_dropped(caught)


# -- OpenAI Chat Completions ----------------------------------------------------------------

CHAT_TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]


async def test_chat_completions_stream_with_tool_calls_and_usage(scripted_model_server):
    server = scripted_model_server(
        [
            reply(
                text("Let me look."),
                tool_call("shell", {"command": "ls -la /tmp and more"}),
                tool_call("shell", {"command": "pwd"}),
            )
        ]
    )
    stream = await gpt(server).chat.completions.create(
        model="gpt-4o", messages=USER, tools=CHAT_TOOLS, stream=True, stream_options={"include_usage": True}
    )
    content, calls, finish, usage = "", {}, None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = entry["id"] or delta.id
                entry["name"] += delta.function.name or ""
                entry["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert content == "Let me look."
    assert finish == "tool_calls"
    assert [json.loads(calls[i]["arguments"]) for i in (0, 1)] == [
        {"command": "ls -la /tmp and more"},
        {"command": "pwd"},
    ]
    assert all(call["id"].startswith("call_") and call["name"] == "shell" for call in calls.values())
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_chat_completions_json_and_faults(scripted_model_server):
    server = scripted_model_server(
        [reply(text("plain")), http_error(500), disconnect(after_events=2), reply(tool_call("shell", {"c": 1}))]
    )
    client = gpt(server, max_retries=0)
    completion = await client.chat.completions.create(model="gpt-4o", messages=USER)
    assert completion.choices[0].message.content == "plain" and completion.choices[0].finish_reason == "stop"
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="gpt-4o", messages=USER)
    with pytest.raises(Exception) as caught:
        async for _ in await client.chat.completions.create(model="gpt-4o", messages=USER, stream=True):
            pass
    assert_dropped(caught)
    completion = await client.chat.completions.create(model="gpt-4o", messages=USER)
    assert completion.choices[0].finish_reason == "tool_calls"
    assert json.loads(completion.choices[0].message.tool_calls[0].function.arguments) == {"c": 1}


# -- Request helpers (pure logic) ----------------------------------------------------------


def test_model_request_helpers_read_every_wire():
    from agenter.testing.records import Headers
    from agenter.testing.wires import AnthropicWire, OpenAIChatWire, OpenAIResponsesWire

    headers = Headers({"X-Test": "1"})
    anthropic_request = AnthropicWire().parse(
        {
            "model": "m",
            "system": [{"type": "text", "text": "sys"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "do it"}]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "ok"}],
                            "is_error": True,
                        }
                    ],
                },
            ],
        },
        headers,
        "/v1/messages",
    )
    assert anthropic_request.last_user_text == "do it" and anthropic_request.system_text == "sys"
    assert anthropic_request.tool_results == [{"id": "t1", "output": "ok", "is_error": True}]
    responses_request = OpenAIResponsesWire().parse(
        {
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {"type": "function_call_output", "call_id": "c1", "output": "done"},
            ],
            "tools": RESPONSES_TOOLS,
        },
        headers,
        "/v1/responses",
    )
    assert responses_request.last_user_text == "go"
    assert responses_request.tool_results == [{"id": "c1", "output": "done", "is_error": False}]
    assert responses_request.tool_type("apply_patch") == "custom" and responses_request.tool_names == [
        "shell",
        "apply_patch",
    ]
    chat_request = OpenAIChatWire().parse(
        {
            "messages": [{"role": "system", "content": "s"}, {"role": "tool", "tool_call_id": "c2", "content": "out"}],
            "tools": CHAT_TOOLS,
        },
        headers,
        "/v1/chat/completions",
    )
    assert chat_request.system == "s" and chat_request.tool_names == ["shell"]
    assert chat_request.tool_results == [{"id": "c2", "output": "out", "is_error": False}]
    assert headers["x-test"] == headers.get("X-TEST") == "1" and "X-Test" in headers


# -- Packaging --------------------------------------------------------------------------------


def test_import_does_not_pull_in_model_sdks():
    code = "import sys, agenter.testing; print(sorted({'anthropic', 'openai'} & set(sys.modules)))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
