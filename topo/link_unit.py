"""The size-independent, link-limited part of a collective's cost on the cluster graph.

:func:`link_unit` loads the links with one group's traffic (an algorithm's ``fill`` from
:mod:`topo.algorithms`) plus that of the concurrent groups that share any of its links, and
returns t(S) = latency_s + S * seconds_per_byte for the busiest link, with that link in words.
It also returns the busiest link as NCCL's tuner sees it: the group alone, on the links NCCL's
topology knows (GPUs, NVLink, PCIe, NICs and their switch ports), not the fabric's
switch-to-switch links, so neither oversubscription nor other jobs change NCCL's choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topo.loads import LinkLoads
from topo.routing import Router

Fill = Callable[[LinkLoads, Router, np.ndarray], float]


@dataclass(frozen=True)
class Unit:
    """Size-independent part of a cost: t(S) = latency_s + S * seconds_per_byte."""

    latency_s: float
    seconds_per_byte: float
    bottleneck: str
    nccl_seconds_per_byte: float = 0.0


def link_unit(router: Router, fill: Fill, group: tuple[int, ...], others: tuple[tuple[int, ...], ...]) -> Unit:
    """The busiest link of ``group``'s traffic while ``others`` run the same algorithm."""
    mine = LinkLoads(router)
    latency = fill(mine, router, np.asarray(group))
    focal = mine.totals()
    rest = LinkLoads(router)
    for g in relevant_groups(router, group, others):
        fill(rest, router, np.asarray(g))
    used = np.flatnonzero(focal)
    if not len(used):
        return Unit(latency, 0.0, "")
    total = focal[used] + rest.totals()[used]
    per_byte = total * router.seconds_per_byte[used]
    worst = int(np.argmax(per_byte))
    alone = focal[used] * router.seconds_per_byte[used] * ~router.switch_to_switch[used]
    return Unit(latency, float(per_byte[worst]), describe(router, int(used[worst]), total[worst]),
                float(alone.max()))


def relevant_groups(router: Router, group: tuple[int, ...], others: tuple[tuple[int, ...], ...]
                    ) -> list[tuple[int, ...]]:
    """The concurrent groups that can load a link of ``group``: those with a member on one of its
    nodes (intra-node, PCIe and NIC links), under one of its leaves (leaf uplinks) or, on three
    tiers, in one of its pods (pod uplinks)."""
    gpn, leaf_of = router.spec.gpus_per_node, router.leaf_of_device
    nodes = {d // gpn for d in group}
    leaves = {leaf_of[d] for d in group}
    pods = {int(router.leaf_pod[leaf_of[d]]) for d in group} if len(router.pod_out) else set()
    return [g for g in others
            if any(d // gpn in nodes or leaf_of[d] in leaves
                   or (pods and int(router.leaf_pod[leaf_of[d]]) in pods) for d in g)]


def describe(router: Router, edge: int, load: float) -> str:
    """Words for a bottleneck edge, free of node numbers (results are shared across shifts)."""
    tail, head = router.ends[edge]
    data = router.edge_attrs[edge // 2]
    kinds = f"{router.vertex_attrs[tail]['kind']}->{router.vertex_attrs[head]['kind']}"
    achievable = data["bandwidth_GBps"] * data["efficiency"]
    return (f"{kinds} {data['link']} ({achievable:.1f} GB/s achievable) carrying "
            f"{load:.3g} bytes per byte of S")
