"""Redaction: API keys out of every text that may reach a log, an event, an error or a transcript."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["Redactor", "redact", "strip_ansi"]

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|AUTH|CREDENTIAL)", re.IGNORECASE)
#: Key shapes. Each starts at a word boundary (no letter, digit, "_" or "-" before it), so an
#: ordinary word that contains one ("task-scheduler", "mask-rcnn", "fix-api-key: notes")
#: is left alone; the key itself must hold a digit where its shape has no fixed prefix of its
#: own to tell it from prose ("Bearer authentication", "sk-learn-examples").
_START = r"(?<![A-Za-z0-9_\-])"
_WITH_DIGIT = r"(?=[A-Za-z0-9_\-.]*\d)"
_SECRET_PATTERNS = [
    re.compile(_START + r"sk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic, DeepSeek, ...
    re.compile(r"(?i)((?<![A-Za-z0-9_\-])bearer\s+)" + _WITH_DIGIT + r"[A-Za-z0-9_\-\.]{8,}"),
    re.compile(r"(?i)(" + _START + r"x-api-key[\"']?\s*[:=]\s*[\"']?)(?=[^\s\"',]*\d)[^\s\"',]{6,}"),
    re.compile(r"(?i)(" + _START + r"x-goog-api-key[\"']?\s*[:=]\s*[\"']?)(?=[^\s\"',]*\d)[^\s\"',]{6,}"),
    re.compile(_START + r"AIza[0-9A-Za-z_\-]{20,}"),  # Google API keys
    re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),  # GitHub tokens
]
#: What every key shape above contains (same flags): a text without any of these needs no pattern.
_SHAPE_HINT = re.compile(r"sk-|AIza|gh[pousr]_|github_pat_|(?i:bearer|api-key)")
#: Characters JSON text escapes (ensure_ascii off): a secret with one is not found verbatim in it.
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def _may_hold_a_key_shape(text: str) -> bool:
    """Whether `text` contains what every key shape contains, by substring tests on its lower
    case (a case-insensitive regex scan is many times slower). The regex's case folding differs
    from lower() only for the dotted and dotless i, so text with those asks the regex."""
    if "sk-" in text or "AIza" in text or ("_" in text and ("gh" in text or "github" in text)):
        return True
    if len(text) < 6:  # shorter than "bearer" and "api-key"
        return False
    if not text.isascii() and ("\u0130" in text or "\u0131" in text):
        return _SHAPE_HINT.search(text) is not None
    lower = text.lower()
    return "bearer" in lower or "api-key" in lower


def _keep_prefix(match: re.Match[str]) -> str:
    return (match.group(1) if match.re.groups else "") + "[REDACTED]"


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is secret (asked once per name:
    every session builds a Redactor from the whole environment)."""
    return _SECRET_ENV.search(name) is not None


def strip_ansi(text: str) -> str:
    """Text without terminal escape sequences (colours, cursor moves, titles)."""
    return _ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


class Redactor:
    """Removes API keys from text.

    Secrets are the values of environment variables whose names look secret (…KEY, …TOKEN, …),
    collected once, plus explicit `extra` values, plus anything shaped like a key (sk-…,
    Bearer …, x-api-key: …, AIza…, GitHub's ghp_…), standing as a word of its own: a word
    that merely contains such a prefix ("task-scheduler.py") is text, not a key.
    """

    def __init__(self, env: Mapping[str, str] | None = None, extra: Iterable[str | None] | None = None):
        sources = dict(os.environ)
        if env:
            sources.update(env)
        secrets = {v for k, v in sources.items() if v and len(v) >= 8 and _secret_name(k)}
        secrets.update(s for s in (extra or []) if s and len(s) >= 4)
        self._secrets = sorted(secrets, key=len, reverse=True)
        self._safe_for: list[str] | None = None
        self._safe = False

    def add(self, *secrets: str | None) -> None:
        """Also hide these values (keys learnt after construction)."""
        fresh = {s for s in secrets if s and len(s) >= 4} - set(self._secrets)
        if fresh:
            self._secrets = sorted([*self._secrets, *fresh], key=len, reverse=True)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if type(text) is not str:
            text = str.__str__(text)  # a str subclass (an enum's value) comes back a plain str
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[REDACTED]")
        # Every event's every string passes here: one scan for what a key shape must contain
        # spares the five pattern scans on the text that has none (nearly all of it).
        if _may_hold_a_key_shape(text):
            for pattern in _SECRET_PATTERNS:
                text = pattern.sub(_keep_prefix, text)
        return text

    def data(self, value: object) -> object:
        """A copy of JSON-like data (dicts, lists, strings) with every string redacted (dict
        keys are kept as they are; a tuple becomes a list)."""
        kind = type(value)
        if (kind is dict or kind is list) and self._json_safe():
            # Every event passes here whole. Its JSON text holds every string in it verbatim
            # (the secrets need no escaping, the key shapes never do), so one look at that text
            # clears the lot; then only the containers are copied.
            try:
                text = json.dumps(value, ensure_ascii=False, default=_not_json)
            except (TypeError, ValueError, RecursionError):  # not plain JSON data: item by item
                text = None
            if text is not None and self._clean_text(text):
                return _copy(value)
        return self._walk(value)

    def _walk(self, value: object) -> object:
        kind = type(value)
        if kind is str:
            return self(value) if value else value  # type: ignore[arg-type]
        if kind is dict:
            if len(value) >= _BATCH and self._clean([v for v in value.values() if v is not None]):  # type: ignore[arg-type,attr-defined]
                return dict(value)  # type: ignore[call-overload]
            walk = self._walk
            return {key: walk(item) for key, item in value.items()}  # type: ignore[attr-defined]
        if kind is list or kind is tuple:
            if len(value) >= _BATCH and self._clean(value):  # type: ignore[arg-type]
                return list(value)  # type: ignore[call-overload]
            walk = self._walk
            return [walk(item) for item in value]  # type: ignore[attr-defined]
        if kind is int or kind is float or kind is bool or value is None:
            return value
        # Subclasses (a str enum, an OrderedDict, a named tuple) as before.
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {key: self._walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(item) for item in value]
        return value

    def _json_safe(self) -> bool:
        """Whether every secret reads the same inside JSON text (no quote, backslash or control
        character, which JSON escapes)."""
        secrets = self._secrets
        if self._safe_for is not secrets:
            self._safe = not any(_JSON_ESCAPED.search(s) for s in secrets)
            self._safe_for = secrets
        return self._safe

    def _clean_text(self, text: str) -> bool:
        for secret in self._secrets:
            if secret in text:
                return False
        return not _may_hold_a_key_shape(text)

    def _clean(self, items: list[object] | tuple[object, ...]) -> bool:
        """Whether `items` are all strings with nothing to redact in any of them: one look at
        them joined (a list of changed files, a result's file contents) instead of one per item.
        Joining can only add matches that span two items, which sends them one by one."""
        try:
            text = "\n".join(items)  # type: ignore[arg-type]  # any item that is no str: TypeError
        except TypeError:  # not all strings
            return False
        return self._clean_text(text)


def _not_json(value: object) -> object:
    raise TypeError("not JSON")


def _copy(value: object) -> object:
    """What Redactor._walk returns for data with nothing to redact: containers copied (a tuple
    as a list, a subclass as its base), strings as plain str, everything else as it is."""
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) is str else _copy(item) for key, item in value.items()}  # type: ignore[attr-defined]
    if kind is list or kind is tuple:
        return [item if type(item) is str else _copy(item) for item in value]  # type: ignore[attr-defined]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item) for item in value]
    return value


#: A list or dict at least this long is looked at whole first (see Redactor._clean).
_BATCH = 4


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """One-off redaction; prefer a Redactor when redacting many strings."""
    return Redactor(env)(text)
