"""The one failure classifier (agenter.backends._failures): a table of real provider answers and
agent-program texts, then end to end: anthropic-sdk answered Anthropic's 400 "credit balance is
too low" raises kind quota, and a fallback chain starting with it moves on and completes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from agenter import AutonomousCodingAgent, CodingStatus
from agenter._errors import ERROR_KINDS, BackendError
from agenter.backends._failures import (
    ANOTHER_BACKEND_MAY_FIX,
    KIND_ORDER,
    KNOWN_FAILURES,
    Failure,
    classify,
    classify_failure,
    error_message,
    error_type,
    kind_of_type,
)
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.backends.fallback import DEFAULT_FALLBACK_ON
from agenter.backends.model_api.anthropic_sdk import AnthropicSDKBackend, AnthropicSDKOptions
from agenter.testing import FunctionBackend, ScriptedModelServer, TurnContext, http_error, reply, tool_call

API_KEY = "sk-test-FAILURES-0123456789abcdef"
#: Anthropic's answer when the account has no credit left (HTTP 400).
CREDIT = ("Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade "
          "or purchase credits.")
OPENAI_QUOTA = ("You exceeded your current quota, please check your plan and billing details. For more "
                "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.")


def anthropic(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011"}


def openai(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def gemini(status: int, message: str, name: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": name}}


#: (who, HTTP status, JSON body as the provider sends it, kind, retried)
PAYLOADS: list[tuple[str, int, Any, str, bool]] = [
    # Anthropic Messages API
    ("anthropic credit balance", 400, anthropic("invalid_request_error", CREDIT), "quota", False),
    ("anthropic billing", 402, anthropic("billing_error", "There is an issue with your payment information."),
     "quota", False),
    ("anthropic spend limit", 400, anthropic("invalid_request_error", "You have reached your specified API usage "
                                                                      "limits. You will regain access on 2026-04-01 "
                                                                      "at 00:00 UTC."), "quota", False),
    ("anthropic prompt too long", 400, anthropic("invalid_request_error",
                                                 "prompt is too long: 210000 tokens > 200000 maximum"),
     "context_length", False),
    ("anthropic prompt too long, capital", 400, anthropic("invalid_request_error", "Prompt is too long"),
     "context_length", False),
    ("anthropic context limit", 400, anthropic("invalid_request_error",
                                               "input length and `max_tokens` exceed context limit: 199000 + 21333 > "
                                               "200000, decrease input length or `max_tokens` and try again"),
     "context_length", False),
    ("anthropic bad request", 400, anthropic("invalid_request_error", "messages.1.content: tool_use ids must be unique"),
     "config", False),
    ("anthropic 500 stays transient", 500, anthropic("api_error", "prompt is too long"), "transient", True),
    ("anthropic bad key", 401, anthropic("authentication_error", "invalid x-api-key"), "auth", False),
    ("anthropic forbidden", 403, anthropic("permission_error",
                                           "Your API key does not have permission to use the specified resource."),
     "auth", False),
    ("anthropic no model", 404, anthropic("not_found_error", "model: claude-nope"), "config", False),
    ("anthropic too large", 413, anthropic("request_too_large", "Request exceeds the maximum allowed number of bytes."),
     "context_length", False),
    ("anthropic rate limit", 429, anthropic("rate_limit_error", "This request would exceed the rate limit for your "
                                                                "organization of 50 requests per minute."),
     "rate_limit", True),
    ("anthropic overloaded", 529, anthropic("overloaded_error", "Overloaded"), "transient", True),
    ("anthropic overloaded inside a 200 stream", 200, anthropic("overloaded_error", "Overloaded"), "transient", True),
    ("anthropic internal", 500, anthropic("api_error", "Internal server error"), "transient", True),
    # OpenAI (the wire's shape; the openai client passes the inner object, read the same)
    ("openai insufficient quota", 429, openai(OPENAI_QUOTA, "insufficient_quota", "insufficient_quota"), "quota",
     False),
    ("openai insufficient quota, inner object", 429,
     openai(OPENAI_QUOTA, "insufficient_quota", "insufficient_quota")["error"], "quota", False),
    ("openai rate limit", 429, openai("Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
                                      "Limit 30000, Used 29000, Requested 2000. Please try again in 2s.", "tokens",
                                      "rate_limit_exceeded"), "rate_limit", True),
    ("openai request too large for the TPM limit", 429, openai(
        "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 45000.",
        "tokens", "rate_limit_exceeded"), "rate_limit", True),
    ("openai context length", 400, openai("This model's maximum context length is 128000 tokens. However, your "
                                          "messages resulted in 130000 tokens. Please reduce the length of the "
                                          "messages.", "invalid_request_error", "context_length_exceeded"),
     "context_length", False),
    ("llama.cpp context size", 400, {"error": {"code": 400, "message": "request (4476 tokens) exceeds the available "
                                                                   "context size (4096 tokens)",
                                                "type": "exceed_context_size_error", "n_prompt_tokens": 4476,
                                                "n_ctx": 4096}}, "context_length", False),
    ("openai bad key", 401, openai("Incorrect API key provided: sk-abc. You can find your API key at "
                                   "https://platform.openai.com/account/api-keys.", "invalid_request_error",
                                   "invalid_api_key"), "auth", False),
    ("openai server error", 500, openai("The server had an error while processing your request. Sorry about that!",
                                        "server_error", None), "transient", True),
    ("openai overloaded", 503, openai("The engine is currently overloaded, please try again later", "server_error",
                                      None), "transient", True),
    ("openai format refused", 400, openai("response_format json_schema is not supported by this server",
                                          "invalid_request_error", None), "config", False),
    ("openai no such model", 400, openai("model 'x' does not exist", "invalid_request_error", None), "config", False),
    ("openai slow down", 429, openai("slow down", "requests", "rate_limit_exceeded"), "rate_limit", True),
    # Gemini (the generativelanguage API; its OpenAI-compatible endpoint sends the same in a list)
    ("gemini rate limit", 429, gemini(429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED"),
     "rate_limit", True),
    ("gemini rate limit, listed", 429,
     [gemini(429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED")], "rate_limit", True),
    ("gemini free tier quota", 429, gemini(429, "You exceeded your current quota, please check your plan and billing "
                                                "details. * Quota exceeded for metric: generativelanguage.googleapis"
                                                ".com/generate_content_free_tier_requests, limit: 0",
                                           "RESOURCE_EXHAUSTED"), "quota", True),
    ("gemini bad key", 400, gemini(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT"), "auth",
     False),
    ("gemini too many tokens", 400, gemini(400, "The input token count (1200000) exceeds the maximum number of tokens "
                                                "allowed (1048576).", "INVALID_ARGUMENT"), "context_length", False),
    ("gemini location", 400, gemini(400, "User location is not supported for the API use.", "FAILED_PRECONDITION"),
     "config", False),
    ("gemini unregistered caller", 403, gemini(403, "Method doesn't allow unregistered callers (callers without "
                                                    "established identity). Please use API Key or other form of API "
                                                    "consumer identity to call this API.", "PERMISSION_DENIED"),
     "auth", False),
    ("gemini overloaded", 503, gemini(503, "The model is overloaded. Please try again later.", "UNAVAILABLE"),
     "transient", True),
    ("gemini internal", 500, gemini(500, "An internal error has occurred. Please retry or report in "
                                         "https://developers.generativeai.google/guide/troubleshooting", "INTERNAL"),
     "transient", True),
]


@pytest.mark.parametrize(("status", "body", "kind", "retried"), [p[1:] for p in PAYLOADS],
                         ids=[p[0] for p in PAYLOADS])
def test_provider_answers(status: int, body: Any, kind: str, retried: bool):
    exc = SimpleNamespace(body=body, message="fallback text")
    failure = Failure(error_message(exc), status, error_type=error_type(body))
    verdict = classify_failure(failure)
    assert (verdict.kind, verdict.retry) == (kind, retried)
    assert failure.message != "fallback text"  # the provider's own message was read


#: (LiteLLM exception name, its status, its message, kind, retried): LiteLLM's exceptions subclass
#: openai's and mostly carry no body, so the class name is the error type.
LITELLM: list[tuple[str, int, str, str, bool]] = [
    ("RateLimitError", 429, "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached",
     "rate_limit", True),
    ("RateLimitError", 429, f"litellm.RateLimitError: RateLimitError: OpenAIException - {OPENAI_QUOTA}", "quota", True),
    ("ContextWindowExceededError", 400, "litellm.ContextWindowExceededError: the conversation does not fit",
     "context_length", False),
    ("AuthenticationError", 401, "litellm.AuthenticationError: AuthenticationError: OpenAIException - bad key",
     "auth", False),
    ("BadRequestError", 400, f"litellm.BadRequestError: AnthropicException - {anthropic('invalid_request_error', CREDIT)}",
     "quota", False),
    ("BadRequestError", 400, "litellm.BadRequestError: OpenAIException - Invalid value for 'temperature'", "config",
     False),
    ("PaymentRequiredError", 402, "litellm.PaymentRequiredError: Insufficient Balance", "quota", False),
    ("NotFoundError", 404, "litellm.NotFoundError: The model `gpt-x` does not exist", "config", False),
    ("ServiceUnavailableError", 503, "litellm.ServiceUnavailableError: service unavailable", "transient", True),
    ("InternalServerError", 500, "litellm.InternalServerError: InternalServerError: boom", "transient", True),
]


@pytest.mark.parametrize(("name", "status", "message", "kind", "retried"), LITELLM)
def test_litellm_exceptions(name: str, status: int, message: str, kind: str, retried: bool):
    verdict = classify_failure(Failure(message, status, error_type=name))
    assert (verdict.kind, verdict.retry) == (kind, retried)


#: (program, what it printed, kind, status): the texts the CLI backends hand to `classify`.
TEXTS: list[tuple[str, str, str, int | None]] = [
    ("aider", "litellm.RateLimitError: RateLimitError: OpenAIException - too many requests", "rate_limit", None),
    ("aider", "litellm.ContextWindowExceededError: the conversation does not fit", "context_length", None),
    ("aider", "litellm.APIConnectionError: APIConnectionError: OpenAIException - Connection error.", "transient",
     None),
    ("aider", "litellm.NotFoundError: NotFoundError: OpenAIException - The model `gpt-x` does not exist", "config",
     None),
    ("aider", "litellm.BudgetExceededError: Budget has been exceeded", "quota", None),
    ("claude", "Credit balance is too low", "quota", None),
    ("claude", 'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"' + CREDIT + '"}}',
     "quota", 400),
    ("claude", 'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"input length and '
               '`max_tokens` exceed context limit: 199000 + 21333 > 200000"}}', "context_length", 400),
    ("claude", 'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
               'long: 210000 tokens > 200000 maximum"}}', "context_length", 400),
    ("claude", 'API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"Number of request '
               'tokens has exceeded your per-minute rate limit"}}', "rate_limit", 429),
    ("claude", 'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
     "transient", 529),
    ("claude", "API Error: 402 payment required", "quota", 402),
    ("claude", "Invalid API key · Please run /login", "auth", None),
    ("claude", "Claude AI usage limit reached|1750000000", "quota", None),
    ("claude", "API Error: Server is temporarily limiting requests (not your usage limit) · Rate limited", "rate_limit",
     None),
    ("codex", "unexpected status 401 Unauthorized: Incorrect API key provided", "auth", 401),
    ("codex", "exceeded retry limit, last status: 429 Too Many Requests", "rate_limit", 429),
    ("codex", "stream disconnected before completion: error sending request for url (http://127.0.0.1:9/v1/responses)",
     "transient", None),
    ("codex", "You've hit your usage limit. Upgrade to Pro or try again in 3 days.", "quota", None),
    ("codex", "We're currently experiencing high demand, which may cause temporary errors.", "transient", None),
    ("gemini", '[API Error: {"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).",'
               '"status":"RESOURCE_EXHAUSTED"}}]', "rate_limit", 429),
    ("gemini", '{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.",'
               '"status":"INVALID_ARGUMENT"}}', "auth", 400),
    ("gemini", "TerminalQuotaError: You have exhausted your daily quota on this model.", "quota", None),
    ("gemini", "[API Error: got status: UNAVAILABLE. The model is overloaded.]", "transient", None),
    ("opencode", 'APIError: {"name":"APIError","data":{"message":"Insufficient credits","statusCode":402,'
                 '"isRetryable":false}}', "quota", 402),
    ("opencode", 'APIError: {"message":"Rate limit exceeded","statusCode":429}', "rate_limit", 429),
    ("any", "HTTP 500 Internal Server Error", "transient", 500),
    ("any", "request failed with status code 404", "config", 404),
    ("any", "segmentation fault", "unknown", None),
]


@pytest.mark.parametrize(("program", "text", "kind", "status"), TEXTS)
def test_program_texts(program: str, text: str, kind: str, status: int | None):
    assert classify(text) == (kind, status)


def test_a_status_given_wins_over_the_one_in_the_text():
    assert classify("upstream said 500", 429) == ("rate_limit", 429)
    assert classify("exceeded your current quota", 429) == ("quota", 429)


def test_the_status_decides_where_it_is_not_ambiguous():
    # Words may refine 400/403/413/429 only: a 500 or a 401 keeps its status's kind.
    assert classify_failure(Failure(CREDIT, 500)).kind == "transient"
    assert classify_failure(Failure("billing account disabled", 401)).kind == "auth"
    assert classify_failure(Failure("quota exceeded", 403)).kind == "quota"
    assert classify_failure(Failure("rate limit", 400)).kind == "config"


def test_retry_rules():
    dropped = classify_failure(Failure("refused", connection=True))
    assert (dropped.kind, dropped.retry) == ("transient", True)
    assert [classify_failure(Failure("x", s)).retry for s in (408, 409, 429, 500, 529, 400, 401, 404)] == [
        True, True, True, True, True, False, False, False]
    stop = classify_failure(Failure("x", 503, {"x-should-retry": "false"}))
    assert (stop.kind, stop.retry) == ("transient", False)
    later = classify_failure(Failure("x", 429, {"retry-after": "3"}))
    assert later.wait(0, 4, 60) == 3.0 and later.wait(0, 4, 1.5) == 1.5  # host.retry's policy
    assert later.wait(4, 4, 60) is None  # retries used up
    assert classify_failure(Failure("x", 400)).wait(0, 4, 60) is None


def test_error_bodies_are_read_in_every_shape():
    assert error_type(openai("m", "tokens", "rate_limit_exceeded")) == "rate_limit_exceeded"  # the known one
    assert error_type(openai("m", "invalid_request_error", None)) == "invalid_request_error"
    assert error_type(openai("m", "weird_type", "weird_code")) == "weird_code"  # unknown: the first given
    assert error_type(anthropic("overloaded_error", "Overloaded")) == "overloaded_error"
    assert error_type({"type": "error"}) is None and error_type(None) is None and error_type("text") is None
    assert error_message(SimpleNamespace(body={"error": "plain"}, message="m")) == "plain"
    assert error_message(SimpleNamespace(body=None, message="the SDK's text")) == "the SDK's text"
    assert error_message(ValueError("no body")) == "no body"


def test_the_table_is_one_vocabulary():
    types = [name for row in KNOWN_FAILURES for name in row.types]
    assert len(types) == len(set(types)), "an error type is listed twice"
    assert {row.kind for row in KNOWN_FAILURES} == set(KIND_ORDER) <= set(ERROR_KINDS)
    assert [KIND_ORDER.index(row.kind) for row in KNOWN_FAILURES] == sorted(
        KIND_ORDER.index(row.kind) for row in KNOWN_FAILURES)  # listed in the order that decides
    for row in KNOWN_FAILURES:
        for phrase in row.phrases:
            re.compile(phrase)
    assert kind_of_type("contextWindowExceeded") == "context_length" and kind_of_type("nope") is None
    assert DEFAULT_FALLBACK_ON == ANOTHER_BACKEND_MAY_FIX and set(ANOTHER_BACKEND_MAY_FIX) <= set(ERROR_KINDS)


# ---------------------------------------------------------------------- end to end


def make_backend(server: ScriptedModelServer) -> AnthropicSDKBackend:
    options = AnthropicSDKOptions(api_key=API_KEY, base_url=server.base_url, max_retry_wait=0.0)
    settings = BackendSettings(model=None, tools=[], sandbox=False, options=options)
    AnthropicSDKBackend.check_settings(settings)
    return AnthropicSDKBackend(settings)


@pytest.mark.agent
async def test_anthropic_sdk_out_of_credit_is_a_quota_error(tmp_path: Path):
    with ScriptedModelServer([http_error(400, CREDIT)]) as server:
        backend = make_backend(server)
        await backend.connect(SessionSpec(cwd=tmp_path))
        try:
            with pytest.raises(BackendError) as caught:
                async for _ in backend.execute("Do the task."):
                    pass
        finally:
            await backend.disconnect()
    error = caught.value
    assert (error.kind, error.status_code) == ("quota", 400)
    assert "credit balance is too low" in str(error) and "invalid_request_error" in str(error)
    assert [r.status for r in server.model_requests] == [400]  # not retried
    assert API_KEY not in str(error)


class Healthy(FunctionBackend):
    name: ClassVar[str] = "healthy"


def complete(ctx: TurnContext) -> str:
    ctx.write("done.py", "x = 1\n")
    return "done"


@pytest.mark.agent
async def test_a_chain_moves_on_from_anthropic_sdk_out_of_credit_and_completes(tmp_path: Path):
    script = [reply(tool_call("write_file", {"path": "half.py", "content": "x = \n"})), http_error(400, CREDIT)]
    with ScriptedModelServer(script) as server:
        first = ("anthropic-sdk", {"api_key": API_KEY, "base_url": server.base_url, "max_retry_wait": 0.0})
        agent = AutonomousCodingAgent(backend=[first, (Healthy, {"turn": complete})], sandbox=False)
        result = await agent.execute("Write done.py", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.error
    assert [(a["backend"], a["status"], a["error_kind"]) for a in result.attempts] == [
        ("anthropic-sdk", "failed", "quota"), ("healthy", "completed", None)]
    assert result.attempts[0]["reverted"] == ["half.py"]  # the failed attempt's write was put back
    assert not (tmp_path / "half.py").exists() and (tmp_path / "done.py").read_text() == "x = 1\n"
    assert [r.status for r in server.model_requests] == [200, 400]


async def test_openai_insufficient_quota_is_not_retried(tmp_path: Path):
    # OpenAI's exact answer, sent as a custom body: the quota is gone, no retry can help.
    body = openai(OPENAI_QUOTA, "insufficient_quota", "insufficient_quota")
    with ScriptedModelServer([], default=http_error(429, body=body)) as server:
        agent = AutonomousCodingAgent(backend="openai", model="scripted-model", mode="patch",
                                      base_url=server.openai_base_url, api_key="test-key", max_retry_wait=0.0)
        result = await agent.execute("Create a.py", cwd=tmp_path)
    assert result.status is CodingStatus.ERROR and result.error_kind == "quota"
    assert result.error == f"OpenAI-compatible API error 429: {OPENAI_QUOTA}"
    assert len(server.model_requests) == 1


@pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed")
@pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning")
@pytest.mark.parametrize(("status", "body"), [
    (429, openai(OPENAI_QUOTA, "insufficient_quota", "insufficient_quota")),
    (400, openai(CREDIT, "invalid_request_error", None)),  # a proxy passing Anthropic's answer on
], ids=["insufficient_quota", "credit_balance"])
async def test_litellm_out_of_credit_is_a_quota_error(tmp_path: Path, status: int, body: dict[str, Any]):
    with ScriptedModelServer([], default=http_error(status, body=body)) as server:
        agent = AutonomousCodingAgent(backend="litellm", model="openai/scripted-model", mode="patch",
                                      base_url=server.openai_base_url, api_key="test-key", max_retry_wait=0.0)
        result = await agent.execute("Create a.py", cwd=tmp_path)
    assert result.status is CodingStatus.ERROR and result.error_kind == "quota", result.error
    assert f"LiteLLM error {status}: " in (result.error or "")
    assert len(server.model_requests) == 1  # not retried
