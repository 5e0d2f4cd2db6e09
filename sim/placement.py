"""Expert-parallel groups on the rank grid, in Megatron-Core's rank order.

Megatron-Core folds the ranks of one pipeline stage, the (tp, cp, dp) grid flattened with the
placement's nesting (TP innermost by default), into an expert grid (etp, ep, edp), innermost
first (``RankGenerator`` with ``order="tp-cp-ep-dp-pp"``: expert ranks ``tp-ep-dp``): expert
tensor parallelism takes the innermost ``etp`` ranks, expert parallelism the next ``ep``, and the
expert-data-parallel group what is left. With etp = tp and cp = 1 an EP group is ``ep``
consecutive data-parallel replicas (inside a node when tp x ep fits one), an EDP group strides
over them.

A communication op of an expert dimension carries its layout in its group (the pricer has the
placement but not the plan): a :class:`core.groups.CommGroup` of axis ``ep``, ``edp`` or ``etp``
with the plan's ``ep`` and ``etp`` (:func:`schedules.moe_sizes.expert_dim`);
:class:`sim.pricing.TaskCoster` resolves it with :func:`expert_groups`.
"""

from __future__ import annotations

import numpy as np

from core.groups import EXPERT_AXES
from schedules.expert_layout import STAGE_DIMS
from schedules.expert_layout import expert_coordinates as layout_coordinates
from topo.placement import Placement

EXPERT_DIMS = EXPERT_AXES


def round_robin_nodes(experts: int, top_k: int, nodes: int) -> float:
    """Mean number of nodes a token's experts occupy under NeMo AutoModel's ``FakeBalancedGate``
    (token i takes experts (i·k + j) mod E, j < k: nemo_automodel/components/moe/layers.py @
    01926a5c443b7979463c73341bf64adf79de638e) with experts placed contiguously, E/n per node
    (``experts_start_idx = ep_rank * n_local_experts``, same file): averaged over the distinct
    start experts i·k mod E."""
    per_node = experts / nodes
    starts = sorted({(i * top_k) % experts for i in range(experts)})
    spans = [len({int(((s + j) % experts) // per_node) for j in range(top_k)}) for s in starts]
    return sum(spans) / len(spans)


def deepep_volume(experts: int, top_k: int, destinations: int, routing: str = "uniform") -> float:
    """Volume of DeepEP's dispatch (and combine) over that of one copy per routed expert, for a
    token whose ``top_k`` experts are drawn uniformly without replacement from ``experts`` spread
    evenly over ``destinations``: DeepEP sends a token once to each destination holding one of its
    experts. Across nodes a destination is a *node* (one RDMA copy, forwarded inside the node over
    NVLink: DeepSeek-V3 report §3.2.2; deepseek-ai/DeepEP's internode dispatch); inside one node it
    is a *rank* (the intranode dispatch sends ``num_tokens_per_rank`` rows, ``is_token_in_rank``
    "whether a token be sent to a rank", and the receiver gets the token once with its local
    ``recv_topk_idx``: ``deep_ep/buffers/legacy.py`` ``get_dispatch_layout``/``dispatch``). A
    destination is missed with probability C(E - E/n, k) / C(E, k); the token goes to
    n (1 - P_miss) destinations instead of k copies: ``n (1 - P_miss) / k``, 1 for a single
    destination. Routing limited to fewer nodes (DeepSeek-V3's 4) would lower it further; it is
    not assumed. With ``routing="round-robin"`` the k experts are consecutive
    (:func:`round_robin_nodes` destinations per token, 1 when E/n is a multiple of k): ``D / k``
    for those D destinations. Across nodes the copies a node forwards to its ranks over NVLink
    are not counted apart (the network part dominates)."""
    if destinations <= 1:
        return 1.0
    if routing == "round-robin":
        return min(1.0, round_robin_nodes(experts, top_k, destinations) / top_k)
    per_destination = experts / destinations
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, (experts - per_destination - i) / (experts - i))
    return min(1.0, destinations * (1.0 - miss) / top_k)


def expert_coordinates(placement: Placement, ep: int, etp: int) -> dict[str, np.ndarray]:
    """Per rank (indexed by rank) its coordinate along ``etp``, ``ep`` and ``edp``
    (:func:`schedules.expert_layout.expert_coordinates`)."""
    coords = {dim: placement.coordinate_array(dim) for dim in STAGE_DIMS}
    return layout_coordinates(coords, placement.sizes, placement.order, ep, etp)


def expert_groups(placement: Placement, dim: str, ep: int, etp: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Per rank its group id along expert dimension ``dim``, and each group's ranks (sorted):
    the ranks of one pipeline stage that share the other two expert coordinates."""
    coords = expert_coordinates(placement, ep, etp)
    return groups_sharing([placement.coordinate_array("pp")] + [coords[d] for d in EXPERT_DIMS if d != dim])


def groups_sharing(fixed: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Group the ranks (indexed by rank) that share every coordinate array of ``fixed``: per rank
    its group id, and each group's ranks (sorted)."""
    key = np.zeros(fixed[0].size, dtype=np.int64)
    for values in fixed:
        key = key * (int(values.max()) + 1) + values
    _, ids = np.unique(key, return_inverse=True)
    order = np.argsort(ids, kind="stable")
    bounds = np.flatnonzero(np.diff(ids[order])) + 1
    return ids, [tuple(int(r) for r in chunk) for chunk in np.split(order, bounds)]
