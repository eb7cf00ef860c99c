"""`agenter run "PROMPT" --cwd DIR --backend NAME`: a coding run from the shell.

Exit code 0 only for COMPLETED; --json prints one event per line (NDJSON) for pipelines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenter", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a coding agent on a repository")
    run.add_argument("prompt", help="the task")
    run.add_argument("--cwd", default=".", help="the repository to work in (default: .)")
    run.add_argument("--backend", default="anthropic-sdk", help="agent backend (default: anthropic-sdk)")
    run.add_argument("--model", default=None)
    run.add_argument("--max-cost", type=float, default=None, help="cost budget in USD")
    run.add_argument("--max-tokens", type=int, default=None, help="token budget")
    run.add_argument("--max-time", type=float, default=None, help="time budget in seconds")
    run.add_argument("--max-iterations", type=int, default=None)
    run.add_argument("--validator", action="append", default=None, metavar="NAME",
                     help="syntax, security or 'command:CMD' (repeatable; default: syntax)")
    run.add_argument("--allow-write", action="append", default=None, metavar="PATTERN",
                     help="gitignore-style pattern writes must match (repeatable)")
    run.add_argument("--system-prompt", default=None)
    run.add_argument("--no-sandbox", action="store_true", help="unrestricted file access")
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="a backend option; VALUE is parsed as JSON when it can be")
    run.add_argument("--json", action="store_true", help="print events as NDJSON")
    sub.add_parser("backends", help="list backend names")
    return parser


def _backend_options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"agenter: --option needs KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "backends":
        from agenter.backends import backend_names

        print("\n".join(backend_names()))
        return EXIT_OK
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from agenter import AutonomousCodingAgent, Budget, CodingRequest, ConfigurationError
    from agenter._types import CodingStatus

    budget_fields = {k: v for k, v in {
        "max_cost_usd": args.max_cost, "max_tokens": args.max_tokens,
        "max_time_seconds": args.max_time, "max_iterations": args.max_iterations,
    }.items() if v is not None}
    try:
        agent = AutonomousCodingAgent(
            backend=args.backend, model=args.model, validators=args.validator,
            sandbox=not args.no_sandbox, **_backend_options(args.option))
        request = CodingRequest(prompt=args.prompt, cwd=args.cwd, system_prompt=args.system_prompt,
                                allowed_write_paths=args.allow_write,
                                budget=Budget(**budget_fields) if budget_fields else None)
    except (ConfigurationError, ValueError) as exc:
        print(f"agenter: {exc}", file=sys.stderr)
        return EXIT_USAGE

    display = _NdjsonDisplay() if args.json else _LiveDisplay()
    result_status = None
    try:
        async for event in agent.stream_execute(request):
            display.show(event)
            if event.type.value == "session_end":
                result_status = event.data.get("status")
    except ConfigurationError as exc:
        print(f"agenter: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        display.close()
    return EXIT_OK if result_status == CodingStatus.COMPLETED.value else EXIT_NOT_COMPLETED


class _NdjsonDisplay:
    def show(self, event: Any) -> None:
        sys.stdout.write(event.to_json() + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        pass


class _LiveDisplay:
    """A rich status line that follows the run, with the notable events printed above it."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.status = self.console.status("starting…")
        self.status.start()
        self.iteration = 0
        self.tokens = 0
        self.cost = 0.0

    def _line(self, text: str) -> str:
        return f"iteration {self.iteration} · {self.tokens} tokens · ${self.cost:.4f} · {text}"

    def show(self, event: Any) -> None:
        from rich.markup import escape

        kind, data = event.type.value, event.data
        if kind == "session_start":
            self.console.print(f"[bold]agenter[/] {data.get('backend')} · model {data.get('model')} · {escape(str(data.get('cwd')))}")
        elif kind == "iteration_start":
            self.iteration = data["iteration"]
            self.console.print(f"[cyan]▶ iteration {self.iteration}[/]")
        elif kind == "backend_message":
            what = data.get("tool_name") or data.get("message_type")
            snippet = (data.get("content") or "").strip().splitlines()
            text = f"{what}: {snippet[0][:100] if snippet else ''}"
            self.status.update(escape(self._line(text)))
            if data.get("message_type") == "tool_call":
                self.console.print(f"  [dim]tool[/] {escape(str(data.get('tool_name')))} {escape(json.dumps(data.get('tool_input'))[:120])}")
        elif kind == "validation_result":
            mark = "[green]✓[/]" if data["passed"] else ("[red]✗[/]" if data["blocking"] else "[yellow]![/]")
            self.console.print(f"  {mark} {data['validator']}" + ("" if data["passed"] else f": {len(data['errors'])} problem(s)"))
            for error in data["errors"][:5]:
                self.console.print(f"      [dim]{escape(error[:200])}[/]")
        elif kind == "iteration_end":
            self.tokens, self.cost = data.get("tokens", 0), data.get("cost", 0.0)
        elif kind in ("completed", "failed", "refused"):
            colour = {"completed": "green", "failed": "red", "refused": "yellow"}[kind]
            self.console.print(f"[bold {colour}]{kind.upper()}[/] {escape(str(data.get('error') or data.get('reason') or ''))}")
            for path in data.get("files", []):
                self.console.print(f"  changed {escape(path)}")
        elif kind == "session_end":
            self.console.print(self._line(f"status {data['status']} in {data.get('duration', 0):.1f} s"))

    def close(self) -> None:
        self.status.stop()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
