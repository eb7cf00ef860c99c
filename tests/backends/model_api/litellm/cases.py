"""The litellm backend's case (tests/backends/kit.py): a completion backend, played by the shared
completion harness (tests/backends/model_api/completion.py). LiteLLM is imported by the backend
itself, after it has told LiteLLM to use its bundled price map."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ...kit import Case
from ..completion import CompletionHarness


def litellm(shared: Path) -> Case:
    if importlib.util.find_spec("litellm") is None:
        pytest.skip("litellm is not installed")
    from agenter.backends.model_api.litellm import LiteLLMBackend

    return Case(backend=LiteLLMBackend, wire="openai", model="openai/scripted-model",
                harness=lambda kit: CompletionHarness(kit, "openai/scripted-model"))


CASES = [pytest.param(litellm, id="litellm", marks=[
    # LiteLLM reads pydantic fields the deprecated way on every streamed chunk, and declares
    # TypedDicts pydantic warns about.
    pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.xdist_group("litellm")])]  # seconds to import: under `make check` one worker does
