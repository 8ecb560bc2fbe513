"""Print every import circle among stabilitycli's modules and private names taken across them.

An import circle is two or more modules that reach each other through imports
(lazy ones inside functions included, since they tie the modules as tightly).
Exit status 1 when there is any circle or any `_private` name taken from another
module, so `scripts/check.sh` can hold both at zero.

    .venv/bin/python scripts/import_cycles.py
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp

PACKAGE = "stabilitycli"
ROOT = Path(__file__).resolve().parent.parent


def _imported_by(graph: grimp.ImportGraph, module: str) -> Iterator[str]:
    return iter(sorted(graph.find_modules_directly_imported_by(module)))


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, _imported_by(graph, start))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, _imported_by(graph, child)))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def private_imports(graph: grimp.ImportGraph) -> list[str]:
    """`from stabilitycli.x import _name` taken by a module other than x.

    A package's private submodule imported by a module of that same package is its
    own business (`from stabilitycli.ingest.text import _textline` inside `ingest/text/`).
    """
    found = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                for alias in node.names:
                    if not alias.name.startswith("_") or alias.name.startswith("__"):
                        continue
                    importer = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    own_package = importer.rsplit(".", 1)[0]
                    if path.name == "__init__.py":
                        own_package = importer.removesuffix(".__init__")
                    submodule = f"{node.module}.{alias.name}"
                    if submodule in graph.modules and node.module == own_package:
                        continue
                    rel = path.relative_to(ROOT)
                    found.append(f"{rel}:{node.lineno}: {node.module}.{alias.name}")
        found += _private_attributes(path, tree, graph)
    return found


def _private_attributes(path: Path, tree: ast.Module, graph: grimp.ImportGraph) -> list[str]:
    """`module._name` where `module` is another stabilitycli module this file imported."""
    bound: dict[str, str] = {}  # local name -> the module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
            for alias in node.names:
                if f"{node.module}.{alias.name}" in graph.modules:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE) and alias.asname:
                    bound[alias.asname] = alias.name
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            rel = path.relative_to(ROOT)
            found.append(f"{rel}:{node.lineno}: {bound[node.value.id]}.{node.attr}")
    return found


def main() -> int:
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    found = circles(graph)
    for component in found:
        print("circle: " + " <-> ".join(component))
    private = private_imports(graph)
    for line in private:
        print("private name imported: " + line)
    print(f"{len(found)} import circle(s), {len(private)} private name(s) imported across modules")
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main())
