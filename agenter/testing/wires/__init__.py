"""Wire formats the scripted model server speaks. Each wire is one module (see ``_base.Wire``)."""

from __future__ import annotations

from ._base import Turn, Wire
from .anthropic import AnthropicWire
from .gemini import GeminiWire
from .openai_chat import OpenAIChatWire
from .openai_responses import OpenAIResponsesWire

# Gemini before OpenAI Responses: both answer GET .../models, Gemini only for its own versions.
DEFAULT_WIRES: tuple[type[Wire], ...] = (AnthropicWire, GeminiWire, OpenAIResponsesWire, OpenAIChatWire)

__all__ = ["DEFAULT_WIRES", "AnthropicWire", "GeminiWire", "OpenAIChatWire", "OpenAIResponsesWire", "Turn", "Wire"]
