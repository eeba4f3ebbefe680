"""No import circle in ``bridge/``, counting imports under ``TYPE_CHECKING`` too.

A circle means two modules can only be understood, tested or changed together. The walk reads
every module's source (nothing is imported) and finds the strongly connected groups of the
graph "module -> the bridge modules it imports".
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source_trees import parse

ROOT = Path(__file__).resolve().parents[1]
# The one circle left: the cluster reaches into the core that owns it. The thread actor issue
# (a router between them) removes it; then this set is empty, and the test says so.
KNOWN: set[frozenset[str]] = set()


def modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "bridge").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The bridge modules ``name`` imports (``from pkg import sub`` counts ``pkg.sub``)."""
    out: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {module for module in out if module in known and module != name}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected groups of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_circle_in_the_bridge() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    found = set(circles(graph))
    new = found - KNOWN
    assert not new, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in new)
    gone = KNOWN - found
    assert not gone, f"no longer a circle, take it out of KNOWN: {sorted(map(sorted, gone))}"
