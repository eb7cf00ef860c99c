"""configure_logging(): agenter's logs on stderr, with every record redacted.

Third-party clients log request bodies and headers at DEBUG (httpx, anthropic, openai). The
handler installed here carries a filter that redacts API keys from every record it emits, also
those of other libraries when it is installed on the root logger (the default).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from agenter.host.redact import Redactor

__all__ = ["RedactingFilter", "configure_logging"]


class RedactingFilter(logging.Filter):
    """Formats each record's message once and replaces secrets in it (and in its traceback)."""

    def __init__(self, redactor: Redactor | None = None):
        super().__init__()
        self.redactor = redactor or Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logged as it is
            message = str(record.msg)
        record.msg, record.args = self.redactor(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        return True


def configure_logging(level: int | str = "INFO", *, stream: Any = None, all_loggers: bool = True,
                      fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> logging.Handler:
    """Send logs to stderr (or `stream`) at `level`, redacted.

    all_loggers=True installs the handler on the root logger, so third-party DEBUG output is
    redacted too; False installs it on the "agenter" logger only. Returns the handler (remove it
    with `logging.getLogger().removeHandler(handler)`). Calling it again replaces the handler.
    """
    target = logging.getLogger() if all_loggers else logging.getLogger("agenter")
    for existing in list(target.handlers):
        if getattr(existing, "_agenter", False):
            target.removeHandler(existing)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._agenter = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(RedactingFilter())
    target.addHandler(handler)
    target.setLevel(level)
    return handler
