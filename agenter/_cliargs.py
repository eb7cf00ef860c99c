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
import re
from collections.abc import Iterable
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


def not_text_problem(label: str, value: str | None) -> str | None:
    """A problem when `value` came from bytes that are not UTF-8 text. Python keeps such bytes of a
    command line as lone surrogates (PEP 383); no model API takes them."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{label} is not valid UTF-8 text"
    if "\x00" in value:
        return f"{label} contains NUL bytes: it is not text"
    return None


def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of a file the user named (`-`: standard input), or a ValueError saying in one line
    why there is none: missing or unreadable, compressed, not UTF-8, binary. `what` names the file
    in the message ("the tasks file"). A UTF-8 byte-order mark is dropped."""
    import sys

    name = f"{what} {os.fspath(path)!r}"
    try:
        data = sys.stdin.buffer.read() if os.fspath(path) == "-" else Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from None
    for start, kind in _PACKED:
        if data.startswith(start):
            raise ValueError(f"cannot read {name}: it is {kind}, not text; decompress it first")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); is it a binary file?") from None
    if "\0" in text:
        raise ValueError(f"cannot read {name}: it holds NUL bytes, so it is not text; is it a binary file?")
    return text


def read_text_input(path: str | os.PathLike[str], what: str, *, parameter: str) -> str:
    """read_text_file's text, or a ConfigurationError for `parameter` with its one line."""
    from agenter._errors import ConfigurationError

    try:
        return read_text_file(path, what)
    except ValueError as exc:
        raise ConfigurationError(str(exc), parameter=parameter) from None


#: Keyword spellings in agenter's messages → how they are given on the command line. Backend
#: options become `--option KEY=VALUE` (see cli_hints).
_FLAG_SPELLINGS = (
    (re.compile(r"\bsandbox=False\b(?:\s*\(CLI: --no-sandbox\))?"), "--no-sandbox"),
    (re.compile(r"\bpass sandbox=True\b"), "leave out --no-sandbox"),
    (re.compile(r"\bsandbox=True\b"), "no --no-sandbox"),
    (re.compile(r"\bmodel=(?:\.\.\.|…)"), "--model NAME"),
)
_KEYWORD = re.compile(r"(?<![\w.-])([a-z][a-z0-9_]*)=(\[[^\]]*\]|\{[^}]*\}|'[^']*'|\"[^\"]*\"|[^\s,;)]*)")
_LITERALS = {"False": "false", "True": "true", "None": "null"}


def cli_hints(message: str, options: Iterable[str]) -> str:
    """A message with Python keyword hints spelled as flags: `sandbox=False` → `--no-sandbox`,
    `anthropic_shell=False` → `--option anthropic_shell=false`, `api_key=...` → `--option api_key=...`.
    Only names in `options` (the backend's options) become --option; other text is kept."""
    names = set(options)
    for pattern, spelling in _FLAG_SPELLINGS:
        message = pattern.sub(spelling, message)

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if name not in names:
            return match.group(0)
        return f"--option {name}={_cli_value(value)}"

    return _KEYWORD.sub(flag, message)


def _cli_value(value: str) -> str:
    """A Python literal as --option parses it (JSON), quoted for a shell where it needs it."""
    if value in _LITERALS:
        return _LITERALS[value]
    if value in ("", "...", "…"):
        return "…"
    if value[:1] in "[{'\"":
        import ast

        try:
            text = json.dumps(ast.literal_eval(value))
        except (ValueError, SyntaxError, TypeError):
            return value
        return text if value[:1] in "'\"" and " " not in text else f"'{text}'"
    return value
