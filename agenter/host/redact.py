"""Redaction: API keys out of every text that may reach a log, an event, an error or a transcript."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["Redactor", "redact", "strip_ansi"]

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|AUTH|CREDENTIAL)", re.IGNORECASE)
_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-\.]{8,}"),
    re.compile(r"(?i)(x-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',]{6,}"),
    re.compile(r"(?i)(x-goog-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',]{6,}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{20,}"),  # Google API keys
]
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    """Text without terminal escape sequences (colours, cursor moves, titles)."""
    return _ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


class Redactor:
    """Removes API keys from text.

    Secrets are the values of environment variables whose names look secret (…KEY, …TOKEN, …),
    collected once, plus explicit `extra` values, plus anything shaped like a key (sk-…,
    Bearer …, x-api-key: …, AIza…).
    """

    def __init__(self, env: Mapping[str, str] | None = None, extra: Iterable[str | None] | None = None):
        sources = dict(os.environ)
        if env:
            sources.update(env)
        secrets = {v for k, v in sources.items() if v and len(v) >= 8 and _SECRET_ENV.search(k)}
        secrets.update(s for s in (extra or []) if s and len(s) >= 4)
        self._secrets = sorted(secrets, key=len, reverse=True)

    def add(self, *secrets: str | None) -> None:
        """Also hide these values (keys learnt after construction)."""
        fresh = {s for s in secrets if s and len(s) >= 4} - set(self._secrets)
        if fresh:
            self._secrets = sorted([*self._secrets, *fresh], key=len, reverse=True)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[REDACTED]")
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
        return text

    def data(self, value: object) -> object:
        """A copy of JSON-like data (dicts, lists, strings) with every string redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {key: self.data(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        return value


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """One-off redaction; prefer a Redactor when redacting many strings."""
    return Redactor(env)(text)
