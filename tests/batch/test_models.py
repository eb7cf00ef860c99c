"""Task rows, their defaults and budgets, the results file and the summary: plain logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenter import Budget, ConfigurationError
from agenter.batch import (
    BatchInputError,
    BatchLimits,
    BatchRow,
    BatchSummary,
    BatchTask,
    ResultsFile,
    TaskCap,
    TaskDefaults,
    load_tasks,
    predictions,
    read_rows,
)
from agenter.batch._runner import task_budget, task_config
from agenter.batch._summary import percentile


def test_tasks_file_with_every_problem_named_by_line(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join([
        json.dumps({"id": "a", "repository": "repo", "prompt": "fix"}),
        "",
        "{not json",
        json.dumps({"id": "b", "repository": "repo", "prompt": "x", "colour": "red"}),
        json.dumps({"id": "a", "repository": "repo", "prompt": "again"}),
        json.dumps({"id": "c", "repository": "repo", "prompt": "   "}),
        json.dumps({"id": "d", "repository": "repo", "prompt": "x", "budget": {"max_cost_usd": -1}}),
        json.dumps(["a list"]),
    ]) + "\n")
    with pytest.raises(BatchInputError) as caught:
        load_tasks(path)
    problems = caught.value.problems
    assert problems[0].startswith("line 3: not JSON")
    assert "line 4 (id 'b'): unknown task field 'colour'" in problems
    assert any(p.startswith("line 6 (id 'c'): invalid task field 'prompt'") for p in problems)
    assert any(p.startswith("line 7 (id 'd'): invalid task field 'budget'") and "max_cost_usd" in p
               for p in problems)
    assert "line 8: a task is a JSON object, got list" in problems
    assert "duplicate id 'a'" in problems
    assert isinstance(caught.value, ConfigurationError)


def test_relative_repositories_are_relative_to_the_tasks_file(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "tasks.jsonl"
    path.write_text(json.dumps({"id": "a", "repository": "../repo", "prompt": "p"}) + "\n"
                    + json.dumps({"id": "b", "repository": "https://example.com/r.git", "prompt": "p"}) + "\n")
    a, b = load_tasks(path)
    assert a.repository == str(tmp_path / "repo")
    assert b.repository == "https://example.com/r.git"


def test_missing_tasks_file_is_a_configuration_error(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="cannot read the tasks file"):
        load_tasks(tmp_path / "nope.jsonl")


def test_task_config_merges_over_the_defaults():
    defaults = TaskDefaults(backend="anthropic-sdk", model="m1", options={"base_url": "u", "api_key": "k"},
                            validators=["syntax"], test_command="pytest -q")
    task = BatchTask(id="a", repository="r", prompt="p", options={"max_tokens": 10})
    backend, name, model, options, validators = task_config(task, defaults)
    assert (backend, name, model) == ("anthropic-sdk", "anthropic-sdk", "m1")
    assert options == {"base_url": "u", "api_key": "k", "max_tokens": 10}
    assert validators == ["syntax", "command:pytest -q"]
    # A task on another backend does not get the default backend's options.
    other = BatchTask(id="b", repository="r", prompt="p", backend="codex", model="m2", validators=[],
                      test_command="make test")
    backend, name, model, options, validators = task_config(other, defaults)
    assert (backend, name, model, options) == ("codex", "codex", "m2", {})
    assert validators == ["command:make test"]
    # No validators anywhere: the agent's default (syntax), plus the test command when there is one.
    assert task_config(BatchTask(id="c", repository="r", prompt="p"), TaskDefaults())[4] is None
    assert task_config(BatchTask(id="c", repository="r", prompt="p", test_command="t"), TaskDefaults())[4] == [
        "syntax", "command:t"]


def test_task_budget_takes_its_own_fields_and_the_batch_cap():
    defaults = TaskDefaults(budget=Budget(max_cost_usd=2.0, max_time_seconds=100, max_iterations=3))
    task = BatchTask(id="a", repository="r", prompt="p", budget={"max_cost_usd": 0.5})
    budget, capped = task_budget(task, defaults, None)
    assert budget is not None
    assert (budget.max_cost_usd, budget.max_time_seconds, budget.max_iterations) == (0.5, 100, 3)
    assert capped == []
    budget, capped = task_budget(task, defaults, TaskCap(max_cost_usd=0.2, max_time_seconds=500))
    assert budget is not None and budget.max_cost_usd == 0.2 and budget.max_time_seconds == 100
    assert capped == ["cost"]
    budget, capped = task_budget(BatchTask(id="b", repository="r", prompt="p"), TaskDefaults(),
                                 TaskCap(max_time_seconds=5))
    assert budget is not None and budget.max_time_seconds == 5 and capped == ["time"]
    assert task_budget(BatchTask(id="b", repository="r", prompt="p"), TaskDefaults(), None) == (None, [])


def test_batch_limits_must_be_positive():
    with pytest.raises(ConfigurationError, match="max_cost_usd must be > 0"):
        BatchLimits(max_cost_usd=0)


def test_results_file_resumes_after_a_cut_line(tmp_path: Path):
    out = tmp_path / "results.jsonl"
    out.write_text(json.dumps(BatchRow(id="a", status="completed").model_dump()) + "\n"
                   + '{"id": "b", "status": "compl')  # the process died mid-write
    rows, bad = read_rows(out)
    assert list(rows) == ["a"] and bad == 1
    with ResultsFile(out) as results:
        results._write(json.dumps(BatchRow(id="b", status="failed").model_dump()) + "\n")
    rows, bad = read_rows(out)
    assert sorted(rows) == ["a", "b"] and bad == 1  # ours started on a line of its own


def test_a_second_writer_is_refused(tmp_path: Path):
    out = tmp_path / "results.jsonl"
    with ResultsFile(out), pytest.raises(ConfigurationError, match="another batch is writing"):
        ResultsFile(out).open()


def test_last_row_of_an_id_wins(tmp_path: Path):
    out = tmp_path / "r.jsonl"
    out.write_text("".join(json.dumps(BatchRow(id="a", status=s).model_dump()) + "\n" for s in ("error", "completed")))
    assert read_rows(out)[0]["a"].status == "completed"


def test_summary_figures():
    rows = {f"t{i}": BatchRow(id=f"t{i}", status="completed" if i < 3 else "error", cost_usd=0.5,
                              duration_seconds=float(i + 1), error_kind=None if i < 3 else "auth")
            for i in range(4)}
    summary = BatchSummary.of(["t0", "t1", "t2", "t3", "t4"], rows, list(rows.values())[:2], skipped=2, not_run=0)
    assert (summary.total, summary.with_row, summary.passed) == (5, 4, 3)
    assert summary.pass_rate == 0.75 and summary.cost_usd == 2.0 and summary.run_cost_usd == 1.0
    assert (summary.p50_seconds, summary.p95_seconds) == (2.0, 4.0)
    assert summary.statuses == {"completed": 3, "error": 1} and summary.error_kinds == {"auth": 1}
    assert not summary.complete and not summary.all_passed
    assert "passed 3 (75.0%)" in summary.lines()[0]
    assert percentile([], 0.5) is None and percentile([3.0], 0.95) == 3.0


def test_swebench_predictions():
    rows = [BatchRow(id="django__django-1", status="completed", diff="diff --git a/x b/x\n", model="m"),
            BatchRow(id="django__django-2", status="failed", diff="", backend="codex")]
    assert predictions(rows) == [
        {"instance_id": "django__django-1", "model_name_or_path": "m", "model_patch": "diff --git a/x b/x\n"},
        {"instance_id": "django__django-2", "model_name_or_path": "codex", "model_patch": ""}]
    assert [p["instance_id"] for p in predictions(rows, only_passed=True, model_name="mine")] == ["django__django-1"]
