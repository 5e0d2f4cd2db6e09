"""A simulation job: model + parallel plan + cluster (three separate inputs, as in Calculon),
resolved from CLI flags and/or a TOML file (flags override the file)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from core.errors import invalid
from core.settings import declared
from schedules.frameworks import get_framework
from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan, check_plan
from schedules.plan.layout import INTERLEAVED_SCHEDULES, V_SCHEDULES
from sim.flow import FIDELITIES
from sim.job_sections import DETAILS, ModelSection
from sim.job_settings import BY_KEY, SECTIONS, check_setting, check_settings
from topo import ClusterSpec, get_cluster, load_cluster_file
from topo.collective_fit import CollectiveFit
from topo.hardware_profile import load_profile
from topo.toml_file import load_toml

# Settings a job file or flags may give, by section of the TOML file (:mod:`sim.job_settings`).
MODEL_FIELDS = {d.name: d.spec.sets or d.name for d in declared(ModelSection) if d.name != "model"}
"""A model dimension's setting -> the ModelSpec field it sets (``model`` names the preset)."""
PLAN_KEYS = tuple(d.name for d in declared(ParallelPlan))
CLUSTER_KEYS = SECTIONS["cluster"]
SIM_KEYS = SECTIONS["sim"]

# What ``resolve_job`` used with no settings at all before the default job (library callers).
DEFAULTS: dict[str, Any] = {
    "model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2,
    "microbatch_size": 1, "global_batch": 32, "schedule": "1f1b",
}
# The embedded default job the command line starts from: every setting not given keeps its value
# here; dp is the GPUs left, the global batch is microbatches x dp x microbatch_size.
DEFAULT_JOB: Mapping[str, Any] = MappingProxyType({
    "model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2,
    "microbatch_size": 1, "microbatches": 16, "schedule": "1f1b",
})
CHUNKED_SCHEDULES = INTERLEAVED_SCHEDULES + V_SCHEDULES


def default_vpp(schedule: str) -> int:
    """Model chunks per pipeline rank a schedule runs with when vpp is not given (2 for the
    interleaved and V schedules, else 1)."""
    return 2 if schedule in CHUNKED_SCHEDULES else 1


@dataclass(frozen=True, kw_only=True)
class Job:
    """Everything one simulation needs.

    Attributes:
        model, plan, cluster: the three inputs.
        steps: training steps to simulate.
        folded: simulate one rank per pipeline rank (identical ranks folded); False = every rank.
        ideal_network: communication costs nothing (isolates schedule effects).
        detail: Timeline detail: "op" (a span per op), "task" (a span per task and lane) or "auto".
        collective_fits: measured collective costs (a hardware profile's) used instead of the
            analytic model where they apply.
        fidelity: network model: "analytic" (alpha-beta durations) or "flow" (communication
            tasks as max-min fair flows on the links, :mod:`sim.flow`).
        jitter_cv: coefficient of variation of each rank's compute between two collectives
            (stragglers as an expected value, :mod:`sim.stragglers`); 0 = identical ranks.
        exact: simulate every micro-batch (no steady-state extension, :mod:`sim.steady_state`).
        interference: compute runs slower beside communication kernels (:mod:`sim.interference`).
    """

    model: ModelSpec
    plan: ParallelPlan
    cluster: ClusterSpec
    steps: int = 1
    folded: bool = True
    ideal_network: bool = False
    detail: str = "auto"
    collective_fits: tuple[CollectiveFit, ...] = ()
    fidelity: str = "analytic"
    jitter_cv: float = 0.0
    exact: bool = False
    interference: bool = True

    def __post_init__(self) -> None:
        if self.plan.world_size != self.cluster.num_gpus:
            raise invalid("dp", self.plan.dp,
                          f"tp*cp*pp*dp = {self.plan.world_size} must equal the cluster's GPUs "
                          f"({self.cluster.nodes} nodes x {self.cluster.gpus_per_node} = {self.cluster.num_gpus})")
        if self.steps < 1:
            raise invalid("steps", self.steps, "expected an integer >= 1")
        if self.detail not in DETAILS:
            raise invalid("detail", self.detail, "expected one of " + ", ".join(DETAILS))
        if self.fidelity not in FIDELITIES:
            raise invalid("fidelity", self.fidelity, "expected one of " + ", ".join(FIDELITIES))
        if (isinstance(self.jitter_cv, bool) or not isinstance(self.jitter_cv, int | float)
                or not 0.0 <= self.jitter_cv < 1.0):
            raise invalid("jitter_cv", self.jitter_cv, "expected a number in [0, 1)")
        check_plan(self.model, self.plan)
        self._check_precision()

    def _check_precision(self) -> None:
        """The plan's dtype has math on the device (before any simulation); MXFP8 needs Blackwell
        (its 1x32 block-scaled GEMMs are a Blackwell tensor-core format, TE ``mxfp8.rst``)."""
        device = self.cluster.device
        device.peak_flops(self.plan.dtype)  # a one-line error listing the device's dtypes
        if self.plan.dtype == "fp8" and self.plan.fp8_recipe == "mxfp8" and device.compute_capability < BLACKWELL:
            raise invalid("fp8_recipe", "mxfp8", f"needs a Blackwell GPU (device {device.name!r} is not): use "
                                                 "delayed, tensorwise, rowwise or blockwise")


BLACKWELL = 100  # CUDA compute capability x 10 of the first Blackwell GPUs


def read_job_file(path: str | Path) -> dict[str, Any]:
    """Flat settings from a TOML job file; unreadable files, invalid TOML, unknown sections/keys
    and invalid values are one-line errors starting with the path (:func:`topo.toml_file.load_toml`)."""
    return load_toml(path, _flat_settings)


FILE_SECTIONS = (*SECTIONS, "reliability")  # [reliability]: read by sim.run.reliability_file


def _flat_settings(data: dict[str, Any]) -> dict[str, Any]:
    """The settings of a parsed job file, its sections flattened, each value checked
    (:mod:`sim.job_settings`); unknown sections and keys are errors. A key names its setting
    (``[framework] preset`` is ``framework_preset``)."""
    settings: dict[str, Any] = {}
    for section, values in data.items():
        if section not in FILE_SECTIONS or not isinstance(values, Mapping):
            raise invalid("section", section, "expected one of [" + "], [".join(FILE_SECTIONS) + "]")
        if section == "reliability":
            continue
        for key, value in values.items():
            field = f"{section}.{key}"
            name = BY_KEY.get((section, key))
            if name is None:
                valid = [k for (sec, k) in BY_KEY if sec == section]
                raise invalid(field, value, f"valid keys: {', '.join(valid)}")
            check_setting(name, value, field)
            settings[name] = value
    return settings


def resolve_job(settings: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> Job:
    """Build a Job from flat settings (job file merged with flags), each checked
    (:func:`sim.job_settings.check_setting`).

    ``defaults`` (the command line passes :data:`DEFAULT_JOB`): a job every setting not given
    keeps; dp is the GPUs left; with dp but no nodes the cluster is sized to the plan; the global
    batch is microbatches x dp x microbatch_size. Without ``defaults`` (library callers), unset plan
    fields take :class:`~schedules.plan.ParallelPlan`'s defaults and :data:`DEFAULTS` applies
    only when no setting is given at all.
    """
    s = {k: v for k, v in settings.items() if v is not None}
    check_settings(s)
    if s.get("microbatch_size") == "auto":  # sim.microbatch_tuning chooses it after resolving
        del s["microbatch_size"]
    grow, given = False, set(s)
    if defaults is not None:
        s, grow = _with_defaults(s, defaults)
    model = _resolve_model(s)
    cluster = _resolve_cluster(s)
    plan = _resolve_plan(s, cluster, grow=grow, defaulted=frozenset(set(s) - given))
    cluster = _fit_nodes(cluster, plan, explicit_nodes="nodes" in s and not grow)
    fits: tuple[CollectiveFit, ...] = ()
    if "profile" in s:  # a hardware profile (trainsim calibrate) on top of the cluster
        profile = load_profile(s["profile"])
        cluster, fits = profile.apply(cluster), profile.collectives
    return Job(model=model, plan=plan, cluster=cluster, steps=int(s.get("steps", 1)),
               folded=not s.get("full", False), ideal_network=bool(s.get("ideal_network", False)),
               detail=str(s.get("detail", "auto")), collective_fits=fits,
               fidelity=str(s.get("fidelity", "analytic")), jitter_cv=s.get("jitter_cv", 0.0),
               exact=bool(s.get("exact", False)), interference=bool(s.get("interference", True)))


def _with_defaults(s: dict[str, Any], defaults: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``s`` completed from the default job; True when its node count is the default's (and may
    grow to hold a plan larger than the default cluster)."""
    out = dict(s)
    if not all(k in s for k in REQUIRED_DIMS):  # every dimension given: a custom model
        out.setdefault("model", defaults["model"])
    for key in ("tp", "pp", "microbatch_size"):
        out.setdefault(key, defaults[key])
    grow = False
    if "cluster" not in s:
        out["cluster"] = defaults["cluster"]
        if "nodes" not in s and "dp" not in s:
            out["nodes"], grow = defaults["nodes"], True
    if "global_batch" not in s:
        out.setdefault("microbatches", defaults["microbatches"])
    if "schedule" not in s:
        out["schedule"] = "interleaved" if s.get("vpp", 1) > 1 else defaults["schedule"]
    if out.get("tp", 1) > 1:  # e.g. an MoE preset's sequence parallelism and etp
        for key, value in _preset_tp_defaults(out.get("model"), out["tp"]).items():
            out.setdefault(key, value)
    return out, grow


def _preset_tp_defaults(name: object, tp: int) -> dict[str, object]:
    """Plan fields the layers of model preset ``name`` default to under ``tp`` > 1
    (:meth:`schedules.layer_kinds.MoELayers.tp_plan_defaults`); none for a custom model."""
    try:
        return layer_kind(get_model(name)).tp_plan_defaults(tp) if isinstance(name, str) else {}
    except ValueError:
        return {}


REQUIRED_DIMS = ("layers", "hidden", "heads", "vocab", "seq_len")
MAX_PARAMS = 1e15


def _resolve_model(s: Mapping[str, Any]) -> ModelSpec:
    dims = {MODEL_FIELDS[k]: s[k] for k in MODEL_FIELDS if k in s}
    name = s.get("model")
    if name is None and dims:
        missing = [k for k in REQUIRED_DIMS if k not in s]
        if missing:
            raise invalid("model", None, "give a model preset, or every dimension (missing: "
                                + ", ".join(missing) + ")")
    base = None if name is None and dims else get_model(str(name or DEFAULTS["model"]))
    try:
        model = ModelSpec(name="custom", **dims) if base is None else dataclasses.replace(base, **dims)
    except ValueError as exc:  # name the setting as flags and job files do (hidden, not hidden_size)
        text = str(exc)
        field = text.split("=", 1)[0]
        key = next((k for k, f in MODEL_FIELDS.items() if f == field), None)
        raise ValueError(f"{key}{text[len(field):]}" if key else text) from None
    if model.num_params() > MAX_PARAMS:
        raise invalid("model", model.name, f"{model.num_params():.3g} parameters; at most {MAX_PARAMS:.0e}")
    return model


def _resolve_cluster(s: Mapping[str, Any]) -> ClusterSpec:
    cluster = _named_cluster(s)
    cv = s.get("gpu_speed_cv")
    if cv is None:
        return cluster
    return dataclasses.replace(cluster, device=dataclasses.replace(cluster.device, speed_cv=float(cv)))


def _named_cluster(s: Mapping[str, Any]) -> ClusterSpec:
    name = str(s.get("cluster", DEFAULTS["cluster"]))
    price = s.get("price_per_gpu_hour_usd")
    if name.endswith(".toml") or Path(name).is_file():  # resized and repriced as a preset is
        sizes: dict[str, Any] = {"nodes": s.get("nodes"), "gpus_per_node": s.get("gpus_per_node"),
                                 "price_per_gpu_hour_usd": None if price is None else float(price)}
        return dataclasses.replace(load_cluster_file(name), **{k: v for k, v in sizes.items() if v is not None})
    nodes = s.get("nodes", DEFAULTS["nodes"] if "cluster" not in s else None)
    return get_cluster(name, nodes=nodes, gpus_per_node=s.get("gpus_per_node"), price_per_gpu_hour_usd=price)


def _resolve_plan(s: Mapping[str, Any], cluster: ClusterSpec, grow: bool = False,
                  defaulted: frozenset[str] = frozenset()) -> ParallelPlan:
    values = {k: s[k] for k in PLAN_KEYS if k in s}
    if not any(k in s for k in (*SECTIONS["plan"], *SECTIONS["framework"], *SECTIONS["model"], *CLUSTER_KEYS)):  # the default job
        values = {k: DEFAULTS[k] for k in ("tp", "pp", "microbatch_size", "global_batch", "schedule")}
    if "framework_preset" in s:  # the stack's choices, under the fields given explicitly
        preset = get_framework(s["framework_preset"])
        values = {**preset.plan_fields(), **values}
    if isinstance(values.get("placement"), str):
        values["placement"] = tuple(p.strip() for p in values["placement"].split(","))
    elif isinstance(values.get("placement"), list):
        values["placement"] = tuple(values["placement"])
    if "dp" not in values:
        inner = int(values.get("tp", 1)) * int(values.get("cp", 1)) * int(values.get("pp", 1))
        if grow and inner > cluster.num_gpus and inner % cluster.gpus_per_node == 0:
            values["dp"] = 1  # a plan larger than the default cluster gets the nodes it needs
        elif cluster.num_gpus % inner:
            field = next((k for k in ("tp", "cp", "pp") if k in values and k not in defaulted), "tp")
            from_default = [f"{k}={values[k]}" for k in ("tp", "pp") if k in defaulted]
            why = f" ({', '.join(from_default)}: the default job's; give --tp/--pp)" if from_default else ""
            raise invalid(field, values.get(field, 1),
                                f"tp*cp*pp = {inner} must divide the cluster's {cluster.num_gpus} GPUs{why}")
        else:
            values["dp"] = cluster.num_gpus // inner
    per_pipeline = values["dp"] * values.get("microbatch_size", 1)
    if "microbatches" in s:
        if "global_batch" in values and values["global_batch"] != s["microbatches"] * per_pipeline:
            raise invalid("microbatches", s["microbatches"],
                                f"give microbatches or global_batch (--microbatches or --global-batch), not "
                                f"both (global_batch="
                                f"{values['global_batch']} is {values['global_batch'] / per_pipeline:g} "
                                f"micro-batches of dp*microbatch_size = {per_pipeline})")
        values["global_batch"] = s["microbatches"] * per_pipeline
    if "global_batch" not in values:
        values["global_batch"] = per_pipeline * max(1, values.get("pp", 1)) * 2
    if int(values.get("vpp", 1)) > 1 and "schedule" not in values:
        values["schedule"] = "interleaved"
    if "vpp" not in values and "schedule" in values:
        values["vpp"] = default_vpp(values["schedule"])
    _check_fp8_given(s, values)
    return ParallelPlan(**values)


FP8_KEYS = ("fp8_recipe", "fp8_weight_cast", "fp8_param_gather", "fp8_bf16_layers")


def _check_fp8_given(s: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    """An FP8 setting given explicitly needs an FP8 plan (a preset's FP8 choices need not)."""
    given = next((k for k in FP8_KEYS if k in s), None)
    if given is not None and values.get("dtype", "bf16") != "fp8":
        raise invalid(given, s[given], f"an FP8 setting needs dtype fp8 (got dtype {values.get('dtype', 'bf16')})")


def _fit_nodes(cluster: ClusterSpec, plan: ParallelPlan, explicit_nodes: bool) -> ClusterSpec:
    """Without --nodes, size the cluster to the plan (tp*cp*pp*dp GPUs)."""
    if explicit_nodes or plan.world_size == cluster.num_gpus:
        return cluster
    if plan.world_size % cluster.gpus_per_node:
        raise invalid("dp", plan.dp, f"tp*cp*pp*dp = {plan.world_size} is not a whole number of "
                            f"{cluster.gpus_per_node}-GPU nodes")
    return dataclasses.replace(cluster, nodes=plan.world_size // cluster.gpus_per_node)


def describe_job(job: Job, schedule: str | None = None) -> str:
    """The job actually simulated, on one line, e.g. ``llama3-8b on 2 x dgx-h100 (16 GPUs): TP4 CP1
    PP2 DP2 1f1b, 16 micro-batches of 1 per pipeline (global batch 32), ZeRO-0``; ``schedule`` replaces the schedule's name (compare)."""
    p, c = job.plan, job.cluster
    vpp = f" VPP{p.vpp}" if p.vpp > 1 else ""
    ep = f" EP{p.ep}" + (f" ETP{p.etp}" if p.etp > 1 else "") if p.ep > 1 else ""
    hybrid = f" (HSDP {p.dp_replicate} x {p.dp // p.dp_replicate})" if p.hybrid else ""
    return (f"{job.model.name} on {c.nodes} x {c.name} ({c.num_gpus} GPUs): TP{p.tp} CP{p.cp} PP{p.pp} "
            f"DP{p.dp}{hybrid}{ep}{vpp} {schedule or p.schedule}, {p.num_microbatches} micro-batches of {p.microbatch_size} per "
            f"pipeline (global batch {p.global_batch}), ZeRO-{p.zero}")
