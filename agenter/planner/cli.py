"""`agenter plan "PROMPT" --cwd DIR`: plan a task, then run each atomic task as a verified run.

Also runs as `python -m agenter.planner ...`. Exit codes as `agenter run`: 0 completed, 1 not
completed, 2 usage error, 130 interrupted. `--json` prints one PlanEvent per line; the last line
is always run_end. See docs/planning.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agenter._cliargs import budget_fields, pair_problems, parse_options, positive_problems, read_text_input

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

__all__ = ["add_plan_parser", "main", "run_plan"]


def add_plan_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `plan` command to an argparse sub-parser set (the `agenter` command's)."""
    plan = subparsers.add_parser("plan", help="plan a task, then run each part as a verified run",
                                 description=__doc__.splitlines()[0])
    _arguments(plan)
    return plan


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the task")
    parser.add_argument("--cwd", default=".", help="the repository to work in (default: .)")
    parser.add_argument("--backend", default="anthropic-sdk", help="executor backend (default: anthropic-sdk)")
    parser.add_argument("--model", default=None, help="executor model (default: the backend's own)")
    parser.add_argument("--planner-backend", default=None, help="planner backend (default: --backend)")
    parser.add_argument("--planner-model", default=None, help="planner model (default: --model)")
    parser.add_argument("--decomposition", choices=("none", "deliverables", "full"), default="deliverables",
                        help="none: one task; deliverables: one level; full: recursive to --max-depth")
    parser.add_argument("--max-depth", type=int, default=2, help="levels of the task tree (full; default 2)")
    parser.add_argument("--test-design", choices=("none", "descriptions", "code"), default="none",
                        help="tests designed by the planner after the plan (default: none)")
    parser.add_argument("--parallel", type=int, default=1, help="independent tasks at once, each in a git worktree")
    parser.add_argument("--plan-only", action="store_true", help="print the plan and run nothing")
    parser.add_argument("--plan", dest="plan_file", default=None, metavar="FILE",
                        help="run this plan (JSON, as --plan-only --json prints it) instead of planning")
    parser.add_argument("--yes", action="store_true", help="approve the plan without asking")
    parser.add_argument("--max-cost", type=float, default=None, help="cost budget for the whole run, USD")
    parser.add_argument("--max-tokens", type=int, default=None, help="token budget for the whole run")
    parser.add_argument("--max-time", type=float, default=None, help="time budget for the whole run, seconds")
    parser.add_argument("--max-iterations", type=int, default=None, help="turns per task run (default 5)")
    parser.add_argument("--validator", action="append", default=None, metavar="NAME",
                        help="executor validator: syntax, security or 'command:CMD' (repeatable)")
    parser.add_argument("--allow-write", action="append", default=None, metavar="PATTERN",
                        help="gitignore-style pattern every task's writes must match (repeatable)")
    parser.add_argument("--no-sandbox", action="store_true", help="unrestricted file access for the executor")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="executor backend option")
    parser.add_argument("--planner-option", action="append", default=[], metavar="KEY=VALUE",
                        help="planner backend option (default: the --option values when the backends match)")
    parser.add_argument("--json", action="store_true", help="print PlanEvents as NDJSON on stdout")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agenter plan", description=__doc__.splitlines()[0])
    _arguments(parser)
    return run_plan(parser.parse_args(argv))


def run_plan(args: argparse.Namespace) -> int:
    """Run the parsed `plan` command; returns the exit code."""
    problems = _usage_problems(args)
    if problems:
        for problem in problems:
            print(f"agenter: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        print("agenter: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _usage_problems(args: argparse.Namespace) -> list[str]:
    problems = ["the prompt is empty"] if not args.prompt.strip() else []
    problems += positive_problems(args, at_least_one=("parallel", "max_depth"))
    problems += pair_problems("--option", args.option) + pair_problems("--planner-option", args.planner_option)
    args.loaded_plan = None
    if args.plan_file is not None:
        if Path(args.plan_file).is_file():
            args.loaded_plan, found = _read_plan(args.plan_file)
            problems += found
        else:
            problems.append(f"--plan: no such file {args.plan_file!r}")
    return problems


def _read_plan(path: str) -> tuple[Any, list[str]]:
    """The plan in a --plan file, or the problems that keep it from being one (one line each)."""
    from pydantic import ValidationError

    from agenter import ConfigurationError
    from agenter.planner import Plan

    where = f"--plan {path!r}"
    try:
        text = read_text_input(path, "the plan file", parameter="plan")
    except ConfigurationError as exc:
        return None, [str(exc)]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); a plan is what "
                      "`agenter plan ... --plan-only` prints"]
    if not isinstance(data, dict):
        return None, [f"{where}: a plan is a JSON object, not a {type(data).__name__}"]
    try:
        return Plan.model_validate(data), []
    except ValidationError as exc:
        return None, [f"{where}: {line}" for line in _validation_lines(exc)]


def _validation_lines(exc: Any) -> list[str]:
    """A pydantic ValidationError as one line per problem: the field, then what is wrong (no URL,
    no input dump)."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "missing":
            lines.append(f"field {field!r} is missing")
        else:
            lines.append(f"field {field!r}: {message}" if field else message)
    return lines


def _build(args: argparse.Namespace) -> Any:
    from agenter import AutonomousCodingAgent, Budget
    from agenter.planner import PlanAndExecute

    budget = budget_fields(args)
    options = parse_options(args.option)
    executor = AutonomousCodingAgent(backend=args.backend, model=args.model, validators=args.validator,
                                     sandbox=not args.no_sandbox, **options)
    planner_backend = args.planner_backend or args.backend
    planner_options = parse_options(args.planner_option) if args.planner_option or planner_backend != args.backend \
        else options
    needs_planner = args.plan_file is None and (args.decomposition != "none" or args.test_design != "none")
    planner = AutonomousCodingAgent(backend=planner_backend, model=args.planner_model or args.model,
                                    mode="analysis", **planner_options) if needs_planner else None
    interactive = not args.yes and not args.json and not args.plan_only and sys.stdin.isatty()
    return PlanAndExecute(executor=executor, planner=planner, decomposition=args.decomposition,
                          max_depth=args.max_depth, test_design=args.test_design, parallel=args.parallel,
                          budget=Budget(**budget) if budget else None,
                          on_approval=_ask_approval if interactive else None)


async def _ask_approval(plan: Any) -> bool:
    from agenter.planner.plan import walk

    lines = [f"Plan: {plan.root_task_description}"]
    for task, depth, _ in walk(plan.tasks):
        lines.append(f"{'  ' * depth}{task.id}. {task.description}"
                     + (f"  (after {', '.join(task.depends_on)})" if task.depends_on else ""))
    print("\n".join(lines), file=sys.stderr)
    answer = await asyncio.to_thread(input, "Run this plan? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


async def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from agenter import ConfigurationError
    from agenter.planner import PlanEventType

    try:
        runner = _build(args)
        events = runner.stream_execute(args.prompt, args.cwd, plan=args.loaded_plan, plan_only=args.plan_only,
                                       allowed_write_paths=args.allow_write)
        result = None
        async for event in events:
            if args.json:
                sys.stdout.write(event.to_json() + "\n")
                sys.stdout.flush()
            else:
                _show(event)
            if event.type is PlanEventType.RUN_END:
                result = event.result
    except ConfigurationError as exc:
        print(f"agenter: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except ValidationError as exc:
        for line in _validation_lines(exc):
            print(f"agenter: {line}", file=sys.stderr)
        return EXIT_USAGE
    if result is None:
        return EXIT_NOT_COMPLETED
    if not args.json:
        if args.plan_only and result.plan is not None:
            print(result.plan.model_dump_json(indent=2))
        print(result.summary(), file=sys.stderr if args.plan_only else sys.stdout)
    return EXIT_OK if result.ok else EXIT_NOT_COMPLETED


def _show(event: Any) -> None:
    """One line on stderr per notable event (the summary comes at the end)."""
    kind, data, task = event.type.value, event.data, event.task_id
    line = None
    if kind == "plan_created":
        line = f"plan: {data['atomic_tasks']} task(s), order {', '.join(data['order'])}"
    elif kind == "approval" and not data.get("approved"):
        line = "plan rejected"
    elif kind == "task_start":
        line = f"▶ task {task} (run {data.get('attempt', 1)}): {str(data.get('description', ''))[:80]}"
    elif kind == "task_end":
        line = f"  task {task}: {data.get('status')}" + (f" - {data['reason']}" if data.get("reason") else "")
    elif kind == "merge" and data.get("outcome") == "conflict":
        line = f"  task {task}: conflict in {', '.join(data.get('conflicts', []))}; running it again"
    elif kind == "integration_result":
        mark = {True: "passed", False: "FAILED", None: "not run"}[data.get("passed")]
        line = f"  integration test {mark}: {data.get('description')}"
    if line:
        print(line, file=sys.stderr, flush=True)
