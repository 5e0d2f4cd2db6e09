"""Validation: simulate exactly the configuration of a recorded run and compare with it.

- :func:`job_for_run` builds the simulator's Job from a run's manifest (model, plan as the
  trainer ran it, cluster) with an optional hardware profile;
- :func:`validate_run` simulates it and compares the two Timelines (:class:`Comparison`);
- :mod:`profiler.validate.suite` is the validation suite (recorded under ``traces/suite-*``).
"""

from profiler.validate.compare import Comparison, MetricRow, validate_run
from profiler.validate.job import job_for_run

__all__ = ["Comparison", "MetricRow", "job_for_run", "validate_run"]
