"""The workload: model specs, the parallel plan, pipeline schedules and the task-graph builder.

This package knows nothing about hardware: it describes *what* work and communication a training
step contains (FLOPs, bytes, dependencies). Costs are attached later by :mod:`sim`.
"""
