"""The layout stays legible: the pure core imports nothing that does I/O, and no module
imports itself back (the layering contracts in pyproject.toml are `lint-imports`, in
.ci/run)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

BRIDGE = Path(__file__).resolve().parents[2] / "bridge"
CORE_MAY_IMPORT = (
    "__future__",
    "bridge.core",
    "collections",
    "dataclasses",
    "enum",
    "functools",
    "itertools",
    "math",
    "re",
    "typing",
    "types",
    "bridge.runtime.events",
)


@pytest.mark.parametrize("path", sorted((BRIDGE / "core").glob("*.py")), ids=lambda p: p.name)
def test_the_core_imports_nothing_with_io(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    foreign = [m for m in imported if m and not m.startswith(CORE_MAY_IMPORT)]
    assert foreign == [], f"{path.name} imports {foreign}"


def test_no_import_cycle_between_modules() -> None:
    """Imports under TYPE_CHECKING and inside functions count: a guard that dodges a cycle at
    run time leaves it in the design (the consumer owns a Protocol instead)."""
    graph = grimp.build_graph("bridge", cache_dir=None)
    cycles = {
        " -> ".join((importer, *back))
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if (back := graph.find_shortest_chain(importer=imported, imported=importer))
    }
    assert sorted(cycles) == []
