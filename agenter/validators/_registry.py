"""resolve_validators: turn the facade's `validators=` argument into validator objects."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from agenter._compat import deprecated
from agenter._errors import ConfigurationError
from agenter.validators._base import Validator
from agenter.validators._legacy import Validator017, is_validator_017
from agenter.validators.command import CommandValidator
from agenter.validators.security import SecurityValidator
from agenter.validators.syntax import SyntaxValidator

VALID_NAMES = ["syntax", "security", "command:<shell command>"]


def _is_validator(item: Any) -> bool:
    return (not isinstance(item, type) and callable(getattr(item, "validate", None))
            and isinstance(getattr(item, "name", None), str) and hasattr(item, "blocking"))


def _from_name(name: str) -> Validator:
    key = name.strip()
    lowered = key.lower()
    if lowered == "syntax":
        return SyntaxValidator()
    if lowered == "security":
        return SecurityValidator()
    if lowered.startswith("command:"):
        command = key[len("command:"):].strip()
        if command:
            return CommandValidator(command)
        raise ConfigurationError("'command:' needs a command after the colon, e.g. 'command:pytest -q'",
                                 parameter="validators", valid=VALID_NAMES)
    raise ConfigurationError(f"unknown validator {name!r}", parameter="validators", valid=VALID_NAMES)


def resolve_validators(spec: None | str | Validator | Iterable[str | Validator]) -> list[Validator]:
    """None -> [SyntaxValidator()]; names and validator objects -> validator objects, in order.

    Names: "syntax", "security", "command:<shell command>" (e.g. "command:pytest -q").
    An empty list means no validators at all.
    """
    if spec is None:
        return [SyntaxValidator()]
    if isinstance(spec, str) or _is_validator(spec) or is_validator_017(spec) or isinstance(spec, type):
        spec = [spec]  # type: ignore[list-item]
    resolved: list[Validator] = []
    for item in spec:  # type: ignore[union-attr]
        if isinstance(item, str):
            resolved.append(_from_name(item))
        elif isinstance(item, type) and _is_validator_class(item):
            resolved.append(_validator(item()))
        else:
            resolved.append(_validator(item))
    return resolved


def _validator(item: Any) -> Validator:
    """A validator object checked, or one written for agenter 0.1.7 wrapped (with a warning)."""
    if is_validator_017(item):
        _check_async(item)
        deprecated(f"the validator {type(item).__name__} (validate given a dict of path -> contents, "
                   "no name/blocking)",
                   "name, blocking and async validate(self, files: list[str], cwd: Path): the changed "
                   "paths, read as needed")
        return Validator017(item)
    if _is_validator(item):
        return _check_async(item)
    raise ConfigurationError(
        f"{item!r} is not a validator (it needs name, blocking and async validate(files, cwd))",
        parameter="validators", valid=VALID_NAMES,
    )


def _check_async(validator: Validator) -> Validator:
    """A `validate` written as a plain `def` would fail every iteration when the session awaits it:
    say so now. Only plain Python functions are judged; other callables (a functools.partial,
    a mock, an object with an async __call__) may well return an awaitable."""
    validate = inspect.unwrap(validator.validate)
    function = getattr(validate, "__func__", validate)
    if inspect.isfunction(function) and not inspect.iscoroutinefunction(function):
        returns = str(getattr(function, "__annotations__", {}).get("return", ""))
        if "Awaitable" not in returns and "Coroutine" not in returns:
            raise ConfigurationError(
                f"validator {getattr(validator, 'name', type(validator).__name__)!r}: validate must be async (`async def validate(self, files, cwd)`), "
                f"but {type(validator).__name__}.validate is a plain def", parameter="validators")
    return validator


def _is_validator_class(cls: type) -> bool:
    return callable(getattr(cls, "validate", None))
