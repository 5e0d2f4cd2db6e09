"""The settings of a job that are not plan fields, declared as the plan's are (:mod:`core.settings`):
the ``[model]``, ``[cluster]`` and ``[sim]`` sections of a job file, the plan's micro-batch count
and the ``[framework]`` preset. ``None``: not given (the job's default applies,
:func:`sim.job.resolve_job`)."""

from __future__ import annotations

from dataclasses import dataclass

from core.settings import BOOLEAN, NAME, choice, integer, number, setting
from schedules.frameworks import FRAMEWORK_PRESETS
from sim.flow import FIDELITIES
from topo.cluster import MAX_GPUS_PER_NODE, MAX_NODES, MAX_PRICE_PER_GPU_HOUR_USD
from topo.variability import MAX_SPEED_CV

DETAILS = ("auto", "op", "task")


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """``[model]``: a preset, or its dimensions (which also override a preset's); each dimension
    sets the :class:`schedules.model.ModelSpec` field its declaration names (``sets``)."""

    model: str | None = setting(rule=NAME, section="model", help="model preset (see `trainsim presets`)")
    layers: int | None = setting(rule=integer(1, 100_000), section="model", sets="num_layers", help="transformer layers")
    hidden: int | None = setting(rule=integer(1, 1 << 20), section="model", sets="hidden_size", help="hidden size")
    heads: int | None = setting(rule=integer(1, 65536), section="model", sets="num_heads", help="attention heads")
    kv_heads: int | None = setting(rule=integer(1, 65536), section="model", sets="num_kv_heads", help="key/value heads (GQA)")
    ffn_hidden: int | None = setting(rule=integer(1, 1 << 24), section="model", sets="ffn_hidden_size", help="MLP inner size")
    vocab: int | None = setting(rule=integer(1, 100_000_000), section="model", sets="vocab_size", help="vocabulary size")
    seq_len: int | None = setting(rule=integer(1, 100_000_000), section="model", help="sequence length (tokens)")
    ffn_kind: str | None = setting(rule=choice(("gelu", "swiglu")), section="model", help="MLP kind")


@dataclass(frozen=True, kw_only=True)
class BatchSection:
    """``[plan]`` settings that are not plan fields, and ``[framework]``."""

    microbatches: int | None = setting(rule=integer(1, 10_000_000),
                                       help="micro-batches per pipeline per step (default 16; the global batch is "
                                            "this x dp x micro-batch size)")
    framework_preset: str | None = setting(
        rule=choice(tuple(FRAMEWORK_PRESETS)), section="framework", key="preset", flag="--framework",
        help="training stack preset: sets the runtime, fused kernels, overlap, selective recompute and ZeRO-3 unit "
             "choices that stack makes, under the flags given explicitly")


@dataclass(frozen=True, kw_only=True)
class ClusterSection:
    """``[cluster]``: a preset or cluster file, its size and price, a hardware profile."""

    cluster: str | None = setting(rule=NAME, section="cluster",
                                  help="cluster preset or a cluster TOML file (default dgx-h100)")
    nodes: int | None = setting(rule=integer(1, MAX_NODES), section="cluster",
                                help="nodes (default: 2 of the default cluster; with --dp, as many as the plan needs; "
                                     "a --cluster preset's own count)")
    gpus_per_node: int | None = setting(rule=integer(1, MAX_GPUS_PER_NODE), section="cluster",
                                        help="GPUs per node (default: the preset's)")
    price_per_gpu_hour_usd: float | None = setting(rule=number(0, MAX_PRICE_PER_GPU_HOUR_USD), section="cluster", flag="--price",
                                                   metavar="USD", help="price per GPU-hour")
    profile: str | None = setting(rule=NAME, section="cluster", metavar="PROFILE.toml",
                                  help="hardware profile (trainsim calibrate) applied to the cluster")
    gpu_speed_cv: float | None = setting(
        rule=number(0, MAX_SPEED_CV), section="cluster", metavar="CV",
        help="part-to-part speed variation of the GPUs (coefficient of variation); compute runs at the slowest GPU's "
             "pace (default: the device's, 0.0098 for GPU presets from Sinha et al. SC'22; 0 = identical GPUs)",
        source="Sinha et al., 'Not All GPUs Are Created Equal', SC'22")


@dataclass(frozen=True, kw_only=True)
class SimSection:
    """``[sim]``: what is simulated and how."""

    steps: int | None = setting(rule=integer(1, 1_000_000), section="sim",
                                help="training steps to simulate (default 1)")
    full: bool | None = setting(rule=BOOLEAN, section="sim", switch=True,
                                help="simulate every rank (no folding)")
    interference: bool | None = setting(rule=BOOLEAN, section="sim",
                                        help="compute runs slower beside communication kernels on GPUs (default on)")
    exact: bool | None = setting(rule=BOOLEAN, section="sim", switch=True,
                                 help="simulate every micro-batch (default: a long step is simulated with fewer "
                                      "micro-batches and its steady state extended, where that is exact)")
    ideal_network: bool | None = setting(rule=BOOLEAN, section="sim", switch=True, help="communication costs nothing")
    detail: str | None = setting(rule=choice(DETAILS), section="sim", help="timeline detail (default auto)")
    fidelity: str | None = setting(rule=choice(FIDELITIES), section="sim",
                                   help="network model: analytic (default) or flow (max-min fair flows, congestion)")
    jitter_cv: float | None = setting(rule=number(0, 1, hi_open=True), section="sim", metavar="CV",
                                      help="stragglers: coefficient of variation of each rank's compute between "
                                           "collectives (expected-value model; default 0)")
