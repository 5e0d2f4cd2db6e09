"""Communication groups: which ranks a collective or a send runs among, as a value.

The builder states a communication op's group (:attr:`core.taskgraph.Op.dim`) without knowing
the hardware; the pricer resolves it to ranks on the placement (:class:`sim.pricing.TaskCoster`):

- a parallel dimension: ``TP``, ``CP``, ``PP`` (a send's two ends) or ``DP`` (ZeRO's DP x CP group);
- a group of the step's end (:mod:`schedules.step_end_syncs`): ``PP_ENDS`` (the first and the last
  pipeline rank at one TP, CP and DP place: the tied embedding's two copies), ``MP`` (Megatron's
  model-parallel group, TP x PP) or ``WORLD`` (every rank);
- under hybrid sharding (``replicas`` > 1, :mod:`sim.hybrid_groups`): one replica's ranks
  (``Axis.DP_SHARD``) or the ranks at the same place of every replica (``Axis.DP_REPLICATE``);
- an expert dimension in Megatron-Core's expert layout of ``ep`` x ``etp`` (:mod:`sim.placement`):
  expert parallelism, expert data parallelism or expert tensor parallelism, an EP all-to-all
  dispatched by DeepEP carrying its experts and top-k (:func:`sim.placement.deepep_volume`).

:attr:`CommGroup.name` writes a group as the Timeline's group keys show it (``"tp"``, ``"dps:2"``,
``"ep:8:1:deepep256x8rr"``); nothing parses it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Axis(StrEnum):
    """The rank-grid axis a communication group runs along."""

    TP = "tp"
    CP = "cp"
    PP = "pp"
    DP = "dp"  # the DP x CP group (ZeRO and FSDP shard over it)
    PP_ENDS = "ppe"  # the first and the last pipeline rank at one (tp, cp, dp)
    MP = "mp"  # Megatron's model-parallel group: TP x PP at one (cp, dp)
    WORLD = "world"
    DP_SHARD = "dps"  # hybrid sharding: one replica's ranks
    DP_REPLICATE = "dpr"  # hybrid sharding: the ranks at one place of every replica
    EP = "ep"
    EDP = "edp"
    ETP = "etp"


EXPERT_AXES = (Axis.EP, Axis.EDP, Axis.ETP)
HYBRID_AXES = (Axis.DP_SHARD, Axis.DP_REPLICATE)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeepEP:
    """An EP all-to-all dispatched by DeepEP: a token travels once to each destination holding
    one of its ``top_k`` experts out of ``experts``, drawn uniformly or, with ``round_robin``,
    consecutively (NeMo AutoModel's ``FakeBalancedGate``)."""

    experts: int
    top_k: int
    round_robin: bool = False

    @property
    def routing(self) -> str:
        """"round-robin" or "uniform"."""
        return "round-robin" if self.round_robin else "uniform"

    @property
    def name(self) -> str:
        return f"deepep{self.experts}x{self.top_k}" + ("rr" if self.round_robin else "")


@dataclass(frozen=True, slots=True)
class CommGroup:
    """A communication op's group: its axis, and what resolving it on the rank grid needs besides.

    Attributes:
        axis: the axis the group runs along.
        replicas: hybrid-sharding replicas (the ``DP_SHARD`` and ``DP_REPLICATE`` axes), else 1.
        ep, etp: the expert layout (the expert axes), else 1.
        deepep: DeepEP's dispatch of an EP all-to-all, else None.
    """

    axis: Axis
    replicas: int = 1
    ep: int = 1
    etp: int = 1
    deepep: DeepEP | None = None

    @classmethod
    def expert(cls, axis: Axis, ep: int, etp: int, deepep: DeepEP | None = None) -> CommGroup:
        """A group of Megatron-Core's expert layout of ``ep`` x ``etp``."""
        return cls(axis, ep=ep, etp=etp, deepep=deepep)

    @classmethod
    def hybrid(cls, axis: Axis, replicas: int) -> CommGroup:
        """A hybrid-sharding group of a DP group split into ``replicas``."""
        return cls(axis, replicas=replicas)

    @property
    def is_expert(self) -> bool:
        return self.axis in EXPERT_AXES

    @property
    def is_hybrid(self) -> bool:
        return self.axis in HYBRID_AXES

    @property
    def name(self) -> str:
        """The group as group keys write it: ``"tp"``, ``"dps:<replicas>"``, ``"ep:<ep>:<etp>"``
        (with ``":deepep<E>x<k>[rr]"`` under DeepEP)."""
        if self.is_hybrid:
            return f"{self.axis}:{self.replicas}"
        if self.is_expert:
            return f"{self.axis}:{self.ep}:{self.etp}" + (f":{self.deepep.name}" if self.deepep else "")
        return str(self.axis)

    def __str__(self) -> str:
        return self.name


TP, CP, PP, DP = (CommGroup(axis) for axis in (Axis.TP, Axis.CP, Axis.PP, Axis.DP))
PP_ENDS, MP, WORLD = (CommGroup(axis) for axis in (Axis.PP_ENDS, Axis.MP, Axis.WORLD))
