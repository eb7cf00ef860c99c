"""agenter: run any autonomous coding agent behind one facade and get a verified result.

Public names are re-exported lazily from private modules so `import agenter` stays fast;
backends and their third-party packages load only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agenter._version import __version__

_EXPORTS: dict[str, str] = {
    "AutonomousCodingAgent": "agenter.facade.agent",
    "CodingRequest": "agenter._types",
    "CodingResult": "agenter._types",
    "CodingStatus": "agenter._types",
    "Budget": "agenter._types",
    "Usage": "agenter._types",
    "CodingEvent": "agenter._events",
    "CodingEventType": "agenter._events",
    "AgenterError": "agenter._errors",
    "ConfigurationError": "agenter._errors",
    "BackendError": "agenter._errors",
    "BudgetExceededError": "agenter._errors",
    "PathSecurityError": "agenter._errors",
    "Tool": "agenter.tools",
    "tool": "agenter.tools",
    "Validator": "agenter.validators",
    "ValidationResult": "agenter.validators",
    "ValidatorChain": "agenter.validators",
    "SyntaxValidator": "agenter.validators",
    "SecurityValidator": "agenter.validators",
    "CommandValidator": "agenter.validators",
    "CodingSession": "agenter.session.loop",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'agenter' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from agenter._errors import (
        AgenterError,
        BackendError,
        BudgetExceededError,
        ConfigurationError,
        PathSecurityError,
    )
    from agenter._events import CodingEvent, CodingEventType
    from agenter._types import Budget, CodingRequest, CodingResult, CodingStatus, Usage
    from agenter.facade.agent import AutonomousCodingAgent
    from agenter.session.loop import CodingSession
    from agenter.tools import Tool, tool
    from agenter.validators import (
        CommandValidator,
        SecurityValidator,
        SyntaxValidator,
        ValidationResult,
        Validator,
        ValidatorChain,
    )
