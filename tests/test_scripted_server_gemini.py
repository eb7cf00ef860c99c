"""The scripted model server's Gemini wire, over plain HTTP (httpx) and with the real Gemini CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenter.testing import (
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

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_PATH = "/v1beta/models/gemini-2.5-pro"
WRITE_FILE = {
    "name": "write_file",
    "description": "Write a file.",
    "parametersJsonSchema": {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
    },
}
BODY: dict[str, Any] = {
    "contents": [{"role": "user", "parts": [{"text": "Create calc.py"}]}],
    "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
    "tools": [{"functionDeclarations": [WRITE_FILE]}, {"googleSearch": {}}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
}


def client(server: ScriptedModelServer, **kwargs: Any) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"x-goog-api-key": "secret-key-1"}, **kwargs)


def stream_events(http: httpx.Client, path: str, body: Any = BODY) -> tuple[list[dict[str, Any]], Exception | None]:
    """The SSE events of a streamed call, and the error that ended the stream early (if any)."""
    events: list[dict[str, Any]] = []
    try:
        with http.stream("POST", path, params={"alt": "sse"}, json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: ") :]))
    except httpx.HTTPError as exc:
        return events, exc
    return events, None


def candidate(response: dict[str, Any]) -> dict[str, Any]:
    (only,) = response["candidates"]
    return only


# -- generateContent (JSON) -----------------------------------------------------------------


def test_generate_content_renders_thinking_text_and_a_function_call(scripted_model_server):
    server = scripted_model_server(
        [
            reply(
                thinking("The user wants a module."),
                text("Writing calc.py."),
                tool_call("write_file", {"file_path": "calc.py", "content": "x = 1\n"}, id="call_1"),
            )
        ]
    )
    with client(server) as http:
        answer = http.post(f"{MODEL_PATH}:generateContent", json=BODY).json()
    first = candidate(answer)
    assert first["finishReason"] == "STOP" and first["index"] == 0
    assert first["content"]["role"] == "model"
    thought, said, call = first["content"]["parts"]
    assert thought == {"text": "The user wants a module.", "thought": True}
    assert said == {"text": "Writing calc.py."}
    assert call["functionCall"] == {
        "id": "call_1",
        "name": "write_file",
        "args": {"file_path": "calc.py", "content": "x = 1\n"},
    }
    assert call["thoughtSignature"]  # thinking models sign their first call
    assert answer["modelVersion"] == "gemini-2.5-pro" and answer["responseId"]
    usage = answer["usageMetadata"]
    assert usage["promptTokenCount"] > 0 and usage["candidatesTokenCount"] > 0 and usage["thoughtsTokenCount"] > 0
    assert usage["totalTokenCount"] == (
        usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
    )
    assert usage["cachedContentTokenCount"] == 0


def test_the_request_log_holds_the_gemini_request_with_the_key_redacted(scripted_model_server):
    server = scripted_model_server([reply(text("one")), reply(text("two"))])
    with httpx.Client(base_url=server.base_url) as http:
        http.post(f"{MODEL_PATH}:generateContent", params={"key": "secret-key-2"}, json=BODY)
    with client(server) as http:
        stream_events(http, "/v1/models/gemini-2.5-flash:streamGenerateContent")
    first, second = server.model_requests
    assert first.wire == second.wire == "gemini"
    assert first.query["key"] == ["[redacted]"] and "secret-key-2" not in repr(first)
    assert second.headers["x-goog-api-key"] == "[redacted]" and second.query["alt"] == ["sse"]
    assert second.model_request is not None and second.model_request.headers["x-goog-api-key"] == "[redacted]"
    request = first.model_request
    assert request is not None
    assert (request.model, request.stream, second.model_request.model, second.model_request.stream) == (
        "gemini-2.5-pro",
        False,
        "gemini-2.5-flash",
        True,
    )
    assert request.messages == BODY["contents"]
    # Each function declaration is one tool; other tools (googleSearch) are kept as sent.
    assert request.tools == [WRITE_FILE, {"googleSearch": {}}]
    assert request.tool_names == ["write_file"]
    assert request.system_text == "You are a coding agent."
    assert request.last_user_text == "Create calc.py"


def test_every_api_version_prefix_is_served(scripted_model_server):
    server = scripted_model_server(default=reply(text("ok")))
    with client(server) as http:
        for version in ("v1", "v1beta", "v1alpha"):
            answer = http.post(f"/{version}/models/gemini-2.5-flash:generateContent", json=BODY)
            assert answer.status_code == 200 and candidate(answer.json())["content"]["parts"] == [{"text": "ok"}]
    assert [r.path for r in server.model_requests] == [
        f"/{version}/models/gemini-2.5-flash:generateContent" for version in ("v1", "v1beta", "v1alpha")
    ]


def test_snake_case_fields_are_read_as_well(scripted_model_server):
    server = scripted_model_server([reply(text("ok"))])
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "system_instruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"function_declarations": [WRITE_FILE]}],
    }
    with client(server) as http:
        assert http.post(f"{MODEL_PATH}:generateContent", json=body).status_code == 200
    request = server.model_requests[0].model_request
    assert request is not None and request.tool_names == ["write_file"] and request.system_text == "Be brief."


# -- streamGenerateContent (SSE) ------------------------------------------------------------


def test_stream_sends_text_in_pieces_a_call_whole_and_the_finish_last(scripted_model_server):
    long_text = "Writing the calculator module now, with care. " * 3
    server = scripted_model_server(
        [
            reply(
                thinking("Plan: one file."),
                text(long_text),
                tool_call("write_file", {"file_path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
                tool_call("write_file", {"file_path": "test_calc.py", "content": "from calc import add\n"}),
            )
        ]
    )
    with client(server) as http:
        events, error = stream_events(http, f"{MODEL_PATH}:streamGenerateContent")
    assert error is None
    parts = [part for event in events for part in candidate(event)["content"]["parts"]]
    assert all(len(candidate(event)["content"]["parts"]) == 1 for event in events)
    assert "".join(p["text"] for p in parts if p.get("thought")) == "Plan: one file."
    said = [p["text"] for p in parts if "text" in p and not p.get("thought")]
    assert len(said) > 1 and "".join(said) == long_text
    calls = [p for p in parts if "functionCall" in p]
    assert [c["functionCall"]["name"] for c in calls] == ["write_file", "write_file"]
    assert calls[0]["functionCall"]["args"]["file_path"] == "calc.py"
    assert calls[0]["functionCall"]["id"] != calls[1]["functionCall"]["id"]
    assert "thoughtSignature" in calls[0] and "thoughtSignature" not in calls[1]
    # Only the last event finishes; every event names the model and carries usage.
    assert [("finishReason" in candidate(e)) for e in events] == [False] * (len(events) - 1) + [True]
    assert candidate(events[-1])["finishReason"] == "STOP"
    assert {e["modelVersion"] for e in events} == {"gemini-2.5-pro"} and len({e["responseId"] for e in events}) == 1
    assert events[0]["usageMetadata"]["candidatesTokenCount"] == 0
    final = events[-1]["usageMetadata"]
    assert final["candidatesTokenCount"] > 0 and final["thoughtsTokenCount"] > 0


def test_an_empty_reply_still_streams_one_finished_event(scripted_model_server):
    server = scripted_model_server([reply()])
    with client(server) as http:
        events, error = stream_events(http, f"{MODEL_PATH}:streamGenerateContent")
    assert error is None and len(events) == 1
    assert candidate(events[0])["content"]["parts"] == [{"text": ""}]
    assert candidate(events[0])["finishReason"] == "STOP"


def test_refusal_is_a_safety_stop_and_max_tokens_maps(scripted_model_server):
    server = scripted_model_server(
        [refusal_reply("I can't help with that."), reply(text("cut"), stop_reason="max_tokens")]
    )
    with client(server) as http:
        events, _ = stream_events(http, f"{MODEL_PATH}:streamGenerateContent")
        truncated = http.post(f"{MODEL_PATH}:generateContent", json=BODY).json()
    last = candidate(events[-1])
    assert last["finishReason"] == "SAFETY"
    assert last["safetyRatings"][0]["blocked"] is True
    assert "".join(p["text"] for e in events for p in candidate(e)["content"]["parts"]) == "I can't help with that."
    assert candidate(truncated)["finishReason"] == "MAX_TOKENS"


# -- usage and the implicit prompt cache ----------------------------------------------------


def test_repeated_prefix_is_reported_as_cached_and_usage_can_be_set(scripted_model_server):
    usage = {"input_tokens": 500, "output_tokens": 40, "cache_read_input_tokens": 1500, "reasoning_tokens": 10}
    server = scripted_model_server([reply(text("a")), reply(text("b")), reply(thinking("t"), text("c"), usage=usage)])
    longer = {**BODY, "contents": [*BODY["contents"], {"role": "model", "parts": [{"text": "a"}]}]}
    with client(server) as http:
        first = http.post(f"{MODEL_PATH}:generateContent", json=BODY).json()["usageMetadata"]
        second = http.post(f"{MODEL_PATH}:generateContent", json=longer).json()["usageMetadata"]
        forced = http.post(f"{MODEL_PATH}:generateContent", json=BODY).json()["usageMetadata"]
    assert first["cachedContentTokenCount"] == 0
    assert 0 < second["cachedContentTokenCount"] < second["promptTokenCount"]
    assert second["cachedContentTokenCount"] == first["promptTokenCount"]
    # promptTokenCount includes the cached part; candidates exclude the thoughts.
    assert forced == {
        "promptTokenCount": 2000,
        "candidatesTokenCount": 30,
        "totalTokenCount": 2040,
        "cachedContentTokenCount": 1500,
        "thoughtsTokenCount": 10,
    }


# -- countTokens and the model list ---------------------------------------------------------


def test_count_tokens_does_not_consume_the_script(scripted_model_server):
    server = scripted_model_server([reply(text("turn"))])
    bigger = {"contents": [{"role": "user", "parts": [{"text": "Create calc.py " * 50}]}]}
    with client(server) as http:
        small = http.post(f"{MODEL_PATH}:countTokens", json={"contents": BODY["contents"]}).json()
        large = http.post(f"{MODEL_PATH}:countTokens", json=bigger).json()
        whole = http.post(
            f"{MODEL_PATH}:countTokens", json={"generateContentRequest": {"model": "models/gemini-2.5-pro", **BODY}}
        ).json()
        turn = http.post(f"{MODEL_PATH}:generateContent", json=BODY).json()
    assert 0 < small["totalTokens"] < large["totalTokens"]
    assert whole["totalTokens"] > small["totalTokens"]  # tools and the system instruction count too
    assert candidate(turn)["content"]["parts"] == [{"text": "turn"}]
    assert [r.kind for r in server.requests] == ["count_tokens"] * 3 + ["model"]
    assert server.requests[0].headers["x-goog-api-key"] == "[redacted]"


def test_model_list_in_gemini_shape_only_for_gemini_requests(scripted_model_server):
    server = scripted_model_server()
    with httpx.Client(base_url=server.base_url) as http:
        gemini = http.get("/v1beta/models").json()
        openai_list = http.get("/v1/models").json()
    assert "models/gemini-2.5-pro" in [m["name"] for m in gemini["models"]]
    assert openai_list["object"] == "list"
    assert [r.wire for r in server.requests] == ["gemini", "openai-responses"]


# -- faults ---------------------------------------------------------------------------------


def test_http_errors_use_the_google_error_shape(scripted_model_server):
    server = scripted_model_server(
        [
            http_error(429, "Resource has been exhausted"),
            http_error(500, "boom"),
            http_error(400, "bad", error_type="FAILED_PRECONDITION"),
        ]
    )
    with client(server) as http:
        limited = http.post(f"{MODEL_PATH}:streamGenerateContent", params={"alt": "sse"}, json=BODY)
        internal = http.post(f"{MODEL_PATH}:generateContent", json=BODY)
        custom = http.post(f"{MODEL_PATH}:generateContent", json=BODY)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "0"
    assert limited.json() == {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.001s"}],
        }
    }
    assert internal.status_code == 500 and internal.json()["error"]["status"] == "INTERNAL"
    assert "details" not in internal.json()["error"]
    assert custom.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert [r.status for r in server.model_requests] == [429, 500, 400]


def test_disconnect_cuts_the_stream_before_the_finish(scripted_model_server):
    server = scripted_model_server([disconnect(after_events=2, reply=reply(text("A long answer. " * 10)))])
    with client(server) as http:
        events, error = stream_events(http, f"{MODEL_PATH}:streamGenerateContent")
    assert isinstance(error, httpx.RemoteProtocolError)
    assert len(events) == 2 and all("finishReason" not in candidate(e) for e in events)


def test_hang_after_events_goes_silent_and_delay_waits(scripted_model_server):
    server = scripted_model_server([hang(after_events=1), reply(text("slow"), delay=0.3)])
    with client(server, timeout=httpx.Timeout(5.0, read=0.5)) as http:
        events, error = stream_events(http, f"{MODEL_PATH}:streamGenerateContent")
        assert isinstance(error, httpx.ReadTimeout) and len(events) == 1
        answer = http.post(f"{MODEL_PATH}:generateContent", json=BODY, timeout=5.0)
    assert answer.elapsed.total_seconds() >= 0.3 and candidate(answer.json())["content"]["parts"] == [{"text": "slow"}]


def test_function_responses_become_tool_results(scripted_model_server):
    seen = []

    def handler(request):
        seen.append(request)
        return reply(text(f"{len(request.tool_results)} results"))

    server = scripted_model_server(handler=handler)
    contents = [
        {"role": "user", "parts": [{"text": "Create calc.py"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "write_file", "args": {}}}]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "call_1", "name": "write_file", "response": {"output": "written"}}},
                {"functionResponse": {"name": "run_shell", "response": {"error": "denied"}}},
            ],
        },
    ]
    with client(server) as http:
        answer = http.post(f"{MODEL_PATH}:generateContent", json={**BODY, "contents": contents}).json()
    assert candidate(answer)["content"]["parts"] == [{"text": "2 results"}]
    (request,) = seen
    assert request.tool_results == [
        {"id": "call_1", "output": "written", "is_error": False},
        {"id": "run_shell", "output": "denied", "is_error": True},  # no id: the name links it
    ]
    assert request.last_user_text == "Create calc.py"  # the function-response turn is skipped


# -- the real Gemini CLI --------------------------------------------------------------------


def gemini_cli() -> str | None:
    local = REPO_ROOT / "node_modules" / ".bin" / "gemini"
    return str(local) if local.exists() else shutil.which("gemini")


@pytest.mark.skipif(gemini_cli() is None, reason="Gemini CLI is not installed (node_modules/.bin or PATH)")
def test_gemini_cli_writes_a_file_through_the_scripted_server(scripted_model_server, tmp_path):
    content = "def add(a, b):\n    return a + b\n"
    server = scripted_model_server(
        [
            reply(
                text("Writing calc.py."),
                tool_call("write_file", {"file_path": "calc.py", "content": content}, id="call_write_1"),
                usage={"input_tokens": 1000, "output_tokens": 20},
            ),
            reply(
                text("Created calc.py with add()."),
                usage={"input_tokens": 200, "cache_read_input_tokens": 1000, "output_tokens": 10},
            ),
        ]
    )
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    (home / ".gemini").mkdir(parents=True)
    workspace.mkdir()
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},  # no Clearcut logging (and no user-id header)
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "telemetry": {"enabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    # Headless Gemini CLI refuses to run in an untrusted folder.
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(workspace): "TRUST_FOLDER"}))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": server.base_url,
        "GEMINI_API_KEY": "dummy-gemini-key",
    }
    command = [gemini_cli() or "gemini", "-p", "Create calc.py with an add function", "-o", "stream-json"]
    # yolo: headless default mode does not even declare write_file; -m: "auto" first asks a
    # router model (a JSON-mode generateContent call) which would take a script item.
    command += ["--approval-mode", "yolo", "-m", "gemini-2.5-flash"]
    proc = subprocess.Popen(
        command,
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        # The CLI relaunches itself as a child in the same process group: end both.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert (workspace / "calc.py").read_text() == content

    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    tool_use = next(e for e in events if e["type"] == "tool_use")
    assert tool_use["tool_name"] == "write_file" and tool_use["parameters"] == {
        "file_path": "calc.py",
        "content": content,
    }
    assert next(e for e in events if e["type"] == "tool_result")["status"] == "success"
    # Assistant text arrives as deltas, one per SSE event.
    after_tool = events[events.index(tool_use) :]
    said = "".join(e["content"] for e in after_tool if e["type"] == "message" and e["role"] == "assistant")
    assert said == "Created calc.py with add()."
    result = events[-1]
    assert result["type"] == "result" and result["status"] == "success"
    # The usage the script set reaches the CLI's own accounting.
    stats = result["stats"]
    assert (stats["input_tokens"], stats["cached"], stats["output_tokens"]) == (2200, 1000, 30)

    first, second = server.model_requests
    assert all(r.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent" for r in (first, second))
    assert first.query == {"alt": ["sse"]} and first.headers["x-goog-api-key"] == "[redacted]"
    assert "dummy-gemini-key" not in repr(server.requests)
    assert first.model_request is not None and second.model_request is not None
    assert "write_file" in first.model_request.tool_names
    assert "Create calc.py with an add function" in first.model_request.last_user_text
    (result_seen,) = second.model_request.tool_results
    assert result_seen["id"] == "call_write_1" and "calc.py" in result_seen["output"] and not result_seen["is_error"]


def test_a_response_without_calls_signs_its_last_part(scripted_model_server):
    """As Gemini 3 does: no function call, so the thinking's signature is on the last part;
    streamed, on an empty text piece after the text (the real API's last chunk)."""
    server = scripted_model_server([reply(thinking("Nothing to change."), text("All good here.")),
                                    reply(thinking("Still nothing."), text("Fine."))])
    with client(server) as http:
        answer = http.post(f"{MODEL_PATH}:generateContent", json=BODY).json()
        events, error = stream_events(http, f"{MODEL_PATH}:streamGenerateContent")
    thought, said = candidate(answer)["content"]["parts"]
    assert "thoughtSignature" not in thought and said["text"] == "All good here." and said["thoughtSignature"]
    assert error is None
    parts = [part for event in events for part in candidate(event)["content"]["parts"]]
    assert [p["thoughtSignature"] for p in parts if "thoughtSignature" in p] == [parts[-1]["thoughtSignature"]]
    assert parts[-1] == {"text": "", "thoughtSignature": parts[-1]["thoughtSignature"]}
    assert "".join(p["text"] for p in parts if not p.get("thought")) == "Fine."
    assert candidate(events[-1])["finishReason"] == "STOP"
