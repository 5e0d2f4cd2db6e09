"""Reliability inputs: failure classes and their rates, restart cost, checkpoint policy, storage.

Rates are failures per 1,000 node-days (the unit of Kokolis et al., "Revisiting Reliability in
Large-Scale ML Research Clusters", arXiv 2410.21680), so a job's interruption rate is exactly
proportional to its node count. Every bad value is a one-line ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

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


def check_number(field_name: str, value: Any, low: float = 0.0, *, positive: bool = False) -> None:
    """Raise unless ``value`` is a finite real >= ``low`` (> ``low`` when ``positive``)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (positive and value == low):
        raise bad(field_name, value, f"expected a finite number {'>' if positive else '>='} {low:g}")


@dataclass(frozen=True, kw_only=True)
class ClassRate:
    """One failure class.

    Attributes:
        cls: the class.
        per_1000_node_days: failures per 1,000 node-days (>= 0).
        kills_job: True when the job stops and restarts; False when the failure only slows a rank:
            the job runs at the degraded rank's pace (the straggler model, :mod:`sim.run.slow_ranks`)
            until it is noticed, then swaps the node at a planned restart.
        detect_s: seconds from the failure to the job noticing it (for a slowing class: seconds the
            job runs slowed).
        repair_s: seconds to repair or replace the failed node (waited for when no spare is free).
        slowdown: a slowing class's degraded GPU takes this many times a median GPU's compute
            time (>= 1; 1 = counted only). Killing classes must leave it at 1.
    """

    cls: FailureClass
    per_1000_node_days: float
    kills_job: bool = True
    detect_s: float = 0.0
    repair_s: float = 0.0
    slowdown: float = 1.0

    def __post_init__(self) -> None:
        name = f"classes.{self.cls.value}"
        for attr in ("per_1000_node_days", "detect_s", "repair_s"):
            check_number(f"{name}.{attr}", getattr(self, attr))
        if not isinstance(self.kills_job, bool):
            raise bad(f"{name}.kills_job", self.kills_job, "expected true or false")
        check_number(f"{name}.slowdown", self.slowdown, 1.0)
        if self.kills_job and self.slowdown != 1.0:
            raise bad(f"{name}.slowdown", self.slowdown, "a class that kills the job slows nothing; "
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
    """What a restart costs besides reading the checkpoint back (seconds).

    Attributes:
        reschedule_s: re-queue and allocate nodes.
        init_s: process start, framework and NCCL initialisation at any size.
        init_s_per_1k_ranks: further initialisation per 1,000 ranks (grows with the job).
        warmup_s: first slow steps (compilation, allocator, data loader).
    """

    reschedule_s: float = 0.0
    init_s: float = 0.0
    init_s_per_1k_ranks: float = 0.0
    warmup_s: float = 0.0

    def __post_init__(self) -> None:
        for attr in ("reschedule_s", "init_s", "init_s_per_1k_ranks", "warmup_s"):
            check_number(f"restart.{attr}", getattr(self, attr))

    def seconds(self, ranks: int) -> float:
        """Restart seconds for ``ranks`` ranks, checkpoint load excluded."""
        return self.reschedule_s + self.init_s + self.init_s_per_1k_ranks * ranks / 1000.0 + self.warmup_s


@dataclass(frozen=True, kw_only=True)
class StorageSpec:
    """Where checkpoints go.

    The default aggregate bandwidth is Llama 3's Tectonic file system's sustained 2 TB/s (arXiv
    2407.21783 sec. 3.3.1, "240 PB ... 2 TB/s sustained throughput and 7 TB/s peak", read through
    the summary at ai-papers.xuzou.cn/papers/llama3_2024).

    Attributes:
        aggregate_GBps: the storage system's aggregate write/read bandwidth, GB/s.
        node_GBps: one node's bandwidth to storage, GB/s (0 = only the aggregate limits).
        capacity_bytes: storage space for checkpoints (0 = unlimited).
        keep: checkpoints kept at once (their total must fit ``capacity_bytes``).
    """

    aggregate_GBps: float = 2000.0
    node_GBps: float = 0.0
    capacity_bytes: float = 0.0
    keep: int = 2

    def __post_init__(self) -> None:
        check_number("storage.aggregate_GBps", self.aggregate_GBps, positive=True)
        check_number("storage.node_GBps", self.node_GBps)
        check_number("storage.capacity_bytes", self.capacity_bytes)
        if isinstance(self.keep, bool) or not isinstance(self.keep, int) or self.keep < 1:
            raise bad("storage.keep", self.keep, "expected an integer >= 1")


@dataclass(frozen=True, kw_only=True)
class CheckpointPolicy:
    """How often and how checkpoints are taken.

    Attributes:
        interval_s: seconds of training between checkpoints, or None for ``auto`` (the numerical
            optimum, :func:`sim.run.interval.numerical_optimum_s`).
        mode: sync, async or memory (:class:`CheckpointMode`).
    """

    interval_s: float | None = None
    mode: CheckpointMode = CheckpointMode.SYNC

    def __post_init__(self) -> None:
        if self.interval_s is not None:
            check_number("checkpoint.interval_s", self.interval_s, positive=True)


@dataclass(frozen=True, kw_only=True)
class ReliabilityInputs:
    """Everything the run-level prediction needs besides the job.

    Attributes:
        name: preset or file name; source: where the rates come from; scope: what they count.
        classes: the failure classes.
        spare_nodes: hot spares that replace a failed node at once.
        restart, checkpoint, storage: see their classes.
        seed, samples: the Monte Carlo's random seed and number of simulated runs.
        weibull_shape: None = Poisson failures; k > 0 = Weibull times between failures of shape k
            and the same mean (k < 1: infant mortality, bursts).
        pue: facility power usage effectiveness (1.0 = IT energy only).
        price_per_kwh_usd: electricity price for the energy cost (0 = not counted).
    """

    name: str = "custom"
    source: str = ""
    scope: RateScope = RateScope.ALL
    classes: tuple[ClassRate, ...] = ()
    spare_nodes: int = 0
    restart: RestartCost = field(default_factory=RestartCost)
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    storage: StorageSpec = field(default_factory=StorageSpec)
    seed: int = 0
    samples: int = 2000
    weibull_shape: float | None = None
    pue: float = 1.0
    price_per_kwh_usd: float = 0.0

    def __post_init__(self) -> None:
        for attr, low in (("spare_nodes", 0), ("seed", 0), ("samples", 10)):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad(attr, value, f"expected an integer >= {low}")
        if self.samples > 100_000:
            raise bad("samples", self.samples, "expected an integer in [10, 100000]")
        if self.weibull_shape is not None:
            check_number("weibull_shape", self.weibull_shape, positive=True)
        check_number("pue", self.pue, 1.0)
        check_number("price_per_kwh_usd", self.price_per_kwh_usd)
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
