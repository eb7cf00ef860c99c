"""`agenter batch TASKS.jsonl --out RESULTS.jsonl`: many tasks, one row each, resumable.

Exit codes: 0 every task has a row and passed, 1 otherwise (a failed task or one left without a
row), 2 usage error, 3 every task passed or paused and some wait for approval (continue them with
--approve ID or --approve-all), 130 interrupted (run the same command again to resume). See
docs/batch.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from agenter._cliargs import budget_fields, pair_problems, parse_options, positive_problems

EXIT_OK = 0
EXIT_NOT_ALL_PASSED = 1
EXIT_USAGE = 2
EXIT_PAUSED = 3
EXIT_INTERRUPTED = 130


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `batch` subcommand to an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "batch", help="run many tasks, each in a workspace of its own",
        description="Run every task of a JSONL file in a workspace of its own and append one result row "
                    "per task to --out; ids that already have a row there are skipped (resume).")
    parser.add_argument("tasks", help="the tasks file: one JSON object a line (id, repository, prompt, ...)")
    parser.add_argument("--out", required=True, help="the results file (JSONL), appended to")
    parser.add_argument("--concurrency", type=int, default=4, help="tasks at once (default: 4)")
    parser.add_argument("--backend", default="anthropic-sdk", help="default backend (default: anthropic-sdk)")
    parser.add_argument("--model", default=None, help="default model (default: the backend's own)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the default backend; VALUE is parsed as JSON when it can be")
    parser.add_argument("--validator", action="append", default=None, metavar="NAME",
                        help="default validators: syntax, security or 'command:CMD' (repeatable)")
    parser.add_argument("--test-command", default=None, help="default test command (a blocking validator)")
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument("--no-sandbox", action="store_true", help="unrestricted file access for the agents")
    task = parser.add_argument_group("each task's budget (a task's own budget fields win)")
    task.add_argument("--max-cost", type=float, default=None, help="USD per task")
    task.add_argument("--max-tokens", type=int, default=None, help="tokens per task")
    task.add_argument("--max-time", type=float, default=None, help="seconds per task")
    task.add_argument("--max-iterations", type=int, default=None, help="turns per task")
    whole = parser.add_argument_group("the whole batch")
    whole.add_argument("--batch-max-cost", type=float, default=None, help="USD over all tasks")
    whole.add_argument("--batch-max-time", type=float, default=None, help="seconds for the batch")
    whole.add_argument("--retry", action="append", default=[], metavar="STATUS",
                       help="re-run tasks whose row has this status, e.g. error (repeatable)")
    whole.add_argument("--approve", action="append", default=[], metavar="TASK_ID[=ANSWER]",
                       help="continue this paused task: ANSWER allow (default), deny or always for its waiting "
                            "calls (repeatable; the agents' conversation_store must be the one it paused with)")
    whole.add_argument("--approve-all", nargs="?", const="allow", default=None, metavar="ANSWER",
                       help="continue every paused task: allow (default), deny or always")
    whole.add_argument("--keep-workspaces", action="store_true", help="leave each task's workspace in place")
    whole.add_argument("--workspace-root", default=None, help="where workspaces are made (default: a temp dir)")
    whole.add_argument("--git-cache", default=None, help="where mirrors of git URLs are kept")
    output = parser.add_argument_group("output")
    output.add_argument("--swebench", default=None, metavar="PATH",
                        help="also write SWE-bench predictions of every row (.jsonl or .json)")
    output.add_argument("--swebench-model", default=None, help="model_name_or_path of the predictions")
    output.add_argument("--swebench-only-passed", action="store_true", help="predictions of passed rows only")
    output.add_argument("--quiet", action="store_true", help="no line per finished task")
    output.add_argument("--no-progress", action="store_true", help="no live display (the summary is printed)")
    output.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    ray = parser.add_argument_group("Ray engine (pip install 'agenter-sdk[ray]')")
    ray.add_argument("--engine", choices=["local", "ray"], default="local")
    ray.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    ray.add_argument("--ray-num-cpus", type=int, default=None, help="CPUs of the local cluster")
    ray.add_argument("--ray-cpus-per-task", type=float, default=1.0, help="CPUs each task asks for (default 1)")
    ray.add_argument("--ray-resource", action="append", default=[], metavar="NAME=AMOUNT",
                     help="a custom resource each task asks for, e.g. agent_slots=1 (repeatable)")
    ray.add_argument("--ray-max-retries", type=int, default=3, help="attempts after a lost worker (default 3)")
    return parser


_ANSWERS = ("allow", "deny", "always")


def _approve(args: argparse.Namespace) -> str | dict[str, str] | None:
    """run_batch's `approve` from --approve and --approve-all."""
    if args.approve_all is not None:
        return str(args.approve_all)
    if not args.approve:
        return None
    return {task_id.strip(): answer or "allow" for task_id, _, answer in (p.partition("=") for p in args.approve)}


def _problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.concurrency < 1:
        problems.append("--concurrency must be >= 1")
    problems += positive_problems(args, above_zero=("batch_max_cost", "batch_max_time"))
    if args.ray_cpus_per_task < 0:
        problems.append("--ray-cpus-per-task must be >= 0")
    if args.ray_max_retries < 0:
        problems.append("--ray-max-retries must be >= 0")
    problems += pair_problems("--option", args.option) + pair_problems("--ray-resource", args.ray_resource)
    for pair in args.ray_resource:
        try:
            float(pair.partition("=")[2])
        except ValueError:
            problems.append(f"--ray-resource needs a number after '=', got {pair!r}")
    for pair in args.approve:
        task_id, _, answer = pair.partition("=")
        if not task_id.strip():
            problems.append(f"--approve needs a task id, got {pair!r}")
        elif answer and answer not in _ANSWERS:
            problems.append(f"--approve {pair!r}: the answer is allow, deny or always")
    if args.approve_all is not None and args.approve_all not in _ANSWERS:
        problems.append(f"--approve-all {args.approve_all!r}: the answer is allow, deny or always")
    if args.approve and args.approve_all is not None:
        problems.append("--approve and --approve-all: choose one")
    if args.engine != "ray" and (args.address or args.ray_resource):
        problems.append("--address and --ray-resource need --engine ray")
    return problems


def run(args: argparse.Namespace) -> int:
    """Run `agenter batch` with parsed arguments; returns the exit code."""
    from agenter._errors import ConfigurationError
    from agenter._types import Budget
    from agenter.batch import BatchLimits, RayOptions, RichProgress, TaskDefaults, export_swebench, run_batch

    problems = _problems(args)
    if problems:
        for problem in problems:
            print(f"agenter: {problem}", file=sys.stderr)
        return EXIT_USAGE
    budget = budget_fields(args)
    try:
        defaults = TaskDefaults(backend=args.backend, model=args.model, options=parse_options(args.option),
                                validators=args.validator, test_command=args.test_command,
                                budget=Budget(**budget) if budget else None,
                                sandbox=not args.no_sandbox, system_prompt=args.system_prompt)
        limits = BatchLimits(max_cost_usd=args.batch_max_cost, max_time_seconds=args.batch_max_time)
        ray = RayOptions(address=args.address, num_cpus=args.ray_num_cpus, num_cpus_per_task=args.ray_cpus_per_task,
                         resources_per_task={k.strip(): float(v) for k, _, v in
                                             (pair.partition("=") for pair in args.ray_resource)},
                         max_retries=args.ray_max_retries)
    except ConfigurationError as exc:
        print(f"agenter: {exc}", file=sys.stderr)
        return EXIT_USAGE
    progress = None if args.no_progress else RichProgress(show_tasks=not args.quiet)
    try:
        if args.swebench:  # written after the batch: a place it cannot go is known now
            from pathlib import Path

            from agenter.batch._results import check_writable

            check_writable(Path(args.swebench).expanduser(), "the predictions file", parameter="swebench")
        summary = asyncio.run(run_batch(
            args.tasks, args.out, defaults=defaults, concurrency=args.concurrency, limits=limits,
            keep_workspaces=args.keep_workspaces, workspace_root=args.workspace_root, git_cache=args.git_cache,
            retry=args.retry, engine=args.engine, ray=ray, progress=progress, approve=_approve(args)))
    except ConfigurationError as exc:  # a bad tasks file, option or backend, found before any task ran
        print(f"agenter: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("agenter: interrupted; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if progress is None:
        for line in summary.lines():
            print(line, file=sys.stderr)
    if args.swebench:
        count = export_swebench(args.out, args.swebench, model_name=args.swebench_model,
                                only_passed=args.swebench_only_passed)
        print(f"wrote {count} SWE-bench prediction(s) to {args.swebench}", file=sys.stderr)
    if summary.paused:
        print(f"{summary.paused} task(s) wait for approval: run the same command with --approve TASK_ID "
              "(=deny, =always) or --approve-all to continue them", file=sys.stderr)
    if args.json:
        print(json.dumps(summary.to_dict()))
    if summary.all_passed:
        return EXIT_OK
    paused_only = summary.complete and summary.paused and summary.passed + summary.paused == summary.total
    return EXIT_PAUSED if paused_only else EXIT_NOT_ALL_PASSED
