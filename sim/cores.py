"""A node's CPU cores (and memory bandwidth) shared by the processes on it: processor sharing (SimPy).

On a CPU host whose "devices" are processes (the cpu-host cluster: one process per rank), the
ranks' compute runs on the node's cores. While the total weight ``w`` of the jobs running on a
node exceeds its ``capacity`` (cores), each job progresses at rate ``capacity / w`` of its speed
alone (the kernel's fair scheduler shares the cores equally among runnable threads); otherwise
at full speed. A job's weight is the number of identical ranks it stands for (folded
simulations). Ranks blocked in a collective sleep (gloo waits on a condition variable) and do
not load the cores: only compute work is submitted here. Rates are recomputed whenever a job
starts or ends, so a job that runs alone for part of its life finishes early.

The node's memory bandwidth is a second shared resource: work streaming from DRAM (large
element-wise and optimizer ops) is submitted with ``resource="memory"``, whose capacity is the
node's DRAM bandwidth in units of what one process achieves alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

EPS = 1e-12  # seconds of work left that count as done (float round-off)


RESOURCES = ("core", "memory")


@dataclass(eq=False)
class _Job:
    remaining_s: float
    node: int
    weight: float
    done: simpy.Event
    resource: str = "core"
    rate: float = 1.0


class SharedCores:
    """Owns the running jobs of every node and one process that advances them; call :meth:`run`."""

    def __init__(self, env: simpy.Environment, capacity: float, memory_capacity: float | None = None) -> None:
        for name, value in (("capacity", capacity), ("memory_capacity", memory_capacity)):
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value!r} is invalid: expected a capacity > 0")
        self.env = env
        self.capacity = {"core": float(capacity),
                         "memory": float(memory_capacity if memory_capacity is not None else capacity)}
        self.active: list[_Job] = []
        self._wake: simpy.Event = env.event()
        self._last = 0.0
        env.process(self._run())

    def run(self, work_s: float, node: int, weight: float = 1.0, resource: str = "core") -> simpy.Event:
        """Start ``work_s`` seconds of work (as long alone) on ``node``'s ``resource`` (core or
        memory); returns its done event."""
        if resource not in RESOURCES:
            raise ValueError(f"resource={resource!r} is invalid: expected one of {', '.join(RESOURCES)}")
        done = self.env.event()
        if work_s <= 0:
            done.succeed()
            return done
        self._advance()
        self.active.append(_Job(work_s, node, weight, done, resource))
        if not self._wake.triggered:
            self._wake.succeed()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self._last
        self._last = self.env.now
        if elapsed > 0:
            for job in self.active:
                job.remaining_s -= elapsed * job.rate

    def _rates(self) -> None:
        load: dict[tuple[int, str], float] = {}
        for job in self.active:
            key = (job.node, job.resource)
            load[key] = load.get(key, 0.0) + job.weight
        for job in self.active:
            job.rate = min(1.0, self.capacity[job.resource] / load[(job.node, job.resource)])

    def _run(self):  # type: ignore[no-untyped-def]
        while True:
            if not self.active:
                self._wake = self.env.event()
                yield self._wake
                continue
            self._advance()
            finished = [job for job in self.active if job.remaining_s <= EPS]
            for job in finished:
                self.active.remove(job)
                job.done.succeed()
            if not self.active:
                continue
            self._rates()
            next_s = min(job.remaining_s / job.rate for job in self.active)
            self._wake = self.env.event()
            yield self.env.timeout(next_s) | self._wake
