"""Host services: the only code that touches processes, /proc, signals, PATH probes and secrets.

Every layer may use it; it imports nothing of agenter but the public types and errors.
"""

from agenter.host.process import MARK_ENV, AgentProcess, ProcessOutcome, marked_env, reap, run_process
from agenter.host.redact import Redactor, redact, strip_ansi
from agenter.host.requirements import (
    Credentials,
    Program,
    PythonPackage,
    PythonVersion,
    Requirement,
    check_requirements,
    find_program,
)

__all__ = [
    "MARK_ENV", "AgentProcess", "Credentials", "ProcessOutcome", "Program", "PythonPackage", "PythonVersion",
    "Redactor", "Requirement", "check_requirements", "find_program", "marked_env", "reap", "redact",
    "run_process", "strip_ansi",
]
