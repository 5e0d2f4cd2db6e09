"""The settings of a job, one table: what each key accepts, in which job-file section it lives.

Job files (:func:`sim.job.read_job_file`), command-line flags (:mod:`sim.cli.job_args`) and
:func:`sim.job.resolve_job` check every value through :func:`check_setting`, so a bad value gives
the same one-line error wherever it comes from: the field, the value (shortened when long) and
what is valid, e.g. ``plan.tp='four' is invalid: expected an integer in [1, 65536]``.

Values are type-checked, not coerced: a TOML string ``"no"`` is not a boolean, ``2.0`` is not
an integer, NaN and infinities are not numbers. Upper bounds refuse values no run could use
(``layers = 1000000000``); what a valid but large plan costs is the size guard's business
(:mod:`sim.size_guard`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from core.errors import invalid
from schedules.attention_kernels import ATTENTION_KERNELS
from schedules.frameworks import FRAMEWORK_PRESETS
from schedules.plan import (
    ACTIVATION_OFFLOAD_UNITS,
    DIMENSIONS,
    DTYPES,
    ELEMENTWISE_KINDS,
    FP8_RECIPES,
    FP8_WEIGHT_CASTS,
    FRAMEWORKS,
    FSDP_RESHARD_KINDS,
    GRAD_REDUCE_DTYPES,
    GRAD_SYNC_KINDS,
    LOSS_DTYPES,
    MOE_DISPATCHERS,
    MOE_OVERLAP_KINDS,
    OFFLOAD_DEVICES,
    OFFLOAD_KINDS,
    OPTIMIZER_KINDS,
    PIPELINE_P2P_KINDS,
    RECOMPUTE_KINDS,
    SCHEDULE_NAMES,
    SELECTIVE_KINDS,
    ZERO3_GATHERS,
    ZERO3_UNITS,
)
from sim.flow.transport import FIDELITIES
from topo.cluster import MAX_GPUS_PER_NODE, MAX_NODES, MAX_PRICE_PER_GPU_HOUR_USD
from topo.variability import MAX_SPEED_CV

MAX_NAME_CHARS = 255  # a file name component (NAME_MAX on Linux); longer names are refused
MAX_PATH_CHARS = 4096  # PATH_MAX


@dataclass(frozen=True)
class Rule:
    """A rule for one setting's values.

    Attributes:
        what: what is valid, as the error says it ("an integer in [1, 65536]").
        accepts: True when a value follows the rule.
        values: the valid values of a closed vocabulary (empty for open kinds).
    """

    what: str
    accepts: Callable[[Any], bool]
    values: tuple[Any, ...] = ()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(lo: int, hi: int) -> Rule:
    """An int (not a bool, not a float) in [lo, hi]."""
    return Rule(f"expected an integer in [{lo}, {hi}]", lambda v: _is_int(v) and lo <= v <= hi)


def integer_or_auto(lo: int, hi: int) -> Rule:
    """An int in [lo, hi], or "auto" (a rule of the simulator chooses it)."""
    return Rule(f"expected an integer in [{lo}, {hi}] or \"auto\"",
                lambda v: v == "auto" or (_is_int(v) and lo <= v <= hi))


def number(lo: float, hi: float, *, hi_open: bool = False) -> Rule:
    """A finite int or float in [lo, hi] (or [lo, hi) with ``hi_open``)."""
    def accepts(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return False
        return lo <= v < hi if hi_open else lo <= v <= hi
    return Rule(f"expected a number in [{lo:g}, {hi:g}{')' if hi_open else ']'}", accepts)


BOOLEAN = Rule("expected true or false (a boolean, not a string)", lambda v: isinstance(v, bool), (False, True))


def choice(values: tuple[Any, ...]) -> Rule:
    """One of ``values`` (exact type: 1 is not True; an enum member stands for its plain value)."""
    plain = tuple(c.value if isinstance(c, Enum) else c for c in values)
    return Rule("expected one of " + ", ".join(map(str, plain)),
                lambda v: any(type(v) is type(c) and v == c for c in plain), plain)


def _name_ok(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_PATH_CHARS and "\0" not in v \
        and all(len(part) <= MAX_NAME_CHARS for part in v.split("/"))


NAME = Rule(f"expected a name or path (path components of at most {MAX_NAME_CHARS} characters)", _name_ok)


def _placement_ok(v: Any) -> bool:
    parts = v.split(",") if isinstance(v, str) else v
    return isinstance(parts, list | tuple) and all(isinstance(p, str) for p in parts) \
        and sorted(p.strip() for p in parts) == sorted(DIMENSIONS)


PLACEMENT = Rule("expected a permutation of tp,cp,dp,pp (innermost first)", _placement_ok)

DEGREE = integer(1, 65536)


@dataclass(frozen=True)
class Setting:
    """One key of a job: its job-file section and its rule."""

    key: str
    section: str
    rule: Rule


def _table(section: str, **rules: Rule) -> dict[str, Setting]:
    return {k: Setting(k, section, rule) for k, rule in rules.items()}


SETTINGS: Mapping[str, Setting] = {
    **_table("model", model=NAME, layers=integer(1, 100_000), hidden=integer(1, 1 << 20),
             heads=integer(1, 65536), kv_heads=integer(1, 65536), ffn_hidden=integer(1, 1 << 24),
             ffn_kind=choice(("gelu", "swiglu")), vocab=integer(1, 100_000_000), seq_len=integer(1, 100_000_000)),
    **_table("plan", tp=DEGREE, cp=DEGREE, pp=DEGREE, dp=DEGREE, vpp=integer(1, 1024),
             microbatch_size=integer_or_auto(1, 1_000_000), global_batch=integer(1, 1_000_000_000),
             microbatches=integer(1, 10_000_000), zero=choice((0, 1, 2, 3)), sequence_parallel=BOOLEAN,
             recompute=choice(RECOMPUTE_KINDS), dtype=choice(DTYPES), schedule=choice(SCHEDULE_NAMES),
             uneven_stages=BOOLEAN, placement=PLACEMENT, dp_bucket_bytes=integer(1, 10**13),
             overlap_grad_reduce=BOOLEAN, overlap_param_gather=BOOLEAN, flash_attention=BOOLEAN,
             offload=choice(OFFLOAD_KINDS), offload_device=choice(OFFLOAD_DEVICES), offload_activations=BOOLEAN,
             activation_offload_unit=choice(ACTIVATION_OFFLOAD_UNITS),
             framework=choice(FRAMEWORKS), framework_preset=choice(tuple(FRAMEWORK_PRESETS)),
             elementwise=choice(ELEMENTWISE_KINDS), optimizer=choice(OPTIMIZER_KINDS),
             selective_recompute=choice(SELECTIVE_KINDS), zero3_unit=choice(ZERO3_UNITS),
             zero3_gather=choice(ZERO3_GATHERS),
             zero3_max_live_params=number(0, 1e15), zero3_max_reuse_distance=number(0, 1e15),
             zero3_prefetch_bucket_params=number(0, 1e15), tp_comm_overlap=BOOLEAN,
             grad_reduce_dtype=choice(GRAD_REDUCE_DTYPES), ep=DEGREE, etp=DEGREE,
             moe_imbalance=number(1, 1e6), moe_overlap=choice(MOE_OVERLAP_KINDS),
             moe_dispatcher=choice(MOE_DISPATCHERS), attention_kernel=choice(ATTENTION_KERNELS),
             fsdp_reshard_after_forward=choice(FSDP_RESHARD_KINDS), dp_replicate=DEGREE,
             master_weights=BOOLEAN, loss_dtype=choice(LOSS_DTYPES),
             grad_sync=choice(GRAD_SYNC_KINDS), fp8_recipe=choice(FP8_RECIPES),
             fp8_weight_cast=choice(FP8_WEIGHT_CASTS), fp8_param_gather=BOOLEAN,
             fp8_bf16_layers=integer(0, 100_000), pipeline_p2p=choice(PIPELINE_P2P_KINDS),
             loss_allreduce=BOOLEAN, loss_nan_check=BOOLEAN, timer_syncs=BOOLEAN),
    **_table("cluster", cluster=NAME, nodes=integer(1, MAX_NODES), gpus_per_node=integer(1, MAX_GPUS_PER_NODE),
             price_per_gpu_hour_usd=number(0, MAX_PRICE_PER_GPU_HOUR_USD), profile=NAME, gpu_speed_cv=number(0, MAX_SPEED_CV)),
    **_table("sim", steps=integer(1, 1_000_000), full=BOOLEAN, ideal_network=BOOLEAN,
             detail=choice(("auto", "op", "task")), fidelity=choice(FIDELITIES),
             jitter_cv=number(0, 1, hi_open=True), exact=BOOLEAN, interference=BOOLEAN),
}
SECTIONS: Mapping[str, tuple[str, ...]] = {
    section: tuple(k for k, s in SETTINGS.items() if s.section == section)
    for section in ("model", "plan", "cluster", "sim")}


def check_setting(key: str, value: Any, field: str | None = None) -> None:
    """Raise a one-line ValueError unless ``value`` is valid for ``key`` (named ``field`` in it)."""
    setting = SETTINGS.get(key)
    if setting is None:
        raise invalid(field or key, value, "unknown setting; valid: " + ", ".join(SETTINGS))
    if not setting.rule.accepts(value):
        raise invalid(field or key, value, setting.rule.what)


def check_settings(settings: Mapping[str, Any]) -> None:
    """:func:`check_setting` on every non-None value."""
    for key, value in settings.items():
        if value is not None:
            check_setting(key, value)
