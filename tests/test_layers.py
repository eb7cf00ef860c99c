"""The layer rule, checked on the source: lower layers never import upper ones.

adapters/planner → facade → session → backends → tools, permissions, sandbox, validators →
usage, host → _types, _events, _errors, _version. A backend never imports another backend's
private modules, nor `agenter` itself or the facade.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "agenter"

# Layer of each top-level part; an import may only go to the same or a lower number.
LAYERS = {
    "_version": 0, "_types": 0, "_events": 0, "_errors": 0,
    "host": 1, "usage": 1, "_logging": 1, "_cliargs": 1,
    "sandbox": 2, "tools": 2, "validators": 2, "permissions": 2,
    "backends": 3,
    "session": 4,
    "facade": 5,
    "adapters": 6, "planner": 6, "batch": 6, "cli": 7, "_cliview": 7, "__main__": 7,
    "testing": 6,
}


def _part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "agenter":
        return None
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_no_upward_imports():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        if own == "__init__":
            continue  # the package's lazy re-exports
        own_layer = LAYERS.get(own)
        assert own_layer is not None, f"{rel}: add {own!r} to LAYERS"
        for line, module in _imports(path):
            target = _part(module)
            if target is None:
                continue
            if target == "":
                if own_layer < LAYERS["adapters"]:  # only users of the public API may
                    problems.append(f"{rel}:{line} imports the top-level package `agenter`")
                continue
            target_layer = LAYERS.get(target)
            if target_layer is None:
                problems.append(f"{rel}:{line} imports unknown part {module}")
            elif target_layer > own_layer:
                problems.append(f"{rel}:{line} imports {module} (layer {target}) from layer {own}")
    assert not problems, "\n".join(problems)


def test_backends_do_not_import_each_others_private_modules():
    problems = []
    backends = PACKAGE / "backends"
    for path in sorted(backends.rglob("*.py")):
        rel = path.relative_to(backends)
        if len(rel.parts) < 2:
            continue
        own = rel.parts[0]
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["agenter", "backends"] and len(parts) > 2:
                other = parts[2]
                shared = (backends / f"{other}.py").is_file()  # backends/_prompts.py, base.py, ...
                if other != own and not shared and not other.startswith("__"):
                    problems.append(f"backends/{rel}:{line} imports {module}")
    assert not problems, "\n".join(problems)
