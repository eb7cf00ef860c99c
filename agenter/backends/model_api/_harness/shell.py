"""The bash tool: one command per call, in its own session, bounded in time and output.

With sandbox=True the command runs confined (`agenter.sandbox.confine`: Landlock, else
bubblewrap on Linux; Seatbelt on macOS): the workspace is the only place it can write (read-only
in plan mode) besides a private TMPDIR, the credential files of the home directory cannot be
read, there is no network unless the policy allows it, and the process tree dies with the
command. With sandbox=False it runs directly. Either way the permission gate has judged the command before it runs; the OS
sandbox is what holds for the programs the gate cannot see into (`python x.py`, `make`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenter._errors import BackendError
from agenter.host.process import run_process
from agenter.sandbox.confine import Confinement as ShellSandbox
from agenter.sandbox.confine import unusable_hint
from agenter.sandbox.paths import is_within

if TYPE_CHECKING:
    from agenter.permissions import PermissionPolicy

BASH_TOOL_NAME = "bash"
#: Seconds a command may run when the model names no timeout, and the most it may ask for.
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
#: Bytes of output kept per command (stdout and stderr together); the end is kept.
OUTPUT_LIMIT = 1_000_000
#: Results longer than this go to a file (the executor saves them; the model gets a preview).
RESULT_CHARS = 30_000

# Environment variables that look secret are not passed to the model's commands: what a command
# prints goes to the model.
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL|COOKIE|SESSION)", re.IGNORECASE)


#: History files of the home (besides `.*_history`) that record what was typed.
_HISTORY_FILES = frozenset({".lesshst", ".viminfo", ".histfile", ".sh_history", ".zhistory"})


def bash_tool_definition(*, sandbox: bool, network: bool, read_only: bool, timeout: float) -> dict[str, Any]:
    """The tool as the model sees it; the description says what the sandbox allows."""
    limits = [f"Times out after {timeout:g} s unless you pass a larger timeout (at most {MAX_TIMEOUT:g} s)."]
    if sandbox:
        where = ("Nothing can be written (read-only session)." if read_only else
                 "Only the working directory and $TMPDIR (private) are writable; the rest of "
                 "the filesystem is read-only. Write temporary files under $TMPDIR, not /tmp.")
        limits.append(where)
        limits.append("The network is available." if network else "There is no network access.")
    return {
        "name": BASH_TOOL_NAME,
        "description": (
            "Run a shell command with bash in the working directory and return its output (stdout and stderr "
            "together, then the exit code when it is not 0). Each call starts a new shell: cd and variables do "
            "not carry over. No terminal and no input: use non-interactive flags. " + " ".join(limits)
            + " Prefer read_file/grep/glob for reading files and the file tools for editing them."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, run as `bash -c COMMAND`."},
                "timeout": {"type": "number", "description": f"Seconds, at most {MAX_TIMEOUT:g}."},
            },
            "required": ["command"],
        },
    }


def hidden_home_paths(home: str, is_credential: Any, *, keep: Iterable[str] = (), limit: int = 5000) -> list[str]:
    """Entries of the home directory (and of its hidden folders, one level down) that hold
    credentials, as `is_credential(path)` judges them, and the shells' and REPLs' history files
    (commands typed with secrets in them); `keep` (the workspace, the results folder) and their
    parents are never hidden. Bounded by `limit` entries looked at."""
    found: list[str] = []
    kept = [os.path.realpath(k) for k in keep]
    seen = 0

    def consider(path: str) -> bool:
        nonlocal seen
        seen += 1
        if any(is_within(k, path) for k in kept):
            return False
        if is_credential(path) or _is_history(path):
            found.append(path)
            return True
        return False

    try:
        top = sorted(os.scandir(home), key=lambda e: e.name)
    except OSError:
        return found
    for entry in top:
        if seen >= limit:
            break
        if consider(entry.path) or not entry.name.startswith("."):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            children = sorted(os.scandir(entry.path), key=lambda e: e.name)
        except OSError:
            continue
        for child in children:
            if seen >= limit:
                break
            consider(child.path)
    return found


def shell_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the model's commands: ours without variables that look secret."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if not _SECRET_NAME.search(k)}
    env.setdefault("PATH", os.defpath)
    # No pager, no prompt: there is no one at a terminal.
    env.update({"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "TERM": "dumb"})
    return env


@dataclass
class ShellResult:
    text: str
    is_error: bool
    exit_code: int | None = None  # None: it did not start, or it timed out


async def run_shell(command: str, *, cwd: Path, timeout: float, sandbox: ShellSandbox | None,
                    env: Mapping[str, str], output_limit: int = OUTPUT_LIMIT) -> ShellResult:
    """Run one command to the end (or its timeout); the text is what the model reads."""
    argv: Sequence[str] = sandbox.argv(command) if sandbox is not None else ["bash", "-c", command]
    try:
        outcome = await run_process(argv, cwd=cwd, timeout=timeout, env=env, merge_stderr=True,
                                    stdout_limit=output_limit)
    except OSError as exc:
        program = argv[0]
        return ShellResult(f"Could not start {program}: {exc.strerror or exc}", is_error=True)
    text = outcome.stdout.rstrip("\n")
    notes: list[str] = []
    if outcome.stdout_truncated:
        text = (f"[the output was longer than {output_limit:,} bytes; only its end is kept]\n" + text)
    if outcome.timed_out:
        notes.append(f"[timed out after {timeout:g} s: the command and everything it started were stopped]")
    elif outcome.returncode not in (0, None):
        code = outcome.returncode or 0
        notes.append(f"[exit code {code}{f' (killed by signal {-code})' if code < 0 else ''}]")
    if notes:
        text = f"{text}\n{' '.join(notes)}" if text else " ".join(notes)
    return ShellResult(text, is_error=outcome.timed_out or outcome.returncode != 0,
                       exit_code=None if outcome.timed_out else outcome.returncode)


def network_allowed(policy: PermissionPolicy | None) -> bool:
    """Whether sandboxed commands get the network: only when the policy allows every network
    call (`allow network`) and has no other network rule (a host list cannot be enforced on a
    shell without a proxy, so it keeps the network off)."""
    if policy is None:
        return False
    rules = [rule for rule in policy.rules if rule.kind == "network"]
    return any(r.effect == "allow" and r.matches_all for r in rules) and all(r.effect == "allow" for r in rules)


_probed: set[tuple[str, str, bool, bool]] = set()


async def probe_sandbox(sandbox: ShellSandbox, env: Mapping[str, str], backend: str) -> None:
    """Run `true` in the sandbox once per process and shape, so a machine where the mechanism
    cannot confine (bubblewrap without user namespaces) fails at connect with what to do, not on
    every command."""
    key = (sandbox.mechanism, sandbox.program, sandbox.network, sandbox.read_only)
    if key in _probed:
        return
    result = await run_shell("true", cwd=sandbox.cwd, timeout=30, sandbox=sandbox, env=env)
    if result.is_error:
        raise BackendError(
            f"{sandbox.mechanism} cannot create the bash tool's sandbox on this machine: "
            f"{result.text.strip()[:500]}. {unusable_hint(sandbox.mechanism)}", backend=backend, kind="config")
    _probed.add(key)


def timeout_of(arguments: Mapping[str, Any], default: float) -> float:
    """The model's timeout, within (0, MAX_TIMEOUT]; the default when absent or invalid."""
    value = arguments.get("timeout")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default
    return float(min(value, max(MAX_TIMEOUT, default)))


def _is_history(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith(".") and (name.endswith("_history") or name in _HISTORY_FILES)

