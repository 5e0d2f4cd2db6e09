"""Named reliability inputs from published figures; each names its source and what its rates count.

Sources (read for this module; figures quoted as published):

- Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research Clusters",
  arXiv 2410.21680 (HPCA 2025): hardware failures of 6.50 (RSC-1) and 2.34 (RSC-2) per 1,000
  node-days on 8-GPU A100 nodes; health checks every 5 minutes. The rates count hardware only.
  Its ETTR section could not be read through the tools available here: the restart overhead
  ``u0 = 300 s`` used with these presets is RECALLED, not read (see tests/sim/run/test_published.py).
- Llama 3 (arXiv 2407.21783), sec. 3.3.4 and Table 5 (read through the transcription at
  glennklockwood.com/garden/component-reliability, which lists every row): 466 interruptions in a
  54-day snapshot on 16,384 H100 (2,048 nodes), 47 planned, 419 unexpected: faulty GPU 148, GPU HBM3
  72, software bug 54, network switch/cable 35, host maintenance 32, GPU SRAM 19, GPU system
  processor 17, NIC 7, NCCL watchdog timeouts 7, silent data corruption 6, GPU thermal interface
  + sensor 6, SSD 3, power supply 3, server chassis 2, IO expansion board 2, dependency 2, CPU 2,
  system memory 2. Those rates count every unexpected cause. Restart cost is not published
  ("fast automated restarts"): the preset's 300 s is a stated assumption.
- OPT-175B chronicles (facebookresearch/metaseq, projects/OPT/chronicles/27_percent_update.md,
  posted 2021-12-03): "40+ restarts" since the November 17 update (16 days) on 992 A100 (124
  nodes) "for a variety of hardware, infrastructure, or experimental stability issues"; each
  restart downloaded "1.6TB of a single model checkpoint (992 files, each ~1.7GB)". All causes.
"""

from __future__ import annotations

from sim.run.inputs import ClassRate, FailureClass, RateScope, ReliabilityInputs, RestartCost

LLAMA3_NODE_DAYS = 2048 * 54  # 16,384 H100 / 8 per node, 54 days (Llama 3 sec. 3.3.4)
LLAMA3_UNEXPECTED = {  # Table 5 rows grouped into classes; sums to 419
    FailureClass.GPU: 148 + 19 + 17 + 6 + 6,  # faulty GPU, SRAM, system processor, SDC, thermal
    FailureClass.HBM: 72,
    FailureClass.SWITCH: 35,
    FailureClass.NIC: 7,
    FailureClass.HOST: 3 + 3 + 2 + 2 + 2 + 2,  # SSD, PSU, chassis, IO board, CPU, system memory
    FailureClass.MAINTENANCE: 32,  # unplanned host maintenance
    FailureClass.SOFTWARE: 54 + 2 + 7,  # software bug, dependency, NCCL watchdog timeouts
}
OPT_RESTARTS, OPT_NODE_DAYS = 40, 124 * 16
META_HEALTH_CHECK_S = 300.0  # "health checks every 5 minutes" (2410.21680): detection within 5 min
META_RESTART_S = 300.0  # u0, RECALLED from 2410.21680's ETTR example (its section was not readable here)


def _per_1000(count: float, node_days: float) -> float:
    return 1000.0 * count / node_days


def _meta(name: str, rate: float, cluster: str) -> ReliabilityInputs:
    return ReliabilityInputs(
        name=name, scope=RateScope.HARDWARE,
        source=f"Kokolis et al. arXiv 2410.21680: {cluster} {rate} hardware failures per 1000 node-days",
        classes=(ClassRate(cls=FailureClass.HARDWARE, per_1000_node_days=rate),),
        restart=RestartCost(init_s=META_RESTART_S))


def _llama3() -> ReliabilityInputs:
    classes = tuple(ClassRate(cls=c, per_1000_node_days=_per_1000(n, LLAMA3_NODE_DAYS))
                    for c, n in LLAMA3_UNEXPECTED.items())
    return ReliabilityInputs(
        name="llama3-405b", scope=RateScope.ALL, classes=classes,
        source="Llama 3 arXiv 2407.21783 Table 5: 419 unexpected interruptions, 54 days, 2048 nodes",
        restart=RestartCost(init_s=300.0))


def _opt175b() -> ReliabilityInputs:
    return ReliabilityInputs(
        name="opt-175b", scope=RateScope.ALL,
        source="metaseq OPT-175B chronicles: 40+ restarts in 16 days on 124 nodes (all causes)",
        classes=(ClassRate(cls=FailureClass.HARDWARE, per_1000_node_days=_per_1000(OPT_RESTARTS, OPT_NODE_DAYS)),))


def _none() -> ReliabilityInputs:
    return ReliabilityInputs(name="none", source="no failures (every hour productive)", scope=RateScope.ALL)


PRESETS = {"meta-rsc1": lambda: _meta("meta-rsc1", 6.50, "RSC-1"),
           "meta-rsc2": lambda: _meta("meta-rsc2", 2.34, "RSC-2"),
           "llama3-405b": _llama3, "opt-175b": _opt175b, "none": _none}


def get_reliability(name: str) -> ReliabilityInputs:
    """The preset ``name``; the error lists the valid names."""
    if name not in PRESETS:
        raise ValueError(f"reliability={name!r} is invalid: expected a preset ({', '.join(PRESETS)}) "
                         "or a TOML file with a [reliability] table")
    return PRESETS[name]()
