"""The project's import graph from ``ast`` (every import, also those inside functions): prints
each cycle between its modules, and each import made inside a function. Exit 1 on a cycle.

    .venv/bin/python scripts/import_graph.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "legacy_v4", "metadata_v5", "bench")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported project module, whether the import is inside a function)."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{a.name}" for a in child.names] + [child.module]
            for name in names:
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    found.append((name, inner))
            visit(child, inner)

    visit(tree, False)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def main() -> int:
    known = modules()
    graph: dict[str, set[str]] = {}
    for mod, path in known.items():
        deps = imports(path, known)
        # a package's __init__ importing its own submodules is not a dependency of theirs on it
        graph[mod] = {d for d, _ in deps if d != mod and not mod.startswith(d + ".")}
        for d, inner in deps:
            if inner and d != mod:
                print(f"in a function: {mod} -> {d}")
    found = cycles(graph)
    for comp in found:
        print("cycle:", " <-> ".join(comp))
    print(f"{len(known)} modules, {sum(map(len, graph.values()))} imports, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
