"""Backends: the contract (`agenter.backends.base`) and the registry of built-in backends.

Backends are imported only when chosen, so `import agenter` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from agenter._errors import ConfigurationError
from agenter._types import ModifiedFiles
from agenter.backends.base import (
    BackendCapabilities,
    BackendClass,
    BackendMessage,
    BackendOptions,
    BackendSettings,
    BaseBackend,
    CodingBackend,
    Denial,
    MessageType,
    Refusal,
    SessionSpec,
    ToolReply,
    TurnReport,
)

_REGISTRY: dict[str, str | type[Any]] = {
    "anthropic-sdk": "agenter.backends.model_api.anthropic_sdk:AnthropicSDKBackend",
    "claude-code": "agenter.backends.agents.claude_code:ClaudeCodeBackend",
    "codex": "agenter.backends.agents.codex:CodexBackend",
    "openhands": "agenter.backends.agents.openhands:OpenHandsBackend",
    "acp": "agenter.backends.agents.acp:ACPBackend",
    "openai": "agenter.backends.model_api.openai_compat:OpenAICompatBackend",
    "litellm": "agenter.backends.model_api.litellm:LiteLLMBackend",
    "gemini": "agenter.backends.model_api.gemini:GeminiBackend",
    "claude-cli": "agenter.backends.cli.claude:ClaudeCliBackend",
    "codex-cli": "agenter.backends.cli.codex:CodexCliBackend",
    "gemini-cli": "agenter.backends.cli.gemini:GeminiCliBackend",
    "opencode-cli": "agenter.backends.cli.opencode:OpenCodeCliBackend",
    "aider-cli": "agenter.backends.cli.aider:AiderCliBackend",
}


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def register_backend(name: str, backend: str | type[Any]) -> None:
    """Add a backend: a class or a 'module:Class' path imported on first use."""
    _REGISTRY[name] = backend


def unregister_backend(name: str) -> None:
    """Remove a registered backend (tests that register their own)."""
    _REGISTRY.pop(name, None)


def load_backend(name: str) -> type[BaseBackend[Any]]:
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
    cls: type[BaseBackend[Any]] = getattr(module, class_name)
    return cls


__all__ = [
    "BackendCapabilities", "BackendClass", "BackendMessage", "BackendOptions", "BackendSettings", "BaseBackend",
    "CodingBackend", "Denial", "MessageType", "ModifiedFiles", "Refusal", "SessionSpec", "ToolReply", "TurnReport",
    "backend_names", "load_backend", "register_backend", "unregister_backend",
]
