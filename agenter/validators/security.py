"""SecurityValidator: bandit on the changed Python files, in a subprocess."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agenter._compat import deprecated
from agenter._errors import ConfigurationError
from agenter.host.process import run_process
from agenter.validators._base import ValidationResult

LEVELS = ("low", "medium", "high")
_RANK = {"undefined": 0, "low": 1, "medium": 2, "high": 3}
INSTALL_HINT = "pip install 'agenter-sdk[security]'"


def _level(value: str, parameter: str) -> str:
    level = str(value).lower()
    if level not in LEVELS:
        raise ConfigurationError(f"unknown {parameter} {value!r}", parameter=parameter, valid=list(LEVELS))
    return level


def _renamed(old: str, value: Any, new: str, current: Any, default: Any) -> Any:
    """agenter 0.1.7's keyword `old` for today's `new` (a DeprecationWarning; both: an error)."""
    if current != default:
        raise ConfigurationError(f"{old}= is agenter 0.1.7's name of {new}=; pass only {new}=", parameter=old)
    deprecated(f"SecurityValidator({old}=...)", f"SecurityValidator({new}=...)")
    return value


def _clean(filename: str) -> str:
    return filename[2:] if filename.startswith("./") else filename


class SecurityValidator:
    """Runs bandit (``python -m bandit -f json -q FILES``) on changed *.py files.

    Advisory by default (blocking=False): findings are reported, the iteration is not failed.
    severity / confidence are thresholds ("low" | "medium" | "high"): issues below either are
    ignored. If bandit is missing, crashes or prints something that is not its JSON report,
    the result is a failure that says so: never a silent pass.

    python: the interpreter that runs bandit (default: the current one).

    agenter 0.1.7's `min_severity`, `min_confidence`, `is_blocking` and `skip_ids` still work
    (deprecated): they mean `severity`, `confidence`, `blocking` and `extra_args=["--skip",
    "B101,..."]`. Without `skip_ids` nothing is skipped (0.1.7 skipped B101 and B311), and the
    thresholds default to "low" (0.1.7: "MEDIUM"): more findings are reported, none hidden.
    """

    def __init__(self, *, severity: str = "low", confidence: str = "low", blocking: bool = False,
                 python: str | None = None, timeout: float = 120.0, name: str = "security",
                 extra_args: list[str] | None = None, min_severity: str | None = None,
                 min_confidence: str | None = None, is_blocking: bool | None = None,
                 skip_ids: Iterable[str] | None = None):
        if min_severity is not None:
            severity = _renamed("min_severity", min_severity, "severity", severity, "low")
        if min_confidence is not None:
            confidence = _renamed("min_confidence", min_confidence, "confidence", confidence, "low")
        if is_blocking is not None:
            blocking = bool(_renamed("is_blocking", is_blocking, "blocking", blocking, False))
        extra_args = list(extra_args or [])
        if skip_ids is not None:
            deprecated("SecurityValidator(skip_ids=...)", 'SecurityValidator(extra_args=["--skip", "B101,B311"])')
            ids = [str(i) for i in skip_ids]
            if ids:
                extra_args += ["--skip", ",".join(ids)]
        self.name = name
        self.blocking = blocking
        self.severity = _level(severity, "severity")
        self.confidence = _level(confidence, "confidence")
        self.python = python or sys.executable
        self.timeout = timeout
        self.extra_args = extra_args

    def __repr__(self) -> str:
        return (f"SecurityValidator(severity={self.severity!r}, confidence={self.confidence!r}, "
                f"blocking={self.blocking})")

    def _result(self, passed: bool, errors: list[str], details: str | None = None,
                skipped: bool = False) -> ValidationResult:
        return ValidationResult(validator=self.name, passed=passed, errors=errors,
                                blocking=self.blocking, details=details, skipped=skipped)

    async def validate(self, files: list[str], cwd: Path) -> ValidationResult:
        targets = [f for f in files if f.endswith(".py")]
        if not targets:
            return self._result(True, [], "no Python files changed", skipped=True)
        arguments = [f"./{f}" if f.startswith("-") else f for f in targets]
        command = [self.python, "-m", "bandit", "-f", "json", "-q", *self.extra_args, *arguments]
        try:
            outcome = await run_process(command, cwd=cwd, timeout=self.timeout)
        except OSError as exc:
            return self._result(False, [
                f"bandit is not installed: could not start {self.python!r} ({exc.strerror or exc}); "
                f"{INSTALL_HINT}"
            ])
        if outcome.timed_out:
            return self._result(False, [f"bandit timed out after {self.timeout:g}s and was stopped"])
        stderr = outcome.stderr.strip()
        if "No module named bandit" in stderr:
            return self._result(False, [f"bandit is not installed: {INSTALL_HINT}"], stderr[-2000:])
        try:
            report = json.loads(outcome.stdout)
            if not isinstance(report, dict) or not isinstance(report.get("results"), list):
                raise ValueError("no 'results' list")
        except ValueError:
            tail = (stderr or outcome.stdout.strip())[-2000:]
            return self._result(False, [
                f"bandit failed (exit code {outcome.returncode}) without a JSON report: "
                + (tail.splitlines()[-1] if tail else "no output")
            ], tail or None)

        errors: list[str] = []
        ignored = 0
        for issue in report["results"]:
            severity = str(issue.get("issue_severity", "undefined")).lower()
            confidence = str(issue.get("issue_confidence", "undefined")).lower()
            if _RANK.get(severity, 0) < _RANK[self.severity] or _RANK.get(confidence, 0) < _RANK[self.confidence]:
                ignored += 1
                continue
            errors.append(
                f"{_clean(str(issue.get('filename', '?')))}:{issue.get('line_number', '?')}: "
                f"[{issue.get('test_id', '?')}] {issue.get('issue_text', '').strip()} "
                f"({severity.upper()} severity, {confidence.upper()} confidence)"
            )
        for problem in report.get("errors") or []:
            errors.append(f"{_clean(str(problem.get('filename', '?')))}: bandit could not scan the file: "
                          f"{problem.get('reason', 'unknown reason')}")
        details = (f"bandit scanned {len(targets)} file(s): {len(errors)} finding(s) at or above "
                   f"{self.severity} severity / {self.confidence} confidence, {ignored} below the threshold")
        return self._result(not errors, errors, details)
