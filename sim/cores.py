"""A node's CPU cores (and memory bandwidth) shared by the processes on it: processor sharing (SimPy).

On a CPU host whose "devices" are processes (the cpu-host cluster: one process per rank), the
ranks' compute runs on the node's cores. While the total weight ``w`` of the jobs running on a
node exceeds its ``capacity`` (cores), each job progresses at rate ``capacity / w`` of its speed
alone (the kernel's fair scheduler shares the cores equally among runnable threads); otherwise
at full speed. A job's weight is the number of identical ranks it stands for (folded
simulations). Ranks blocked in a collective sleep (gloo waits on a condition variable) and do
not load the cores, but the collective's own copying and reducing does: the engine submits
compute work and collectives (gloo runs them on a worker thread of each member) here. Rates are
recomputed whenever a job starts or ends, so a job that runs alone for part of its life finishes
early.

The node's memory bandwidth is a second shared resource: work streaming from DRAM (large
element-wise and optimizer ops) is submitted with ``resource="memory"``, whose capacity is the
node's DRAM bandwidth in units of what one process achieves alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from core.errors import invalid
from sim.fluid import SecondsShare, Work

RESOURCES = ("core", "memory")


@dataclass(eq=False)
class _Job(Work):
    node: int = 0
    weight: float = 1.0
    resource: str = "core"


class SharedCores(SecondsShare):
    """Owns the running jobs of every node and one process that advances them; call :meth:`run`."""

    active: list[_Job]  # type: ignore[assignment]

    def __init__(self, env: simpy.Environment, capacity: float, memory_capacity: float | None = None) -> None:
        for name, value in (("capacity", capacity), ("memory_capacity", memory_capacity)):
            if value is not None and not value > 0:
                raise invalid(name, value, "expected a capacity > 0")
        self.capacity = {"core": float(capacity),
                         "memory": float(memory_capacity if memory_capacity is not None else capacity)}
        super().__init__(env)

    def run(self, work_s: float, node: int, weight: float = 1.0, resource: str = "core") -> simpy.Event:
        """Start ``work_s`` seconds of work (as long alone) on ``node``'s ``resource`` (core or
        memory); returns its done event."""
        if resource not in RESOURCES:
            raise invalid("resource", resource, "expected one of " + ", ".join(RESOURCES))
        return self._start(_Job(work_s, self.env.event(), node=node, weight=weight, resource=resource))

    def _rates(self) -> None:
        load: dict[tuple[int, str], float] = {}
        for job in self.active:
            key = (job.node, job.resource)
            load[key] = load.get(key, 0.0) + job.weight
        for job in self.active:
            job.rate = min(1.0, self.capacity[job.resource] / load[(job.node, job.resource)])
