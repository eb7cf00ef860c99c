"""`agenter run "PROMPT" --cwd DIR --backend NAME`: a coding run from the shell.

Exit codes: 0 completed, 1 not completed, 2 usage error, 130 interrupted (Ctrl-C).
--json prints one event per line (NDJSON) for pipelines; the last line is always session_end.
--log-dir DIR writes the run's transcript there; `agenter show FILE` renders a transcript and
`agenter runs DIR` lists them; --resume FILE|ID continues an earlier run. See docs/cli.md and
docs/sessions.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a job stopped by Ctrl-C

INTERRUPTED = "interrupted by the user"

# Request and budget fields as the user typed them, so no message names a pydantic field.
_FLAGS = {
    "prompt": "the prompt", "cwd": "--cwd", "system_prompt": "--system-prompt",
    "allowed_write_paths": "--allow-write", "max_cost_usd": "--max-cost",
    "max_tokens": "--max-tokens", "max_time_seconds": "--max-time",
    "max_iterations": "--max-iterations",
}


def _parser() -> argparse.ArgumentParser:
    from agenter import __version__

    parser = argparse.ArgumentParser(prog="agenter", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"agenter {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a coding agent on a repository")
    run.add_argument("prompt", help="the task")
    run.add_argument("--cwd", default=".", help="the repository to work in (default: .)")
    run.add_argument("--backend", default="anthropic-sdk", help="agent backend (default: anthropic-sdk)")
    run.add_argument("--model", default=None, help="model name (default: the backend's own)")
    run.add_argument("--max-cost", type=float, default=None, help="cost budget in USD")
    run.add_argument("--max-tokens", type=int, default=None, help="token budget")
    run.add_argument("--max-time", type=float, default=None, help="time budget in seconds")
    run.add_argument("--max-iterations", type=int, default=None,
                     help="backend turns, the first attempt plus retries (default: 5)")
    run.add_argument("--validator", action="append", default=None, metavar="NAME",
                     help="syntax, security or 'command:CMD' (repeatable; default: syntax)")
    run.add_argument("--allow-write", action="append", default=None, metavar="PATTERN",
                     help="gitignore-style pattern writes must match (repeatable)")
    run.add_argument("--system-prompt", default=None)
    run.add_argument("--no-sandbox", action="store_true", help="unrestricted file access")
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="a backend option; VALUE is parsed as JSON when it can be")
    run.add_argument("--json", action="store_true", help="print events as NDJSON on stdout")
    run.add_argument("--log-dir", default=None, metavar="DIR",
                     help="write the run's transcript (JSONL, every event as it happens) to DIR")
    run.add_argument("--resume", default=None, metavar="TRANSCRIPT|ID",
                     help="continue an earlier run: its transcript file or the agent's session id")
    backends = sub.add_parser("backends", help="the backends: installed or not, version, path, credentials")
    backends.add_argument("--names", action="store_true", help="print only the backend names")
    backends.add_argument("--json", action="store_true", help="one JSON object per backend")
    show = sub.add_parser("show", help="render a transcript")
    show.add_argument("file", help="a transcript written with --log-dir")
    runs = sub.add_parser("runs", help="list the transcripts in a directory")
    runs.add_argument("dir", help="the --log-dir of earlier runs")
    from agenter.batch.cli import add_parser as add_batch_parser
    from agenter.planner.cli import add_plan_parser

    add_plan_parser(sub)
    add_batch_parser(sub)
    return parser


def _backends(args: argparse.Namespace) -> int:
    """`agenter backends`: what each backend needs and whether this machine has it."""
    from agenter.backends import backend_names

    if args.names:
        print("\n".join(backend_names()))
        return EXIT_OK
    from agenter.backends.registry import detect_backends

    statuses = detect_backends()
    if args.json:
        for status in statuses:
            print(json.dumps(status.as_dict()))
        return EXIT_OK
    for status in statuses:
        mark = "✓" if status.usable else ("·" if status.installed else "✗")
        where = f" {status.version or ''} {status.path or ''}".rstrip()
        credentials = {True: f"credentials: {status.credentials_source}", False: "no credentials found",
                       None: "credentials: the agent's own"}[status.credentials]
        print(f"{mark} {status.name:<14}{where}")
        if status.installed:
            print(f"    {credentials}; capabilities: {', '.join(status.capabilities)}")
        else:
            print(f"    needs: {status.problem}")
    return EXIT_OK


def _usage_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the flags, in the flags' own words (checked before anything starts)."""
    from agenter._cliargs import pair_problems, positive_problems

    problems = ["the prompt is empty"] if not args.prompt.strip() else []
    return problems + positive_problems(args) + pair_problems("--option", args.option)


def _describe_error(exc: BaseException) -> str:
    """One line for a configuration or validation error: flags instead of pydantic field
    names, and none of pydantic's multi-line layout or documentation links."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(_describe_problem(problem) for problem in exc.errors(include_url=False))
    cause = exc.__cause__
    message = str(exc)
    if isinstance(cause, ValidationError):
        head = message.split(str(cause))[0].rstrip(": \n") if str(cause) in message else message
        return f"{head}: {_describe_error(cause)}" if head else _describe_error(cause)
    lines = [line.strip() for line in message.splitlines()]
    return "; ".join(line for line in lines if line and "errors.pydantic.dev" not in line)


def _describe_problem(problem: Any) -> str:
    where = [str(part) for part in problem.get("loc", ())]
    field = _FLAGS.get(where[-1], ".".join(where)) if where else ""
    text = str(problem.get("msg", "invalid value"))
    text = text[:1].lower() + text[1:]
    return f"{field}: {text}" if field else text


def main(argv: list[str] | None = None) -> int:
    command = _Command()
    try:
        return command.main(argv)
    except KeyboardInterrupt:
        # asyncio.run turns the first Ctrl-C into a cancellation of the run (the session then
        # stops its backend) and re-raises it here once the run has unwound.
        try:
            command.interrupted()
        except BrokenPipeError:  # Ctrl-C in a terminal also ends the reader of a pipe
            _discard_stdout()
        print("agenter: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of --json went away (`agenter run --json ... | head -1`): the run was
        # stopped when the event stream closed. Quiet, as other commands are.
        _discard_stdout()
        return EXIT_NOT_COMPLETED


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _Command:
    """One invocation; keeps the display so an interrupt can still close the event stream."""

    def __init__(self) -> None:
        self.display: _NdjsonDisplay | _LiveDisplay | None = None

    def main(self, argv: list[str] | None) -> int:
        args = _parser().parse_args(argv)
        if args.command == "backends":
            return _backends(args)
        if args.command == "batch":
            from agenter.batch.cli import run as run_batch

            return run_batch(args)
        if args.command == "show":
            return _show(args.file)
        if args.command == "runs":
            return _runs(args.dir)
        if args.command == "plan":
            from agenter.planner.cli import run_plan

            return run_plan(args)
        problems = _usage_problems(args)
        if problems:
            for problem in problems:
                print(f"agenter: {problem}", file=sys.stderr)
            return EXIT_USAGE
        return asyncio.run(self.run(args))

    async def run(self, args: argparse.Namespace) -> int:
        from pydantic import ValidationError

        from agenter import AutonomousCodingAgent, Budget, CodingRequest, ConfigurationError
        from agenter._cliargs import budget_fields, parse_options

        budget = budget_fields(args)
        try:
            agent = AutonomousCodingAgent(
                backend=args.backend, model=args.model, validators=args.validator,
                sandbox=not args.no_sandbox, log_dir=args.log_dir, **parse_options(args.option))
            request = CodingRequest(prompt=args.prompt, cwd=args.cwd, system_prompt=args.system_prompt,
                                    allowed_write_paths=args.allow_write, resume=args.resume,
                                    budget=Budget(**budget) if budget else None)
        except (ConfigurationError, ValidationError) as exc:
            print(f"agenter: {_describe_error(exc)}", file=sys.stderr)
            return EXIT_USAGE

        display = self.display = _NdjsonDisplay() if args.json else _LiveDisplay()
        try:
            async for event in agent.stream_execute(request):
                display.show(event)
        except (ConfigurationError, ValidationError) as exc:
            # Raised before the session starts (the request is checked first), so no event
            # stream is open that would need a final line.
            print(f"agenter: {_describe_error(exc)}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            display.close()
        return EXIT_OK if display.progress.status == "completed" else EXIT_NOT_COMPLETED

    def interrupted(self) -> None:
        if self.display is not None:
            self.display.interrupted()
            self.display.close()


class _Progress:
    """What the events so far say: enough to end an interrupted stream truthfully."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.iteration = 0
        self.tokens = 0
        self.cost = 0.0
        self.files: set[str] = set()
        self.status: str | None = None  # set by session_end

    def update(self, event: Any) -> None:
        kind, data = event.type.value, event.data
        if kind == "iteration_start":
            self.iteration = data["iteration"]
        elif kind == "iteration_end":
            self.tokens, self.cost = data.get("tokens", 0), data.get("cost", 0.0)
            self.files.update(data.get("files_modified", []))
        elif kind == "session_end":
            self.status = data.get("status")


class _NdjsonDisplay:
    def __init__(self) -> None:
        self.progress = _Progress()

    def show(self, event: Any) -> None:
        self.progress.update(event)
        sys.stdout.write(event.to_json() + "\n")
        sys.stdout.flush()

    def interrupted(self) -> None:
        """End the stream as a session would: an outcome event, then session_end."""
        from agenter import CodingEvent, CodingEventType

        progress = self.progress
        if progress.status is not None:
            return  # the session had already ended
        common = dict(iterations=progress.iteration, tokens=progress.tokens, cost=progress.cost)
        # files: what the finished iterations changed; the interrupted turn may have changed more.
        self.show(CodingEvent(type=CodingEventType.FAILED, data=dict(
            status="error", error=INTERRUPTED, exceeded_limit=None, files=sorted(progress.files),
            summary="", **common)))
        # result is null: the session did not finish, so there is no verified result.
        self.show(CodingEvent(type=CodingEventType.SESSION_END, data=dict(
            status="error", error=INTERRUPTED, interrupted=True,
            duration=round(time.monotonic() - progress.started, 3), result=None, **common)))

    def close(self) -> None:
        pass


# The live display's heading colour per final status; the heading itself is the status.
_COLOURS = {"completed": "green", "completed_with_limit_exceeded": "yellow", "refused": "yellow"}


class _LiveDisplay:
    """A rich status line that follows the run, with the notable events printed above it."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.status = self.console.status("starting…")
        self.status.start()
        self.progress = _Progress()

    def _line(self, text: str) -> str:
        progress = self.progress
        return f"iteration {progress.iteration} · {progress.tokens} tokens · ${progress.cost:.4f} · {text}"

    def show(self, event: Any) -> None:
        from rich.markup import escape

        self.progress.update(event)
        kind, data = event.type.value, event.data
        if kind == "session_start":
            model = data.get("model") or "agent default"
            self.console.print(f"[bold]agenter[/] {escape(str(data.get('backend')))} · model: {escape(str(model))}"
                               f" · {escape(str(data.get('cwd')))}")
        elif kind == "iteration_start":
            self.console.print(f"[cyan]▶ iteration {self.progress.iteration}[/]")
        elif kind == "backend_message":
            what = data.get("tool_name") or data.get("message_type")
            snippet = (data.get("content") or "").strip().splitlines()
            text = f"{what}: {snippet[0][:100] if snippet else ''}"
            self.status.update(escape(self._line(text)))
            if data.get("message_type") == "tool_call":
                self.console.print(f"  [dim]tool[/] {escape(str(data.get('tool_name')))} "
                                   f"{escape(json.dumps(data.get('tool_input'))[:120])}")
        elif kind == "validation_result":
            self._validation(data)
        elif kind in ("completed", "failed", "refused"):
            status = str(data.get("status") or kind)
            colour = _COLOURS.get(status, "red")
            heading = status.replace("_", " ").upper()
            detail = data.get("error") or data.get("reason") or ""
            self.console.print(f"[bold {colour}]{heading}[/]  {escape(str(detail))}".rstrip())
            for path in data.get("files", []):
                self.console.print(f"  changed {escape(path)}")
        elif kind == "session_end":
            duration = data.get("duration", 0) or 0
            self.console.print(self._line(f"status {data['status']} in {duration:.1f} s"))

    def _validation(self, data: dict[str, Any]) -> None:
        from rich.markup import escape

        name = escape(str(data["validator"]))
        if data.get("skipped"):
            # Nothing for it to check (no matching file changed): not a pass.
            self.console.print(f"  [dim]– {name} skipped[/]")
            return
        mark = "[green]✓[/]" if data["passed"] else ("[red]✗[/]" if data["blocking"] else "[yellow]![/]")
        self.console.print(f"  {mark} {name}" + ("" if data["passed"] else f": {len(data['errors'])} problem(s)"))
        for error in data["errors"][:5]:
            self.console.print(f"      [dim]{escape(error[:200])}[/]")

    def interrupted(self) -> None:
        pass  # main() prints the one line that says so

    def close(self) -> None:
        self.status.stop()


# ---------------------------------------------------------------------------- transcripts
def _read(path: str) -> Any:
    from agenter import ConfigurationError
    from agenter.session.transcript import read_transcript

    try:
        return read_transcript(path)
    except ConfigurationError as exc:
        print(f"agenter: {exc}", file=sys.stderr)
        return None


def _when(stamp: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if isinstance(stamp, int | float) else "?"


def _show(path: str) -> int:
    """Print a transcript as a readable account of the run(s)."""
    transcript = _read(path)
    if transcript is None:
        return EXIT_USAGE
    out = _TranscriptPrinter()
    out.header(transcript)
    for record in transcript.records:
        kind = record.get("record")
        if kind == "request":
            out.request(record)
        elif kind == "event":
            out.event(record)
    out.flush_text()
    if transcript.end is None:
        print("\n(the session did not close: the run was killed, crashed, or is still running)")
    return EXIT_OK


class _TranscriptPrinter:
    """Plain text, one line per notable event; streamed text pieces joined into one line."""

    def __init__(self) -> None:
        self.pending: list[str] = []

    def header(self, transcript: Any) -> None:
        head = transcript.header
        versions = " · ".join(f"{k} {v}" for k, v in (head.get("versions") or {}).items())
        print(f"transcript {transcript.path}")
        print(f"backend {head.get('backend')} · model {head.get('model') or 'agent default'} · "
              f"mode {head.get('mode')} · cwd {head.get('cwd')}")
        print(f"started {_when(head.get('started'))} · {versions}")
        resumed = head.get("resumed_from")
        if resumed:
            print(f"resumes {resumed.get('transcript') or 'session'} (agent session {resumed.get('session_id')})")
        if transcript.session_id:
            print(f"agent session {transcript.session_id}")

    def request(self, record: dict[str, Any]) -> None:
        self.flush_text()
        prompt = str(record.get("prompt") or "").strip().splitlines()
        print(f"\n── request {record.get('request')}: {prompt[0][:200] if prompt else ''}")

    def flush_text(self) -> None:
        if self.pending:
            print(f"    text: {_one_line(''.join(self.pending))}")
            self.pending = []

    def event(self, record: dict[str, Any]) -> None:
        kind, data = record.get("type"), record.get("data") or {}
        if kind == "backend_message":
            self.message(data)
            return
        self.flush_text()
        if kind == "iteration_start":
            print(f"  ▶ iteration {data.get('iteration')}")
        elif kind == "validation_result":
            mark = "–" if data.get("skipped") else ("✓" if data.get("passed") else "✗")
            problems = "" if data.get("passed") or data.get("skipped") else f": {len(data.get('errors') or [])} problem(s)"
            print(f"    {mark} {data.get('validator')}{problems}")
            for error in (data.get("errors") or [])[:3]:
                print(f"        {_one_line(str(error))}")
        elif kind == "iteration_end":
            files = ", ".join(data.get("files_modified") or []) or "none"
            print(f"  ◀ iteration {data.get('iteration')}: {'passed' if data.get('passed') else 'not passed'}; "
                  f"files {files}; {data.get('tokens', 0)} tokens, ${data.get('cost', 0):.4f}")
        elif kind in ("completed", "failed", "refused"):
            status = str(data.get("status") or kind).replace("_", " ").upper()
            detail = data.get("error") or data.get("reason") or data.get("summary") or ""
            print(f"  {status}  {_one_line(str(detail))}")
        elif kind == "session_end":
            print(f"  {data.get('iterations', 0)} iteration(s) · {data.get('tokens', 0)} tokens · "
                  f"${data.get('cost', 0) or 0:.4f} · {data.get('duration', 0) or 0:.1f} s")

    def message(self, data: dict[str, Any]) -> None:
        kind = data.get("kind") or data.get("message_type")
        content = str(data.get("content") or "")
        if kind == "text_delta":
            self.pending.append(content)
            return
        self.flush_text()
        tool = data.get("tool_name") or ""
        if kind in ("tool_call_started", "tool_call"):
            print(f"    tool {tool} {_one_line(json.dumps(data.get('tool_input'), default=str))}")
        elif kind in ("tool_call_finished", "tool_result"):
            print(f"    {'✗' if data.get('is_error') else '✓'} {tool} {_one_line(content)}".rstrip())
        elif kind == "command_started":
            command = data.get("command") or (data.get("tool_input") or {}).get("command") or content
            print(f"    $ {_one_line(str(command))}")
        elif kind == "command_finished":
            print(f"    $ exit {data.get('exit_code', '?')} {_one_line(content)}".rstrip())
        elif kind == "file_edited":
            print(f"    edited {data.get('path')} (+{data.get('lines_added', '?')} -{data.get('lines_removed', '?')})")
        elif kind in ("permission_decision", "permission"):
            print(f"    permission {'denied' if data.get('is_error') else 'allowed'}: {tool} {_one_line(content)}")
        elif kind == "usage_updated":
            usage = data.get("usage") or {}
            print(f"    usage {usage.get('total_tokens', 0)} tokens, ${usage.get('cost_usd', 0):.4f}")
        elif kind == "thinking_delta":
            return
        else:
            print(f"    {kind}: {_one_line(content)}")


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _runs(folder: str) -> int:
    """List the transcripts in a directory, oldest first."""
    from agenter import ConfigurationError
    from agenter.session.transcript import read_transcript

    root = os.path.expanduser(folder)
    if not os.path.isdir(root):
        print(f"agenter: {folder!r} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    rows = []
    for name in sorted(os.listdir(root)):
        if not name.endswith(".jsonl"):
            continue
        try:
            transcript = read_transcript(os.path.join(root, name))
        except ConfigurationError:
            continue  # another program's JSONL
        head, results = transcript.header, transcript.results
        last = results[-1] if results else {}
        status = last.get("status") or ("unfinished" if transcript.end is None else "no request")
        tokens = sum(int(r.get("tokens") or 0) for r in results)
        cost = sum(float(r.get("cost") or 0) for r in results)
        rows.append((head.get("started") or 0, [
            _when(head.get("started")), str(head.get("backend")), str(head.get("model") or "-"),
            str(len(transcript.requests)), status, str(tokens), f"${cost:.4f}", name]))
    if not rows:
        print(f"no transcripts in {folder}")
        return EXIT_OK
    table = [["started", "backend", "model", "requests", "status", "tokens", "cost", "file"]]
    table += [row for _, row in sorted(rows, key=lambda r: r[0])]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
