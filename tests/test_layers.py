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
    "_version": 0, "_types": 0, "_events": 0, "_errors": 0, "_compat": 0,
    "host": 1, "usage": 1, "_logging": 1, "_cliargs": 1,
    "sandbox": 2, "tools": 2, "validators": 2, "permissions": 2, "store": 2,
    "backends": 3,
    "session": 4,
    "facade": 5,
    "adapters": 6, "planner": 6, "batch": 6, "cli": 7, "_cliview": 7, "__main__": 7,
    "testing": 6, "logging": 6, "data_models": 6,
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


#: Parts whose modules import each other in one direction only (no circle, even through an
#: import inside a function or under TYPE_CHECKING): a reader can take them bottom up.
WITHOUT_CIRCLES = ("facade", "session")


def _module(path: Path) -> str:
    return ".".join(("agenter", *path.relative_to(PACKAGE).with_suffix("").parts))


def test_no_import_circle_inside_facade_and_session():
    modules = {_module(p): p for part in WITHOUT_CIRCLES for p in (PACKAGE / part).glob("*.py")
               if p.name != "__init__.py"}  # a package's re-exports are not a module's dependency
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name}

    def circle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in path:
                    stack.append((nxt, path + [nxt]))
        return None

    circles = {" -> ".join(c) for name in sorted(graph) if (c := circle_from(name))}
    assert not circles, "\n".join(sorted(circles))


#: Folders of backends/ that hold a family of backends (each member a folder; the family's own
#: modules, `_x.py`, beside them). backends/cli/ holds one module per program instead.
FAMILIES = ("agents", "model_api")


def _member(parts: tuple[str, ...] | list[str]) -> tuple[str, ...] | None:
    """The backend a module of backends/ belongs to (its family and name), or None for shared
    code: the root modules, _programs/, a family's own `_x` modules."""
    if len(parts) >= 2 and parts[0] in FAMILIES and not parts[1].startswith("_"):
        return (parts[0], parts[1].removesuffix(".py"))
    if len(parts) >= 2 and parts[0] == "cli" and not parts[1].startswith("_"):
        return ("cli", parts[1].removesuffix(".py"))
    return None


def test_backends_do_not_import_each_other():
    problems = []
    backends = PACKAGE / "backends"
    for path in sorted(backends.rglob("*.py")):
        rel = path.relative_to(backends)
        own = _member(rel.parts)
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] != ["agenter", "backends"] or len(parts) < 3:
                continue
            other = _member(parts[2:])
            if other is not None and other != own:
                problems.append(f"backends/{rel}:{line} imports {module}")
            if own is not None and len(parts) > 3 and parts[2] in FAMILIES + ("cli",) and other is None \
                    and parts[2] != own[0]:
                problems.append(f"backends/{rel}:{line} imports another family's own module {module}")
    assert not problems, "\n".join(problems)
