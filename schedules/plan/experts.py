"""The plan's expert parallelism (MoE models).

Attributes of :class:`ExpertParallel`:
    ep: expert parallelism: the routed experts of each MoE layer are split over ``ep``
        ranks of the data-parallel group (innermost, Megatron-Core's rank order), which
        exchange tokens by all-to-all (:mod:`schedules.moe_ops`); must divide dp.
    etp: expert tensor parallelism: each expert's matrices split over ``etp`` ranks; must
        divide tp.
    moe_imbalance: routing imbalance: tokens the most loaded expert-parallel rank receives,
        as a multiple of the even share (>= 1.0; capped at ep and by the capacity factor).
    moe_overlap: dispatch/combine all-to-alls of one micro-batch run under another
        micro-batch's compute: "on", "off", or "auto" (on under DualPipeV, which exists
        for it); see :mod:`schedules.passes.ep_overlap`.
    moe_dispatcher: how tokens travel to their experts: "alltoall" (each of a token's top-k
        copies to its expert's rank, Megatron-Core's all-to-all dispatcher) or "deepep"
        (DeepEP's dispatch: one copy per destination node over the network, forwarded to
        the node's ranks over NVLink; :func:`sim.placement.deepep_volume`).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid
from core.settings import check_declared, choice, number, setting
from schedules.plan.layout import DEGREE

MOE_OVERLAP_KINDS = ("auto", "on", "off")
MOE_DISPATCHERS = ("alltoall", "deepep")


@dataclass(frozen=True, kw_only=True)
class ExpertParallel:
    """How an MoE model's experts are split and their tokens exchanged (see the module docstring)."""

    ep: int = setting(1, rule=DEGREE, help="expert parallel (MoE models; divides dp and the experts)")
    etp: int = setting(1, rule=DEGREE, help="expert tensor parallel (divides tp; default 1)")
    moe_imbalance: float = setting(1.0, rule=number(1, 1e6),
                                   help="most loaded EP rank's tokens / even share (>= 1; default 1)")
    moe_overlap: str = setting("auto", rule=choice(MOE_OVERLAP_KINDS),
                               help="all-to-alls under the other micro-batch's compute (auto: on under dualpipev)")
    moe_dispatcher: str = setting("alltoall", rule=choice(MOE_DISPATCHERS),
                                  help="alltoall (a copy per routed expert, default) or deepep (a copy per "
                                       "destination node)")

    def __post_init__(self) -> None:
        check_declared(self, invalid)
