"""agenter 0.1.7's `agenter.logging` module, kept so its imports still work (deprecated).

Today's spelling is `from agenter import configure_logging`. 0.1.7's `quiet=True` (silence
agenter's logs) still works here: it means level "CRITICAL".

This module's name shadows nothing inside agenter: its own modules import the standard
library's `logging` by its absolute name.
"""

from __future__ import annotations

import logging as _std_logging
from typing import Any

from agenter._compat import deprecated
from agenter._logging import configure_logging as _configure_logging

__all__ = ["configure_logging"]


def configure_logging(level: int | str = "INFO", quiet: bool = False, **options: Any) -> _std_logging.Handler:
    """`agenter.configure_logging` under its 0.1.7 import path; `quiet=True` means level CRITICAL."""
    deprecated("agenter.logging.configure_logging", "from agenter import configure_logging")
    if quiet:
        deprecated("configure_logging(quiet=True)", 'configure_logging(level="CRITICAL")')
        level = "CRITICAL"
    return _configure_logging(level, **options)
