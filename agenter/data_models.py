"""agenter 0.1.7's `agenter.data_models`, kept so its imports still work (deprecated).

Importing it warns once; every name it had that still exists is the current class (import it
from `agenter` instead), and its submodules (`agenter.data_models.types`, `.events`,
`.budget`, `.exceptions`, `.tools`, `.usage`, `.messages`) are this module. A name that is gone
raises an ImportError naming its replacement.
"""

from __future__ import annotations

import sys
from typing import Any

from agenter._compat import REMOVED, deprecated, removed
from agenter._errors import (
    AgenterError,
    BackendError,
    BudgetExceededError,
    ConfigurationError,
    PathSecurityError,
)
from agenter._events import CodingEvent, CodingEventType
from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus, Usage
from agenter.validators import ValidationResult

__all__ = [
    "AgenterError", "BackendError", "Budget", "BudgetExceededError", "CodingEvent", "CodingEventType",
    "CodingRequest", "CodingResult", "CodingStatus", "ConfigurationError", "PathSecurityError", "Usage",
    "ValidationResult",
]

#: 0.1.7's backend message classes: today a BACKEND_MESSAGE event carries a dict.
_MESSAGES = ("ToolCallMessage", "ToolResultMessage", "TextMessage", "ThinkingMessage", "BackendMessage",
             "UsageMessage", "StructuredOutputMessage", "RefusalMessage", "EventData")

deprecated("agenter.data_models", "from agenter import Budget, CodingRequest, CodingResult, ...")

for _submodule in ("types", "events", "budget", "exceptions", "tools", "usage", "messages"):
    sys.modules.setdefault(f"{__name__}.{_submodule}", sys.modules[__name__])


def __getattr__(name: str) -> Any:
    if name in REMOVED:
        raise ImportError(removed(name, "agenter.data_models"), name=name)
    if name in _MESSAGES:
        raise ImportError(
            f"agenter.data_models.{name} is gone: a BACKEND_MESSAGE event's data is a dict, "
            'event.data["kind"] (tool_call_started, text, ...) with its fields, e.g. '
            'event.data["tool_name"] (docs/observability.md)', name=name)
    raise AttributeError(f"module 'agenter.data_models' has no attribute {name!r}")
