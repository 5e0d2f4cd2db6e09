"""A faster ``__init__`` for frozen, slotted dataclasses made by the hundred thousand (tasks, ops).

The ``__init__`` that :func:`dataclasses.dataclass` writes for a frozen class sets each field with
``object.__setattr__(self, "name", value)``: a global lookup, an attribute lookup and a name
lookup on the class per field. :func:`slot_init` writes one with the same parameters, defaults
and ``__post_init__`` call that sets each slot through its member descriptor instead (about half
the cost for a 14-field Task). The instance is the same: the same fields, values and class, still
frozen (assignment after ``__init__`` still raises).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

C = TypeVar("C")


def slot_init(cls: type[C]) -> type[C]:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` setting its slots directly
    (fields with a default factory, keyword-only fields and ``ClassVar``/``InitVar`` pseudo-fields
    are not supported: a TypeError)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not (cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__):  # type: ignore[attr-defined]
        raise TypeError(f"slot_init: {cls.__name__} is not a frozen, slotted dataclass")
    if len(fields) != len(cls.__dataclass_fields__) or any(  # type: ignore[attr-defined]
            f.default_factory is not dataclasses.MISSING or f.kw_only for f in fields):
        raise TypeError(f"slot_init: {cls.__name__} has a field slot_init cannot set")
    namespace: dict[str, Any] = {}
    signature, body = [], []
    for i, f in enumerate(fields):
        namespace[f"_set{i}"] = cls.__dict__[f.name].__set__
        has_default = f.default is not dataclasses.MISSING
        if has_default:
            namespace[f"_default{i}"] = f.default
        if f.init:
            signature.append(f"{f.name}=_default{i}" if has_default else f.name)
            body.append(f"    _set{i}(self, {f.name})")
        elif has_default:
            body.append(f"    _set{i}(self, _default{i})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, namespace)  # noqa: S102 - made from the class's own field names, as dataclasses does
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
