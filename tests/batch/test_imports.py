"""No import circle inside agenter/batch, counting the imports made inside functions too (a lazy
import that closes a circle only hides it)."""

from __future__ import annotations

import ast
from pathlib import Path

BATCH = Path(__file__).parents[2] / "agenter" / "batch"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in BATCH.glob("*.py"):
        if path.name == "__init__.py":
            continue  # its re-exports are loaded lazily by name
        own = f"agenter.batch.{path.stem}"
        targets = graph.setdefault(own, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            targets.update(n for n in names if n.startswith("agenter.batch.") and n != own)
    return graph


def test_no_import_circle_in_batch():
    graph = _graph()
    assert "agenter.batch._ray" in graph and "agenter.batch._ray" in graph["agenter.batch._engine"]
    circles = []

    def visit(module: str, trail: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in trail:
                circles.append(" -> ".join([*trail[trail.index(target):], target]))
            else:
                visit(target, [*trail, target])

    for module in sorted(graph):
        visit(module, [module])
    assert not circles, circles
