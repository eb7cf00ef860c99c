"""The openai backend's case (tests/backends/kit.py): a completion backend, played by the shared
completion harness (tests/backends/model_api/completion.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenter.backends.model_api.openai_compat import OpenAICompatBackend

from ...kit import Case
from ..completion import CompletionHarness


def openai(shared: Path) -> Case:
    return Case(backend=OpenAICompatBackend, wire="openai", model="scripted-model",
                harness=lambda kit: CompletionHarness(kit, "scripted-model"))


CASES = [pytest.param(openai, id="openai")]
