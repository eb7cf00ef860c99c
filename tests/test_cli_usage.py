"""The mistakes a new user makes, found before anything starts (exit 2, on stderr, no model
request, no transcript): typos with the closest flag, backend or field suggested, --resume on a
backend that cannot continue another process's run, a missing API key, a prompt that is not
text, what the backend needs from the machine (hints spelled as flags); `agenter` alone and
`-V`; `agenter backends` explained. Also the Python API's typos and a validator whose validate
is not async."""

from __future__ import annotations

import gzip
import subprocess

import pytest
from test_cli import AGENTER, clean_env, run_cli

from agenter import AutonomousCodingAgent, Budget, CodingRequest, ConfigurationError, ValidationResult
from agenter.testing import ScriptedModelServer, reply, text, tool_call


def refused_before_start(*args: str, env: dict[str, str] | None = None, **server_env: str) -> str:
    """Run `agenter run ...` against a scripted server given by --option base_url; assert it exits
    2 having sent no model request; its stderr."""
    with ScriptedModelServer([reply(text("a run that wrongly started"))]) as server:
        proc = run_cli("run", *args, "--option", f"base_url={server.base_url}", env=env or clean_env(**server_env))
        assert server.model_requests == []
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return proc.stderr


# ------------------------------------------------------------------------ the command line


def test_agenter_alone_prints_help_and_dash_v_the_version():
    from agenter import __version__

    alone = run_cli()
    assert alone.returncode == 2 and alone.stdout == ""  # as uv does: help, exit code of a usage error
    assert alone.stderr.startswith("usage: agenter") and "run " in alone.stderr and "backends" in alone.stderr
    version = run_cli("-V")
    assert version.returncode == 0 and version.stdout.strip() == f"agenter {__version__}"


def test_a_mistyped_flag_gets_the_subcommands_usage_and_the_closest_flag(tmp_path):
    proc = run_cli("run", "x", "--cwd", str(tmp_path), "--max-cots", "1")
    assert proc.returncode == 2
    usage, error = proc.stderr.split("agenter run: error: ")
    assert usage.startswith("usage: agenter run ") and "--max-cost" in usage
    assert error.strip() == "unrecognized arguments: --max-cots 1; did you mean --max-cost?"
    command = run_cli("rnu", "x")
    assert command.returncode == 2 and "did you mean 'run'?" in command.stderr


def test_a_mistyped_backend_gets_the_closest_name(tmp_path):
    stderr = refused_before_start("x", "--cwd", str(tmp_path), "--backend", "claude_code")
    assert stderr.startswith("agenter: unknown backend 'claude_code'; did you mean 'claude-code'? (valid values")
    assert len(stderr.splitlines()) == 1


@pytest.mark.parametrize(("backend", "reason"), [
    ("anthropic-sdk", "its conversation lives only as long as one run"),
    ("openai", "its conversation lives only as long as one run"),
])
def test_resume_on_a_backend_that_cannot_continue_another_processes_run(tmp_path, backend, reason):
    logs = tmp_path / "logs"
    stderr = refused_before_start("continue", "--cwd", str(tmp_path), "--backend", backend, "--model", "m",
                                  "--resume", "a-session-id", "--log-dir", str(logs),
                                  "--option", "api_key=sk-test")
    assert stderr.startswith(f"agenter: --resume: the {backend} backend cannot continue an earlier run ({reason})")
    able = stderr.split("backends that can: ")[1].strip().split(", ")
    assert {"claude-code", "codex", "acp", "claude-cli", "codex-cli", "openhands"} <= set(able)
    assert "anthropic-sdk" not in able and "openai" not in able and "litellm" not in able
    assert not logs.exists()  # nothing started: no transcript


def test_a_missing_api_key_is_found_before_the_run_starts(tmp_path):
    logs = tmp_path / "logs"
    stderr = refused_before_start("Write hello.py", "--cwd", str(tmp_path), "--log-dir", str(logs))
    assert stderr == ("agenter: no Anthropic API key for the anthropic-sdk backend: export ANTHROPIC_API_KEY=… "
                      "or pass --option api_key=…\n")
    assert not logs.exists()


def test_a_key_in_the_environment_or_an_option_is_enough(tmp_path):
    script = [reply(tool_call("write_file", {"path": "hello.py", "content": "print('hi')\n"})),
              reply(text("Wrote hello.py"))]
    for extra, env in [(["--option", "api_key=sk-test"], clean_env()),
                       ([], clean_env(ANTHROPIC_API_KEY="sk-test"))]:
        (tmp_path / "hello.py").unlink(missing_ok=True)
        with ScriptedModelServer(script) as server:
            proc = run_cli("run", "Write hello.py", "--cwd", str(tmp_path), "--option",
                           f"base_url={server.base_url}", *extra, env=env)
        assert proc.returncode == 0, proc.stderr


def test_a_prompt_that_is_not_utf8_text(tmp_path):
    with ScriptedModelServer([]) as server:
        proc = subprocess.run([*(a.encode() for a in AGENTER), b"run", b"fix \xff\xfe it", b"--cwd",
                               str(tmp_path).encode(), b"--option", f"base_url={server.base_url}".encode()],
                              capture_output=True, timeout=60, env=clean_env(ANTHROPIC_API_KEY="sk-test"))
        assert server.model_requests == []
    assert proc.returncode == 2
    assert proc.stderr.decode() == "agenter: the prompt is not valid UTF-8 text\n"


def test_prompt_files_binary_or_compressed_are_one_line_each(tmp_path):
    binary = tmp_path / "task.bin"
    binary.write_bytes(bytes(range(256)))
    packed = tmp_path / "task.md.gz"
    packed.write_bytes(gzip.compress(b"Write hello.py"))
    nul = tmp_path / "task.txt"
    nul.write_bytes(b"Write\x00hello.py")
    cases = {binary: "not UTF-8 text", packed: "it is gzip-compressed, not text", nul: "NUL bytes",
             tmp_path / "missing.md": "No such file or directory"}
    for path, problem in cases.items():
        stderr = refused_before_start("--prompt-file", str(path), "--cwd", str(tmp_path),
                                      env=clean_env(ANTHROPIC_API_KEY="sk-test"))
        assert stderr.startswith(f"agenter: cannot read the prompt file {str(path)!r}: ") and problem in stderr
        assert len(stderr.splitlines()) == 1
    both = refused_before_start("x", "--prompt-file", str(nul), "--cwd", str(tmp_path),
                                env=clean_env(ANTHROPIC_API_KEY="sk-test"))
    assert "not both" in both


def test_a_prompt_file_and_standard_input_are_read(tmp_path):
    task = tmp_path / "task.md"
    task.write_text("Write hello.py\n\nIt prints hi.\n")
    script = [reply(tool_call("write_file", {"path": "hello.py", "content": "print('hi')\n"})),
              reply(text("Wrote hello.py"))]
    for args, stdin in [(["--prompt-file", str(task)], None), (["--prompt-file", "-"], task.read_bytes())]:
        (tmp_path / "hello.py").unlink(missing_ok=True)
        with ScriptedModelServer(script) as server:
            proc = subprocess.run([*AGENTER, "run", *args, "--cwd", str(tmp_path), "--option",
                                   f"base_url={server.base_url}", "--option", "api_key=sk-test"],
                                  input=stdin, capture_output=True, timeout=60, env=clean_env())
            assert "It prints hi." in str(server.model_requests[0].body["messages"][0])
        assert proc.returncode == 0, proc.stderr


def test_what_the_backend_needs_is_listed_line_by_line_with_flags(tmp_path):
    """bubblewrap asked for and not on PATH: the requirement error as lines, its hints as flags,
    not Python. (By default Landlock confines the bash tool and needs no program.)"""
    empty = tmp_path / "no-programs"
    empty.mkdir()
    stderr = refused_before_start("x", "--cwd", str(tmp_path), "--option", "anthropic_shell_sandbox=bubblewrap",
                                  env=clean_env(PATH=str(empty), ANTHROPIC_API_KEY="sk-test"))
    first, *needs = stderr.splitlines()
    assert first == "agenter: the anthropic-sdk backend cannot run here; it needs:"
    assert needs and "bubblewrap" in needs[0]
    assert "--option anthropic_shell=false" in stderr and "--no-sandbox" in stderr
    assert "sandbox=False" not in stderr and ":;" not in stderr


def test_python_hints_become_flags():
    from agenter._cliargs import cli_hints

    options = ["anthropic_shell", "api_key", "acp_fs", "codex_home"]
    assert cli_hints("pass anthropic_shell=False for no bash tool, or sandbox=False", options) == (
        "pass --option anthropic_shell=false for no bash tool, or --no-sandbox")
    assert cli_hints("set OPENAI_API_KEY or pass api_key=... (a local server)", options) == (
        "set OPENAI_API_KEY or pass --option api_key=… (a local server)")
    assert cli_hints("Pass sandbox=False (CLI: --no-sandbox) to run it", options) == "Pass --no-sandbox to run it"
    assert cli_hints("it needs model=... (the name)", options) == "it needs --model NAME (the name)"
    assert cli_hints("pass acp_fs=['write']", options) == "pass --option acp_fs='[\"write\"]'"
    # names that are not the backend's options stay as they are
    assert cli_hints("cwd=/x and permissions=None", options) == "cwd=/x and permissions=None"


def test_backends_has_a_legend_and_a_concrete_hint_for_acp():
    proc = run_cli("backends", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("✓ ready: installed, credentials found; · installed") and "✗ not installed" in lines[-1]
    acp = lines.index(next(line for line in lines if line.split()[1:2] == ["acp"]))
    assert lines[acp].startswith("? acp")
    assert lines[acp + 1].strip().startswith("needs --option acp_command=…: the ACP agent program, e.g. 'codex-acp'")
    assert "needs: needs" not in proc.stdout
    assert all(line == line.rstrip() for line in lines)


# ------------------------------------------------------------------------ the Python API


def test_a_mistyped_request_or_budget_field_is_named_with_the_closest_one(tmp_path):
    with pytest.raises(ConfigurationError, match=r"unknown CodingRequest field 'promt'; did you mean 'prompt'\?"):
        CodingRequest(promt="x", cwd=tmp_path)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=r"unknown Budget field 'max_cost'; did you mean 'max_cost_usd'\?"):
        Budget(max_cost=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=r"'prompt': String should have at least 1 character"):
        CodingRequest(prompt="", cwd=tmp_path)


def test_a_mistyped_agent_argument_suggests_the_facades_own():
    with pytest.raises(ConfigurationError) as raised:
        AutonomousCodingAgent(max_iteration=3, sandbox=False)
    assert str(raised.value).startswith(
        "unknown option 'max_iteration' for backend 'anthropic-sdk'; did you mean 'max_iterations' "
        "(an argument of AutonomousCodingAgent)? (valid options of anthropic-sdk: ")
    with pytest.raises(ConfigurationError, match=r"did you mean 'base_url'\?"):
        AutonomousCodingAgent(bse_url="http://x", sandbox=False)


class PlainDefValidator:
    name = "plain"
    blocking = True

    def validate(self, files, cwd):
        return ValidationResult(validator=self.name, passed=True)


class AsyncValidator:
    name = "async"
    blocking = True

    async def validate(self, files, cwd):
        return ValidationResult(validator=self.name, passed=True)


def test_a_validator_whose_validate_is_not_async_fails_when_the_agent_is_built():
    for validator in (PlainDefValidator(), PlainDefValidator):
        with pytest.raises(ConfigurationError, match=r"validator 'plain': validate must be async"):
            AutonomousCodingAgent(validators=[validator], sandbox=False)
    AutonomousCodingAgent(validators=[AsyncValidator(), AsyncValidator, "syntax", "command:true"], sandbox=False)


def test_a_validate_that_returns_an_awaitable_is_accepted():
    """Callables other than plain functions may return an awaitable: they are not refused."""
    from functools import partial

    class Wrapped:
        name = "wrapped"
        blocking = True

        def __init__(self) -> None:
            self.validate = partial(AsyncValidator.validate, self)

    AutonomousCodingAgent(validators=[Wrapped()], sandbox=False)
