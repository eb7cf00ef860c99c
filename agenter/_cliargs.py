"""Flag handling the command lines share (`agenter run`, `agenter plan`, `agenter batch`).

Each command checks its flags before anything starts and reports problems in the flags' own
words; the budget flags and `--option KEY=VALUE` mean the same on all of them.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

#: Budget flags (argparse dest) → Budget field.
BUDGET_FLAGS = {"max_cost": "max_cost_usd", "max_tokens": "max_tokens", "max_time": "max_time_seconds",
                "max_iterations": "max_iterations"}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def positive_problems(args: argparse.Namespace, *, above_zero: tuple[str, ...] = (),
                      at_least_one: tuple[str, ...] = ()) -> list[str]:
    """Budget flags, plus the named extra ones: numbers that must be > 0 (finite) or integers >= 1."""
    problems = []
    # `not value > 0` also catches NaN, which float() accepts.
    for dest in ("max_cost", "max_time", *above_zero):
        value = getattr(args, dest)
        if value is not None and not (value > 0 and math.isfinite(value)):
            problems.append(f"{_flag(dest)} must be > 0")
    for dest in ("max_tokens", "max_iterations", *at_least_one):
        value = getattr(args, dest)
        if value is not None and value < 1:
            problems.append(f"{_flag(dest)} must be >= 1")
    return problems


def pair_problems(flag: str, pairs: list[str]) -> list[str]:
    """`KEY=VALUE` flags with no `=` or no key."""
    problems = []
    for pair in pairs:
        key, sep, _ = pair.partition("=")
        if not sep or not key.strip():
            problems.append(f"{flag} needs KEY=VALUE, got {pair!r}")
    return problems


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`--option KEY=VALUE` pairs as keyword arguments: a value is JSON when it parses, else text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def budget_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The budget flags that were given, as Budget keyword arguments."""
    return {field: getattr(args, dest) for dest, field in BUDGET_FLAGS.items() if getattr(args, dest) is not None}
