"""Suite-wide test settings (at the repo root: a tests/conftest.py would put tests/ on sys.path
and make tests/topo shadow the topo package): Hypothesis without its per-example deadline.

Hypothesis fails an example that takes longer than 200 ms by default; on a loaded machine (other
jobs on the same cores) a sound example can take that long, so the deadline is off for every
property test. Hangs are caught by the tests' own guards, not by this deadline.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("trainsim", deadline=None)
settings.load_profile("trainsim")
