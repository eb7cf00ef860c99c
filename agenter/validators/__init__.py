"""Validators: checks that turn an agent's changes into a verified result.

Bandit is not imported here; SecurityValidator runs it as a subprocess when used.
"""

from agenter.validators._base import (
    ValidationResult,
    Validator,
    ValidatorChain,
    all_skipped,
    passed,
)
from agenter.validators._registry import VALID_NAMES, resolve_validators
from agenter.validators.command import CommandValidator
from agenter.validators.security import SecurityValidator
from agenter.validators.syntax import SyntaxValidator

__all__ = [
    "VALID_NAMES",
    "CommandValidator",
    "SecurityValidator",
    "SyntaxValidator",
    "ValidationResult",
    "Validator",
    "ValidatorChain",
    "all_skipped",
    "passed",
    "resolve_validators",
]
