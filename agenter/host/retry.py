"""How long to wait before retrying a model request: the one policy every backend uses."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime

__all__ = ["MAX_BACKOFF", "retry_delay"]

#: The longest exponential backoff step, in seconds (the server's retry-after may ask for more).
MAX_BACKOFF = 8.0


def retry_delay(attempt: int, headers: Mapping[str, str] | None, cap: float,
                rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait: the server's retry-after-ms / retry-after when sent (0 means at once),
    else exponential backoff with jitter; never more than `cap`."""
    if headers is not None:
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = headers.get(name)
            if value is None:
                continue
            try:
                return min(cap, max(0.0, float(value) * scale))
            except ValueError:
                if name == "retry-after":  # an HTTP date
                    try:
                        return min(cap, max(0.0, parsedate_to_datetime(value).timestamp() - time.time()))
                    except (TypeError, ValueError):
                        pass
    return min(cap, min(MAX_BACKOFF, 0.5 * 2 ** attempt) * (1 - 0.25 * rand()))
