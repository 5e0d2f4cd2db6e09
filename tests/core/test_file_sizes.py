"""No library module over 400 lines (issue 26: files stay small enough to read in one sitting)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "topo", "schedules", "sim", "profiler")
MAX_LINES = 400


def test_no_library_module_is_over_400_lines() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
             for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    assert len(sizes) > 100  # the library was found
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
