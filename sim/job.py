"""A simulation job: model + parallel plan + cluster (three separate inputs, as in Calculon),
resolved from CLI flags and/or a TOML file (flags override the file)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedules.errors import invalid
from schedules.model import ModelSpec, get_model
from schedules.plan import ParallelPlan, check_plan
from sim.flow.transport import FIDELITIES
from topo import ClusterSpec, get_cluster, load_cluster_file
from topo.collective_fit import CollectiveFit
from topo.hardware_profile import load_profile
from topo.toml_file import load_toml

DETAILS = ("auto", "op", "task")

# Settings a job file or flags may give, by section of the TOML file.
MODEL_KEYS = {"model": "preset", "layers": "num_layers", "hidden": "hidden_size", "heads": "num_heads",
              "kv_heads": "num_kv_heads", "ffn_hidden": "ffn_hidden_size", "ffn_kind": "ffn_kind",
              "vocab": "vocab_size", "seq_len": "seq_len"}
PLAN_KEYS = ("tp", "cp", "pp", "dp", "vpp", "microbatch_size", "global_batch", "zero",
             "sequence_parallel", "recompute", "dtype", "schedule", "uneven_stages", "placement",
             "dp_bucket_bytes", "overlap_grad_reduce", "overlap_param_gather", "flash_attention",
             "offload", "offload_device", "offload_activations", "ep", "etp", "moe_imbalance", "moe_overlap")
CLUSTER_KEYS = ("cluster", "nodes", "gpus_per_node", "price_per_gpu_hour_usd", "profile")
SIM_KEYS = ("steps", "full", "ideal_network", "detail", "fidelity", "jitter_cv", "exact", "interference")
SECTIONS = {"model": tuple(MODEL_KEYS), "plan": PLAN_KEYS, "cluster": CLUSTER_KEYS, "sim": SIM_KEYS}

DEFAULTS: dict[str, Any] = {
    "model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2,
    "microbatch_size": 1, "global_batch": 32, "schedule": "1f1b",
}


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


def read_job_file(path: str | Path) -> dict[str, Any]:
    """Flat settings from a TOML job file; unreadable files, invalid TOML and unknown
    sections/keys are one-line errors starting with the path (:func:`topo.toml_file.load_toml`)."""
    return load_toml(path, _flat_settings)


def _flat_settings(data: dict[str, Any]) -> dict[str, Any]:
    """The settings of a parsed job file, its sections flattened; unknown ones are errors."""
    settings: dict[str, Any] = {}
    for section, values in data.items():
        if section not in SECTIONS or not isinstance(values, Mapping):
            raise invalid("section", section, "expected one of [" + "], [".join(SECTIONS) + "]")
        for key, value in values.items():
            if key not in SECTIONS[section]:
                raise invalid(f"{section}.{key}", value, f"valid keys: {', '.join(SECTIONS[section])}")
            settings[key] = value
    return settings


def resolve_job(settings: Mapping[str, Any]) -> Job:
    """Build a Job from flat settings (job file merged with flags), filling defaults."""
    s = {k: v for k, v in settings.items() if v is not None}
    model = _resolve_model(s)
    cluster = _resolve_cluster(s)
    plan = _resolve_plan(s, cluster)
    cluster = _fit_nodes(cluster, plan, explicit_nodes="nodes" in s)
    fits: tuple[CollectiveFit, ...] = ()
    if "profile" in s:  # a hardware profile (trainsim calibrate) on top of the cluster
        profile = load_profile(s["profile"])
        cluster, fits = profile.apply(cluster), profile.collectives
    return Job(model=model, plan=plan, cluster=cluster, steps=int(s.get("steps", 1)),
               folded=not s.get("full", False), ideal_network=bool(s.get("ideal_network", False)),
               detail=str(s.get("detail", "auto")), collective_fits=fits,
               fidelity=str(s.get("fidelity", "analytic")), jitter_cv=s.get("jitter_cv", 0.0),
               exact=bool(s.get("exact", False)), interference=bool(s.get("interference", True)))


def _resolve_model(s: Mapping[str, Any]) -> ModelSpec:
    dims = {MODEL_KEYS[k]: s[k] for k in MODEL_KEYS if k != "model" and k in s}
    name = s.get("model")
    if name is None and dims:
        return ModelSpec(name="custom", **dims)
    base = get_model(str(name or DEFAULTS["model"]))
    return dataclasses.replace(base, **dims) if dims else base


def _resolve_cluster(s: Mapping[str, Any]) -> ClusterSpec:
    name = str(s.get("cluster", DEFAULTS["cluster"]))
    price = s.get("price_per_gpu_hour_usd")
    if name.endswith(".toml") or Path(name).is_file():
        cluster = load_cluster_file(name)
        if price is not None:
            cluster = dataclasses.replace(cluster, price_per_gpu_hour_usd=float(price))
        return cluster
    nodes = s.get("nodes", DEFAULTS["nodes"] if "cluster" not in s else None)
    return get_cluster(name, nodes=nodes, gpus_per_node=s.get("gpus_per_node"), price_per_gpu_hour_usd=price)


def _resolve_plan(s: Mapping[str, Any], cluster: ClusterSpec) -> ParallelPlan:
    values = {k: s[k] for k in PLAN_KEYS if k in s}
    if not any(k in s for k in (*PLAN_KEYS, *MODEL_KEYS, *CLUSTER_KEYS)):  # the embedded default job
        values = {k: DEFAULTS[k] for k in ("tp", "pp", "microbatch_size", "global_batch", "schedule")}
    if isinstance(values.get("placement"), str):
        values["placement"] = tuple(values["placement"].split(","))
    if "dp" not in values:
        inner = int(values.get("tp", 1)) * int(values.get("cp", 1)) * int(values.get("pp", 1))
        if cluster.num_gpus % inner:
            raise invalid("tp", values.get("tp", 1), f"tp*cp*pp = {inner} must divide the cluster's "
                          f"{cluster.num_gpus} GPUs")
        values["dp"] = cluster.num_gpus // inner
    if "global_batch" not in values:
        values["global_batch"] = values["dp"] * values.get("microbatch_size", 1) * max(1, values.get("pp", 1)) * 2
    if int(values.get("vpp", 1)) > 1 and "schedule" not in values:
        values["schedule"] = "interleaved"
    return ParallelPlan(**values)


def _fit_nodes(cluster: ClusterSpec, plan: ParallelPlan, explicit_nodes: bool) -> ClusterSpec:
    """Without --nodes, size the cluster to the plan (tp*cp*pp*dp GPUs)."""
    if explicit_nodes or plan.world_size == cluster.num_gpus:
        return cluster
    if plan.world_size % cluster.gpus_per_node:
        raise invalid("dp", plan.dp, f"tp*cp*pp*dp = {plan.world_size} is not a whole number of "
                      f"{cluster.gpus_per_node}-GPU nodes")
    return dataclasses.replace(cluster, nodes=plan.world_size // cluster.gpus_per_node)
