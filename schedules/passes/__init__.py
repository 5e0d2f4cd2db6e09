"""The task-graph builder's passes (see :mod:`schedules.builder`, the entry point)."""
