"""The session loop and the facade, driven by an in-test backend (pure logic, no agent program)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from agenter import (
    AutonomousCodingAgent,
    BackendError,
    Budget,
    BudgetExceededError,
    CodingEventType,
    CodingRequest,
    CodingStatus,
    ConfigurationError,
)
from agenter.backends import BackendMessage, MessageType
from agenter.testing import FunctionBackend, TurnContext


class Recorder:
    """What the function backends of one agent saw: prompts and disconnects."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.disconnects = 0

    @property
    def disconnected(self) -> bool:
        return self.disconnects > 0


def write(path: str, content: str, tokens: int = 100):
    def turn(ctx: TurnContext):
        call = ctx.write(path, content)
        ctx.use(input_tokens=tokens, output_tokens=10, cost_usd=0.01)
        return [call, f"wrote {path}"]
    return turn


RECORD = Recorder()


def agent(*turns, **kwargs) -> AutonomousCodingAgent:
    global RECORD
    RECORD = Recorder()
    record = RECORD

    def recording(turn):
        def wrapped(ctx: TurnContext):
            record.prompts.append(ctx.prompt)
            return turn(ctx)
        return wrapped

    def on_disconnect():
        record.disconnects += 1

    return AutonomousCodingAgent(backend=FunctionBackend, turn=[recording(t) for t in turns],
                                 on_disconnect=on_disconnect, **kwargs)


async def collect(a: AutonomousCodingAgent, request: CodingRequest):
    return [event async for event in a.stream_execute(request)]


async def test_completed_first_try(tmp_path):
    a = agent(write("ok.py", "x = 1\n"))
    result = await a.execute(CodingRequest(prompt="add x", cwd=tmp_path))
    assert result.status is CodingStatus.COMPLETED
    assert result.files == {"ok.py": "x = 1\n"}
    assert result.iterations == 1
    assert result.summary == "wrote ok.py"
    assert result.input_tokens == 100 and result.total_cost_usd == pytest.approx(0.01)
    assert RECORD.disconnected


async def test_retry_after_syntax_error_carries_errors_and_files(tmp_path):
    a = agent(write("bad.py", "def f(:\n"), write("bad.py", "def f():\n    return 1\n"))
    events = await collect(a, CodingRequest(prompt="write f", cwd=tmp_path))
    end = events[-1]
    assert end.type is CodingEventType.SESSION_END
    assert end.data["status"] == "completed" and end.data["iterations"] == 2
    retry_prompt = RECORD.prompts[1]
    assert "SyntaxError" in retry_prompt and "bad.py" in retry_prompt
    assert "write f" not in retry_prompt  # resume: the task is not sent again
    kinds = [e.type for e in events]
    assert kinds[0] is CodingEventType.SESSION_START
    assert kinds.count(CodingEventType.ITERATION_START) == 2
    assert kinds[-2] is CodingEventType.COMPLETED
    first_validation = next(e for e in events if e.type is CodingEventType.VALIDATION_RESULT)
    assert first_validation.data["passed"] is False and first_validation.data["validator"] == "syntax"


async def test_event_order(tmp_path):
    events = await collect(agent(write("a.py", "a = 1\n")), CodingRequest(prompt="p", cwd=tmp_path))
    assert [e.type for e in events] == [
        CodingEventType.SESSION_START, CodingEventType.ITERATION_START,
        CodingEventType.BACKEND_MESSAGE, CodingEventType.BACKEND_MESSAGE, CodingEventType.BACKEND_MESSAGE,
        CodingEventType.VALIDATION_START, CodingEventType.VALIDATION_RESULT,
        CodingEventType.ITERATION_END, CodingEventType.COMPLETED, CodingEventType.SESSION_END]
    # the usage the response settled (every backend reports it, before the calls it asked for), the tool call, the text
    assert [e.data["kind"] for e in events[2:5]] == ["usage_updated", "tool_call_started", "text"]
    assert events[2].data["usage"]["total_tokens"] > 0 and events[2].data["settled"]["output_tokens"] > 0
    start = events[0].data
    assert start["cwd"] == str(tmp_path.resolve()) and start["max_iterations"] == 5
    message = events[3].data
    assert message["message_type"] == "tool_call" and message["tool_name"] == "write_file"
    end_iter = events[7].data
    assert end_iter["files_modified"] == ["a.py"] and end_iter["passed"] is True
    assert "tokens" in end_iter and "cost" in end_iter


async def test_a_retry_after_a_turn_that_changed_nothing_says_so(tmp_path):
    """The retry prompt does not call it "your changes" when no file changed (a small model that
    answered with code and no tool call read that its change had been made)."""
    a = agent(lambda ctx: ["here is the code"], write("f.py", "x = 1\n"), max_iterations=2,
              validators=["command:false"])
    await a.execute(CodingRequest(prompt="write f", cwd=tmp_path))
    assert RECORD.prompts[1].startswith("No file has changed yet, and the workspace did not pass validation.")


async def test_validation_never_passes_is_failed(tmp_path):
    bad = write("bad.py", "def (:\n")
    result = await agent(bad, bad, max_iterations=2).execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.status is CodingStatus.FAILED
    assert result.iterations == 2
    assert any("SyntaxError" in e for e in result.validation_errors)


async def test_refusal(tmp_path):
    def refuse(ctx):
        ctx.refuse("not doing that", "harmful")
        return [BackendMessage(MessageType.TEXT, content="I won't")]
    events = await collect(agent(refuse), CodingRequest(prompt="p", cwd=tmp_path))
    assert events[-2].type is CodingEventType.REFUSED
    assert events[-2].data["reason"] == "not doing that" and events[-2].data["category"] == "harmful"
    assert events[-1].data["status"] == "refused"


async def test_backend_error_is_error_status_with_cause(tmp_path):
    def crash(ctx):
        raise BackendError("agent program crashed", stderr_tail="boom")
    a = agent(crash)
    result = await a.execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.status is CodingStatus.ERROR
    assert "crashed" in result.error and "boom" in result.error
    assert RECORD.disconnected


async def test_time_budget_cancels_a_hung_turn(tmp_path):
    cancelled = asyncio.Event()

    async def hang(ctx):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
    a = agent(hang)
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await collect(a, CodingRequest(prompt="p", cwd=tmp_path, budget=Budget(max_time_seconds=0.5)))
    assert loop.time() - started < 2.0
    assert cancelled.is_set()
    assert events[-1].type is CodingEventType.SESSION_END
    assert events[-1].data["status"] == "budget_exceeded"
    assert events[-1].data["result"]["exceeded_limit"] == "time"


async def test_token_budget_checked_while_streaming(tmp_path):
    seen = []

    async def chatty(ctx):
        for i in range(10):
            ctx.use(input_tokens=400)
            yield BackendMessage(MessageType.TEXT, content=f"m{i}")

    a = agent(chatty)
    async for event in a.stream_execute(CodingRequest(prompt="p", cwd=tmp_path, budget=Budget(max_tokens=1000))):
        seen.append(event)
    messages = [e for e in seen if e.type is CodingEventType.BACKEND_MESSAGE]
    assert len(messages) < 10
    assert seen[-1].data["result"]["exceeded_limit"] == "tokens"


async def test_raise_on_budget_exceeded(tmp_path):
    async def expensive(ctx):
        ctx.use(input_tokens=10, cost_usd=5.0)
        return [BackendMessage(MessageType.TEXT, content="spent")]
    a = agent(expensive, raise_on_budget_exceeded=True)
    with pytest.raises(BudgetExceededError) as info:
        await a.execute(CodingRequest(prompt="p", cwd=tmp_path, budget=Budget(max_cost_usd=1.0)))
    assert info.value.limit == "cost" and info.value.result.status is CodingStatus.BUDGET_EXCEEDED


async def test_no_change_is_not_success(tmp_path):
    def idle(ctx):
        return [BackendMessage(MessageType.TEXT, content="All good, nothing to do.")]
    a = agent(idle, idle, max_iterations=2)
    result = await a.execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.status is CodingStatus.FAILED
    assert "without changing any file" in RECORD.prompts[1]
    relaxed = await agent(idle).execute(CodingRequest(prompt="p", cwd=tmp_path, require_changes=False))
    assert relaxed.status is CodingStatus.COMPLETED


async def test_a_run_that_changed_nothing_says_what_the_model_did_instead(tmp_path):
    # "the agent changed no file" alone hides the cause: a model that never called a tool, one
    # whose calls all failed, one that replied with nothing.
    def idle(ctx):
        return [BackendMessage(MessageType.TEXT, content="All good,\n  nothing to do.")]

    def silent(ctx):
        return []

    def failing_edit(ctx):
        return [BackendMessage(MessageType.TOOL_CALL, tool_name="edit_file", tool_input={"path": "a.py"}),
                BackendMessage(MessageType.TOOL_RESULT, tool_name="edit_file", is_error=True,
                               content="old_string occurs 3 times in 'a.py'")]

    result = await agent(idle, idle, max_iterations=2).execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.error == ("the agent changed no file in 2 iteration(s): the model made no tool call; "
                            "its last reply: 'All good, nothing to do.'")
    result = await agent(failing_edit, silent, max_iterations=2).execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.error == ("the agent changed no file in 2 iteration(s): 1 tool call(s), none changed a file; "
                            "the last error: \"old_string occurs 3 times in 'a.py'\"; its last reply was empty")


async def test_structured_output_required(tmp_path):
    class Answer(BaseModel):
        value: int

    def no_output(ctx):
        return [BackendMessage(MessageType.TEXT, content="forgot")]

    def output(ctx):
        ctx.output(Answer(value=3))
        return []

    result = await agent(no_output, output).execute(
        CodingRequest(prompt="p", cwd=tmp_path, output_type=Answer))
    assert result.status is CodingStatus.COMPLETED and result.output == Answer(value=3)
    assert result.iterations == 2


async def test_deleted_files_are_reported(tmp_path):
    (tmp_path / "old.py").write_text("x = 1\n")

    def delete(ctx):
        (ctx.cwd / "old.py").unlink()
        (ctx.cwd / "new.py").write_text("y = 2\n")
        return []
    result = await agent(delete).execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.files == {"new.py": "y = 2\n", "old.py": None}


def test_configuration_errors(tmp_path):
    with pytest.raises(ConfigurationError, match="anthropic-sdk"):
        AutonomousCodingAgent(backend="nope")
    with pytest.raises(ConfigurationError, match="turn"):
        AutonomousCodingAgent(backend=FunctionBackend, turn=[], bogus_option=1)
    with pytest.raises(ConfigurationError, match="max_iterations"):
        AutonomousCodingAgent(backend=FunctionBackend, turn=[], max_iterations=0)
    with pytest.raises(ConfigurationError, match="cwd"):
        agent().execute_sync(CodingRequest(prompt="p", cwd=tmp_path / "missing"))


def test_execute_sync(tmp_path):
    result = agent(write("s.py", "s = 1\n")).execute_sync("do it", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED


async def test_secret_never_in_events(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", "supersecretvalue123")

    def leak(ctx):
        raise BackendError("failed with key supersecretvalue123 and sk-ant-abcdef123456789")
    events = await collect(agent(leak), CodingRequest(prompt="p", cwd=tmp_path))
    dumped = "".join(e.to_json() for e in events)
    assert "supersecretvalue123" not in dumped and "sk-ant-abcdef123456789" not in dumped


async def test_stopping_the_stream_early_disconnects_the_backend(tmp_path):
    import contextlib

    cancelled = asyncio.Event()

    async def slow(ctx):
        try:
            yield BackendMessage(MessageType.TEXT, content="working")
            await asyncio.sleep(30)
        finally:
            cancelled.set()  # closed at its yield or cancelled in the sleep: either way, stopped

    a = agent(slow)
    async with contextlib.aclosing(a.stream_execute(CodingRequest(prompt="p", cwd=tmp_path))) as stream:
        async for event in stream:
            if event.type is CodingEventType.BACKEND_MESSAGE:
                break
    assert cancelled.is_set()  # the in-flight turn was cancelled, not left running
    assert RECORD.disconnected


async def test_time_budget_bounds_validators(tmp_path):
    from agenter import CommandValidator

    a = agent(write("v.py", "v = 1\n"), validators=[CommandValidator("sleep 30", timeout=300)])
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await a.execute(CodingRequest(prompt="p", cwd=tmp_path, budget=Budget(max_time_seconds=1.0)))
    assert loop.time() - started < 8
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert "while validating" in result.error
    assert result.files == {"v.py": "v = 1\n"}  # what was changed is still reported


async def test_slow_start_is_the_time_budget_not_an_error(tmp_path):
    a = AutonomousCodingAgent(backend=FunctionBackend, turn=[], connect_delay=5.0)
    result = await a.execute(CodingRequest(prompt="p", cwd=tmp_path, budget=Budget(max_time_seconds=0.3)))
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "time"
    assert result.iterations == 0


async def test_a_new_file_outside_allowed_paths_is_removed_and_sent_back_to_the_model(tmp_path):
    """A write that got past the backend (here: the backend does not check): the new file is
    removed, named in permission_denials, and the next iteration is told; the run goes on."""
    def both(ctx: TurnContext):
        return [ctx.write("docs/notes.md", "x\n"), ctx.write("src/ok.py", "x = 1\n"), "wrote both"]

    result = await agent(both, write("src/ok.py", "x = 2\n")).execute(
        CodingRequest(prompt="p", cwd=tmp_path, allowed_write_paths=["src/"]))
    assert result.status is CodingStatus.COMPLETED and result.iterations == 2, result
    assert not (tmp_path / "docs" / "notes.md").exists()
    assert result.files == {"src/ok.py": "x = 2\n"}
    assert [(d["target"], d["rule"]) for d in result.permission_denials] == [("docs/notes.md", "allowed_write_paths")]
    retry = RECORD.prompts[1]
    assert "You created docs/notes.md, outside the files you may change (allowed_write_paths: src/)" in retry
    assert "write docs/notes.md: written outside allowed_write_paths" in retry


async def test_a_change_to_an_existing_file_outside_allowed_paths_fails_the_run(tmp_path):
    """agenter keeps no copy of a file's earlier content: a change it cannot undo ends the run,
    named; a new file written beside it is still removed."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("old\n")

    def both(ctx: TurnContext):
        return [ctx.write("docs/notes.md", "x\n"), ctx.write("stray.md", "y\n"), ctx.write("src/ok.py", "x = 1\n")]

    result = await agent(both).execute(CodingRequest(prompt="p", cwd=tmp_path, allowed_write_paths=["src/"]))
    assert result.status is CodingStatus.FAILED and result.iterations == 1
    assert "docs/notes.md" in result.error and "allowed_write_paths" in result.error and "stray.md" not in result.error
    assert "could not undo" in result.error
    assert result.files == {"docs/notes.md": "x\n", "src/ok.py": "x = 1\n"}
    assert not (tmp_path / "stray.md").exists()
    allowed = await agent(write("src/ok.py", "x = 1\n")).execute(
        CodingRequest(prompt="p", cwd=tmp_path, allowed_write_paths=["src/"]))
    assert allowed.status is CodingStatus.COMPLETED


class _WillNotStart(FunctionBackend):
    async def _connect(self, spec):
        raise BackendError("the agent would not start", backend="function", kind="auth")


async def test_a_one_shot_run_is_a_session_of_one_request(tmp_path):
    """execute() opens a session, runs the request and closes it, and its events are those of a
    one-shot run: the backend starts after SESSION_START (a backend that cannot start is an
    ERROR result with its events), SESSION_START carries no request number, and the backend is
    disconnected before the outcome is reported."""
    seen: list[str] = []
    a = AutonomousCodingAgent(backend=_WillNotStart, turn=[], on_disconnect=lambda: seen.append("disconnect"))
    async for event in a.stream_execute(CodingRequest(prompt="p", cwd=tmp_path)):
        seen.append(event.type.value)
        if event.type is CodingEventType.SESSION_START:
            assert "request" not in event.data
    assert seen == ["session_start", "disconnect", "failed", "session_end"]
    result = await a.execute(CodingRequest(prompt="p", cwd=tmp_path))
    assert result.status is CodingStatus.ERROR and result.error_kind == "auth"
    assert result.error == "the agent would not start" and result.iterations == 0

    seen.clear()
    ok = AutonomousCodingAgent(backend=FunctionBackend, turn=write("a.py", "a = 1\n"),
                               on_disconnect=lambda: seen.append("disconnect"))
    kinds = [e.type.value async for e in ok.stream_execute(CodingRequest(prompt="p", cwd=tmp_path))]
    assert kinds[-2:] == ["completed", "session_end"] and seen == ["disconnect"]


async def test_coding_session_is_the_earlier_name_of_a_run_that_connects_itself(tmp_path):
    import agenter
    from agenter.backends import BackendSettings
    from agenter.session.loop import CodingRun
    from agenter.testing import FunctionOptions
    from agenter.validators import ValidatorChain

    assert agenter.CodingSession is agenter.session.loop.CodingSession
    assert issubclass(agenter.CodingSession, CodingRun) and agenter.CodingRun is CodingRun
    disconnects: list[bool] = []
    options = FunctionOptions(turn=write("a.py", "a = 1\n"), on_disconnect=lambda: disconnects.append(True))
    backend = FunctionBackend(BackendSettings(model=None, tools=[], sandbox=False, options=options))
    with pytest.warns(DeprecationWarning, match="CodingRun"):
        run = agenter.CodingSession(backend, CodingRequest(prompt="p", cwd=tmp_path), budget=Budget(),
                                    validators=ValidatorChain([]), backend_name="function")
    kinds = [e.type async for e in run.run()]
    assert kinds[0] is CodingEventType.SESSION_START and kinds[-1] is CodingEventType.SESSION_END
    assert run.result is not None and run.result.status is CodingStatus.COMPLETED
    assert run.result.files == {"a.py": "a = 1\n"} and disconnects == [True]
