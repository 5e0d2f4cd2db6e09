"""Each setting declared once: a dataclass field that carries what is valid, its help text, its
job-file section and key, its command-line flag and the source of its default.

A config dataclass declares a setting with :func:`setting` in place of a plain default; the
job-file reader, the command-line flags, the settings table and the flag reference
(``docs/flags.md``) are all made from :func:`declared` (``sim.job_settings``, ``sim.cli.job_args``,
``sim.cli.flag_reference``), so a value is accepted or refused the same way wherever it comes
from.

Values are type-checked, not coerced: a string ``"no"`` is not a boolean, ``2.0`` is not an
integer, NaN and infinities are not numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from core.errors import invalid

MAX_NAME_CHARS = 255  # a file name component (NAME_MAX on Linux); longer names are refused
MAX_PATH_CHARS = 4096  # PATH_MAX


@dataclass(frozen=True)
class Rule:
    """What values a setting accepts.

    Attributes:
        what: what is valid, as the error says it ("expected an integer in [1, 65536]").
        accepts: True when a value follows the rule.
        values: the valid values of a closed vocabulary (empty for open kinds).
        type: the Python type a command-line string converts to (int, float, str or bool).
    """

    what: str
    accepts: Callable[[Any], bool]
    values: tuple[Any, ...] = ()
    type: type = str

    def check(self, field: str, value: Any) -> None:
        """Raise the one-line ``invalid(field, value, what)`` unless the rule accepts ``value``."""
        if not self.accepts(value):
            raise invalid(field, value, self.what)


def is_int(v: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def integer(lo: int, hi: int) -> Rule:
    """An int (not a bool, not a float) in [lo, hi]."""
    return Rule(f"expected an integer in [{lo}, {hi}]", lambda v: is_int(v) and lo <= v <= hi, type=int)


def number(lo: float, hi: float, *, hi_open: bool = False) -> Rule:
    """A finite int or float in [lo, hi] (or [lo, hi) with ``hi_open``)."""
    def accepts(v: Any) -> bool:
        if not is_real(v):
            return False
        return lo <= v < hi if hi_open else lo <= v <= hi
    return Rule(f"expected a number in [{lo:g}, {hi:g}{')' if hi_open else ']'}", accepts, type=float)


def is_real(v: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def at_least(lo: float, *, strict: bool = False) -> Rule:
    """A finite int or float >= lo (> lo with ``strict``), with no upper bound."""
    return Rule(f"expected a finite number {'>' if strict else '>='} {lo:g}",
                lambda v: is_real(v) and (v > lo if strict else v >= lo), type=float)


def count(lo: int) -> Rule:
    """An int (not a bool, not a float) >= lo, with no upper bound."""
    return Rule(f"expected an integer >= {lo}", lambda v: is_int(v) and v >= lo, type=int)


def optional(rule: Rule) -> Rule:
    """``rule``, or None (unset: what None means is the setting's help)."""
    return Rule(rule.what, lambda v: v is None or rule.accepts(v), rule.values, rule.type)


BOOLEAN = Rule("expected true or false (a boolean, not a string)", lambda v: isinstance(v, bool), (False, True), bool)


def choice(values: tuple[Any, ...]) -> Rule:
    """One of ``values`` (exact type: 1 is not True; an enum member stands for its plain value)."""
    plain = tuple(c.value if isinstance(c, Enum) else c for c in values)
    return Rule("expected one of " + ", ".join(map(str, plain)),
                lambda v: any(type(v) is type(c) and v == c for c in plain), plain,
                type(plain[0]) if plain else str)


def or_auto(rule: Rule) -> Rule:
    """``rule``, or the text "auto" (a rule of the simulator chooses the value)."""
    return Rule(f'{rule.what} or "auto"', lambda v: v == "auto" or rule.accepts(v), rule.values, rule.type)


def _name_ok(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_PATH_CHARS and "\0" not in v \
        and all(len(part) <= MAX_NAME_CHARS for part in v.split("/"))


NAME = Rule(f"expected a name or path (path components of at most {MAX_NAME_CHARS} characters)", _name_ok)


@dataclass(frozen=True, kw_only=True)
class Spec:
    """How a setting is given, besides its name and default.

    Attributes:
        rule: what is valid.
        help: the flag's help text (one or two sentences, units included).
        section: the job-file section (``[plan]``, ``[model]``, ``[cluster]``, ``[sim]``, ...).
        key: its key there ("" = the field's name).
        flag: its command-line flag ("" = ``--`` and the key with dashes; None: no flag).
        switch: a flag that only turns the setting on (``--full``), not ``--x``/``--no-x``.
        metavar: the flag's value placeholder in the help ("" = argparse's).
        source: where the default (or what the setting models) comes from.
        group: the help section of the flag ("" = the job-file section's).
        auto: a job file or flag may also say "auto" (the simulator chooses the value after
            resolving the job; the config object itself holds a value its rule accepts).
        sets: the field of the object built from it that it sets, where that is named otherwise
            ("" = its own name; ``[model] layers`` sets ``ModelSpec.num_layers``).
    """

    rule: Rule
    help: str
    section: str = "plan"
    key: str = ""
    flag: str | None = ""
    switch: bool = False
    metavar: str = ""
    source: str = ""
    group: str = ""
    auto: bool = False
    sets: str = ""


SPEC = "trainsim.setting"


def setting(default: Any = None, *, rule: Rule, help: str, **spec: Any) -> Any:
    """A dataclass field that is a setting (:class:`Spec` fields as keywords)."""
    return dataclasses.field(default=default, metadata={SPEC: Spec(rule=rule, help=help, **spec)})


@dataclass(frozen=True)
class Declared:
    """One declared setting: its field name, default and :class:`Spec` (key and flag resolved)."""

    name: str
    default: Any
    spec: Spec

    @property
    def key(self) -> str:
        """Its job-file key."""
        return self.spec.key or self.name

    @property
    def flag(self) -> str | None:
        """Its command-line flag (None: none)."""
        return None if self.spec.flag is None else self.spec.flag or "--" + self.key.replace("_", "-")

    @property
    def rule(self) -> Rule:
        """What a job file or a flag may give (the spec's rule, or "auto" too with ``auto``)."""
        return or_auto(self.spec.rule) if self.spec.auto else self.spec.rule

    @property
    def section(self) -> str:
        """Its job-file section."""
        return self.spec.section


def declared(cls: type) -> tuple[Declared, ...]:
    """The settings a config dataclass declares, in field order."""
    return tuple(Declared(f.name, f.default, f.metadata[SPEC]) for f in dataclasses.fields(cls) if SPEC in f.metadata)


def check_declared(obj: Any, invalid: Callable[[str, Any, str], ValueError]) -> None:
    """Raise ``invalid(field, value, what is valid)`` for the first field of ``obj`` its rule refuses."""
    for d in declared(type(obj)):
        value = getattr(obj, d.name)
        if not d.spec.rule.accepts(value.value if isinstance(value, Enum) else value):
            raise invalid(d.name, value, d.spec.rule.what)
