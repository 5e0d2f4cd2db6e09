"""The one-line error of every bad input: the field, the value (plain, shortened) and what is valid."""

from __future__ import annotations

import pytest

from core.errors import invalid, require_choice, require_number, require_positive_int
from core.vocab import Runtime


def test_the_line_names_field_value_and_what_is_valid() -> None:
    assert str(invalid("plan.tp", "four", "expected an integer")) == "plan.tp='four' is invalid: expected an integer"


def test_long_values_are_cut_and_enum_members_shown_plainly() -> None:
    text = str(invalid("name", "x" * 200, "too long"))
    assert len(text) < 100 and text.startswith("name='xxx") and "…" in text
    assert str(invalid("framework", Runtime.TORCH, "no")) == "framework='torch' is invalid: no"


def test_requirements() -> None:
    with pytest.raises(ValueError, match=r"^zero=5 is invalid: expected one of 0, 1, 2, 3$"):
        require_choice("zero", 5, (0, 1, 2, 3))
    with pytest.raises(ValueError, match=r"^tp=True is invalid"):
        require_positive_int("tp", True)
    with pytest.raises(ValueError, match=r"^cv=nan is invalid: expected a number in \[0.0, 1\]"):
        require_number("cv", float("nan"), high=1)
    require_choice("framework", "torch", tuple(Runtime))  # a plain string is one of the members
