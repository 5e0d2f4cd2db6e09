"""No library code outside the layer kinds asks whether a model is MoE (issue 26 item 3).

A dense and an MoE model answer the same questions through their layer kind
(:mod:`schedules.layer_kinds`: parameters, FLOPs, ops, memory, communication groups, sizes), so
a caller never branches on ``model.moe``. The check walks the AST of every library module for a
*switch on MoE*: ``moe is None`` / ``moe is not None`` (any name or attribute called ``moe``), or
``moe`` / ``x.moe`` used as a condition (``if``, ``while``, ``... if ... else``, ``and``/``or``,
``not``, ``assert``). Only the allowed modules may hold one: the layer kinds, and the MoE spec's
own module (which layers of a spec are MoE, and the spec read from a caller's input).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "topo", "schedules", "sim", "profiler")
ALLOWED = {"schedules/layer_kinds.py", "schedules/moe.py"}


def _is_moe(node: ast.AST) -> bool:
    """Whether ``node`` is ``moe`` or ``<anything>.moe`` (not ``args.moe``: a command's ``--moe``
    flag, validate's MoE suite, is no model)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "moe" and not (isinstance(node.value, ast.Name) and node.value.id == "args")
    return isinstance(node, ast.Name) and node.id == "moe"


def _conditions(node: ast.AST) -> Iterator[ast.expr]:
    """The expressions ``node`` uses as truth values."""
    if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
        yield node.test
    elif isinstance(node, ast.BoolOp):
        yield from node.values
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node.operand
    elif isinstance(node, ast.comprehension):
        yield from node.ifs


def _is_none_test(node: ast.Compare) -> bool:
    """Whether ``node`` is ``<moe> is None`` or ``<moe> is not None``."""
    return (_is_moe(node.left) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Is | ast.IsNot)
            and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None)


def moe_switches(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that switch on whether a model is MoE."""
    lines = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare) and _is_none_test(n)}
    lines |= {c.lineno for n in ast.walk(tree) for c in _conditions(n) if _is_moe(c)}
    return sorted(lines)


def library_switches() -> dict[str, list[int]]:
    """Every library module's MoE switches (relative path -> lines), modules without any left out."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = moe_switches(ast.parse(path.read_text()))
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    return found


def test_the_check_sees_each_form_of_switch() -> None:
    source = ("a = m.moe is None\nb = moe is not None\nif spec.moe:\n    pass\nc = 1 if moe else 2\n"
              "d = x and m.moe\nassert moe\ne = not model.moe\nf = moe.top_k\ng = m.moe.attention is None\n"
              "if args.moe:\n    pass\n")
    assert moe_switches(ast.parse(source)) == [1, 2, 3, 5, 6, 7, 8]


def test_only_the_layer_kinds_switch_on_moe() -> None:
    found = library_switches()
    assert set(found) & ALLOWED  # the layer kinds still ask, so the check sees real code
    assert {path: lines for path, lines in found.items() if path not in ALLOWED} == {}
