"""docs/migrating.md, row by row: agenter 0.1.7's documented API either still works (with a
DeprecationWarning naming today's spelling) or fails with an error naming its replacement.

Each test is one row of the table (or a few rows about one thing), exercised through the public
API: runs go through the real session with FunctionBackend, or the real anthropic-sdk backend
against the scripted model server where a model has to call something.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import sys
import warnings
from pathlib import Path

import pytest

import agenter
from agenter import (
    AgenterError,
    AutonomousCodingAgent,
    BackendError,
    Budget,
    BudgetExceededError,
    CodingRequest,
    CodingStatus,
    ConfigurationError,
    PathSecurityError,
    SecurityValidator,
    Tool,
    ValidationResult,
    tool,
)
from agenter.testing import FunctionBackend, TurnContext, reply, text, tool_call

DOC = Path(__file__).parents[1] / "docs" / "migrating.md"


def function_agent(*turns, **options) -> AutonomousCodingAgent:
    return AutonomousCodingAgent(backend=FunctionBackend, turn=list(turns), **options)


def write(path: str, content: str):
    def turn(ctx: TurnContext):
        return [ctx.write(path, content), f"wrote {path}"]
    return turn


# ------------------------------------------------------------------------------------- tools
def test_tool_decorator_with_name_description_and_types(recwarn):
    with pytest.deprecated_call(match=r"@tool\(name=\.\.\., description=\.\.\.\)"):
        @tool("add", "Add two numbers", {"a": int, "b": int})
        async def add(args: dict) -> int:
            return args["a"] + args["b"]
    assert (add.name, add.description) == ("add", "Add two numbers")
    assert add.input_schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert add.input_schema["required"] == ["a", "b"]
    assert asyncio.run(add.run({"a": 1, "b": "2"})) == "3"  # validated as 0.1.7's schema says


def test_tool_with_input_schema_and_function_tool_and_tool_classes():
    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    with pytest.deprecated_call(match="typed parameters"):
        @tool(name="search", description="Search the notes", input_schema=schema)
        def search(inputs):
            return {"hits": [inputs["query"]]}
    assert search.input_schema == schema
    assert asyncio.run(search.run({"query": "x"})) == '{"hits": ["x"]}'

    from agenter import FunctionTool

    with pytest.deprecated_call(match=r"Tool\(func, name=\.\.\., description=\.\.\.\)"):
        greet = FunctionTool("greet", "Greet a user", {"name": str}, lambda inputs: f"Hello, {inputs['name']}!")
    assert isinstance(greet, Tool) and asyncio.run(greet.execute({"name": "Ann"})) == "Hello, Ann!"

    class Echo:  # 0.1.7's Tool protocol, not subclassing anything
        name = "echo"
        description = "Echo the text"
        input_schema = {"type": "object", "properties": {"text": {"type": "string"}}}

        async def execute(self, inputs: dict) -> str:
            return inputs["text"]

    class Shout(Tool):  # ... or subclassing Tool, as 0.1.7's protocol class allowed
        name = "shout"
        description = "Shout the text"
        input_schema = {"text": str}

        async def execute(self, inputs: dict) -> str:
            return inputs["text"].upper()

    with pytest.deprecated_call(match="0.1.7-style tool object Echo"):
        agent = AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: None, tools=[Echo()])
    assert agent.tools[0].name == "echo" and asyncio.run(agent.tools[0].run({"text": "hi"})) == "hi"
    with pytest.deprecated_call(match="Tool subclass Shout"):
        shout = Shout()
    assert shout.name == "shout" and asyncio.run(shout.run({"text": "hi"})) == "HI"


@pytest.mark.agent
async def test_017_tools_answer_a_real_model(scripted_model_server, tmp_path: Path):
    """The model (scripted, through the real anthropic-sdk backend) calls each 0.1.7-style tool."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        @tool("add", "Add two numbers", {"a": int, "b": int})
        async def add(args):
            return args["a"] + args["b"]

        from agenter import FunctionTool

        greet = FunctionTool("greet", "Greet", {"type": "object", "properties": {"name": {"type": "string"}}},
                             lambda inputs: f"Hello, {inputs['name']}!")
    server = scripted_model_server([
        reply(tool_call("add", {"a": 2, "b": 3}), tool_call("greet", {"name": "Ann"}),
              tool_call("write_file", {"path": "sum.py", "content": "TOTAL = 5\n"})),
        reply(text("Added and greeted.")),
    ])
    agent = AutonomousCodingAgent(backend="anthropic-sdk", base_url=server.base_url, api_key="sk-test-017",
                                  tools=[add, greet], anthropic_shell=False)
    result = await asyncio.wait_for(agent.execute("Add 2 and 3", cwd=tmp_path), 90)
    assert result.status is CodingStatus.COMPLETED, result.error
    answers = server.model_requests[1].model_request.tool_results
    assert [a["output"] for a in answers[:2]] == ["5", "Hello, Ann!"]
    tools = {t["name"]: t for t in server.model_requests[0].body["tools"]}
    assert tools["add"]["input_schema"]["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}


# ----------------------------------------------------------------------------------- sessions
async def test_open_session_awaited_with_session_budget(tmp_path: Path):
    agent = function_agent(write("a.py", "A = 1\n"), write("b.py", "B = 2\n"))
    with pytest.deprecated_call(match=r"agent.session\(cwd, budget=\.\.\.\)"):
        session = await agent.open_session(cwd=str(tmp_path), session_budget=Budget(max_iterations=4))
    try:
        assert session.is_open and session.budget == Budget(max_iterations=4)
        first = await session.execute("Write a.py")
        followup = await session.execute("Now b.py")
        assert (first.status, followup.status) == (CodingStatus.COMPLETED, CodingStatus.COMPLETED)
        assert session.session_id == "function-session" and session.results == [first, followup]
        assert session.files == {"a.py": "A = 1\n", "b.py": "B = 2\n"}
        with pytest.raises(AttributeError, match=r"session\.files"):
            session.modified_files()
    finally:
        await session.close()
    async with agent.open_session(tmp_path) as again:  # the other 0.1.7 form
        assert again.is_open


async def test_cancel_closes_the_session_and_says_so(tmp_path: Path):
    session = await function_agent(write("a.py", "A = 1\n")).open_session(tmp_path)
    await session.cancel()
    with pytest.raises(ConfigurationError, match=r"cancel\(\) closed it .*agent\.session"):
        await session.execute("more")


# --------------------------------------------------------------------------------- validators
class NoTodo:
    """A validator as agenter 0.1.7 documented them: contents by path, is_blocking, no name."""

    is_blocking = True

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def validate(self, files: dict[str, str], cwd: str) -> ValidationResult:
        self.seen.append(dict(files))
        assert isinstance(cwd, str)
        errors = [f"{path}: TODO left" for path, content in files.items() if "TODO" in content]
        return ValidationResult(passed=not errors, errors=errors)


async def test_017_validator_gets_contents_and_fails_the_run(tmp_path: Path):
    validator = NoTodo()
    with pytest.deprecated_call(match=r"validate\(self, files: list\[str\], cwd: Path\)"):
        agent = function_agent(write("app.py", "x = 1  # TODO\n"), max_iterations=1, validators=[validator])
    result = await agent.execute("Write app.py", cwd=tmp_path)
    assert validator.seen == [{"app.py": "x = 1  # TODO\n"}]
    assert result.status is CodingStatus.FAILED and result.validation_errors == ["[NoTodo] app.py: TODO left"]


async def test_017_advisory_validator_and_a_nameless_result(tmp_path: Path):
    class Advisory(NoTodo):
        is_blocking = False

    with pytest.deprecated_call():
        agent = function_agent(write("app.py", "x = 1  # TODO\n"), validators=["syntax", Advisory()])
    events = [event async for event in agent.stream_execute("Write app.py", cwd=tmp_path)]
    assert events[-1].result.status is CodingStatus.COMPLETED  # advisory: reported, not failing
    verdicts = [e.data for e in events if e.type.value == "validation_result"]
    assert [v.get("validator") for v in verdicts] == ["syntax", "Advisory"]  # the chain named it


def test_security_validator_017_keywords():
    with pytest.deprecated_call(match=r"SecurityValidator\(severity=\.\.\.\)"):
        validator = SecurityValidator(min_severity="HIGH", min_confidence="MEDIUM", is_blocking=True,
                                      skip_ids=["B101", "B311"])
    assert (validator.severity, validator.confidence, validator.blocking) == ("high", "medium", True)
    assert validator.extra_args == ["--skip", "B101,B311"]
    with pytest.raises(ConfigurationError, match="pass only severity="):
        SecurityValidator(severity="medium", min_severity="HIGH")


# ------------------------------------------------------------------------------ errors, names
async def test_budget_exceeded_error_limit_type_and_value(tmp_path: Path):
    def spend(ctx: TurnContext):
        ctx.use(input_tokens=400, output_tokens=100)
        return [ctx.write("a.py", "A = 1\n"), "done"]

    agent = function_agent(spend, raise_on_budget_exceeded=True, budget=Budget(max_tokens=300))
    with pytest.raises(BudgetExceededError) as raised:
        await agent.execute("spend", cwd=tmp_path)
    error = raised.value
    assert (error.limit, error.limit_value, error.actual_value) == ("tokens", 300, 500)
    with pytest.deprecated_call(match=r"BudgetExceededError\.limit"):
        assert error.limit_type == "tokens"

    def half(ctx: TurnContext):  # a session's budget: the figures are the session's
        ctx.use(input_tokens=150, output_tokens=50)
        return [ctx.write(f"f{ctx.iteration}{len(ctx.prompt)}.py", "A = 1\n"), "done"]

    agent = function_agent(half, raise_on_budget_exceeded=True)
    async with agent.session(tmp_path, budget=Budget(max_tokens=300)) as session:
        await session.execute("one")
        with pytest.raises(BudgetExceededError) as raised:
            await session.execute("two, longer")
    assert (raised.value.limit, raised.value.limit_value, raised.value.actual_value) == ("tokens", 300, 400)


REPLACEMENTS = {
    "ValidationError": "validation_errors", "ToolExecutionError": "error result", "BudgetMeter": "Budget",
    "FileOperations": "PathResolver", "FileTracer": "log_dir=", "Tracer": "log_dir=",
    "ToolResult": "raises an exception", "ToolError": "exception", "ToolErrorCode": "exception",
    "PersistentCodingSession": "agent.session(cwd)", "Verbosity": "configure_logging",
    "PathResolver": "from agenter.sandbox.paths import PathResolver",
}


@pytest.mark.parametrize("name", sorted(REPLACEMENTS))
def test_removed_names_name_their_replacement(name):
    with pytest.raises(ImportError, match=re.escape(REPLACEMENTS[name])):
        exec(f"from agenter import {name}", {})
    with pytest.raises(ImportError, match=re.escape(REPLACEMENTS[name])):
        exec(f"from agenter.data_models import {name}", {})


def test_error_keywords_of_017():
    cause = OSError("connection reset")
    with pytest.deprecated_call(match="from exc"):
        error = BackendError("the API failed", backend="anthropic-sdk", cause=cause)
    assert error.cause is cause and error.__cause__ is cause and error.message == "the API failed"
    refused = PathSecurityError("outside", path="../x", cwd="/repo", reason="directory_traversal")
    assert (refused.path, refused.cwd, refused.reason) == ("../x", "/repo", "directory_traversal")
    assert isinstance(refused, PermissionError) and isinstance(refused, AgenterError)


def test_logging_module_and_data_models():
    from agenter.logging import configure_logging

    root = logging.getLogger()
    level = root.level
    with pytest.deprecated_call(match='configure_logging\\(level="CRITICAL"\\)'):
        handler = configure_logging(quiet=True)
    try:
        assert root.level == logging.CRITICAL
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    sys.modules.pop("agenter.data_models", None)
    with pytest.deprecated_call(match="from agenter import Budget"):
        data_models = importlib.import_module("agenter.data_models")
    from agenter.data_models.types import CodingResult  # 0.1.7's submodules are the module

    assert data_models.Budget is Budget and CodingResult is agenter.CodingResult
    with pytest.raises(ImportError, match=re.escape('event.data["tool_name"]')):
        exec("from agenter.data_models.messages import ToolCallMessage", {})


async def test_total_input_tokens(tmp_path: Path):
    def spend(ctx: TurnContext):
        ctx.use(input_tokens=100, cache_read_tokens=20, output_tokens=30)
        return [ctx.write("a.py", "A = 1\n"), "done"]

    result = await function_agent(spend).execute("go", cwd=tmp_path)
    with pytest.deprecated_call(match="cache_read_tokens"):
        assert result.total_input_tokens == 120 == result.total_tokens - result.output_tokens
    with pytest.raises(AttributeError, match="error_kind"):
        result.retryable


def test_options_and_fields_of_017_name_their_replacement(tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"unknown option 'verbosity'.*configure_logging"):
        AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: None, verbosity="normal")
    with pytest.raises(ConfigurationError, match=r"unknown option 'tracer'.*log_dir="):
        AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: None, tracer=object())
    with pytest.raises(ConfigurationError, match=r"Budget\(max_iterations=\.\.\.\)"):
        CodingRequest(prompt="p", cwd=tmp_path, max_iterations=2)


# ------------------------------------------------------------------------------- environment
def test_aca_default_backend(monkeypatch):
    from agenter.backends import register_backend, unregister_backend

    register_backend("function-017", FunctionBackend)
    try:
        monkeypatch.setenv("ACA_DEFAULT_BACKEND", "function-017")
        with pytest.deprecated_call(match="backend='function-017'"):
            agent = AutonomousCodingAgent(turn=lambda ctx: None)
        assert agent.backend_name == "function-017"
        monkeypatch.setenv("ACA_DEFAULT_BACKEND", "no-such-backend")
        with pytest.raises(ConfigurationError, match="ACA_DEFAULT_BACKEND='no-such-backend' names no backend"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                AutonomousCodingAgent()
    finally:
        unregister_backend("function-017")
    monkeypatch.delenv("ACA_DEFAULT_BACKEND")
    assert AutonomousCodingAgent(sandbox=False, api_key="k").backend_name == "anthropic-sdk"


def test_bedrock_switch_on_its_token(monkeypatch):
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-token")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    from agenter.backends import load_backend

    options = load_backend("anthropic-sdk").options_model
    with pytest.deprecated_call(match="anthropic_bedrock=True"):
        assert options().anthropic_bedrock is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert options(anthropic_bedrock=False).anthropic_bedrock is False  # said explicitly: silent
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with pytest.warns(UserWarning, match="calls the Anthropic API"):
        assert options().anthropic_bedrock is False  # both set: not silently another provider


# ----------------------------------------------------------------------------------- adapters
async def test_create_coding_node_returns_a_runnable(tmp_path: Path):
    pytest.importorskip("langgraph")
    from langchain_core.runnables import Runnable, RunnableLambda

    from agenter.adapters.langgraph import create_coding_node

    node = create_coding_node(cwd=str(tmp_path), backend=FunctionBackend, turn=write("hello.py", "print('hi')\n"))
    assert isinstance(node, Runnable)
    result = await node.ainvoke({"prompt": "Create a hello world script"})
    assert result["coding_result"]["status"] == "completed" and result["coding_result"]["summary"]
    status = node | RunnableLambda(lambda state: state["coding_result"]["status"])
    assert await status.ainvoke({"prompt": "again"}) == "completed"
    assert (await node({"prompt": "once more"}))["coding_result"]["status"] == "completed"
    assert create_coding_node(cwd=str(tmp_path)).agent.backend_name == "anthropic-sdk"  # 0.1.7's default


async def test_pydantic_ai_coding_agent(tmp_path: Path):
    pytest.importorskip("pydantic_ai")
    from agenter.adapters.pydantic_ai import CodingAgent

    agent = CodingAgent(cwd=str(tmp_path), backend=FunctionBackend, turn=write("form.py", "VALID = True\n"))
    result = await agent.run("Add input validation")
    assert result.status is CodingStatus.COMPLETED and result.summary
    assert CodingAgent(cwd=str(tmp_path)).backend == "anthropic-sdk"  # 0.1.7's default backend


# ----------------------------------------------------------------------- allowed_write_paths
async def test_a_pattern_without_a_slash_stays_at_the_top(tmp_path: Path):
    """0.1.7's ["*.py"] allowed top-level files only: it still does (never silently more)."""
    turn = write("src/foo.py", "X = 1\n")
    result = await function_agent(turn, max_iterations=1).execute("p", cwd=tmp_path, allowed_write_paths=["*.py"])
    assert result.status is CodingStatus.FAILED and "src/foo.py" in result.error
    result = await function_agent(turn).execute("p", cwd=tmp_path, allowed_write_paths=["**/*.py"])
    assert result.status is CodingStatus.COMPLETED


# ------------------------------------------------------------------------------- the document
def test_every_row_has_a_test():
    """The table and this file stay one mirror of the other: each 0.1.7 name the tests pin is
    in docs/migrating.md."""
    table = DOC.read_text()
    assert "once available" not in table
    for name in [*REPLACEMENTS, "@tool(", "input_schema", "FunctionTool", "open_session", "session_budget",
                 "ValidationResult(passed=True", "min_severity", "limit_type", "limit_value", "cause=",
                 "path=", "agenter.logging", "agenter.data_models", "total_input_tokens",
                 "ACA_DEFAULT_BACKEND", "AWS_BEARER_TOKEN_BEDROCK", "create_coding_node", "CodingAgent",
                 'allowed_write_paths=["*.py"]', "verbosity", "tracer", "max_iterations", "cancel()"]:
        assert name in table, f"docs/migrating.md has no row for {name}"
