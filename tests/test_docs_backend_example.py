"""The 'Writing a backend' example in docs/architecture.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from agenter import AutonomousCodingAgent, CodingStatus

DOC = Path(__file__).parents[1] / "docs" / "architecture.md"


async def test_echo_backend_example(tmp_path):
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL).group(1)
    exec(compile(code, str(DOC), "exec"), {})  # registers "echo"
    agent = AutonomousCodingAgent(backend="echo", echo_greeting="hi")
    result = await agent.execute("say it", cwd=tmp_path)
    assert result.status is CodingStatus.COMPLETED
    assert result.files == {"echo.txt": "hi: say it\n"}
