"""Wire formats the scripted model server speaks. Each wire is one module (see ``_base.Wire``)."""

from __future__ import annotations

from ._base import Turn, Wire
from .anthropic import AnthropicWire
from .openai_chat import OpenAIChatWire
from .openai_responses import OpenAIResponsesWire

DEFAULT_WIRES: tuple[type[Wire], ...] = (AnthropicWire, OpenAIResponsesWire, OpenAIChatWire)

__all__ = ["DEFAULT_WIRES", "AnthropicWire", "OpenAIChatWire", "OpenAIResponsesWire", "Turn", "Wire"]
