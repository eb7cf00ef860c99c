"""Validators and the chain: real files, real bandit, real subprocesses (ended by pid)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from agenter._errors import ConfigurationError
from agenter.validators import (
    CommandValidator,
    SecurityValidator,
    SyntaxValidator,
    ValidationResult,
    Validator,
    ValidatorChain,
    all_skipped,
    passed,
    resolve_validators,
)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


@pytest.fixture
def leftover_pids():
    """Pids a test learns about; killed at the end whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---------------------------------------------------------------- syntax


async def test_syntax_passes_and_fails(tmp_path):
    (tmp_path / "good.py").write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "bad.py").write_text("def f(:\n    pass\n")
    (tmp_path / "indent.py").write_text("def f():\nreturn 1\n")
    (tmp_path / "stub.pyi").write_text("def g( -> int: ...\n")
    (tmp_path / "notes.txt").write_text("def f(:")
    validator = SyntaxValidator()
    ok = await validator.validate(["good.py", "notes.txt"], tmp_path)
    assert ok.passed and not ok.skipped and ok.blocking and ok.errors == []

    result = await validator.validate(["good.py", "bad.py", "indent.py", "stub.pyi"], tmp_path)
    assert not result.passed
    assert len(result.errors) == 3
    assert result.errors[0].startswith("bad.py:1:7: SyntaxError: ")
    assert result.errors[1].startswith("indent.py:2:1: IndentationError: ")
    assert result.errors[2].startswith("stub.pyi:1:")
    assert "compiled 4 Python files, 3 with syntax errors" in result.details


async def test_syntax_catches_compile_time_errors(tmp_path):
    (tmp_path / "ret.py").write_text("x = 1\nreturn x\n")
    (tmp_path / "brk.py").write_text("break\n")
    result = await SyntaxValidator().validate(["ret.py", "brk.py"], tmp_path)
    assert result.errors[0].startswith("ret.py:2:1: SyntaxError: 'return' outside function")
    assert result.errors[1].startswith("brk.py:1:1: SyntaxError: 'break' outside loop")


async def test_syntax_skipped_without_python_files(tmp_path):
    (tmp_path / "a.md").write_text("# x")
    result = await SyntaxValidator().validate(["a.md"], tmp_path)
    assert result.passed and result.skipped
    result = await SyntaxValidator().validate([], tmp_path)
    assert result.skipped


async def test_syntax_odd_sources(tmp_path, capfd):
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n")
    (tmp_path / "badutf8.py").write_bytes(b"name = '\xff\xfe'\n")
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "warn.py").write_text("path = '\\d'\n")  # SyntaxWarning, not an error
    (tmp_path / "py312.py").write_text("type Alias = int\n" if sys.version_info >= (3, 12) else "x = 1\n")
    result = await SyntaxValidator().validate(
        ["latin.py", "badutf8.py", "nul.py", "warn.py", "py312.py"], tmp_path)
    bad = sorted(error.split(":", 1)[0] for error in result.errors)
    assert bad == ["badutf8.py", "nul.py"], result.errors
    assert "SyntaxWarning" not in capfd.readouterr().err


async def test_syntax_many_files_is_fast(tmp_path):
    body = "\n".join(f"def f{i}(a, b):\n    return a * {i} + b" for i in range(20)) + "\n"
    names = []
    for i in range(300):
        name = f"pkg/m{i}.py"
        (tmp_path / "pkg").mkdir(exist_ok=True)
        (tmp_path / name).write_text(body)
        names.append(name)
    started = time.perf_counter()
    result = await SyntaxValidator().validate(names, tmp_path)
    elapsed = time.perf_counter() - started
    print(f"compiled 300 files of 40 lines in {elapsed:.2f}s")
    assert result.passed


async def test_syntax_does_not_block_the_event_loop(tmp_path, monkeypatch):
    """The compiling happens on a worker thread, so the event loop stays free (checked by where it
    runs: counting the loop's ticks meanwhile depended on the machine's speed and failed once)."""
    (tmp_path / "m.py").write_text("x = 1\n")
    where = []
    check_all = SyntaxValidator._check_all

    def recorded(*args):
        where.append(threading.current_thread())
        return check_all(*args)

    monkeypatch.setattr(SyntaxValidator, "_check_all", staticmethod(recorded))
    result = await SyntaxValidator().validate(["m.py"], tmp_path)
    assert result.passed
    assert where and where[0] is not threading.main_thread()


# ---------------------------------------------------------------- security (bandit)

INSECURE = "import subprocess\nx = eval(input())\nsubprocess.call('ls ' + x, shell=True)\n"


@pytest.fixture(scope="module")
def bandit_available():
    probe = subprocess.run([sys.executable, "-m", "bandit", "--version"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("bandit is not installed in this environment (pip install 'agenter-sdk[security]')")


async def test_security_finds_issues(tmp_path, bandit_available):
    (tmp_path / "app.py").write_text(INSECURE)
    (tmp_path / "safe.py").write_text("def add(a, b):\n    return a + b\n")
    validator = SecurityValidator()
    assert validator.blocking is False
    result = await validator.validate(["app.py", "safe.py"], tmp_path)
    assert not result.passed and not result.skipped and not result.blocking
    assert any(e.startswith("app.py:2: [B307] ") and "(MEDIUM severity" in e for e in result.errors), result.errors
    assert any("[B602]" in e and "HIGH severity" in e for e in result.errors), result.errors
    assert not any(e.startswith("safe.py") for e in result.errors)


async def test_security_thresholds(tmp_path, bandit_available):
    (tmp_path / "app.py").write_text(INSECURE)
    high = await SecurityValidator(severity="high").validate(["app.py"], tmp_path)
    assert high.errors and all("HIGH severity" in e for e in high.errors)
    assert "below the threshold" in high.details
    (tmp_path / "mild.py").write_text("import subprocess\n")  # B404: low severity only
    mild = await SecurityValidator(severity="medium").validate(["mild.py"], tmp_path)
    assert mild.passed and not mild.skipped


async def test_security_clean_and_skipped(tmp_path, bandit_available):
    (tmp_path / "safe.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "-dash.py").write_text("y = 2\n")
    clean = await SecurityValidator().validate(["safe.py", "-dash.py"], tmp_path)
    assert clean.passed and not clean.skipped and clean.errors == []
    skipped = await SecurityValidator().validate(["README.md"], tmp_path)
    assert skipped.passed and skipped.skipped


async def test_security_unparseable_file_is_reported(tmp_path, bandit_available):
    (tmp_path / "broken.py").write_text("def f(:\n")
    result = await SecurityValidator().validate(["broken.py"], tmp_path)
    assert not result.passed
    assert any("broken.py" in e and "could not scan" in e for e in result.errors)


async def test_security_bandit_missing_is_a_failure(tmp_path):
    (tmp_path / "app.py").write_text(INSECURE)
    # An interpreter with no site-packages at all: `python -I -S` cannot see bandit.
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {shlex_quote(sys.executable)} -I -S \"$@\"\n")
    bare.chmod(0o755)
    result = await SecurityValidator(python=str(bare)).validate(["app.py"], tmp_path)
    assert not result.passed and not result.skipped
    assert "bandit is not installed" in result.errors[0]
    assert "agenter-sdk[security]" in result.errors[0]


async def test_security_interpreter_missing_is_a_failure(tmp_path):
    (tmp_path / "app.py").write_text("x = 1\n")
    result = await SecurityValidator(python=str(tmp_path / "no-such-python")).validate(["app.py"], tmp_path)
    assert not result.passed
    assert "bandit is not installed" in result.errors[0]


async def test_security_garbage_output_is_a_failure(tmp_path):
    (tmp_path / "app.py").write_text("x = 1\n")
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\necho 'this is not json'\necho 'Traceback: boom' >&2\nexit 2\n")
    fake.chmod(0o755)
    result = await SecurityValidator(python=str(fake)).validate(["app.py"], tmp_path)
    assert not result.passed
    assert "without a JSON report" in result.errors[0] and "exit code 2" in result.errors[0]


def test_security_bad_threshold():
    with pytest.raises(ConfigurationError) as info:
        SecurityValidator(severity="critical")
    assert info.value.parameter == "severity" and info.value.valid == ["low", "medium", "high"]


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# ---------------------------------------------------------------- command


async def test_command_passes_and_is_never_skipped(tmp_path):
    result = await CommandValidator("echo hello && true").validate([], tmp_path)
    assert result.passed and not result.skipped and result.blocking
    assert result.validator == "command:echo hello && true"
    assert "hello" in result.details


async def test_command_runs_in_cwd_with_env(tmp_path):
    validator = CommandValidator(["/bin/sh", "-c", 'test "$(pwd -P)" = "$EXPECTED"'],
                                 env={"EXPECTED": str(tmp_path.resolve())}, name="where")
    result = await validator.validate([], tmp_path)
    assert result.passed, result.errors
    assert result.validator == "where"


async def test_command_failure_carries_the_output_tail(tmp_path):
    script = "for i in $(seq 1 500); do echo line$i; done; echo oops >&2; exit 3"
    result = await CommandValidator(script, blocking=False).validate(["x.py"], tmp_path)
    assert not result.passed and not result.blocking
    error = result.errors[0]
    assert "exit code 3" in error
    assert "oops" in error and "line500" in error
    assert "line1\n" not in error
    assert len(error) < 4000 + 300
    assert error.count("\n") <= 62


async def test_command_long_lines_are_cut(tmp_path):
    result = await CommandValidator("python3 -c \"print('x' * 100000)\"; exit 1").validate([], tmp_path)
    assert not result.passed
    assert len(result.errors[0]) < 4400


async def test_command_missing_program(tmp_path):
    result = await CommandValidator(["definitely-not-a-program-xyz"]).validate([], tmp_path)
    assert not result.passed and "could not run" in result.errors[0]
    shell = await CommandValidator("definitely-not-a-program-xyz").validate([], tmp_path)
    assert not shell.passed and "exit code 127" in shell.errors[0]


async def test_command_timeout_kills_the_process_group(tmp_path, leftover_pids):
    pidfile = tmp_path / "child.pid"
    # The shell starts a grandchild that would outlive a plain kill of the shell.
    command = f"sleep 300 & echo $! > {pidfile}; echo started; wait"
    validator = CommandValidator(command, timeout=1.0)
    started = time.monotonic()
    result = await validator.validate([], tmp_path)
    elapsed = time.monotonic() - started
    grandchild = int(pidfile.read_text())
    leftover_pids.extend([grandchild, validator.last_pid])
    assert not result.passed
    assert "timed out after 1s" in result.errors[0]
    assert "started" in result.errors[0]
    assert elapsed < 10
    assert wait_gone(validator.last_pid)
    assert wait_gone(grandchild)


async def test_command_cancelled_kills_the_process_group(tmp_path, leftover_pids):
    pidfile = tmp_path / "child.pid"
    validator = CommandValidator(f"sleep 300 & echo $! > {pidfile}; wait", timeout=600)
    task = asyncio.create_task(validator.validate([], tmp_path))
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    grandchild = int(pidfile.read_text())
    leftover_pids.append(grandchild)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone(grandchild)


async def test_command_background_leftover_does_not_hang(tmp_path, leftover_pids):
    pidfile = tmp_path / "child.pid"
    # Exits at once but leaves a child holding stdout open.
    validator = CommandValidator(f"sleep 300 & echo $! > {pidfile}; exit 0", timeout=60)
    started = time.monotonic()
    result = await validator.validate([], tmp_path)
    leftover_pids.append(int(pidfile.read_text()))
    assert result.passed
    assert time.monotonic() - started < 15
    assert wait_gone(int(pidfile.read_text()))


async def test_command_output_is_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", "sk-test-secret-value-123456")
    result = await CommandValidator('echo "key=$SOME_API_KEY"; exit 1').validate([], tmp_path)
    assert "sk-test-secret-value-123456" not in result.errors[0]
    assert "[REDACTED]" in result.errors[0]


def test_command_empty_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        CommandValidator("  ")
    with pytest.raises(ConfigurationError):
        CommandValidator([])


# ---------------------------------------------------------------- chain


class Recording:
    def __init__(self, name: str, *, ok: bool = True, blocking: bool = True, raises: Exception | None = None,
                 returns: object = None, skipped: bool = False):
        self.name, self.blocking, self.ok, self.raises, self.returns = name, blocking, ok, raises, returns
        self.skipped = skipped
        self.calls: list[list[str]] = []

    async def validate(self, files, cwd):
        self.calls.append(list(files))
        if self.raises:
            raise self.raises
        if self.returns is not None:
            return self.returns
        return ValidationResult(validator=self.name, passed=self.ok, blocking=self.blocking,
                                skipped=self.skipped, errors=[] if self.ok else [f"{self.name} failed"])


async def test_chain_yields_in_order_and_short_circuits(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    first = Recording("first")
    advisory = Recording("advisory", ok=False, blocking=False)
    blocker = Recording("blocker", ok=False)
    never = Recording("never")
    chain = ValidatorChain([first, advisory, blocker, never])
    assert chain.names == ["first", "advisory", "blocker", "never"]
    seen = []
    async for result in chain.run(["a.py"], tmp_path):
        seen.append(result.validator)
    assert seen == ["first", "advisory", "blocker"]
    assert never.calls == []
    results = await chain.run_all(["a.py"], tmp_path)
    assert not passed(results)
    assert all(r.duration_seconds is not None for r in results)


async def test_chain_advisory_failure_still_passes(tmp_path):
    results = await ValidatorChain([Recording("a", ok=False, blocking=False), Recording("b")]).run_all([], tmp_path)
    assert [r.validator for r in results] == ["a", "b"]
    assert passed(results)


async def test_chain_exception_becomes_a_failure(tmp_path):
    crashing = Recording("crashy", raises=RuntimeError("disk on fire"))
    after = Recording("after")
    results = await ValidatorChain([crashing, after]).run_all([], tmp_path)
    assert len(results) == 1
    assert not results[0].passed and results[0].blocking
    assert "disk on fire" in results[0].errors[0] and "RuntimeError" in results[0].errors[0]
    advisory_crash = Recording("soft", blocking=False, raises=ValueError())
    results = await ValidatorChain([advisory_crash, after]).run_all([], tmp_path)
    assert [r.passed for r in results] == [False, True]
    assert "ValueError" in results[0].errors[0]


async def test_chain_wrong_return_type_is_a_failure(tmp_path):
    results = await ValidatorChain([Recording("odd", returns="yes")]).run_all([], tmp_path)
    assert not results[0].passed and "not a ValidationResult" in results[0].errors[0]


async def test_chain_drops_deleted_and_duplicate_files(tmp_path):
    (tmp_path / "kept.py").write_text("x = 1\n")
    (tmp_path / "pkg").mkdir()
    recorder = Recording("r")
    await ValidatorChain([recorder]).run_all(
        ["kept.py", "gone.py", "kept.py", str(tmp_path / "kept.py"), "pkg"], tmp_path)
    assert recorder.calls == [["kept.py"]]


async def test_chain_cancellation_propagates(tmp_path):
    class Slow:
        name, blocking = "slow", True

        async def validate(self, files, cwd):
            await asyncio.sleep(30)

    task = asyncio.create_task(ValidatorChain([Slow()]).run_all([], tmp_path))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_chain_with_real_validators(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n")
    chain = ValidatorChain([SyntaxValidator(), CommandValidator("exit 0")])
    results = await chain.run_all(["bad.py"], tmp_path)
    assert [r.validator for r in results] == ["syntax"]
    assert not passed(results)


def test_all_skipped():
    skipped = ValidationResult(validator="s", passed=True, skipped=True)
    real = ValidationResult(validator="c", passed=True)
    assert all_skipped([skipped]) and all_skipped([])
    assert not all_skipped([skipped, real])


def test_protocol_runtime_check():
    assert isinstance(SyntaxValidator(), Validator)
    assert isinstance(CommandValidator("true"), Validator)
    assert isinstance(SecurityValidator(), Validator)


# ---------------------------------------------------------------- resolve_validators


def test_resolve_defaults_and_names():
    default = resolve_validators(None)
    assert len(default) == 1 and isinstance(default[0], SyntaxValidator)
    resolved = resolve_validators(["syntax", "security", "command:pytest -q"])
    assert isinstance(resolved[0], SyntaxValidator)
    assert isinstance(resolved[1], SecurityValidator) and resolved[1].blocking is False
    assert isinstance(resolved[2], CommandValidator) and resolved[2].argv == ["/bin/sh", "-c", "pytest -q"]
    assert resolve_validators([]) == []
    assert isinstance(resolve_validators("security")[0], SecurityValidator)
    assert isinstance(resolve_validators(SyntaxValidator)[0], SyntaxValidator)


def test_resolve_instances_kept():
    custom = Recording("custom")
    syntax = SyntaxValidator(blocking=False)
    assert resolve_validators([custom, syntax]) == [custom, syntax]
    assert resolve_validators(custom) == [custom]


@pytest.mark.parametrize("bad", [["lint"], ["command:"], [42], [object()]])
def test_resolve_rejects_unknown(bad):
    with pytest.raises(ConfigurationError) as info:
        resolve_validators(bad)
    assert info.value.parameter == "validators"
    assert "syntax" in info.value.valid and "security" in info.value.valid


def test_import_does_not_load_bandit():
    code = "import sys, agenter.validators; assert 'bandit' not in sys.modules, 'bandit imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
async def test_security_and_syntax_in_one_chain(tmp_path, bandit_available):
    (tmp_path / "app.py").write_text(INSECURE)
    results = await ValidatorChain(resolve_validators(["syntax", "security"])).run_all(["app.py"], tmp_path)
    assert [r.validator for r in results] == ["syntax", "security"]
    assert results[0].passed and not results[1].passed
    assert passed(results)  # security is advisory


# ---------------------------------------------------------------- every verdict in the result
def _bare_python(folder) -> str:
    """An interpreter that cannot see bandit (no site-packages): the scan cannot run."""
    bare = folder / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {shlex_quote(sys.executable)} -I -S \"$@\"\n")
    bare.chmod(0o755)
    return str(bare)


def _writer(*contents: str):
    from agenter.testing import TurnContext

    def make(content: str):
        def turn(ctx: TurnContext):
            return [ctx.write("app.py", content), "wrote app.py"]
        return turn
    return [make(c) for c in contents]


async def test_an_advisory_scan_that_did_not_run_is_in_the_result(tmp_path):
    # bandit missing: the run completes (the scan is advisory), and the result says the scan did
    # not run, not only the event stream (docs/validators.md promises it).
    from agenter import AutonomousCodingAgent, CodingEventType, CodingRequest, CodingStatus
    from agenter.testing import FunctionBackend

    work = tmp_path / "work"
    work.mkdir()
    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=_writer("x = 1\n"),
                                  validators=["syntax", SecurityValidator(python=_bare_python(tmp_path))])
    events = [e async for e in agent.stream_execute(CodingRequest(prompt="p", cwd=work))]
    result = events[-1].result
    assert result.status is CodingStatus.COMPLETED and result.validation_errors == []
    syntax, security = result.validation
    assert (syntax.validator, syntax.passed, syntax.blocking, syntax.skipped) == ("syntax", True, True, False)
    assert (security.validator, security.passed, security.blocking, security.skipped) == (
        "security", False, False, False)
    assert "bandit is not installed" in security.errors[0]
    assert security.duration_seconds is not None and security.duration_seconds >= 0
    # JSON-safe, and in the SESSION_END event's copy of the result as well
    end = events[-1]
    assert end.type is CodingEventType.SESSION_END
    assert end.data["result"]["validation"] == result.model_dump(mode="json")["validation"]
    assert end.data["result"]["validation"][1]["errors"] == security.errors


async def test_the_result_holds_the_last_validation_and_the_chain_stops_at_a_blocking_failure(tmp_path):
    from agenter import AutonomousCodingAgent, CodingRequest, CodingStatus
    from agenter.testing import FunctionBackend

    work = tmp_path / "work"
    work.mkdir()
    chain = ["syntax", SecurityValidator(python=_bare_python(tmp_path))]
    fixed = AutonomousCodingAgent(backend=FunctionBackend, turn=_writer("def f(:\n", "x = 1\n"), validators=chain)
    result = await fixed.execute(CodingRequest(prompt="p", cwd=work))
    assert result.status is CodingStatus.COMPLETED and result.iterations == 2
    assert [(r.validator, r.passed) for r in result.validation] == [("syntax", True), ("security", False)]

    (work / "app.py").unlink()
    broken = AutonomousCodingAgent(backend=FunctionBackend, turn=_writer("def f(:\n", "def g(:\n"),
                                   validators=chain, max_iterations=2)
    result = await broken.execute(CodingRequest(prompt="p", cwd=work))
    assert result.status is CodingStatus.FAILED
    # syntax blocked, so security never ran: it is absent, not reported as passed or skipped
    assert [(r.validator, r.passed, r.blocks) for r in result.validation] == [("syntax", False, True)]
    assert result.validation_errors == [f"[syntax] {e}" for e in result.validation[0].errors]


async def test_a_secret_in_a_verdict_is_redacted_in_the_result(tmp_path, monkeypatch):
    from agenter import AutonomousCodingAgent, CodingRequest
    from agenter.testing import FunctionBackend

    monkeypatch.setenv("MY_SERVICE_API_KEY", "supersecretvalue123")

    class Leaky:
        name, blocking = "leaky", False

        async def validate(self, files, cwd):
            return ValidationResult(validator=self.name, passed=False, blocking=False,
                                    errors=["token supersecretvalue123 rejected"],
                                    details="with supersecretvalue123")
    work = tmp_path / "work"
    work.mkdir()
    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=_writer("x = 1\n"), validators=[Leaky()])
    result = await agent.execute(CodingRequest(prompt="p", cwd=work))
    assert "supersecretvalue123" not in result.model_dump_json()
    assert result.validation[0].errors[0].startswith("token ") and not result.validation[0].passed


async def test_a_command_judges_the_source_not_a_stale_bytecode_cache(tmp_path):
    """A .pyc in __pycache__ is trusted while its source keeps its size and mtime (in seconds):
    a file rewritten within the second to the same size was judged as its old code. Each run of a
    command validator has a bytecode cache of its own (PYTHONPYCACHEPREFIX)."""
    module = tmp_path / "calc.py"
    module.write_text("def sub(a, b):\n    return a * b\n")
    stamp = module.stat().st_mtime_ns
    # The agent's own run (or an earlier check) leaves the cache beside the source.
    writes = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    subprocess.run([sys.executable, "-c", "import calc"], cwd=tmp_path, check=True, env=writes)
    assert list((tmp_path / "__pycache__").glob("calc.*.pyc"))
    module.write_text("def sub(a, b):\n    return a - b\n")  # the same size
    os.utime(module, ns=(stamp, stamp))  # within the same second
    check = CommandValidator([sys.executable, "-c", "import calc, sys; sys.exit(0 if calc.sub(3, 1) == 2 else 1)"])
    assert (await check.validate(["calc.py"], tmp_path)).passed
