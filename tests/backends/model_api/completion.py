"""What the completion backends' tests share (openai, litellm): a patch proposal reply, and the
conformance harness for a backend that changes no file itself.

The suite connects in autonomous mode, which a completion backend refuses: the harness's
backends run the scenarios in patch mode, and 'output' in analysis mode. Patch mode's writes are
the session's (tests/session/test_patch_mode.py proves them end to end), so "write" and "shell"
are not played here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agenter import AutonomousCodingAgent
from agenter.backends.base import BackendSettings, SessionSpec
from agenter.testing import conformance, hang, http_error, reply, text

from ..kit import Kit


def completion_agent(backend: str, server: Any, mode: str, model: str, **options: Any) -> AutonomousCodingAgent:
    """An agent of a completion backend on the server's OpenAI base URL, retrying without waits."""
    settings: dict[str, Any] = {"base_url": server.openai_base_url, "api_key": "test-key", "max_retry_wait": 0.0}
    settings.update(options)
    return AutonomousCodingAgent(backend=backend, model=model, mode=mode, **settings)


class Answer(BaseModel):
    """A structured answer the completion backends' tests ask for."""

    answer: int


def proposal(path: str = "a.py", content: str = "x = 1\n") -> Any:
    """A model reply proposing to create `path` with `content` (patch mode's answer)."""
    change = {"path": path, "operation": "create", "new_path": None, "diff": None, "search_replace": None,
              "content": content}
    return reply(text(json.dumps({"summary": f"Create {path}.", "files": [change]})))


def in_mode(backend_class: Any, mode: str) -> Any:
    """`backend_class` connecting in `mode` whatever the session asks."""

    class ModeBackend(backend_class):  # type: ignore[misc,valid-type]
        async def _connect(self, spec: SessionSpec) -> None:
            spec.mode = mode
            await super()._connect(spec)

    ModeBackend.__name__ = f"{mode.title()}Mode{backend_class.__name__}"
    return ModeBackend


class CompletionHarness:
    """Builds completion backends whose model plays a conformance scenario on a server of the kit."""

    def __init__(self, kit: Kit, model: str):
        self.kit = kit
        self.model = model
        self.capabilities = kit.case.backend.capabilities

    def supports(self, scenario: str) -> bool:
        return scenario in {"hang", "refuse", "output", "fail", "usage"}

    def make(self, scenario: str, cwd: Path) -> Any:
        options: dict[str, Any] = {"max_retry_wait": 0.0}
        script: list[Any] = []
        default: Any = None
        if scenario == "hang":
            default = hang()
        elif scenario == "refuse":
            default = reply(text(f"REFUSED: {conformance.REFUSAL_REASON}"))
        elif scenario == "output":
            default = reply(text(json.dumps(conformance.OUTPUT_VALUE)))
        elif scenario == "fail":
            default = http_error(500, "model down")
            options["max_retries"] = 1
        else:  # usage: a read step, then the proposal
            (cwd / "notes.txt").write_text("notes\n")
            options["context_tokens"] = 0
            script = [reply(text('{"read_files": []}'), usage={"input_tokens": 50, "output_tokens": 5}), proposal()]
        server = self.kit.server(script, default=default)
        backend = in_mode(self.kit.case.backend, "analysis" if scenario == "output" else "patch")
        opts = backend.options_model(base_url=server.openai_base_url, api_key="test-key", **options)
        return backend(BackendSettings(model=self.model, tools=[], sandbox=True, options=opts))
