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


# Where a translation key may be written: the core chooses every text; these only render
# what it chose (cards, schedule listings, the CLI's own report and check-config's
# problems) or the one notice the Feishu client appends to a reply it had to cut.
RENDERING = (
    "core/",
    "i18n.py",
    "devtools/",
    "feishu/cards/",
    "engine/card_views.py",
    "schedules/texts.py",
    "app.py",
    "demo.py",
    "running.py",
    "config/checks.py",
    "feishu/client.py",
    "service.py",
)


def _catalog_keys() -> set[str]:
    import json

    def flat(tree: dict[str, object], prefix: str = "") -> set[str]:
        keys: set[str] = set()
        for name, value in tree.items():
            key = f"{prefix}{name}"
            keys |= flat(value, f"{key}.") if isinstance(value, dict) else {key}
        return keys

    catalog = BRIDGE.parent / "translations" / "zh_CN.json"
    return flat(json.loads(catalog.read_text(encoding="utf-8")))


def test_no_translation_key_decides_anything_outside_the_core_and_rendering() -> None:
    keys = _catalog_keys()
    found = {}
    for path in sorted(BRIDGE.rglob("*.py")):
        where = path.relative_to(BRIDGE).as_posix()
        if where.startswith(RENDERING):
            continue
        strings = {
            node.value
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        # A key, or a key's prefix such as "progress." (a family of lines chosen by it).
        named = {
            s
            for s in strings
            if s in keys or (s.endswith(".") and any(k.startswith(s) for k in keys))
        }
        if named:
            found[where] = sorted(named)
    assert found == {}
