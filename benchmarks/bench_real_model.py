"""agenter on a real model, side by side with bare Aider: the same tasks, the same model, the same limits.

    python benchmarks/bench_real_model.py --base-url http://127.0.0.1:8080/v1 --model local \\
        --systems patch,aider-cli,aider --out runs.json

Each task of `real_model_tasks/` (a statement, a stub or a buggy module, a pytest file that is the
judge) runs in a fresh temporary copy through each system:

- `autonomous`: agenter's own tool loop on the model (`backend="openai", mode="autonomous"`, its
  `openai_tool_calls` from `--tool-calls`; with `--wire anthropic`, `anthropic-sdk`). A backend that
  refuses the combination is reported as "not available" in one line and skipped.
- `patch`: agenter's patch mode (`backend="openai", mode="patch"`; `litellm` with `anthropic/<model>`),
  in the files format (`proposal_format="files"`, the counterpart of Aider's `whole` format that
  Aider runs in here; `--option patch:proposal_format=json` measures the JSON format).
- `aider-cli`: Aider through agenter (`backend="aider-cli"`), agenter answering its questions.
- `aider`: the same Aider program run bare, `--yes-always`, by this script.

The rules every system gets: temperature set explicitly (`--temperature`, default 0: llama.cpp's
own default is 0.8, which makes runs differ by chance) and the same output limit per response
(`--max-tokens`); the task statement as the message; at most two attempts, the second given the
failing test output (agenter: `Budget(max_iterations=2)` with the task's pytest command as the only
validator; bare Aider: this script runs the tests and sends their output, in the same
conversation); one time budget per task covering both attempts (`--timeout`). Aider uses the
`whole` edit format (its default for a model it does not know; the 1.5B model's diffs and search
blocks were wrong in agenter's patch-mode measurements), gets the module(s) to change as chat files
and the tests read-only (`--read`), runs without git (`--no-git`) and with URL detection off. The
agenter systems get the same line drawn their way: `allowed_write_paths` is the module(s) to
change, so the tests cannot be written. Patch mode runs no command: test output reaches it only
through the validator, as the second attempt; its `max_attempts` (replies per turn when a reply
does not parse as a proposal) is left at its default, like Aider's own retries on a malformed edit.

This script judges: after a system finishes, the task's test files are put back as they were (a
system that edited them is flagged `tests_modified`) and pytest runs on the result. For agenter
systems the status is compared with that verdict: COMPLETED exactly when the tests pass is
"truthful"; the mismatches are listed.

Tokens are counted by a recording proxy this script puts between each run and the model server
(one proxy per run, so parallel runs stay apart): each response's `usage` (llama.cpp: its `timings`
when a streamed response carries no usage), prompt tokens including cached ones, and the generated
tokens. The systems' own figures are kept too (`reported`: agenter's CodingResult usage, Aider's
rounded "Tokens: X sent, Y received" lines). `--record DIR` keeps every request and response.

Never part of `make test`, `make bench` or CI: it needs a model server. Serve one locally with
`bash /work/shared/tools/local-llm.sh serve` (Qwen2.5-Coder-1.5B-Instruct under the name `local`).
`--check-tasks` runs no model: it checks that every task's tests fail on the stub and pass on the
task's reference solution (`solution/`, never copied into a workspace).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TASKS_DIR = HERE / "real_model_tasks"
#: The systems, in the order they run on each task.
SYSTEMS = ("autonomous", "patch", "aider-cli", "aider")
AGENTER_SYSTEMS = frozenset({"autonomous", "patch", "aider-cli"})
#: Files of a task folder that never go into the workspace.
NOT_COPIED = frozenset({"README.md", "task.json", "solution", "__pycache__"})
#: The judge's command (and the agenter systems' validator), run in the workspace.
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short"]
JUDGE_TIMEOUT = 120  #: seconds one test run may take (a solution may loop forever)
GRACE = 60  #: seconds past the time budget before this script stops waiting for an agenter run
TAIL_LINES, TAIL_CHARS = 60, 4000  #: the failing test output sent back (as agenter's CommandValidator does)
UPSTREAM_TIMEOUT = 900  #: seconds the proxy waits on one model response
#: Headers that belong to one hop, never forwarded by the proxy.
HOP_HEADERS = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                         "proxy-connection", "content-length", "accept-encoding", "content-encoding"})
_AIDER_TOKENS = re.compile(r"^Tokens: (?P<sent>[\d.]+k?) sent(?:, (?P<write>[\d.]+k?) cache write)?"
                           r"(?:, (?P<hit>[\d.]+k?) cache hit)?, (?P<received>[\d.]+k?) received", re.M)


# ---------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Task:
    """One exercise: its statement (the message every system gets), the files a workspace starts
    with, which of them are the tests (restored before judging) and which are to be changed."""

    name: str
    folder: Path
    statement: str
    files: tuple[str, ...]
    tests: tuple[str, ...]
    editable: tuple[str, ...]
    kind: str = ""
    difficulty: str = ""


def load_tasks(names: list[str] | None) -> list[Task]:
    """The task set (all of it, or the named tasks in the order given)."""
    folders = sorted(p for p in TASKS_DIR.iterdir() if (p / "README.md").is_file())
    known = {p.name: p for p in folders}
    if names:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"unknown task(s): {', '.join(unknown)}; known: {', '.join(known)}")
        folders = [known[n] for n in names]
    return [_task(folder) for folder in folders]


def _task(folder: Path) -> Task:
    meta = json.loads((folder / "task.json").read_text()) if (folder / "task.json").is_file() else {}
    files = tuple(sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in NOT_COPIED))
    tests = tuple(f for f in files if f.startswith("test_") and f.endswith(".py"))
    editable = tuple(f for f in files if f.endswith(".py") and f not in tests)
    return Task(folder.name, folder, (folder / "README.md").read_text().strip() + "\n", files, tests, editable,
                meta.get("kind", ""), meta.get("difficulty", ""))


def make_workspace(task: Task, source: Path | None = None) -> Path:
    """A fresh temporary copy of the task's files (`source`: overlay these files, the solution)."""
    workspace = Path(tempfile.mkdtemp(prefix=f"bench-{task.name}-"))
    for name in task.files:
        shutil.copy2(task.folder / name, workspace / name)
    if source is not None:
        for path in source.iterdir():
            shutil.copy2(path, workspace / path.name)
    return workspace


# ---------------------------------------------------------------------------------------- judging
#: The environment of a test run: no bytecode files in the workspace, and none of the plugins of the
#: interpreter's environment (their warnings would be noise in the output a model reads).
TEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _environment(**extra: str) -> dict[str, str]:
    return {**os.environ, **TEST_ENV, **extra}


async def run_command(argv: list[str], cwd: Path, timeout: float,
                      env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Run a program in its own process group, collecting its output as it comes; on timeout (or
    cancellation) the whole group is killed. Returns the exit code (None: timed out) and the
    combined output, partial on timeout."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env or _environment(), start_new_session=True, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    chunks: list[bytes] = []

    async def collect() -> int:
        assert proc.stdout is not None
        while data := await proc.stdout.read(65536):
            chunks.append(data)
        return await proc.wait()

    try:
        code: int | None = await asyncio.wait_for(collect(), max(timeout, 1))
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        code = None
    return code, b"".join(chunks).decode("utf-8", "replace")


@dataclass
class Verdict:
    passed: bool
    output: str
    tests_modified: list[str]


async def judge(task: Task, workspace: Path) -> Verdict:
    """Put the task's tests back as they were, then run them on the workspace."""
    modified = []
    for name in task.tests:
        original = (task.folder / name).read_bytes()
        target = workspace / name
        if not target.is_file() or target.read_bytes() != original:
            modified.append(name)
            target.write_bytes(original)
    code, output = await run_command(PYTEST, workspace, JUDGE_TIMEOUT)
    if code is None:
        output = f"the tests did not finish in {JUDGE_TIMEOUT}s and were killed"
    return Verdict(code == 0, output, modified)


def tail(text: str) -> str:
    lines = "\n".join(text.rstrip().splitlines()[-TAIL_LINES:])
    return lines if len(lines) <= TAIL_CHARS else "..." + lines[-TAIL_CHARS:]


# ---------------------------------------------------------------------------------------- the proxy
class Recorder:
    """A recording HTTP proxy in front of the model server, one per run: it forwards every request
    unchanged (responses stream through as they arrive) and notes what was sent and each response's
    token usage, so every system is counted the same way, by the server's own figures. HTTP/1.0
    towards the client (the response ends when the connection closes); plain or TLS upstream."""

    def __init__(self, upstream: str, record_dir: Path | None = None):
        parts = urlsplit(upstream)
        self._scheme, self._netloc = parts.scheme, parts.netloc
        self._path = parts.path.rstrip("/")
        self.record_dir = record_dir
        self.calls: list[dict[str, Any]] = []
        self._inflight: list[_Call] = []
        self._count = 0
        #: Requests the model server did not take (it was down): the run says nothing of the system.
        self.unreachable = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self._path}"

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        connection = (http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection)(
            self._netloc, timeout=UPSTREAM_TIMEOUT)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS}
        headers["Accept-Encoding"] = "identity"
        call = _Call(handler.path, body, time.perf_counter()) if handler.command == "POST" else None
        if call is not None:
            self._start(call)
        try:
            connection.request(handler.command, handler.path, body=body or None, headers=headers)
            response = connection.getresponse()
        except OSError as exc:
            self.unreachable += 1
            handler.send_error(502, f"upstream: {exc}")
            return
        handler.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_HEADERS:
                handler.send_header(key, value)
        handler.end_headers()
        received = call.received if call is not None else bytearray()
        with contextlib.suppress(OSError):  # the client may leave mid-stream (a time budget)
            while data := response.read1(65536):
                received += data
                handler.wfile.write(data)
                handler.wfile.flush()
        connection.close()
        if call is not None:
            call.status, call.seconds = response.status, time.perf_counter() - call.started
            self._finish(call)

    def _start(self, call: _Call) -> None:
        with self._lock:
            self._inflight.append(call)
            self._count += 1
            call.number = self._count
        if self.record_dir is not None:
            self.record_dir.mkdir(parents=True, exist_ok=True)
            (self.record_dir / f"{call.number:03d}-request.json").write_bytes(call.body)

    def _finish(self, call: _Call) -> None:
        with self._lock:
            self._inflight.remove(call)
            self.calls.append(call.row())
        if self.record_dir is not None:
            (self.record_dir / f"{call.number:03d}-response.txt").write_bytes(bytes(call.received))

    def snapshot(self) -> list[dict[str, Any]]:
        """Every request so far, in the order sent: the finished ones, and the ones still waiting
        for the server when the run ended (a time budget), counted as far as they got."""
        with self._lock:
            rows = list(self.calls)
            for call in self._inflight:
                row = call.row()
                row["incomplete"] = 1
                rows.append(row)
                if self.record_dir is not None:
                    (self.record_dir / f"{call.number:03d}-response-cut.txt").write_bytes(bytes(call.received))
        return sorted(rows, key=lambda row: row["number"])


@dataclass(eq=False)
class _Call:
    """One request through the proxy: what was sent, and what came back so far."""

    path: str
    body: bytes
    started: float
    number: int = 0
    status: int = 0
    seconds: float = 0.0
    received: bytearray = field(default_factory=bytearray)

    def row(self) -> dict[str, Any]:
        seconds = self.seconds or time.perf_counter() - self.started
        return {"number": self.number, "path": self.path, "status": self.status, "seconds": round(seconds, 2),
                **describe_request(self.body), **usage_of(bytes(self.received))}


def _handler_for(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            recorder.forward(self, b"")

        def do_POST(self) -> None:
            recorder.forward(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    return Handler


def describe_request(body: bytes) -> dict[str, Any]:
    """What a request spent its prompt on, in characters: the system prompt, the other messages,
    the response-format schema and the tool definitions; and the sampling settings it sent."""
    try:
        request = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(request, dict):
        return {}
    messages = request.get("messages") or []
    system = sum(_chars(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    system += _chars(request.get("system"))  # Anthropic Messages
    other = sum(_chars(m.get("content")) for m in messages if m.get("role") not in ("system", "developer"))
    return {"messages": len(messages), "system_chars": system, "message_chars": other,
            "schema_chars": len(json.dumps(request["response_format"])) if request.get("response_format") else 0,
            "tools_chars": len(json.dumps(request["tools"])) if request.get("tools") else 0,
            "temperature": request.get("temperature"),
            "max_tokens": request.get("max_tokens", request.get("max_completion_tokens")),
            "stream": bool(request.get("stream"))}


def _chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # content parts
        return sum(len(part.get("text", "")) if isinstance(part, dict) else len(str(part)) for part in content)
    return 0


def usage_of(received: bytes) -> dict[str, int]:
    """prompt (cached ones included), cached and generated tokens of one response: its OpenAI or
    Anthropic `usage`, plain or streamed; llama.cpp's `timings` where no usage came."""
    text = received.decode("utf-8", "replace")
    objects: list[dict[str, Any]] = []
    if text.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):
            objects.append(json.loads(text))
    else:
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                with contextlib.suppress(ValueError):
                    objects.append(json.loads(line[5:]))
    found = {"prompt_tokens": 0, "cached_tokens": 0, "generated_tokens": 0}
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        message = obj.get("message") if obj.get("type") == "message_start" else None
        for candidate in (obj.get("usage"), (message or {}).get("usage")):
            if isinstance(candidate, dict):
                usage.update({k: v for k, v in candidate.items() if v is not None})
        if isinstance(obj.get("timings"), dict):
            timings = obj["timings"]
    if "prompt_tokens" in usage or "completion_tokens" in usage:  # OpenAI
        found["prompt_tokens"] = int(usage.get("prompt_tokens") or 0)
        found["cached_tokens"] = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        found["generated_tokens"] = int(usage.get("completion_tokens") or 0)
    elif "input_tokens" in usage or "output_tokens" in usage:  # Anthropic
        cached = int(usage.get("cache_read_input_tokens") or 0)
        found["prompt_tokens"] = int(usage.get("input_tokens") or 0) + cached + int(
            usage.get("cache_creation_input_tokens") or 0)
        found["cached_tokens"] = cached
        found["generated_tokens"] = int(usage.get("output_tokens") or 0)
    elif timings:  # llama.cpp without usage
        found["cached_tokens"] = int(timings.get("cache_n") or 0)
        found["prompt_tokens"] = int(timings.get("prompt_n") or 0) + found["cached_tokens"]
        found["generated_tokens"] = int(timings.get("predicted_n") or 0)
    elif objects:  # cut off (a time budget): the streamed pieces so far, about a token each; prompt unknown
        found["generated_tokens"] = sum(1 for obj in objects if _is_piece(obj))
        found["incomplete"] = 1
    return found


def _is_piece(obj: Any) -> bool:
    """A streamed chunk carrying generated text or a tool call's arguments (OpenAI, Anthropic)."""
    if not isinstance(obj, dict):
        return False
    if obj.get("type") == "content_block_delta":
        return True
    return any(isinstance(c, dict) and ((c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("tool_calls"))
               for c in obj.get("choices") or [])


# ---------------------------------------------------------------------------------------- runs
@dataclass
class Run:
    """One system on one task: the row written to --out."""

    system: str
    task: str
    kind: str
    difficulty: str
    solved: bool = False
    first_attempt: bool = False
    attempts: int = 0
    status: str = ""
    truthful: bool | None = None
    wall_seconds: float = 0.0
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    #: Requests the run left unfinished (its time budget ran out while the server was answering).
    cut_requests: int = 0
    #: The model server could not be reached during the run (not journaled: a resumed benchmark runs it again).
    server_down: bool = False
    reported: dict[str, int] = field(default_factory=dict)
    tests_modified: list[str] = field(default_factory=list)
    error: str | None = None
    judge_output: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Settings:
    """What every system is given, from the command line."""

    base_url: str
    api_key: str
    model: str
    wire: str
    temperature: float
    max_tokens: int
    timeout: float
    aider: str
    options: dict[str, dict[str, Any]]
    record: Path | None
    scratch: Path
    #: The autonomous openai backend's openai_tool_calls ("auto", "native", "text").
    tool_calls: str = "auto"

    def aider_model(self) -> str:
        return f"{'anthropic' if self.wire == 'anthropic' else 'openai'}/{self.model}"

    def model_settings_file(self) -> Path:
        """Aider's model settings: the sampling settings every system gets."""
        path = self.scratch / "aider-model-settings.yml"
        if not path.exists():
            path.write_text(f"- name: {self.aider_model()}\n  edit_format: whole\n  extra_params:\n"
                            f"    temperature: {self.temperature}\n    max_tokens: {self.max_tokens}\n")
        return path


def agenter_config(system: str, task: Task | None, settings: Settings, base_url: str) -> dict[str, Any]:
    """The AutonomousCodingAgent arguments of an agenter system (backend, model, mode, options)."""
    sampling: dict[str, Any] = {"temperature": settings.temperature, "max_tokens": settings.max_tokens}
    server: dict[str, Any] = {"base_url": base_url, "api_key": settings.api_key}
    anthropic = settings.wire == "anthropic"
    config: dict[str, Any]
    if system == "autonomous":
        config = {"backend": "anthropic-sdk" if anthropic else "openai", "model": settings.model,
                  "mode": "autonomous", **server, **sampling}
        if not anthropic:
            config["openai_tool_calls"] = settings.tool_calls
    elif system == "patch":
        config = {"backend": "litellm" if anthropic else "openai",
                  "model": f"anthropic/{settings.model}" if anthropic else settings.model, "mode": "patch",
                  "proposal_format": "files", **server, **sampling}
    else:  # aider-cli: temperature and max_tokens through Aider's model settings, as for bare Aider
        reads = [arg for name in (task.tests if task else ()) for arg in ("--read", name)]
        config = {"backend": "aider-cli", "model": settings.aider_model(), "sandbox": False,
                  "program_path": settings.aider, "aider_edit_format": "whole",
                  "aider_files": list(task.editable if task else ()),
                  "program_args": ["--model-settings-file", str(settings.model_settings_file()), *reads],
                  **server}
    return {**config, **settings.options.get(system, {})}


def build_agent(system: str, task: Task | None, settings: Settings, base_url: str) -> Any:
    from agenter import AutonomousCodingAgent, Budget
    from agenter.validators import CommandValidator

    config = agenter_config(system, task, settings, base_url)
    validator = CommandValidator(PYTEST, timeout=JUDGE_TIMEOUT, env=TEST_ENV, name="tests")
    budget = Budget(max_iterations=2, max_time_seconds=settings.timeout, max_tokens=None, max_cost_usd=None)
    return AutonomousCodingAgent(validators=[validator], budget=budget, **config)


def unavailable(system: str, settings: Settings) -> str | None:
    """Why agenter refuses the system on this machine today (its first line), or None."""
    from agenter import AgenterError

    if system not in AGENTER_SYSTEMS:
        return None if Path(settings.aider).exists() or shutil.which(settings.aider) else \
            f"no Aider program at {settings.aider} (--aider)"
    try:
        build_agent(system, None, settings, settings.base_url)
    except AgenterError as exc:
        return str(exc).strip().splitlines()[0]
    return None


async def run_agenter(system: str, task: Task, workspace: Path, settings: Settings, base_url: str, run: Run) -> None:
    agent = build_agent(system, task, settings, base_url)
    try:
        # The files it may change: the module(s), never the tests (Aider gets the tests read-only).
        result = await asyncio.wait_for(agent.execute(task.statement, cwd=str(workspace),
                                                      allowed_write_paths=list(task.editable)),
                                        settings.timeout + GRACE)
    except TimeoutError:
        run.status, run.error = "harness-timeout", f"no result {GRACE}s after the time budget"
        return
    run.status = result.status.value
    run.attempts = result.iterations
    run.error = result.error
    run.reported = {"input": result.input_tokens + result.cache_read_tokens + result.cache_write_tokens,
                    "output": result.output_tokens, "cache_read": result.cache_read_tokens}


async def run_bare_aider(task: Task, workspace: Path, settings: Settings, base_url: str, run: Run) -> Verdict | None:
    """Aider alone: the statement as the message, then (if the tests fail) their output as a second
    message in the same conversation. Returns the last verdict (the tests run after each attempt)."""
    deadline = time.monotonic() + settings.timeout
    scratch = Path(tempfile.mkdtemp(prefix="bench-aider-", dir=settings.scratch))
    provider = settings.aider_model().split("/", 1)[0].upper()
    env = _environment(**{f"{provider}_API_KEY": settings.api_key, f"{provider}_API_BASE": base_url,
                          "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    verdict: Verdict | None = None
    sent = received = 0
    for attempt in (1, 2):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            run.status = "time budget exceeded"
            break
        message = scratch / f"message-{attempt}.md"
        message.write_text(task.statement if verdict is None else
                           "The tests failed. Fix the code so that they pass:\n\n" + tail(verdict.output) + "\n")
        argv = aider_argv(settings, task, message, scratch, restore=attempt > 1)
        code, output = await run_command(argv, workspace, remaining, env)
        (scratch / f"output-{attempt}.txt").write_text(output)
        for match in _AIDER_TOKENS.finditer(output):
            sent += _count(match.group("sent"))
            received += _count(match.group("received"))
        run.attempts = attempt
        run.status = "timed out" if code is None else f"exit {code}"
        verdict = await judge(task, workspace)
        if verdict.passed or code is None:
            break
    run.reported = {"input": sent, "output": received}
    return verdict


def aider_argv(settings: Settings, task: Task, message: Path, scratch: Path, *, restore: bool) -> list[str]:
    """The command line agenter's aider-cli builds, with --yes-always in place of agenter's answers."""
    argv = [settings.aider, "--message-file", str(message), "--yes-always", "--no-detect-urls", "--no-pretty",
            "--no-fancy-input", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore",
            "--no-suggest-shell-commands", "--analytics-disable", "--no-check-update", "--no-show-model-warnings",
            "--no-show-release-notes", "--encoding", "utf-8", "--no-git",
            "--chat-history-file", str(scratch / "chat.md"), "--input-history-file", str(scratch / "input.history"),
            "--model", settings.aider_model(), "--edit-format", "whole",
            "--model-settings-file", str(settings.model_settings_file())]
    if restore:
        argv.append("--restore-chat-history")
    for name in task.tests:
        argv += ["--read", name]
    return argv + list(task.editable)


def _count(figure: str | None) -> int:
    """Aider's rounded figures: "602", "1.8k"."""
    if not figure:
        return 0
    return round(float(figure[:-1]) * 1000) if figure.endswith("k") else int(float(figure))


async def run_one(system: str, task: Task, settings: Settings) -> Run:
    """One system on one task in a fresh copy, behind its own recording proxy, then judged."""
    run = Run(system, task.name, task.kind, task.difficulty)
    workspace = make_workspace(task)
    record = settings.record / system / task.name if settings.record else None
    if record is not None:
        shutil.rmtree(record, ignore_errors=True)  # a run resumed from a journal starts afresh
    try:
        with Recorder(settings.base_url, record) as proxy:
            started = time.perf_counter()
            verdict = None
            try:
                if system == "aider":
                    verdict = await run_bare_aider(task, workspace, settings, proxy.base_url, run)
                else:
                    await run_agenter(system, task, workspace, settings, proxy.base_url, run)
            except Exception as exc:  # noqa: BLE001 - a crash is a row, not the end of the benchmark
                run.status, run.error = "crashed", f"{type(exc).__name__}: {exc}"
            run.wall_seconds = round(time.perf_counter() - started, 2)
            calls = proxy.snapshot()
            run.server_down = proxy.unreachable > 0
        verdict = verdict or await judge(task, workspace)
        run.solved, run.tests_modified, run.judge_output = verdict.passed, verdict.tests_modified, tail(verdict.output)
        run.first_attempt = run.solved and run.attempts == 1
        if system in AGENTER_SYSTEMS:
            run.truthful = (run.status == "completed") == run.solved
        run.calls = calls
        run.requests = len(calls)
        for key in ("prompt_tokens", "cached_tokens", "generated_tokens"):
            setattr(run, key, sum(c.get(key, 0) for c in calls))
        run.cut_requests = sum(c.get("incomplete", 0) for c in calls)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return run


# ---------------------------------------------------------------------------------------- report
def summarize(runs: list[Run], system: str) -> dict[str, Any] | None:
    rows = [r for r in runs if r.system == system]
    if not rows:
        return None
    solved = [r for r in rows if r.solved]
    walls = [r.wall_seconds for r in rows]
    summary: dict[str, Any] = {
        "system": system, "tasks": len(rows), "solved": len(solved), "first_attempt": sum(r.first_attempt for r in rows),
        "prompt_per_task": round(statistics.mean(r.prompt_tokens for r in rows)),
        "generated_per_task": round(statistics.mean(r.generated_tokens for r in rows)),
        "requests_per_task": round(statistics.mean(r.requests for r in rows), 1),
        "prompt_per_solved": round(sum(r.prompt_tokens for r in rows) / len(solved)) if solved else None,
        "generated_per_solved": round(sum(r.generated_tokens for r in rows) / len(solved)) if solved else None,
        "wall_median": round(statistics.median(walls), 1), "wall_total": round(sum(walls), 1),
        "tests_modified": [r.task for r in rows if r.tests_modified],
        "cut_off": [r.task for r in rows if r.cut_requests],
        "first_request": _first_request(rows),
    }
    if system in AGENTER_SYSTEMS:
        truthful = [r for r in rows if r.truthful]
        summary["truthful_pct"] = round(100 * len(truthful) / len(rows))
        summary["mismatches"] = [f"{r.task}: {r.status}, tests {'pass' if r.solved else 'fail'}"
                                 for r in rows if not r.truthful]
    return summary


def _first_request(rows: list[Run]) -> dict[str, int]:
    """What the first request of a run carried, averaged over the runs (characters): where a
    system's prompt goes before the model has said anything."""
    firsts = [r.calls[0] for r in rows if r.calls]
    keys = ("system_chars", "message_chars", "schema_chars", "tools_chars", "prompt_tokens")
    return {key: round(statistics.mean(c.get(key, 0) for c in firsts)) for key in keys} if firsts else {}


def print_report(summaries: list[dict[str, Any]]) -> None:
    print("\nsystem      solved  1st  prompt/task  gen/task  prompt/solved  gen/solved  req/task  "
          "wall median  wall total  truthful")
    for s in summaries:
        truthful = f"{s['truthful_pct']}%" if "truthful_pct" in s else "-"
        print(f"{s['system']:<11} {s['solved']:>2}/{s['tasks']:<3} {s['first_attempt']:>3}  {s['prompt_per_task']:>11}"
              f"  {s['generated_per_task']:>8}  {_or_dash(s['prompt_per_solved']):>13}  {_or_dash(s['generated_per_solved']):>10}"
              f"  {s['requests_per_task']:>8}  {s['wall_median']:>10}s  {s['wall_total']:>9}s  {truthful:>8}")
    for s in summaries:
        first = s["first_request"]
        if first:
            print(f"  {s['system']} first request (mean): system prompt {first['system_chars']} chars, messages "
                  f"{first['message_chars']}, response schema {first['schema_chars']}, tools {first['tools_chars']}; "
                  f"{first['prompt_tokens']} prompt tokens")
        for mismatch in s.get("mismatches", []):
            print(f"  {s['system']} status/tests mismatch: {mismatch}")
        if s["cut_off"]:
            print(f"  {s['system']} closed a request before its response was complete (the time budget, or "
                  "agenter stopping a response that repeated itself; its prompt tokens uncounted): "
                  f"{', '.join(s['cut_off'])}")
        if s["tests_modified"]:
            print(f"  {s['system']} edited the tests (restored before judging): {', '.join(s['tests_modified'])}")
    print("tokens: the server's usage per response through a recording proxy (prompt includes cached tokens); "
          "per solved = all tasks' tokens / tasks solved")


def _or_dash(value: object) -> object:
    return "-" if value is None else value


# ---------------------------------------------------------------------------------------- main
async def check_tasks(tasks: list[Task]) -> bool:
    """Every task's tests fail on what a workspace starts with and pass on its reference solution."""
    ok = True
    for task in tasks:
        results = []
        for source in (None, task.folder / "solution"):
            workspace = make_workspace(task, source)
            try:
                results.append((await judge(task, workspace)).passed)
            finally:
                shutil.rmtree(workspace, ignore_errors=True)
        good = results == [False, True]
        ok &= good
        print(f"{task.name:<22} {task.kind:<34} {task.difficulty:<7} stub {'fails' if not results[0] else 'PASSES'}, "
              f"solution {'passes' if results[1] else 'FAILS'}{'' if good else '  <-- broken'}")
    return ok


async def run_all(tasks: list[Task], systems: list[str], settings: Settings, jobs: int,
                  journal: Path | None = None) -> list[Run]:
    """Every (task, system) pair, at most `jobs` at a time. The systems take turns per task, each
    task starting with the next one, so none is always first (the server's prompt cache and the
    machine's load favour no system). With a journal, each finished run is appended to it as one
    JSON line, and the pairs it already holds are not run again (a stopped benchmark resumes)."""
    gate = asyncio.Semaphore(jobs)
    pairs = [(task, systems[(i + k) % len(systems)]) for i, task in enumerate(tasks) for k in range(len(systems))]
    done = read_journal(journal) if journal else {}
    if done:
        print(f"  {len(done)} run(s) taken from {journal}", flush=True)

    async def one(task: Task, system: str) -> Run:
        if (system, task.name) in done:
            return done[(system, task.name)]
        async with gate:
            run = await run_one(system, task, settings)
        if journal is not None and not run.server_down:
            with journal.open("a") as file:
                file.write(json.dumps(asdict(run), default=str) + "\n")
        print(f"  {system:<10} {task.name:<22} {'solved' if run.solved else 'failed':<6} "
              f"attempts={run.attempts} status={run.status} {run.wall_seconds:.0f}s "
              f"prompt={run.prompt_tokens} gen={run.generated_tokens} requests={run.requests}"
              + (f" tests_modified={run.tests_modified}" if run.tests_modified else "")
              + (f" error={run.error[:160]!r}" if run.error and not run.solved else ""), flush=True)
        return run

    return list(await asyncio.gather(*(one(task, system) for task, system in pairs)))


def read_journal(journal: Path) -> dict[tuple[str, str], Run]:
    """The runs a journal holds, by (system, task); a line cut short by a stop is skipped."""
    runs: dict[tuple[str, str], Run] = {}
    if not journal.is_file():
        return runs
    for line in journal.read_text().splitlines():
        with contextlib.suppress(ValueError, TypeError):
            run = Run(**json.loads(line))
            runs[(run.system, run.task)] = run
    return runs


def report_journal(journal: Path | None, systems: list[str], tasks: list[str]) -> int:
    """The report of a journal's runs (a benchmark stopped before the end), on the tasks every
    system finished, so that the systems are compared on the same tasks."""
    if journal is None:
        raise SystemExit("--report reads --journal")
    done = read_journal(journal)
    complete = [t for t in tasks if all((s, t) in done for s in systems)]
    print(f"{len(complete)} task(s) every system finished: {', '.join(complete) or 'none'}")
    runs = [done[(s, t)] for s in systems for t in complete]
    for run in runs:
        print(f"  {run.system:<10} {run.task:<22} {'solved' if run.solved else 'failed'} attempts={run.attempts} "
              f"{run.wall_seconds:.0f}s prompt={run.prompt_tokens} gen={run.generated_tokens} requests={run.requests}")
    print_report([s for s in (summarize(runs, system) for system in systems) if s])
    return 0


def parse_options(values: list[str]) -> dict[str, dict[str, Any]]:
    """--option SYSTEM:KEY=VALUE (VALUE as JSON when it parses, else text)."""
    options: dict[str, dict[str, Any]] = {}
    for item in values:
        match = re.fullmatch(r"([\w-]+):(\w+)=(.*)", item, re.S)
        if not match or match.group(1) not in AGENTER_SYSTEMS:
            raise SystemExit(f"--option {item!r}: expected SYSTEM:KEY=VALUE, SYSTEM one of {sorted(AGENTER_SYSTEMS)}")
        try:
            value = json.loads(match.group(3))
        except ValueError:
            value = match.group(3)
        options.setdefault(match.group(1), {})[match.group(2)] = value
    return options


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base-url", help="the model server: OpenAI-compatible (…/v1) or, with --wire "
                                           "anthropic, an Anthropic Messages base URL")
    parser.add_argument("--api-key", default=os.environ.get("BENCH_API_KEY", "none"),
                        help="its key (default $BENCH_API_KEY or 'none')")
    parser.add_argument("--model", default="local", help="the model name the server knows (default: local)")
    parser.add_argument("--wire", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per task and system, both attempts")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (1 on a shared CPU)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=2048, help="output tokens per model response")
    parser.add_argument("--tool-calls", choices=("auto", "native", "text"), default="auto",
                        help="the autonomous openai backend's openai_tool_calls (default auto, agenter's own; "
                             "text for a model that writes its calls in its reply)")
    parser.add_argument("--aider", default=str(REPO / ".venv-aider" / "bin" / "aider"), help="the Aider program")
    parser.add_argument("--option", action="append", default=[], metavar="SYSTEM:KEY=VALUE",
                        help="an extra backend option for an agenter system (repeatable)")
    parser.add_argument("--out", type=Path, help="write every run's row and the summaries as JSON")
    parser.add_argument("--journal", type=Path, help="append each finished run here (JSON lines) and skip the "
                                                     "runs it already holds: a stopped benchmark resumes")
    parser.add_argument("--record", type=Path, help="keep every request and response under this directory")
    parser.add_argument("--check-tasks", action="store_true", help="only check the task set (no model)")
    parser.add_argument("--report", action="store_true",
                        help="only print the report of the runs --journal holds (no model): the tasks of --tasks "
                             "that every system of --systems finished")
    return parser.parse_args(argv)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # SIGTERM as Ctrl-C: the runs are cancelled, and each kills the program it started.
    signal.signal(signal.SIGTERM, _interrupt)
    args = arguments(argv)
    tasks = load_tasks([t for t in args.tasks.split(",") if t] or None)
    if args.check_tasks:
        return 0 if asyncio.run(check_tasks(tasks)) else 1
    if args.report:
        return report_journal(args.journal, [s for s in args.systems.split(",") if s], [t.name for t in tasks])
    if not args.base_url:
        raise SystemExit("--base-url is required (or --check-tasks)")
    systems = [s for s in args.systems.split(",") if s]
    if bad := [s for s in systems if s not in SYSTEMS]:
        raise SystemExit(f"unknown system(s): {', '.join(bad)}; known: {', '.join(SYSTEMS)}")
    with tempfile.TemporaryDirectory(prefix="bench-real-model-") as scratch:
        settings = Settings(args.base_url.rstrip("/"), args.api_key, args.model, args.wire, args.temperature,
                            args.max_tokens, args.timeout, args.aider, parse_options(args.option), args.record,
                            Path(scratch), args.tool_calls)
        for system in list(systems):
            reason = unavailable(system, settings)
            if reason:
                print(f"{system}: not available: {reason}")
                systems.remove(system)
        print(f"{len(tasks)} tasks x {', '.join(systems) or 'no system'} on {args.model} at {args.base_url} "
              f"(temperature {args.temperature}, max {args.max_tokens} tokens a response, {args.timeout:g}s a task, "
              f"2 attempts, tool calls {args.tool_calls}, jobs {args.jobs})", flush=True)
        runs = asyncio.run(run_all(tasks, systems, settings, args.jobs, args.journal)) if systems else []
    summaries = [s for s in (summarize(runs, system) for system in systems) if s]
    if summaries:
        print_report(summaries)
    if args.out:
        args.out.write_text(json.dumps({"settings": {k: v for k, v in vars(args).items() if k != "api_key"},
                                        "summaries": summaries, "runs": [asdict(r) for r in runs]},
                                       indent=1, default=str))
        print(f"rows written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
