"""The bash tool: one command per call, in its own session, bounded in time and output.

How a command runs (its environment, the credential files it may not read, the run, the sandbox
probe) is `agenter.sandbox.commands`, shared with the other backends that give their model
agenter's shell; this module is the tool as the harness's models see it. With sandbox=True the
command runs confined (`agenter.sandbox.confine`: Landlock, else bubblewrap on Linux; Seatbelt
on macOS); with sandbox=False it runs directly. Either way the permission gate has judged the
command before it runs.
"""

from __future__ import annotations

from typing import Any

from agenter.sandbox.commands import (
    MAX_TIMEOUT,
    OUTPUT_LIMIT,
    ShellResult,
    hidden_home_paths,
    network_allowed,
    probe_sandbox,
    run_shell,
    shell_env,
    timeout_of,
)
from agenter.sandbox.confine import Confinement as ShellSandbox

__all__ = ["BASH_TOOL_NAME", "DEFAULT_TIMEOUT", "MAX_TIMEOUT", "OUTPUT_LIMIT", "RESULT_CHARS", "ShellResult",
           "ShellSandbox", "bash_tool_definition", "hidden_home_paths", "network_allowed", "probe_sandbox",
           "run_shell", "shell_env", "timeout_of"]

BASH_TOOL_NAME = "bash"
#: Seconds a command may run when the model names no timeout.
DEFAULT_TIMEOUT = 120.0
#: Results longer than this go to a file (the executor saves them; the model gets a preview).
RESULT_CHARS = 30_000


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
            "Run a shell command with bash in the working directory and return its output. Stdout and stderr "
            "come together, then the exit code when it is not 0. Each call starts a new shell: cd and variables do "
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
