"""Reliability inputs: failure classes and their rates, restart cost, checkpoint policy, storage.

Rates are failures per 1,000 node-days (the unit of Kokolis et al., "Revisiting Reliability in
Large-Scale ML Research Clusters", arXiv 2410.21680), so a job's interruption rate is exactly
proportional to its node count. Every bad value is a one-line ``ValueError`` naming the field.

Each setting of the ``[reliability]`` table is declared once, as a field made with
:func:`core.settings.setting` (what is valid, help text, its table): the job-file reader
(:mod:`sim.run.reliability_file`), the checks below and the flag reference (``docs/flags.md``) are
made from the declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from core.settings import (
    BOOLEAN,
    at_least,
    check_declared,
    choice,
    integer,
    optional,
    setting,
)

SECONDS_PER_DAY = 86400.0


class FailureClass(str, Enum):
    """What failed. ``hardware`` is a study's unattributed hardware total (Meta's RSC rates)."""

    GPU = "gpu"
    HBM = "hbm"
    NVLINK = "nvlink"
    NIC = "nic"
    SWITCH = "switch"
    HOST = "host"
    SOFTWARE = "software"
    MAINTENANCE = "maintenance"
    HARDWARE = "hardware"


HARDWARE_CLASSES = frozenset({FailureClass.GPU, FailureClass.HBM, FailureClass.NVLINK, FailureClass.NIC,
                              FailureClass.SWITCH, FailureClass.HOST, FailureClass.HARDWARE})


class RateScope(str, Enum):
    """What a preset's rates count: hardware failures only, or every unexpected interruption."""

    HARDWARE = "hardware"
    ALL = "all"


class CheckpointMode(str, Enum):
    """sync: training waits for the write to storage; async: only the device-to-host snapshot
    blocks, the write runs behind training; memory: the snapshot goes to a peer's host memory."""

    SYNC = "sync"
    ASYNC = "async"
    MEMORY = "memory"


def bad(field_name: str, value: Any, valid: str) -> ValueError:
    """The one-line error: ``reliability.<field>=<value> is invalid: <valid>``."""
    return ValueError(f"reliability.{field_name}={value!r} is invalid: {valid}")


SECONDS = at_least(0)
CLASSES = "reliability.classes.<class>"  # the table of each failure class ([reliability.classes.gpu], ...)


@dataclass(frozen=True, kw_only=True)
class ClassRate:
    """One failure class ``cls`` (its table's name); the slowing classes' model is
    :mod:`sim.run.slow_ranks` (the straggler model)."""

    cls: FailureClass
    per_1000_node_days: float = setting(0.0, rule=at_least(0), section=CLASSES, flag=None,
                                        help="failures per 1,000 node-days")
    kills_job: bool = setting(True, rule=BOOLEAN, section=CLASSES, flag=None,
                              help="true: the job stops and restarts; false: the failure only slows a rank, the "
                                   "job running at its pace until noticed, then swapping the node at a planned restart")
    detect_s: float = setting(0.0, rule=SECONDS, section=CLASSES, flag=None,
                              help="seconds from the failure to the job noticing it (a slowing class: seconds the job "
                                   "runs slowed)")
    repair_s: float = setting(0.0, rule=SECONDS, section=CLASSES, flag=None,
                              help="seconds to repair or replace the failed node (waited for when no spare is free)")
    slowdown: float = setting(1.0, rule=at_least(1), section=CLASSES, flag=None,
                              help="a slowing class's degraded GPU takes this many times a median GPU's compute time "
                                   "(1 = counted only; a killing class leaves it at 1)")

    def __post_init__(self) -> None:
        check_declared(self, lambda key, value, valid: bad(f"classes.{self.cls.value}.{key}", value, valid))
        if self.kills_job and self.slowdown != 1.0:
            raise bad(f"classes.{self.cls.value}.slowdown", self.slowdown, "a class that kills the job slows nothing; "
                      "set kills_job = false or leave slowdown at 1")

    @property
    def slows(self) -> bool:
        """A failure that leaves the job running at a degraded rank's pace."""
        return not self.kills_job and self.per_1000_node_days > 0 and self.slowdown > 1.0

    @property
    def needs_node(self) -> bool:
        """A hardware failure takes its node out until repaired; software restarts in place."""
        return self.cls in HARDWARE_CLASSES

    def per_node_s(self) -> float:
        """Failures per node per second."""
        return self.per_1000_node_days / 1000.0 / SECONDS_PER_DAY


@dataclass(frozen=True, kw_only=True)
class RestartCost:
    """What a restart costs besides reading the checkpoint back (seconds)."""

    reschedule_s: float = setting(0.0, rule=SECONDS, section="reliability.restart", flag=None,
                                  help="seconds to re-queue and allocate nodes")
    init_s: float = setting(0.0, rule=SECONDS, section="reliability.restart", flag=None,
                            help="seconds of process start, framework and NCCL initialisation at any size")
    init_s_per_1k_ranks: float = setting(0.0, rule=SECONDS, section="reliability.restart", flag=None,
                                         help="further initialisation seconds per 1,000 ranks")
    warmup_s: float = setting(0.0, rule=SECONDS, section="reliability.restart", flag=None,
                              help="seconds of first slow steps (compilation, allocator, data loader)")

    def __post_init__(self) -> None:
        check_declared(self, lambda key, value, valid: bad(f"restart.{key}", value, valid))

    def seconds(self, ranks: int) -> float:
        """Restart seconds for ``ranks`` ranks, checkpoint load excluded."""
        return self.reschedule_s + self.init_s + self.init_s_per_1k_ranks * ranks / 1000.0 + self.warmup_s


@dataclass(frozen=True, kw_only=True)
class StorageSpec:
    """Where checkpoints go.

    The default aggregate bandwidth is Llama 3's Tectonic file system's sustained 2 TB/s (arXiv
    2407.21783 sec. 3.3.1, "240 PB ... 2 TB/s sustained throughput and 7 TB/s peak", read through
    the summary at ai-papers.xuzou.cn/papers/llama3_2024).
    """

    aggregate_GBps: float = setting(2000.0, rule=at_least(0, strict=True), section="reliability.storage", flag=None,
                                    help="the storage system's aggregate write/read bandwidth, GB/s",
                                    source="Llama 3 arXiv 2407.21783 sec. 3.3.1: Tectonic's 2 TB/s sustained")
    node_GBps: float = setting(0.0, rule=at_least(0), section="reliability.storage", flag=None,
                               help="one node's bandwidth to storage, GB/s (0 = only the aggregate limits)")
    capacity_bytes: float = setting(0.0, rule=at_least(0), section="reliability.storage", flag=None,
                                    help="storage space for checkpoints, bytes (0 = unlimited)")
    keep: int = setting(2, rule=integer(1, 1_000_000), section="reliability.storage", flag=None,
                        help="checkpoints kept at once (their total must fit capacity_bytes)")

    def __post_init__(self) -> None:
        check_declared(self, lambda key, value, valid: bad(f"storage.{key}", value, valid))


@dataclass(frozen=True, kw_only=True)
class CheckpointPolicy:
    """How often and how checkpoints are taken (``interval_s`` None: ``auto``, the numerical
    optimum of :func:`sim.run.interval.numerical_optimum_s`; modes: :class:`CheckpointMode`)."""

    interval_s: float | None = setting(None, rule=optional(at_least(0, strict=True)), auto=True,
                                       section="reliability.checkpoint", flag=None,
                                       help="seconds of training between checkpoints (auto: the numerical optimum)")
    mode: CheckpointMode = setting(CheckpointMode.SYNC, rule=choice(tuple(CheckpointMode)),
                                   section="reliability.checkpoint", flag=None,
                                   help="sync: training waits for the write; async: only the device-to-host snapshot "
                                        "blocks; memory: the snapshot goes to a peer's host memory")

    def __post_init__(self) -> None:
        check_declared(self, lambda key, value, valid: bad(f"checkpoint.{key}", value, valid))


@dataclass(frozen=True, kw_only=True)
class ReliabilityInputs:
    """Everything the run-level prediction needs besides the job: its ``name`` (preset or file),
    the ``source`` of its rates and what they count (``scope``), the failure ``classes`` and the
    ``restart``, ``checkpoint`` and ``storage`` tables."""

    name: str = "custom"
    source: str = ""
    scope: RateScope = RateScope.ALL
    classes: tuple[ClassRate, ...] = ()
    spare_nodes: int = setting(0, rule=integer(0, 1_000_000_000), section="reliability", flag=None,
                               help="hot spares that replace a failed node at once")
    restart: RestartCost = field(default_factory=RestartCost)
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    storage: StorageSpec = field(default_factory=StorageSpec)
    seed: int = setting(0, rule=integer(0, 2**63 - 1), section="reliability", flag=None, help="the Monte Carlo's random seed")
    samples: int = setting(2000, rule=integer(10, 100_000), section="reliability", flag=None,
                           help="the Monte Carlo's number of simulated runs")
    weibull_shape: float | None = setting(None, rule=optional(at_least(0, strict=True)), section="reliability",
                                          flag=None, help="unset: Poisson failures; k: Weibull times between failures "
                                                          "of shape k and the same mean (k < 1: infant mortality, bursts)")
    pue: float = setting(1.0, rule=at_least(1), section="reliability", flag=None,
                         help="facility power usage effectiveness (1 = IT energy only)")
    price_per_kwh_usd: float = setting(0.0, rule=at_least(0), section="reliability", flag=None,
                                       help="electricity price for the energy cost, USD per kWh (0 = not counted)")

    def __post_init__(self) -> None:
        check_declared(self, bad)
        seen = [c.cls for c in self.classes]
        if len(seen) != len(set(seen)):
            raise bad("classes", [c.value for c in seen], "each failure class at most once")

    def killing(self) -> tuple[ClassRate, ...]:
        """The classes that stop the job."""
        return tuple(c for c in self.classes if c.kills_job and c.per_1000_node_days > 0)

    def slowing(self) -> tuple[ClassRate, ...]:
        """The classes that only slow a rank (:attr:`ClassRate.slows`)."""
        return tuple(c for c in self.classes if c.slows)

    def interrupt_rate_s(self, nodes: int) -> float:
        """Job interruptions per second on ``nodes`` nodes: the classes' rates times the node
        count, exactly (no economy of scale)."""
        return nodes * sum(c.per_node_s() for c in self.killing())

