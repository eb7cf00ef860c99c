"""Print the tables the docs take from the code: README's runtime matrix (what each backend
declares), in docs/architecture.md the layers (tests/test_layers.py's LAYERS), the backend
families (each registered backend's folder and base class) and the modes each backend runs,
and in docs/backends/cli.md every option of every CLI backend (from their options models).

`python scripts/runtime_matrix.py` prints them; `--write` replaces them in the docs.
tests/test_runtime_matrix.py fails when a copy differs, so no table drifts from the code.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
CLI_BACKENDS = ROOT / "docs" / "backends" / "cli.md"
BEGIN = "<!-- runtime matrix: generated from the backends' declared capabilities (scripts/runtime_matrix.py) -->"
END = "<!-- end of runtime matrix -->"
HEADINGS = {"text_completion": "text", "streaming": "stream", "structured_output": "struct",
            "native_tool_loop": "tool loop", "custom_tools": "custom tools", "mcp": "mcp",
            "filesystem_read": "fs read", "filesystem_edit": "fs edit", "shell": "shell",
            "apply_patch": "apply_patch", "subagents": "subagents", "sandbox": "sandbox", "resume": "resume",
            "steering": "steer", "pause": "pause"}
#: For a backend whose enforced kinds depend on its settings (it overrides permission_kinds_for).
PER_SETTINGS = "depends on its settings: the agent program and its mode (docs/permissions.md)"

#: What each top-level part of the package is, for the layer table.
PARTS = {
    "_version": "the version", "_types": "requests, results, budgets, usage (pydantic models)",
    "_events": "the event vocabulary", "_errors": "the exception tree",
    "_compat": "agenter 0.1.7's names: deprecation warnings, what replaces the removed ones",
    "logging": "agenter 0.1.7's `agenter.logging` (deprecated)",
    "data_models": "agenter 0.1.7's `agenter.data_models` (deprecated)",
    "host": "processes (one kill policy), redaction, requirement probes, retry delays",
    "usage": "the usage ledger and prices (genai-prices)", "_logging": "logging set-up",
    "_cliargs": "command-line argument helpers",
    "sandbox": "PathResolver, change detection, the shell sandbox (Landlock, bubblewrap, Seatbelt), the folder lock",
    "tools": "custom tools, the tool executor, the patch applier", "validators": "syntax, security, commands",
    "permissions": "the permission gate, rules, safety checks", "store": "conversation stores (resume across processes)",
    "backends": "the contract and every backend, in three families",
    "session": "CodingRun: one request's loop, budgets, modes (patch), transcripts, spans",
    "facade": "AutonomousCodingAgent, AgentConfig, AgentSession",
    "adapters": "LangGraph, PydanticAI", "planner": "plan and execute", "batch": "batch runs (local, Ray)",
    "testing": "the scripted model server, FunctionBackend, conformance suites",
    "cli": "the `agenter` command", "_cliview": "the CLI's renderer", "__main__": "`python -m agenter`",
}
#: The families: folder, base class, what a member writes.
FAMILIES = {
    "agents": ("`BaseBackend`", "`_connect`, `_turn`, `_disconnect`: an agent SDK or protocol driven in process"),
    "cli": ("`CliBackend` (`cli/_base.py`)", "`command`, `parse_event`, optionally `prepare`, `answer`, `conclude`"),
    "model_api": ("`HarnessBackend` (`model_api/_harness/`); `TwoPathBackend` (`_two_paths.py`) adds "
                  "`_completion.py`'s context path",
                  "a model API driven by agenter's own agent: its options, `loop_config`, `_open_wire` and its wire "
                  "(`_chat.py`: the Chat Completions shape the openai and litellm wires share)"),
}


def _load_layers() -> dict[str, int]:
    spec = importlib.util.spec_from_file_location("test_layers", ROOT / "tests" / "test_layers.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.LAYERS)


def matrix() -> str:
    from agenter.backends import BaseBackend, backend_names, load_backend
    from agenter.backends.capabilities import BackendCapabilities

    # patch_files is chosen per session by an option (proposal_format), not declared by a class.
    names = [f.name for f in fields(BackendCapabilities) if f.name in HEADINGS]
    lines = ["| backend | " + " | ".join(HEADINGS[n] for n in names) + " | permission rules enforced |",
             "|---|" + "---|" * (len(names) + 1)]
    for backend in _builtin():
        cls = load_backend(backend)
        marks = ["✓" if getattr(cls.capabilities, n) else "" for n in names]
        per_settings = cls.permission_kinds_for.__func__ is not BaseBackend.permission_kinds_for.__func__
        kinds = PER_SETTINGS if per_settings else ", ".join(sorted(cls.permission_kinds)) \
            or "none: a policy fails when the agent is built"
        lines.append(f"| `{backend}` | " + " | ".join(marks) + f" | {kinds} |")
    del backend_names
    return "\n".join(lines)


def layers() -> str:
    found = _load_layers()
    lines = ["| layer | parts (a part imports only its own layer and those below) |", "|---|---|"]
    for level in sorted(set(found.values()), reverse=True):
        parts = [name for name, value in found.items() if value == level]
        cells = "; ".join(f"`{name}` ({PARTS.get(name, '?')})" for name in sorted(parts))
        lines.append(f"| {level} | {cells} |")
    return "\n".join(lines)


def families() -> str:
    from agenter.backends import load_backend

    members: dict[str, list[str]] = {}
    for backend in _builtin():
        module = load_backend(backend).__module__.split(".")
        family = module[2] if len(module) > 3 else "(root)"
        members.setdefault(family, []).append(f"`{backend}`")
    lines = ["| family | folder | base | a member writes | members |", "|---|---|---|---|---|"]
    for family, (base, writes) in FAMILIES.items():
        lines.append(f"| {family} | `agenter/backends/{family}/` | {base} | {writes} | "
                     + ", ".join(members.get(family, [])) + " |")
    return "\n".join(lines)


def modes() -> str:
    from agenter.backends import load_backend
    from agenter.backends.capabilities import MODE_REQUIREMENTS, CapabilityError, check_mode

    lines = ["| backend | " + " | ".join(MODE_REQUIREMENTS) + " |", "|---|" + "---|" * len(MODE_REQUIREMENTS)]
    for backend in _builtin():
        cls = load_backend(backend)
        cells = []
        for mode in MODE_REQUIREMENTS:
            try:
                check_mode(mode, cls.capabilities, backend)
                cells.append("✓")
            except CapabilityError as exc:
                cells.append("needs " + ", ".join(sorted(set(exc.required) - set(exc.available))))
        lines.append(f"| `{backend}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cli_options() -> str:
    """Every option of every CLI backend: one row for an option all of them take alike, else one
    row per backend, with its type, default and description (the options model's)."""
    from agenter.backends import load_backend

    backends = [name for name in _builtin() if load_backend(name).__module__.startswith("agenter.backends.cli.")]
    fields = {name: load_backend(name).options_model.model_fields for name in backends}
    lines = ["| option | backend | type | default | meaning |", "|---|---|---|---|---|"]
    shared = [option for option in fields[backends[0]]
              if all(option in fields[b] and _same(fields[b][option], fields[backends[0]][option]) for b in backends)]
    for option in shared:
        lines.append(_option_row(option, "every CLI backend", fields[backends[0]][option]))
    for backend in backends:
        renamed = load_backend(backend).options_model.renamed
        for option, info in fields[backend].items():
            if option not in shared:
                old = [f"`{o}`" for o, new in renamed.items() if new == option]
                lines.append(_option_row(option, f"`{backend}`", info, old))
    return "\n".join(lines)


def _same(a: Any, b: Any) -> bool:
    return (a.annotation, a.description, repr(a.get_default(call_default_factory=True))) == \
        (b.annotation, b.description, repr(b.get_default(call_default_factory=True)))


def _option_row(option: str, backend: str, info: Any, old: list[str] | None = None) -> str:
    meaning = (info.description or "").replace("|", "\\|")
    if old:
        meaning += f" (also accepted: {', '.join(old)})"
    default = repr(info.get_default(call_default_factory=True)).replace("|", "\\|")
    kind = _type_name(info.annotation).replace("|", "\\|")
    return f"| `{option}` | {backend} | {kind} | `{default}` | {meaning} |"


def _type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: `str | None`, `list[str]`, `'responses' | 'chat'`."""
    import types
    import typing

    from pydantic import SecretStr

    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is SecretStr:
        return "str (secret)"
    if annotation is typing.Any:
        return "Any"
    if annotation is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in arguments)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in arguments)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in arguments)}]"
    return getattr(annotation, "__name__", str(annotation))


def _builtin() -> list[str]:
    from agenter.backends import backend_names, load_backend

    # A backend a program registered (a test's, a user's) is not agenter's.
    return [name for name in backend_names() if load_backend(name).__module__.startswith("agenter.backends.")]


#: (file, block name, generator): every generated block.
BLOCKS: list[tuple[Path, str, Callable[[], str]]] = [
    (README, "runtime matrix", matrix),
    (ARCHITECTURE, "layers", layers),
    (ARCHITECTURE, "families", families),
    (ARCHITECTURE, "modes", modes),
    (CLI_BACKENDS, "cli options", cli_options),
]


def markers(name: str) -> tuple[str, str]:
    if name == "runtime matrix":
        return BEGIN, END
    return (f"<!-- {name}: generated from the code (scripts/runtime_matrix.py) -->", f"<!-- end of {name} -->")


def block(text: str, name: str) -> str:
    begin, end = markers(name)
    start = text.index(begin) + len(begin)
    return text[start:text.index(end, start)].strip()


def readme_block(text: str) -> str:
    return block(text, "runtime matrix")


def main(argv: list[str]) -> int:
    for path, name, make in BLOCKS:
        table = make()
        if "--write" in argv:
            text = path.read_text()
            begin, end = markers(name)
            start = text.index(begin) + len(begin)
            path.write_text(text[:start] + "\n" + table + "\n" + text[text.index(end, start):])
        else:
            print(f"{path.name}: {name}\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
