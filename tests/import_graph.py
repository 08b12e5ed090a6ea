"""The import graph of ``wiremq``, type-hint-only imports included, and its cycles.

Every ``import`` and ``from ... import`` of a file counts, wherever it is: at
the top, inside ``if TYPE_CHECKING:`` or inside a function. A cycle through
type-hint-only imports does not fail at run time, but it still says two
modules each need the other to be understood (``tests/unit/test_import_cycles``
keeps them from spreading).

    .venv/bin/python -m tests.import_graph        # prints the cycles, if any
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The import package's parts, as pyproject.toml's package-dir maps them.
PARTS = ("server", "modules", "stores", "admin", "config", "analytics")


def modules() -> dict[str, Path]:
    """Every module of ``wiremq`` by dotted name (a package by its own name)."""
    found = {}
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            dotted = ".".join(("wiremq", *path.relative_to(ROOT).with_suffix("").parts))
            found[dotted.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ``wiremq`` the file imports (a name imported from a package is its
    submodule if there is one of that name, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in known:
                    yield submodule
                elif base in known:
                    yield base


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {other for other in imported(name, path, known) if other != name}
        for name, path in known.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    edges = graph()
    found = cycles(edges)
    for component in found:
        members = set(component)
        print(f"cycle of {len(component)} modules:")
        for name in component:
            inside = sorted(edges[name] & members)
            print(f"  {name} -> {', '.join(inside)}")
    if not found:
        print(f"no import cycles among {len(edges)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
