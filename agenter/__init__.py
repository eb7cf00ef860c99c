"""agenter: run any autonomous coding agent behind one facade and get a verified result.

Public names are re-exported lazily from private modules so `import agenter` stays fast;
backends and their third-party packages load only when used.
"""

from __future__ import annotations

from agenter._version import __version__

#: typing.TYPE_CHECKING without importing typing, which (with re, enum and collections) was
#: most of a bare `import agenter`: 14-21 ms, against about 4 ms without. Type checkers read the
#: name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_EXPORTS: dict[str, str] = {
    "AutonomousCodingAgent": "agenter.facade.agent",
    "AgentSession": "agenter.facade.session",
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
    "RequirementError": "agenter._errors",
    "configure_logging": "agenter._logging",
    "Tool": "agenter.tools",
    "tool": "agenter.tools",
    "Validator": "agenter.validators",
    "ValidationResult": "agenter.validators",
    "ValidatorChain": "agenter.validators",
    "SyntaxValidator": "agenter.validators",
    "SecurityValidator": "agenter.validators",
    "CommandValidator": "agenter.validators",
    "CodingRun": "agenter.session.loop",
    "CodingSession": "agenter.session.loop",  # CodingRun's earlier name, kept working
    "FunctionTool": "agenter.tools",  # agenter 0.1.7's; deprecated (it warns when made), not in __all__
}

__all__ = [
    "AgentSession", "AgenterError", "AutonomousCodingAgent", "BackendError", "Budget", "BudgetExceededError",
    "CodingEvent", "CodingEventType", "CodingRequest", "CodingResult", "CodingRun", "CodingSession", "CodingStatus",
    "CommandValidator", "ConfigurationError", "PathSecurityError", "RequirementError",
    "SecurityValidator", "SyntaxValidator", "Tool", "Usage", "ValidationResult", "Validator",
    "ValidatorChain", "__version__", "configure_logging", "tool",
]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        if name in ("data_models", "logging"):  # agenter 0.1.7's modules, kept (deprecated)
            import importlib

            return importlib.import_module(f"agenter.{name}")
        from agenter._compat import REMOVED, removed

        if name in REMOVED:
            raise ImportError(removed(name), name=name)
        raise AttributeError(f"module 'agenter' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from agenter._errors import AgenterError as AgenterError
    from agenter._errors import BackendError as BackendError
    from agenter._errors import BudgetExceededError as BudgetExceededError
    from agenter._errors import ConfigurationError as ConfigurationError
    from agenter._errors import PathSecurityError as PathSecurityError
    from agenter._errors import RequirementError as RequirementError
    from agenter._events import CodingEvent as CodingEvent
    from agenter._events import CodingEventType as CodingEventType
    from agenter._logging import configure_logging as configure_logging
    from agenter._types import Budget as Budget
    from agenter._types import CodingRequest as CodingRequest
    from agenter._types import CodingResult as CodingResult
    from agenter._types import CodingStatus as CodingStatus
    from agenter._types import Usage as Usage
    from agenter.facade.agent import AutonomousCodingAgent as AutonomousCodingAgent
    from agenter.facade.session import AgentSession as AgentSession
    from agenter.session.loop import CodingRun as CodingRun
    from agenter.session.loop import CodingSession as CodingSession
    from agenter.tools import FunctionTool as FunctionTool
    from agenter.tools import Tool as Tool
    from agenter.tools import tool as tool
    from agenter.validators import CommandValidator as CommandValidator
    from agenter.validators import SecurityValidator as SecurityValidator
    from agenter.validators import SyntaxValidator as SyntaxValidator
    from agenter.validators import ValidationResult as ValidationResult
    from agenter.validators import Validator as Validator
    from agenter.validators import ValidatorChain as ValidatorChain
