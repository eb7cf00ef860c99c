"""Print README's runtime matrix from what the backends declare (capabilities, permission kinds).

`python scripts/runtime_matrix.py` prints the table; `--write` replaces it in README.md.
tests/test_runtime_matrix.py fails when README's copy differs, so the table never drifts.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN = "<!-- runtime matrix: generated from the backends' declared capabilities (scripts/runtime_matrix.py) -->"
END = "<!-- end of runtime matrix -->"
HEADINGS = {"text_completion": "text", "streaming": "stream", "structured_output": "struct",
            "native_tool_loop": "tool loop", "custom_tools": "custom tools", "mcp": "mcp",
            "filesystem_read": "fs read", "filesystem_edit": "fs edit", "shell": "shell",
            "apply_patch": "apply_patch", "subagents": "subagents", "sandbox": "sandbox", "resume": "resume"}
#: For a backend whose enforced kinds depend on its settings (it overrides permission_kinds_for).
PER_SETTINGS = "depends on its settings: the agent program and its mode (docs/permissions.md)"


def matrix() -> str:
    from agenter.backends import BaseBackend, backend_names, load_backend
    from agenter.backends.capabilities import BackendCapabilities

    names = [f.name for f in fields(BackendCapabilities)]
    lines = ["| backend | " + " | ".join(HEADINGS[n] for n in names) + " | permission rules enforced |",
             "|---|" + "---|" * (len(names) + 1)]
    for backend in backend_names():
        cls = load_backend(backend)
        if not cls.__module__.startswith("agenter.backends."):
            continue  # one a program registered (a test's, a user's): not agenter's
        marks = ["✓" if getattr(cls.capabilities, n) else "" for n in names]
        per_settings = cls.permission_kinds_for.__func__ is not BaseBackend.permission_kinds_for.__func__
        kinds = PER_SETTINGS if per_settings else ", ".join(sorted(cls.permission_kinds)) \
            or "none: a policy fails when the agent is built"
        lines.append(f"| `{backend}` | " + " | ".join(marks) + f" | {kinds} |")
    return "\n".join(lines)


def readme_block(text: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)].strip()


def main(argv: list[str]) -> int:
    table = matrix()
    if "--write" in argv:
        text = README.read_text()
        start = text.index(BEGIN) + len(BEGIN)
        README.write_text(text[:start] + "\n" + table + "\n" + text[text.index(END, start):])
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
