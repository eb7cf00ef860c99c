"""What the facade refuses before anything runs, and what the result says when the agent never ran
(issue 11: unknown request fields, budgets, non-writable cwd, secrets in events, typing)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from agenter import AutonomousCodingAgent, Budget, CodingRequest, CodingStatus, ConfigurationError
from agenter.testing import FunctionBackend, TurnContext


def writer(ctx: TurnContext):
    ctx.write("a.py", "a = 1\n")
    return "done"


def make(**kwargs) -> AutonomousCodingAgent:
    return AutonomousCodingAgent(backend=FunctionBackend, turn=writer, **kwargs)


def test_unknown_request_fields_are_refused_with_their_name(tmp_path):
    with pytest.raises(ConfigurationError, match="max_iterations"):
        CodingRequest(prompt="p", cwd=tmp_path, max_iterations=2)  # type: ignore[call-arg]
    agent = make()
    with pytest.raises(ConfigurationError, match="verbosity"):
        agent.execute_sync(CodingRequest(prompt="p", cwd=tmp_path), verbosity="normal")
    with pytest.raises(ConfigurationError, match="max_iteration"):
        agent.execute_sync("p", cwd=tmp_path, max_iteration=2)


def test_a_request_field_given_twice_with_another_value_is_refused(tmp_path):
    # execute(CodingRequest(cwd=d1), cwd=d2) used to run in d2 without a word.
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    agent = make()
    with pytest.raises(ConfigurationError, match="cwd is given twice") as info:
        agent.execute_sync(CodingRequest(prompt="p", cwd=first), cwd=second)
    assert info.value.parameter == "cwd" and not (first / "a.py").exists() and not (second / "a.py").exists()
    with pytest.raises(ConfigurationError, match="prompt is given twice"):
        agent.execute_sync(CodingRequest(prompt="p", cwd=first), prompt="q")
    # the same value (another spelling of the folder), or a field the request left unset: fine
    same = agent.execute_sync(CodingRequest(prompt="p", cwd=first), cwd=str(first / ".." / "one"))
    assert same.status is CodingStatus.COMPLETED and (first / "a.py").exists()
    budgeted = agent.execute_sync(CodingRequest(prompt="p", cwd=second), budget=Budget(max_iterations=1))
    assert budgeted.status is CodingStatus.COMPLETED and (second / "a.py").exists()


def test_budget_given_as_a_dict_is_validated(tmp_path):
    agent = make()
    with pytest.raises(ConfigurationError, match="max_cost_usd"):
        agent.execute_sync(CodingRequest(prompt="p", cwd=tmp_path), budget={"max_cost_usd": -5})
    result = agent.execute_sync(CodingRequest(prompt="p", cwd=tmp_path), budget={"max_iterations": 1})
    assert result.status is CodingStatus.COMPLETED


def test_max_iterations_is_not_dropped_when_a_budget_is_given():
    assert make(max_iterations=2, budget=Budget(max_cost_usd=1.0)).budget.max_iterations == 2
    with pytest.raises(ConfigurationError, match="contradicts"):
        make(max_iterations=2, budget=Budget(max_iterations=4))


def test_unlimited_budget_figures_are_none(tmp_path):
    budget = Budget(max_tokens=None, max_cost_usd=None, max_time_seconds=None)
    result = make(budget=budget).execute_sync("p", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED


def test_blank_prompt_is_refused(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        CodingRequest(prompt="   ", cwd=tmp_path)


def test_cwd_as_str(tmp_path):
    request = CodingRequest(prompt="p", cwd=str(tmp_path))
    assert make().execute_sync(request).status is CodingStatus.COMPLETED


def test_non_writable_cwd_fails_at_once():
    with pytest.raises(ConfigurationError, match="not writable"):
        make().execute_sync("p", cwd="/proc/1")


def test_error_before_the_agent_ran_does_not_claim_it_changed_nothing(tmp_path):
    from agenter import BackendError

    async def cannot_start(ctx):
        raise BackendError("agent program missing")

    class Broken(FunctionBackend):
        async def _connect(self, spec):
            raise BackendError("the agent program is missing", kind="missing_program")

    result = AutonomousCodingAgent(backend=Broken, turn=cannot_start).execute_sync("p", cwd=tmp_path)
    assert result.status is CodingStatus.ERROR
    assert "did not run" in result.summary and "without changing" not in result.summary


def test_unknown_option_names_the_backend_options():
    with pytest.raises(ConfigurationError) as info:
        make(codex_reasoning_effort="high")
    assert "valid options of function" in str(info.value)
    assert "valid values for codex_reasoning_effort" not in str(info.value)


async def test_file_contents_in_events_are_redacted_but_the_result_is_raw(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-very-secret-42")

    def leak(ctx: TurnContext):
        ctx.write("config.py", "TOKEN = 'tok-very-secret-42'\n")
        return "wrote config"

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=leak)
    events = [e async for e in agent.stream_execute("p", cwd=tmp_path)]
    assert "tok-very-secret-42" not in "".join(e.to_json() for e in events)
    assert "[REDACTED]" in events[-1].data["result"]["files"]["config.py"]
    assert events[-1].result.files["config.py"] == "TOKEN = 'tok-very-secret-42'\n"  # raw for the caller
    raw = await agent.execute("p", cwd=tmp_path)
    assert raw.files["config.py"] == "TOKEN = 'tok-very-secret-42'\n"


def test_configure_logging_redacts_third_party_records(monkeypatch, capsys):
    import io
    import logging

    from agenter import configure_logging

    monkeypatch.setenv("SOME_API_KEY", "abcdefgh-secret-999")
    stream = io.StringIO()
    handler = configure_logging("DEBUG", stream=stream)
    try:
        third_party = logging.getLogger("thirdparty.client")  # as httpx logs at DEBUG
        third_party.setLevel(logging.DEBUG)
        third_party.debug("request headers: x-api-key=%s", "abcdefgh-secret-999")
        ours = logging.getLogger("agenter.test")
        ours.setLevel(logging.INFO)
        ours.info("Bearer sk-ant-api03-abcdefghijkl")
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(logging.WARNING)
    out = stream.getvalue()
    assert "abcdefgh-secret-999" not in out and "sk-ant-api03-abcdefghijkl" not in out
    assert out.count("[REDACTED]") >= 2


@pytest.mark.slow
def test_a_user_script_passes_mypy_strict(tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(textwrap.dedent('''
        import asyncio
        from pathlib import Path

        from pydantic import BaseModel

        from agenter import AutonomousCodingAgent, Budget, CodingRequest, CodingResult, CodingStatus, tool


        @tool
        def lookup_ticket(ticket_id: str) -> str:
            """Look up a ticket."""
            return f"ticket {ticket_id}: fix the parser"


        class Summary(BaseModel):
            changed: list[str]


        async def main(repo: str) -> CodingResult:
            agent = AutonomousCodingAgent(model="claude-sonnet-5-5", tools=[lookup_ticket],
                                          validators=["syntax"], budget=Budget(max_cost_usd=1.0))
            request = CodingRequest(prompt="Fix the parser", cwd=repo, output_type=Summary,
                                    allowed_write_paths=["src/"])
            result = await agent.execute(request)
            if result.status is CodingStatus.COMPLETED:
                print(result.files, result.total_cost_usd)
            async for event in agent.stream_execute("again", cwd=Path(repo)):
                print(event.type.value)
            text: str = lookup_ticket("T-1")
            print(text)
            return result


        asyncio.run(main("."))
    '''))
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_terminal_escapes_are_stripped_from_errors(tmp_path):
    from agenter import BackendError

    def crash(ctx):
        raise BackendError("agent died", stderr_tail="\x1b[31mError:\x1b[0m \x1b[1mbad config\x1b[0m")

    result = AutonomousCodingAgent(backend=FunctionBackend, turn=crash).execute_sync("p", cwd=tmp_path)
    assert result.status is CodingStatus.ERROR and "\x1b" not in (result.error or "")
    assert "Error: bad config" in (result.error or "")


async def test_open_session_is_the_0_1_7_name_of_session(tmp_path):
    agent = make()
    async with agent.open_session(tmp_path) as session:
        result = await session.execute("p")
    assert result.status is CodingStatus.COMPLETED
