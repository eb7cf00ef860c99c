"""Plan, then execute, offline: scripted planners and executors (FunctionBackend) run through
agenter's real sessions, validators, budgets and git worktrees."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from agenter import AutonomousCodingAgent, Budget, CodingEventType, CodingStatus, ConfigurationError
from agenter.planner import Plan, PlanAndExecute, PlanEventType, TaskStatus
from agenter.testing import FunctionBackend

from .conftest import file_task, git, plan_dict, scripted_planner, task_id, writing_executor

THREE = plan_dict(file_task("1", "a.txt", "alpha"), file_task("2", "b.txt", "beta"), file_task("3", "c.txt", "gamma"),
                  overall=[{"description": "all three exist", "command": "test -f a.txt -a -f b.txt -a -f c.txt"}])


async def collect(runner: PlanAndExecute, prompt: str, cwd: Path, **options):
    events = [event async for event in runner.stream_execute(prompt, cwd, **options)]
    assert events[-1].type is PlanEventType.RUN_END
    return events, events[-1].result


def kinds(events) -> list[str]:
    return [e.type.value for e in events if e.type is not PlanEventType.CODING_EVENT]


async def test_a_three_deliverable_plan_completes_with_every_file_written_and_each_tasks_validators_run(tmp_path):
    prompts: list[str] = []
    runner = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(prompts))
    events, result = await collect(runner, "write three files", tmp_path)

    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert {p: (tmp_path / p).read_text() for p in ("a.txt", "b.txt", "c.txt")} == {
        "a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"}
    assert result.files == {"a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"}
    for report, path in zip(result.tasks, ("a.txt", "b.txt", "c.txt"), strict=True):
        assert report.status is TaskStatus.COMPLETED and report.files == [path]
        commands = [v for v in report.validation if v.validator.startswith("command:grep")]
        assert len(commands) == 1 and commands[0].passed and not commands[0].skipped
    assert [t.passed for t in result.integration] == [True]
    # One verified run per task, in plan order; each is told what is already done.
    assert [task_id(p) for p in prompts] == ["1", "2", "3"]
    assert "Already done" not in prompts[0] and "- 1: write a.txt" in prompts[2] and "- 2: write b.txt" in prompts[2]
    assert kinds(events) == ["run_start", "plan_created", "approval",
                             "task_start", "task_end", "task_start", "task_end", "task_start", "task_end",
                             "integration_result", "run_end"]
    forwarded = [e for e in events if e.type is PlanEventType.CODING_EVENT]
    assert {e.phase.value for e in forwarded} == {"planning", "execution"}
    assert [e.event.type for e in forwarded if e.task_id == "2"][-1] is CodingEventType.SESSION_END
    assert result.total_tokens == 100 + 3 * 200 and result.phases["planning"].tokens == 100
    assert result.phases["execution"].runs == 3
    summary = result.summary()
    assert summary.startswith("COMPLETED") and "[x] 2 write b.txt containing beta" in summary
    # The run_end event's data is the JSON form of the same result.
    assert events[-1].data["result"]["status"] == "completed"


async def test_a_malformed_plan_gets_the_error_back_and_a_corrected_plan_recovers(tmp_path):
    replies = []
    duplicate = plan_dict(file_task("1", "a.txt", "alpha"), file_task("1", "b.txt", "beta"))

    def answer(ctx):
        replies.append(ctx.output(duplicate))  # what the model is told about its plan
        return THREE

    runner = PlanAndExecute(planner=scripted_planner(answer), executor=writing_executor())
    result = await runner.execute("write three files", tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert replies[0].is_error and "task id '1' is used more than once" in replies[0].text


async def test_a_planner_run_without_a_valid_plan_is_asked_again_with_the_errors_and_the_attempts_are_bounded(tmp_path):
    seen: list[str] = []

    def answer(ctx):
        seen.append(ctx.prompt)
        return THREE if "was not accepted" in ctx.prompt else {"tasks": "not a list"}

    runner = PlanAndExecute(planner=scripted_planner(answer), executor=writing_executor(),
                            budget=Budget(max_iterations=1))
    result = await runner.execute("write three files", tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert len(seen) == 2 and "No structured output matching Plan" in seen[1]

    never = PlanAndExecute(planner=scripted_planner(lambda ctx: {"tasks": []}), executor=writing_executor(),
                           budget=Budget(max_iterations=1), max_plan_attempts=3)
    failed = await never.execute("write three files", tmp_path)
    assert failed.status is CodingStatus.FAILED and "no valid Plan in 3 run(s)" in (failed.error or "")
    assert failed.tasks == [] and failed.phases["planning"].runs == 3


async def test_recursive_decomposition_stops_at_the_depth_limit(tmp_path):
    asks: list[str] = []

    def answer(ctx):
        asks.append(ctx.prompt)
        big = [{"id": "1", "description": "big part one", "is_atomic": False},
               {"id": "2", "description": "big part two", "is_atomic": False}]
        return {"sub_tasks": big} if "Split one task" in ctx.prompt else plan_dict(*big)

    def write_own_file(ctx):
        return [ctx.write(f"out/{task_id(ctx.prompt)}.txt", "ok\n"), "done"]

    runner = PlanAndExecute(planner=scripted_planner(answer), decomposition="full", max_depth=3,
                            executor=writing_executor(override=write_own_file))
    events, result = await collect(runner, "a big job", tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    leaves = [r for r in result.walk() if r.is_atomic]
    assert len(leaves) == 8 and {r.depth for r in leaves} == {3}
    assert [r.id for r in leaves][:3] == ["1.1.1", "1.1.2", "1.2.1"]
    assert len(asks) == 1 + 2 + 4  # the plan, then one split per non-atomic task above the limit
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{r.id}.txt" for r in leaves)
    created = [e for e in events if e.type is PlanEventType.PLAN_CREATED][0]
    assert created.data["atomic_tasks"] == 8


async def test_the_depth_limit_rejects_a_plan_that_is_too_deep(tmp_path):
    replies = []
    deep = plan_dict({"id": "1", "description": "x", "is_atomic": False, "sub_tasks": [
        {"id": "1.1", "description": "y", "is_atomic": False, "sub_tasks": [
            {"id": "1.1.1", "description": "z"}, {"id": "1.1.2", "description": "w"}]}]})

    def answer(ctx):
        replies.append(ctx.output(deep))
        return plan_dict(file_task("1", "a.txt", "alpha"))

    runner = PlanAndExecute(planner=scripted_planner(answer), executor=writing_executor(), decomposition="full")
    result = await runner.execute("job", tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert replies[0].is_error and "depth 3, deeper than the limit of 2" in replies[0].text


async def test_one_failing_task_leaves_its_siblings_completed_and_the_run_failed_with_the_tree_showing_which(tmp_path):
    plan = plan_dict(file_task("1", "a.txt", "alpha"), file_task("2", "b.txt", "beta"),
                     file_task("3", "c.txt", "gamma"), file_task("4", "d.txt", "delta", depends_on=["2"]),
                     overall=[{"description": "never run", "command": "true"}])

    def botch_two(ctx):
        if task_id(ctx.prompts[0]) == "2":
            return [ctx.write("b.txt", "wrong\n"), "done"]
        return None

    runner = PlanAndExecute(planner=scripted_planner(plan), executor=writing_executor(override=botch_two),
                            budget=Budget(max_iterations=2))
    result = await runner.execute("four files", tmp_path)
    assert result.status is CodingStatus.FAILED
    statuses = {r.id: r.status for r in result.tasks}
    assert statuses == {"1": TaskStatus.COMPLETED, "2": TaskStatus.FAILED, "3": TaskStatus.COMPLETED,
                        "4": TaskStatus.SKIPPED}
    assert result.task("2").iterations == 2 and "validation did not pass" in (result.task("2").reason or "")
    assert "depends on 2" in (result.task("4").reason or "")
    assert (tmp_path / "a.txt").is_file() and (tmp_path / "c.txt").is_file() and not (tmp_path / "d.txt").exists()
    assert result.integration[0].passed is None  # not run: the tasks did not all complete
    text = result.summary()
    assert "[!] 2 write b.txt" in text and "[-] 4 write d.txt" in text and "[x] 3 write c.txt" in text
    assert result.error == "2 task(s) not completed: 2, 4"


async def test_a_failing_integration_test_is_fixed_by_the_debugging_task(tmp_path):
    plan = plan_dict(file_task("1", "app.txt", "v1"),
                     overall=[{"description": "the app says fixed", "command": "grep -q fixed app.txt"}])
    debug_prompts: list[str] = []

    def debug(ctx):
        if task_id(ctx.prompt) is None:
            debug_prompts.append(ctx.prompt)
            return [ctx.write("app.txt", "fixed\n"), "fixed it"]
        return None

    runner = PlanAndExecute(planner=scripted_planner(plan), executor=writing_executor(override=debug))
    events, result = await collect(runner, "an app", tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert (tmp_path / "app.txt").read_text() == "fixed\n"
    assert len(result.debug_runs) == 1 and result.debug_runs[0].status is TaskStatus.COMPLETED
    assert "grep -q fixed app.txt" in debug_prompts[0] and "failed with exit code 1" in debug_prompts[0]
    verdicts = [e.data["passed"] for e in events if e.type is PlanEventType.INTEGRATION_RESULT]
    assert verdicts == [False, True] and result.integration[0].passed is True
    assert result.phases["integration"].runs == 1

    unfixed = PlanAndExecute(planner=scripted_planner(plan), executor=writing_executor(), max_debug_attempts=0)
    (tmp_path / "again").mkdir()
    stays = await unfixed.execute("an app", tmp_path / "again")
    assert stays.status is CodingStatus.FAILED and "1 integration test(s) failed" in (stays.error or "")


async def test_rejecting_the_plan_stops_before_any_write_and_an_edited_plan_is_what_runs(tmp_path):
    calls: list[str] = []
    shown: list[Plan] = []

    def reject(plan: Plan) -> bool:
        shown.append(plan)
        return False

    runner = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(calls), on_approval=reject)
    events, result = await collect(runner, "write three files", tmp_path)
    assert result.status is CodingStatus.FAILED and "rejected" in (result.error or "")
    assert calls == [] and list(tmp_path.iterdir()) == []
    assert len(shown[0].tasks) == 3 and kinds(events)[-2:] == ["approval", "run_end"]
    assert all(r.status is TaskStatus.PENDING for r in result.tasks)

    async def keep_first(plan: Plan) -> Plan:
        plan.tasks = plan.tasks[:1]
        return plan

    edited = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(calls), on_approval=keep_first,
                            max_debug_attempts=0)
    events, result = await collect(edited, "write three files", tmp_path)
    assert result.status is CodingStatus.FAILED  # its overall test needs b.txt and c.txt
    assert [r.id for r in result.tasks] == ["1"] and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    assert [e.data.get("edited") for e in events if e.type is PlanEventType.PLAN_CREATED] == [False, True]
    auto = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(), on_approval=reject,
                          auto_approve=True)
    assert (await auto.execute("write three files", tmp_path)).status is CodingStatus.COMPLETED


async def test_plan_only_returns_the_plan_and_runs_nothing(tmp_path):
    calls: list[str] = []
    runner = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(calls))
    result = await runner.execute("write three files", tmp_path, plan_only=True)
    assert result.status is CodingStatus.COMPLETED and result.plan_only
    assert result.plan is not None and [t.id for t in result.plan.tasks] == ["1", "2", "3"]
    assert calls == [] and list(tmp_path.iterdir()) == []
    assert "(plan only)" in result.summary()
    # The plan can be executed later as it is, without planning again.
    again = await PlanAndExecute(executor=writing_executor(calls)).execute("x", tmp_path, plan=result.plan)
    assert again.status is CodingStatus.COMPLETED and len(calls) == 3


async def test_parallel_tasks_run_at_once_in_worktrees_and_merge_cleanly(repo):
    running = 0
    peak = 0
    all_in = asyncio.Event()

    async def slow_write(ctx):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 20)  # only returns if the three run at the same time
        running -= 1
        return None

    runner = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(override=slow_write),
                            parallel=3)
    head = git(repo, "rev-parse", "HEAD")
    events, result = await collect(runner, "write three files", repo)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert peak == 3 and result.workspaces == "worktree"
    assert {p: (repo / p).read_text() for p in ("a.txt", "b.txt", "c.txt")} == {
        "a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"}
    assert [r.merge for r in result.tasks] == ["merged"] * 3
    assert [e.task_id for e in events if e.type is PlanEventType.MERGE] == ["1", "2", "3"]
    starts = [e for e in events if e.type is PlanEventType.TASK_START]
    assert all(str(repo) not in e.data["workspace"] for e in starts)  # each ran in its own worktree
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "diff", "--cached", "--name-only") == ""
    assert git(repo, "worktree", "list").count("\n") == 1


async def test_a_conflicting_pair_is_resolved_by_re_running_the_later_task_on_the_merged_tree(repo):
    plan = plan_dict({"id": "1", "description": "add line one to shared.txt"},
                     {"id": "2", "description": "add line two to shared.txt"})

    async def append(ctx):
        await asyncio.sleep(0.2)
        line = "one" if task_id(ctx.prompt) == "1" else "two"
        target = ctx.cwd / "shared.txt"
        before = target.read_text() if target.exists() else ""
        return [ctx.write("shared.txt", before + line + "\n"), "done"]

    runner = PlanAndExecute(planner=scripted_planner(plan), executor=writing_executor(override=append), parallel=2)
    events, result = await collect(runner, "two lines", repo)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    assert (repo / "shared.txt").read_text() == "one\ntwo\n"
    assert result.task("1").attempts == 1 and result.task("2").attempts == 2
    assert result.task("2").merge == "merged after a re-run"
    merges = [(e.task_id, e.data["outcome"], e.data["conflicts"]) for e in events if e.type is PlanEventType.MERGE]
    assert merges == [("1", "merged", []), ("2", "conflict", ["shared.txt"]), ("2", "merged after a re-run", [])]
    rerun = [e for e in events if e.type is PlanEventType.TASK_START and e.task_id == "2"][-1]
    assert rerun.data["attempt"] == 2


async def test_one_budget_spans_the_phases_is_enforced_inside_tasks_and_stops_new_ones(tmp_path):
    def big_turn(ctx):
        ctx.use(input_tokens=600)
        return None

    runner = PlanAndExecute(planner=scripted_planner(THREE, tokens=100), executor=writing_executor(
        tokens=0, override=big_turn), budget=Budget(max_tokens=1000))
    events, result = await collect(runner, "write three files", tmp_path)
    assert result.status is CodingStatus.BUDGET_EXCEEDED and result.exceeded_limit == "tokens"
    starts = [e.data["budget"]["max_tokens"] for e in events if e.type is PlanEventType.TASK_START]
    assert starts == [900, 300]  # what was left after the planner, then after task 1
    assert result.task("1").status is TaskStatus.COMPLETED
    assert result.task("2").run_status == "budget_exceeded"  # stopped inside its turn
    assert result.task("3").status is TaskStatus.SKIPPED and "budget" in (result.task("3").reason or "")
    assert result.total_tokens == 100 + 600 + 600


async def test_clarification_runs_only_with_a_callback_and_its_answers_reach_the_plan(tmp_path):
    prompts: list[str] = []

    def answer(ctx):
        prompts.append(ctx.prompt)
        if "clear enough to plan" in ctx.prompt:
            return {"questions": ["Which greeting?"]}
        return THREE

    asked: list[list[str]] = []

    async def clarify(questions):
        asked.append(questions)
        return ["Say hello in French"]

    runner = PlanAndExecute(planner=scripted_planner(answer), executor=writing_executor(), on_clarify=clarify)
    events, result = await collect(runner, "write three files", tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert asked == [["Which greeting?"]] and result.clarifications == [
        {"question": "Which greeting?", "answer": "Say hello in French"}]
    assert "Say hello in French" in prompts[1]
    assert "clarification" in kinds(events)

    prompts.clear()
    headless = PlanAndExecute(planner=scripted_planner(answer), executor=writing_executor())
    await headless.execute("write three files", tmp_path)
    assert len(prompts) == 1 and "clear enough" not in prompts[0]


async def test_designed_test_code_is_written_before_each_task_and_decides_it(tmp_path):
    plan = plan_dict({"id": "1", "description": "write greet.sh that prints hello"})
    design = {"tasks": [{"task_id": "1", "unit_tests": [{
        "description": "greet.sh prints hello", "path": "tests/test_greet.sh",
        "code": "out=$(sh greet.sh); [ \"$out\" = hello ]\n", "command": "sh tests/test_greet.sh"}]}],
        "overall_integration_tests": [{"description": "runs twice", "path": "tests/it.sh",
                                       "code": "sh greet.sh && sh greet.sh\n", "command": "sh tests/it.sh"}]}
    seen_tests: list[bool] = []

    def answer(ctx):
        return design if "Design the tests" in ctx.prompt else plan

    def implement(ctx):
        seen_tests.append((ctx.cwd / "tests" / "test_greet.sh").is_file())
        text = "echo hello\n" if ctx.iteration > 1 else "echo hi\n"
        return [ctx.write("greet.sh", text), "done"]

    runner = PlanAndExecute(planner=scripted_planner(answer), executor=writing_executor(override=implement),
                            test_design="code")
    result = await runner.execute("greeter", tmp_path)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    report = result.task("1")
    assert seen_tests == [True, True] and report.iterations == 2  # the test failed once, then passed
    assert report.test_files == ["tests/test_greet.sh"] and "command:sh tests/test_greet.sh" in report.validators
    assert (tmp_path / "tests" / "it.sh").is_file() and result.integration[0].passed is True
    assert set(result.files) == {"greet.sh", "tests/test_greet.sh", "tests/it.sh"}
    assert result.phases["test_design"].runs == 1


async def test_closing_the_stream_early_stops_the_tasks_and_removes_the_worktrees(repo):
    async def hang(ctx):
        await asyncio.sleep(60)

    runner = PlanAndExecute(planner=scripted_planner(THREE), executor=writing_executor(override=hang), parallel=3)
    started = time.monotonic()
    events = runner.stream_execute("write three files", repo)
    async with contextlib.aclosing(events):
        async for event in events:
            if event.type is PlanEventType.TASK_START:
                break
    assert time.monotonic() - started < 15
    assert git(repo, "worktree", "list").count("\n") == 1
    assert not (repo / "a.txt").exists()


def test_bad_options_are_configuration_errors():
    executor = writing_executor()
    with pytest.raises(ConfigurationError, match="mode='analysis'"):
        PlanAndExecute(executor=executor, planner=AutonomousCodingAgent(backend=FunctionBackend, turn=lambda c: None))
    with pytest.raises(ConfigurationError, match="valid values for decomposition"):
        PlanAndExecute(executor=executor, planner=scripted_planner(THREE), decomposition="deep")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="own workspaces"):
        PlanAndExecute(executor=executor, planner=scripted_planner(THREE), parallel=2, workspaces="inplace")
    with pytest.raises(ConfigurationError, match="parallel must be an integer"):
        PlanAndExecute(executor=executor, planner=scripted_planner(THREE), parallel=0)
    with pytest.raises(ConfigurationError, match="be able to change files"):
        PlanAndExecute(executor=scripted_planner(THREE))


async def test_a_given_plan_is_checked_first_and_without_one_a_planner_is_needed(tmp_path):
    runner = PlanAndExecute(executor=writing_executor())
    with pytest.raises(ConfigurationError, match="a planner is needed"):
        await runner.execute("x", tmp_path)
    with pytest.raises(ConfigurationError, match="used more than once"):
        await runner.execute("x", tmp_path, plan=plan_dict(file_task("1", "a", "b"), file_task("1", "c", "d")))


async def test_parallel_tasks_share_the_budget_and_a_later_task_starts_when_a_share_comes_back(repo):
    runner = PlanAndExecute(planner=scripted_planner(THREE, tokens=100), executor=writing_executor(tokens=100),
                            parallel=2, budget=Budget(max_tokens=1000))
    events, result = await collect(runner, "write three files", repo)
    assert result.status is CodingStatus.COMPLETED, result.summary()
    shares = [e.data["budget"]["max_tokens"] for e in events if e.type is PlanEventType.TASK_START]
    assert shares[:2] == [450, 450] and 350 <= shares[2] <= 700


async def test_every_plan_event_is_redacted(tmp_path, monkeypatch):
    secret = "sk-plan-secret-0123456789abcdef"
    monkeypatch.setenv("SERVICE_API_KEY", secret)
    plan = plan_dict(file_task("1", "a.txt", "alpha"))
    plan["root_task_description"] = f"deploy with key {secret}"
    runner = PlanAndExecute(planner=scripted_planner(plan), executor=writing_executor())
    events, result = await collect(runner, f"use {secret}", tmp_path)
    assert result.ok
    assert all(secret not in event.to_json() for event in events)
