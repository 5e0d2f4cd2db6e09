"""Pytest's default import mode (rootdir-relative basenames, no packages) refuses two test
files with the same basename in different folders; CI then stops at collection. Keep them unique."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_basename_is_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
