"""Communication tasks on the flow network: the engine's ``fidelity="flow"`` path.

A task's ops run one after another; each communication op waits its fixed part, then runs its
phases' flows on the shared :class:`sim.flow.network.FlowNetwork` (see
:mod:`sim.flow.decompose`); so do the offload copies (:mod:`sim.flow.host_copies`). Compute tasks
(and the TP/CP collectives inside them) and CPU Adam keep their analytic durations.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from core.errors import invalid
from core.taskgraph import Task
from sim.flow import FIDELITIES
from sim.flow.decompose import FlowPlanner
from sim.flow.host_copies import HOST_COPY_CLASSES
from sim.flow.network import FlowNetwork
from sim.pricing import TaskCoster


class FlowTransport:
    """Runs communication tasks as flows on one cluster's links (bytes/s from the router)."""

    def __init__(self, env: simpy.Environment, coster: TaskCoster, *, folded: bool,
                 record: bool = False) -> None:
        self.env = env
        self.planner = FlowPlanner(coster, folded=folded)
        self.network = FlowNetwork(env, self.planner.capacity_Bps, record=record)

    def handles(self, task: Task) -> bool:
        """Whether ``task`` runs on the flow network: the communication lanes (comm.*) and the
        offload copies (PCIe to and from CPU DRAM, NVMe reads and writes)."""
        return task.lane.startswith("comm.") or (
            bool(task.ops) and all(op.op_class in HOST_COPY_CLASSES for op in task.ops))

    def run(self, task: Task) -> simpy.Process:
        """Start ``task``; the returned process ends when its last flow has finished."""
        return self.env.process(self._run(task))

    def _run(self, task: Task):  # type: ignore[no-untyped-def]
        for op in task.ops:
            plan = self.planner.plan(op, task)
            if plan.alpha_s > 0:
                yield self.env.timeout(plan.alpha_s)
            for inc, nbytes, cap in plan.phases:
                yield self.network.transfer(inc, nbytes, cap, label=f"{task.name}@{task.rank}")


def flow_factory(fidelity: str, coster: TaskCoster, *, folded: bool,
                 record: bool = False) -> Callable[[simpy.Environment], FlowTransport] | None:
    """The Engine's ``flows`` argument for ``fidelity`` (None for "analytic")."""
    if fidelity not in FIDELITIES:
        raise invalid("fidelity", fidelity, "expected one of " + ", ".join(FIDELITIES))
    if fidelity == "analytic":
        return None
    return lambda env: FlowTransport(env, coster, folded=folded, record=record)
