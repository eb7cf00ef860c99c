"""Flag handling the command lines share (`agenter run`, `agenter plan`, `agenter batch`).

Each command checks its flags before anything starts and reports problems in the flags' own
words; the budget flags and `--option KEY=VALUE` mean the same on all of them. Input files they
name (a tasks file, a plan) are read by `read_text_input`, which says in one line why a file is
not text.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

#: How compressed files and archives begin: a file that starts so is named for what it is.
_PACKED = ((b"\x1f\x8b", "gzip-compressed"), (b"BZh", "bzip2-compressed"), (b"\xfd7zXZ\x00", "xz-compressed"),
           (b"\x28\xb5\x2f\xfd", "zstd-compressed"), (b"PK\x03\x04", "a zip archive"))

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


def read_text_input(path: str | os.PathLike[str], what: str, *, parameter: str) -> str:
    """The text of an input file the user named, or a ConfigurationError (for `parameter`) saying
    in one line why there is none: unreadable, compressed, not UTF-8, binary. `what` names the
    file in the message ("the tasks file"). A UTF-8 byte-order mark is dropped."""
    from agenter._errors import ConfigurationError

    name = f"{what} {os.fspath(path)!r}"
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name}: {exc.strerror or exc}", parameter=parameter) from None
    for start, kind in _PACKED:
        if data.startswith(start):
            raise ConfigurationError(f"cannot read {name}: it is {kind}, not text; decompress it first",
                                     parameter=parameter)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"cannot read {name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                 f"{exc.start}); is it a binary file?", parameter=parameter) from None
    if "\0" in text:
        raise ConfigurationError(f"cannot read {name}: it holds NUL bytes, so it is not text; is it a binary file?",
                                 parameter=parameter)
    return text
