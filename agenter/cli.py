"""`agenter run "PROMPT" --cwd DIR --backend NAME`: a coding run from the shell.

Exit codes: 0 completed, 1 not completed, 2 usage error, 3 paused (calls wait for approval:
`agenter approve HANDLE` continues the run), 130 interrupted (Ctrl-C).
--json prints one event per line (NDJSON) for pipelines; the last line is always session_end.
--log-dir DIR writes the run's transcript there; `agenter show FILE` renders a transcript and
`agenter runs DIR` lists them; --resume FILE|ID continues an earlier run. See docs/cli.md and
docs/sessions.md.

Whatever can be known before a run starts is checked first and is a usage error (exit 2, on
stderr, nothing started): bad flags (with the closest flag, backend or option suggested), a
prompt that is not text, a backend that cannot resume across processes given --resume, a
missing API key, what the backend needs from the machine (hints spelled as flags).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from agenter._cliview import INTERRUPTED, LiveDisplay, NdjsonDisplay, Progress

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2
EXIT_PAUSED = 3  # the run paused at calls that wait for a person (--on-ask pause): `agenter approve`
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a job stopped by Ctrl-C

# The live display's classes under their earlier names (tests and callers use them).
_LiveDisplay, _NdjsonDisplay, _Progress = LiveDisplay, NdjsonDisplay, Progress
__all__ = ["EXIT_INTERRUPTED", "EXIT_NOT_COMPLETED", "EXIT_OK", "EXIT_PAUSED", "EXIT_USAGE", "INTERRUPTED", "main"]

# Request and budget fields as the user typed them, so no message names a pydantic field.
_FLAGS = {
    "prompt": "the prompt", "cwd": "--cwd", "system_prompt": "--system-prompt",
    "allowed_write_paths": "--allow-write", "max_cost_usd": "--max-cost",
    "max_tokens": "--max-tokens", "max_time_seconds": "--max-time",
    "max_iterations": "--max-iterations",
}

#: Variables that point a backend at its model server, for the cost note of a local one.
_BASE_URL_VARIABLES = {"anthropic-sdk": "ANTHROPIC_BASE_URL", "claude-code": "ANTHROPIC_BASE_URL",
                       "claude-cli": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL",
                       "codex": "OPENAI_BASE_URL", "codex-cli": "OPENAI_BASE_URL"}


class _Parser(argparse.ArgumentParser):
    """argparse with a did-you-mean for a mistyped choice (a subcommand, --engine ...)."""

    #: The subcommands' parsers, by name (set on the top-level parser).
    commands: Mapping[str, argparse.ArgumentParser]

    def error(self, message: str) -> Any:
        from agenter._types import suggestion

        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            message += suggestion(match.group(1), choices)
        super().error(message)


def _parser() -> _Parser:
    from agenter import __version__

    parser = _Parser(prog="agenter", description=__doc__.splitlines()[0],
                     epilog="`agenter COMMAND --help` for a command's flags; docs/cli.md for all of them.")
    parser.add_argument("-V", "--version", action="version", version=f"agenter {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _run_parser(sub)
    _approve_parser(sub)
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
    parser.commands = sub.choices
    return parser


def _run_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run a coding agent on a repository",
                         description="Run a coding agent on a repository until its work passes the validators.")
    run.add_argument("prompt", nargs="?", default=None, help="the task (or --prompt-file)")
    run.add_argument("--prompt-file", default=None, metavar="FILE",
                     help="read the task from FILE (UTF-8 text; - for standard input)")
    run.add_argument("--cwd", default=".", help="the repository to work in (default: .)")
    run.add_argument("--backend", default="anthropic-sdk",
                     help="agent backend (default: anthropic-sdk; all of them: agenter backends --names)")
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
                     help="continue an earlier run: its transcript file or the agent's session id "
                          "(backends that keep their session across processes)")
    run.add_argument("--permission", action="append", default=None, metavar="RULE",
                     help="a line of the permission policy (docs/permissions.md): a rule such as "
                          "'ask shell:git push*' or a setting such as 'mode default'; repeatable")
    run.add_argument("--on-ask", choices=("deny", "pause"), default="deny",
                     help="what a call that needs approval does with nobody to ask: deny it (default), or "
                          "pause the run (exit 3; `agenter approve HANDLE` continues it; docs/approvals.md)")


def _approve_parser(sub: Any) -> None:
    approve = sub.add_parser("approve", help="continue a paused run: allow (or deny) the calls it waits for",
                             description="Continue a run that paused at calls waiting for approval (agenter run "
                                         "--on-ask pause). Every call that needs approval gets the answer unless "
                                         "--call names some.")
    approve.add_argument("handle", help="the handle the paused run printed (pause-...)")
    answer = approve.add_mutually_exclusive_group()
    answer.add_argument("--deny", action="store_true", help="refuse the calls (the agent is told, and goes on)")
    answer.add_argument("--always", action="store_true",
                        help="allow the calls, and the same tool on the same target for the rest of the run")
    approve.add_argument("--call", action="append", default=None, metavar="ID",
                         help="answer only this pending call (repeatable); the others are decided as usual")
    approve.add_argument("--store", default=None, metavar="PATH|URL",
                         help="where the run was kept: the store of its conversation (a folder, sqlite:///FILE.db, "
                              "redis://HOST:PORT/DB); default: beside --log-dir's transcripts, else the user's cache")
    approve.add_argument("--log-dir", default=None, metavar="DIR",
                         help="the --log-dir of the paused run (its store is there), and of the continued run")
    approve.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="a backend option for the continued run (an API key the record does not keep)")
    approve.add_argument("--json", action="store_true", help="print events as NDJSON on stdout")


def _parse(parser: _Parser, argv: list[str]) -> argparse.Namespace:
    """Parse, or exit 2 with the subcommand's own usage and the closest flag for a mistyped one
    (argparse would print the top-level usage for arguments no subcommand knows)."""
    from agenter._types import suggestion

    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    command = parser.commands[args.command]
    flags = [flag for action in command._actions for flag in action.option_strings]
    unknown = next((word.split("=")[0] for word in extra if word.startswith("-") and word != "-"), None)
    hint = suggestion(unknown, flags).replace("'", "") if unknown else ""
    command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    raise AssertionError("unreachable")  # pragma: no cover - error() exits


# ---------------------------------------------------------------------------- backends
def _backends(args: argparse.Namespace) -> int:
    """`agenter backends`: what each backend needs and whether this machine has it."""
    import json

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
        required = _required_options(status.name)
        mark = "✓" if status.usable else ("·" if status.installed else ("?" if required else "✗"))
        where = f" {status.version or ''} {status.path or ''}".rstrip()
        credentials = {True: f"credentials: {status.credentials_source}", False: "no credentials found",
                       None: "credentials: the agent's own"}[status.credentials]
        print(f"{mark} {status.name:<14}{where}".rstrip())
        if status.installed:
            print(f"    {credentials}; capabilities: {', '.join(status.capabilities)}")
        elif required:
            print(f"    needs {'; '.join(required)} (docs/backends/{status.name}.md)")
        else:
            print(f"    needs: {status.problem}")
    print("\n✓ ready: installed, credentials found; · installed, credentials not found (or kept by the "
          "agent itself); ? cannot tell without the options shown; ✗ not installed: needs what is shown")
    return EXIT_OK


def _required_options(name: str) -> list[str]:
    """`--option KEY=… (what it is)` for each option a backend cannot do without (acp: its agent
    program): without them `detect_backends` cannot tell whether it would run."""
    from agenter.backends import load_backend

    try:
        fields = load_backend(name).options_model.model_fields
    except Exception:  # noqa: BLE001 - a backend that cannot load shows its own problem
        return []
    return [f"--option {key}=…" + (f": {_lower_first(field.description.rstrip('.'))}" if field.description else "")
            for key, field in fields.items() if field.is_required()]


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# ---------------------------------------------------------------------------- usage problems
def _usage_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the flags, in the flags' own words (checked before anything starts)."""
    from agenter._cliargs import not_text_problem, pair_problems, positive_problems

    problems = _prompt_problems(args)
    for label, value in [("--system-prompt", args.system_prompt), ("--model", args.model),
                         *(("--allow-write", pattern) for pattern in args.allow_write or []),
                         *(("--validator", name) for name in args.validator or []),
                         *(("--option", pair) for pair in args.option)]:
        problem = not_text_problem(label, value)
        if problem:
            problems.append(problem)
    problems += positive_problems(args) + pair_problems("--option", args.option)
    if not os.path.isdir(os.path.expanduser(args.cwd)):  # before the API key: the first thing to fix
        problems.append(f"--cwd {args.cwd!r} is not a directory")
    backend = _backend_problem(args.backend)
    if backend:
        return [*problems, backend]
    if args.resume is not None:
        problems += [problem for problem in [_resume_problem(args.resume, args.backend)] if problem]
    return problems + _permission_problems(args)


def _permission_problems(args: argparse.Namespace) -> list[str]:
    """--permission lines that are no policy, and --on-ask pause on a backend that cannot pause."""
    from agenter import ConfigurationError
    from agenter._cliargs import not_text_problem
    from agenter.permissions import PermissionPolicy

    problems = [problem for line in args.permission or [] if (problem := not_text_problem("--permission", line))]
    for line in [] if problems else args.permission or []:
        try:
            PermissionPolicy.parse(line)
        except ConfigurationError as exc:
            problems.append(f"--permission {line!r}: {str(exc).removeprefix('line 1: ')}")
    if args.on_ask == "pause" and args.backend != "auto":
        from agenter.backends import load_backend
        from agenter.facade.agent import pausing_backends

        if not load_backend(args.backend).capabilities.pause:
            problems.append(f"--on-ask pause: the {args.backend} backend cannot pause a run; backends that can: "
                            f"{', '.join(pausing_backends())}")
    return problems


def _prompt_problems(args: argparse.Namespace) -> list[str]:
    """The prompt: given once (argument or --prompt-file), UTF-8 text, not blank. A file's text
    becomes args.prompt."""
    from agenter._cliargs import not_text_problem, read_text_file

    if args.prompt is not None and args.prompt_file is not None:
        return ["give the prompt as an argument or as --prompt-file, not both"]
    if args.prompt_file is not None:
        try:
            args.prompt = read_text_file(args.prompt_file, "the prompt file")
        except ValueError as exc:
            return [str(exc)]
    if args.prompt is None:
        return ['the prompt is missing: agenter run "TASK" (or --prompt-file FILE)']
    problem = not_text_problem("the prompt", args.prompt)
    if problem:
        return [problem]
    return ["the prompt is empty"] if not args.prompt.strip() else []


def _backend_problem(name: str) -> str | None:
    """An unknown backend name, with the closest one (`claude_code` → `claude-code`)."""
    from agenter._types import suggestion
    from agenter.backends import backend_names

    names = backend_names()
    if name in names or name == "auto":
        return None
    return (f"unknown backend {name!r}{suggestion(name, names)} "
            f"(valid values for backend: {', '.join(names)}, auto)")


def _resume_problem(resume: str, name: str) -> str | None:
    """--resume of a transcript that cannot be continued (another backend's, one without a
    session id), or on a backend that cannot continue a run of another process."""
    from agenter import ConfigurationError
    from agenter.session.transcript import resolve_resume

    try:
        resolve_resume(resume, name)
    except ConfigurationError as exc:
        other = re.search(r"is of an? (\S+) run", str(exc))
        return str(exc) + (f"; resume it with --backend {other.group(1)}" if other else "")
    reason = _cannot_resume(name)
    if reason is None:
        return None
    able = [other for other in _backend_names() if _cannot_resume(other) is None]
    return (f"--resume: the {name} backend cannot continue an earlier run ({reason}); "
            f"backends that can: {', '.join(able)}")


def _backend_names() -> list[str]:
    from agenter.backends import backend_names

    return backend_names()


def _cannot_resume(name: str) -> str | None:
    from agenter.backends import load_backend

    if name == "auto":
        return None  # known once chosen; the run says so then
    try:
        cls = load_backend(name)
    except Exception:  # noqa: BLE001 - reported by the agent's own checks
        return "it cannot be loaded"
    if not cls.capabilities.resume:
        return "it keeps no conversation"
    return None


#: Backends that call their model API themselves with a key from `--option api_key=` or one of
#: these variables, and cannot run without one: (what the key is, the variables). The agent
#: programs may hold a login agenter cannot see; openai and codex check their key when the
#: agent is built.
_API_KEYS = {"anthropic-sdk": ("Anthropic API key", ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"))}


def _key_problem(name: str, options: Any) -> str | None:
    """A missing API key, found before the run starts (Credentials.source: names, never values)."""
    from agenter.backends.registry import Credentials

    if name not in _API_KEYS or getattr(options, "api_key", None) is not None:
        return None
    if getattr(options, "anthropic_bedrock", False):
        return None  # AWS credentials, found by boto3's own chain
    what, variables = _API_KEYS[name]
    if Credentials(env=variables).source() is not None:
        return None
    return f"no {what} for the {name} backend: export {variables[0]}=… or pass --option api_key=…"


def _cost_note(name: str, options: Any) -> str:
    """For a model server on this machine (the scripted server, a local model): the cost shown
    is what the tokens would cost at the model's list prices, not a charge."""
    from urllib.parse import urlsplit

    url = getattr(options, "base_url", None) or os.environ.get(_BASE_URL_VARIABLES.get(name, ""), "")
    try:
        host = urlsplit(str(url)).hostname or ""
    except ValueError:
        return ""
    if host == "localhost" or host == "::1" or host.startswith("127."):
        return f"at list prices (the model server is local: {host})"
    return ""


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


def _error_lines(exc: BaseException, backend: str) -> list[str]:
    """What the CLI prints for an error found before the run: one line, or for what the backend
    needs from the machine a heading and one line per need; hints spelled as flags."""
    from agenter import RequirementError
    from agenter._cliargs import cli_hints

    options = _option_names(backend)
    if isinstance(exc, RequirementError) and exc.missing:
        heading = str(exc).splitlines()[0].rstrip()
        return [cli_hints(heading, options), *(f"  - {cli_hints(need, options)}" for need in exc.missing)]
    return [cli_hints(_describe_error(exc), options)]


def _option_names(backend: str) -> list[str]:
    from agenter.backends import load_backend

    try:
        return list(load_backend(backend).options_model.model_fields)
    except Exception:  # noqa: BLE001 - no hints for a backend that cannot load
        return []


def _fail(lines: list[str]) -> int:
    """Print a usage error (`agenter: ` on its first line) and return its exit code."""
    print(f"agenter: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(line, file=sys.stderr)
    return EXIT_USAGE


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    command = _Command()
    try:
        return command.main(sys.argv[1:] if argv is None else argv)
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
        self.display: NdjsonDisplay | LiveDisplay | None = None

    def main(self, argv: list[str]) -> int:
        parser = _parser()
        if not argv:  # as uv does: the help, and the exit code of a usage error
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        args = _parse(parser, argv)
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
        if args.command == "approve":
            return asyncio.run(self.approve(args))
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
                sandbox=not args.no_sandbox, log_dir=args.log_dir, on_ask=args.on_ask,
                permissions="\n".join(args.permission) if args.permission else None, **parse_options(args.option))
            request = CodingRequest(prompt=args.prompt, cwd=args.cwd, system_prompt=args.system_prompt,
                                    allowed_write_paths=args.allow_write, resume=args.resume,
                                    budget=Budget(**budget) if budget else None)
        except (ConfigurationError, ValidationError) as exc:
            return _fail(_error_lines(exc, args.backend))
        missing_key = _key_problem(agent.backend_name, agent.options)
        if missing_key:
            return _fail([missing_key])

        return await self._show_run(args, agent, agent.stream_execute(request))

    async def _show_run(self, args: argparse.Namespace, agent: Any, stream: Any) -> int:
        """Display a run's events; its exit code."""
        from pydantic import ValidationError

        from agenter import ConfigurationError
        from agenter.store import StoreError

        display = self.display = NdjsonDisplay() if args.json else LiveDisplay(
            cost_note=_cost_note(agent.backend_name, agent.options))
        try:
            # aclosing: a display that fails (a closed pipe) ends the run here, not at shutdown.
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    display.show(event)
        except (ConfigurationError, ValidationError, StoreError) as exc:
            # Raised before the session starts (the request, or the paused run and its answers,
            # are checked first), so no event stream is open that would need a final line.
            return _fail(_error_lines(exc, agent.backend_name))
        finally:
            display.close()
        status = display.progress.status
        return EXIT_OK if status == "completed" else EXIT_PAUSED if status == "paused" else EXIT_NOT_COMPLETED

    async def approve(self, args: argparse.Namespace) -> int:
        """`agenter approve HANDLE`: the paused run found, the agent it ran with built again (its
        record keeps the backend, model and options, without secrets), then continued."""
        from pydantic import ValidationError

        from agenter import AutonomousCodingAgent, ConfigurationError
        from agenter._cliargs import pair_problems, parse_options
        from agenter.store import StoreError

        problems = pair_problems("--option", args.option)
        if problems:
            return _fail(problems)
        try:
            record = await asyncio.to_thread(_paused_record, args)
            described = record.get("agent") or {}
            options = {**(described.get("options") or {}), **parse_options(args.option)}
            if args.store is not None:
                options["conversation_store"] = args.store
            agent = AutonomousCodingAgent(
                backend=described.get("backend") or record.get("backend"), model=described.get("model"),
                validators=described.get("validators"), sandbox=described.get("sandbox", True),
                mode=described.get("mode", "autonomous"), permissions=described.get("permissions"),
                on_ask=described.get("on_ask", "pause"), permission_timeout=described.get("permission_timeout", 60.0),
                log_dir=args.log_dir, **options)
        except (ConfigurationError, ValidationError, StoreError) as exc:
            return _fail([_describe_error(exc)])
        answer = "deny" if args.deny else "always" if args.always else "allow"
        decisions: Any = {call: answer for call in args.call} if args.call else answer
        return await self._show_run(args, agent, agent.stream_approve(args.handle, decisions))

    def interrupted(self) -> None:
        if self.display is not None:
            self.display.interrupted()
            self.display.close()


def _paused_record(args: argparse.Namespace) -> dict[str, Any]:
    """The paused run's record, from --store, else beside --log-dir, else the user's cache."""
    from agenter.store import FileConversationStore, StoreError, load_pause, open_store
    from agenter.store._pauses import already_used, unreachable

    store = open_store(args.store) if args.store is not None else FileConversationStore.beside(args.log_dir)
    try:
        held = load_pause(store, args.handle)
    except StoreError as exc:
        raise unreachable(store, exc) from None
    if held.used:
        raise already_used(held)
    return held.record


# ---------------------------------------------------------------------------- transcripts
def _show(path: str) -> int:
    """Print a transcript as a readable account of the run(s)."""
    from agenter._cliview import show

    return EXIT_OK if show(path, lambda message: print(f"agenter: {message}", file=sys.stderr)) else EXIT_USAGE


def _runs(folder: str) -> int:
    """List the transcripts in a directory, oldest first."""
    from agenter._cliview import runs

    if not os.path.isdir(os.path.expanduser(folder)):
        print(f"agenter: {folder!r} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    table = runs(folder)
    if not table:
        print(f"no transcripts in {folder}")
        return EXIT_OK
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
