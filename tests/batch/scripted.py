"""A scripted model for batch tests: it answers each task's own prompt, whatever order the tasks
run in, on whichever worker (the handler reads the task from the conversation it is sent)."""

from __future__ import annotations

import re
import time
from typing import Any

from agenter.testing import ModelRequest, reply, text, tool_call

PROMPT = "Set VALUE in {path} to {value}."
_ASK = re.compile(r"Set VALUE in (\S+) to (\d+)\.")


def _answers_a_tool_call(request: ModelRequest) -> bool:
    last = request.messages[-1] if request.messages else None
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def task_model(delay: float = 0.0):
    """A handler: the first turn writes the file the prompt names, the next one says it is done.
    `delay` holds every answer that long (a model's latency)."""

    def handler(request: ModelRequest) -> Any:
        if delay:
            time.sleep(delay)
        if _answers_a_tool_call(request):
            return reply(text("Done."))
        found = _ASK.search(str(request.messages[0]) if request.messages else "")
        if found is None:
            return reply(text("I do not know what to do."))
        path, value = found.groups()
        return reply(text(f"Writing {path}."), tool_call("write_file", {"path": path, "content": f"VALUE = {value}\n"}))

    return handler
