"""The floors of the library: core imports nothing of the project, each package imports only the
floors below it (core <- topo, schedules <- sim <- profiler), and no module imports itself back
through others, lazily inside a function or not (imports under ``if TYPE_CHECKING:`` never run and
are not counted)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "topo", "schedules", "sim", "profiler")
BELOW = {"core": set(), "topo": {"core"}, "schedules": {"core"}, "sim": {"core", "topo", "schedules"},
         "profiler": {"core", "topo", "schedules", "sim"}}
KNOWN_CYCLES: set[frozenset[str]] = set()  # none left (issue 26 item 3: MoE a layer kind)


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but the bodies of ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _target(name: str) -> str | None:
    """The project module ``name`` (or the one that defines it) names, None outside the project."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    """The project modules ``module`` imports when it runs."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imported(path.read_text(), package) - {module}


def _imported(source: str, package: str) -> set[str]:
    """The project modules a module of ``package`` with this source imports when it runs."""
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {t for a in node.names if (t := _target(a.name))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out |= {t for a in node.names if (t := _target(f"{base}.{a.name}"))}
    return out


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_lazy_and_relative_imports_not_type_checking_ones() -> None:
    source = """
from typing import TYPE_CHECKING
import numpy
from . import plan
if TYPE_CHECKING:
    from topo.cluster import ClusterSpec
else:
    import topo.link
def f():
    from core.vocab import Lane
    import sim.engine as e
"""
    assert _imported(source, "schedules") == {"schedules.plan", "topo.link", "core.vocab", "sim.engine"}


def test_core_imports_nothing_of_the_project() -> None:
    outside = {m: sorted(t for t in ts if not t.startswith("core")) for m, ts in GRAPH.items() if m.startswith("core")}
    assert {m: ts for m, ts in outside.items() if ts} == {}


def test_packages_import_only_the_floors_below() -> None:
    upward = sorted((m, t) for m, ts in GRAPH.items() for t in ts
                    if t.split(".")[0] != m.split(".")[0] and t.split(".")[0] not in BELOW[m.split(".")[0]])
    assert upward == []


def test_no_import_cycles() -> None:
    cycles = [c for c in _cycles() if frozenset(c) not in KNOWN_CYCLES]
    assert cycles == []
