"""No library code compares a value with a lane, kind, phase, op class, collective, runtime,
offload or group-axis name written as a string literal: it names the enum member (``core.vocab``), so a typo is
an AttributeError and a renamed member is found by the type checker.

The check walks the AST of every library module outside ``core/`` for comparisons (``==``,
``!=``, ``in``, ``not in``) and ``isin`` calls whose literal operand is one of those names. A few
names are also words of other vocabularies ("host" is a link kind too, "cpu" a torch device,
"none" a recompute choice): those are flagged only when the other operand is named after a
vocabulary that holds the word (``lane``, ``kind``, ``op_class``, ``phase``, ``framework``, ...).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from core.groups import Axis
from core.vocab import Collective, Kind, Lane, Offload, OffloadDevice, OpClass, Phase, Runtime

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topo", "schedules", "sim", "profiler")
ENUMS = (Lane, Kind, Phase, OpClass, Collective, Runtime, Offload, OffloadDevice, Axis)
NAMES = {m.value for enum in ENUMS for m in enum}
SHARED_WORDS = {"host", "cpu", "none", "compute", "step", "fixed", "other", "params", "optimizer", "torch",
                "B", "F", "W", "attention", "activation", "p2p", "nvme", "send", "recv", "tp", "cp", "dp", "pp", "ep",
                "edp", "etp"}
VOCABULARY_OF = {"lane": (Lane,), "lanes": (Lane,), "kind": (Kind, Collective), "kinds": (Kind, Collective),
                 "op_class": (OpClass,), "phase": (Phase,), "framework": (Runtime,), "runtime": (Runtime,),
                 "offload": (Offload,), "offload_device": (OffloadDevice,), "collective": (Collective,),
                 "coll": (Collective,), "op": (Collective,), "dim": (Axis,), "axis": (Axis,)}


def _literals(node: ast.AST) -> list[str]:
    """The string constants ``node`` is, or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _name(node: ast.AST) -> str:
    """What an operand is called: a name, an attribute, a subscript's string key, a call's function."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        key = node.slice
        return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else _name(node.value)
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _pairs(tree: ast.AST) -> Iterator[tuple[int, ast.AST, ast.AST]]:
    """(line, literal side, other side) of every comparison and ``isin`` call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for a, b in zip(operands, operands[1:], strict=False):
                yield node.lineno, a, b
                yield node.lineno, b, a
        elif isinstance(node, ast.Call) and _name(node.func) == "isin" and node.args:
            target = node.func.value if isinstance(node.func, ast.Attribute) and not node.args[1:] else node.args[0]
            yield node.lineno, node.args[-1], target


def violations(source: str) -> list[tuple[int, str]]:
    """(line, name) of each comparison of a vocabulary name written as a literal."""
    out = []
    for line, literal, other in _pairs(ast.parse(source)):
        for word in _literals(literal):
            named = {m.value for enum in VOCABULARY_OF.get(_name(other).lower(), ()) for m in enum}
            if word in NAMES and (word not in SHARED_WORDS or word in named):
                out.append((line, word))
    return sorted(set(out))


def test_the_check_finds_literal_comparisons() -> None:
    source = """
if op.op_class == "gemm" or task.lane in ("compute", "comm.tp"): pass
if plan.framework != "torch": pass
if link.kind == "host": pass
df[df["kind"].isin(["all_reduce", "send"])]
np.isin(kinds, ["fwd"])
if x == Lane.COMPUTE: pass
"""
    assert violations(source) == [(2, "comm.tp"), (2, "compute"), (2, "gemm"), (3, "torch"), (5, "all_reduce"),
                                  (5, "send"), (6, "fwd")]


def test_no_library_module_compares_with_a_vocabulary_literal() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {word!r}"
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             for line, word in violations(path.read_text())]
    assert found == []
