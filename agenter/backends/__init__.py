"""Backend registry. Backends are imported only when chosen, so `import agenter` stays fast."""

from __future__ import annotations

import importlib

from agenter._errors import ConfigurationError
from agenter.backends._protocol import (
    BackendCapabilities,
    BackendMessage,
    BackendOptions,
    BackendSettings,
    BaseBackend,
    CodingBackend,
    MessageType,
    ModifiedFiles,
    Refusal,
    SessionSpec,
)

_REGISTRY: dict[str, str | type] = {
    "anthropic-sdk": "agenter.backends.anthropic_sdk:AnthropicSDKBackend",
    "claude-code": "agenter.backends.claude_code:ClaudeCodeBackend",
    "codex": "agenter.backends.codex:CodexBackend",
    "openhands": "agenter.backends.openhands:OpenHandsBackend",
    "acp": "agenter.backends.acp:ACPBackend",
}


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def register_backend(name: str, backend: str | type) -> None:
    """Add a backend: a class or a 'module:Class' path imported on first use."""
    _REGISTRY[name] = backend


def load_backend(name: str) -> type:
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ConfigurationError(
            f"Unknown backend {name!r}", parameter="backend", valid=backend_names()
        ) from None
    if isinstance(target, type):
        return target
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)


__all__ = [
    "BackendCapabilities", "BackendMessage", "BackendOptions", "BackendSettings", "BaseBackend",
    "CodingBackend", "MessageType", "ModifiedFiles", "Refusal", "SessionSpec",
    "backend_names", "load_backend", "register_backend",
]
