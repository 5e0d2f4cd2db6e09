"""What a sweep covers, for the first lines of every output: the training run (and which of its
inputs were defaulted), and per design and GPU count its size, its price per GPU-hour and where
that price comes from, how many plans were evaluated, its fastest and cheapest plan, or why no
plan was left."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schedules.model import ModelSpec
from sim.explore.defaults import DEFAULT_NOTES
from sim.explore.designs import base_cluster, price_basis, sized_cluster
from sim.explore.display import count_short, display_rows, usd
from sim.explore.rank import COST, TIME, Row, describe_plan, distinguishable, ranked
from sim.explore.spec import SweepSpec
from sim.explore.sweep import SweepPlan
from sim.memory import GIB


def run_inputs(spec: SweepSpec, model: ModelSpec) -> dict[str, Any]:
    """The training run the sweep sizes (JSON-ready; ``defaulted`` names what the user left out)."""
    seq = model.seq_len
    out = {"model": spec.model, "params_b": round(model.num_params() / 1e9, 3), "seq_len": seq,
           "tokens": spec.tokens, "global_batch": spec.global_batch,
           "global_batch_tokens": spec.global_batch * seq, "defaulted": list(spec.defaulted)}
    if spec.space.framework_preset:  # only when given: a sweep without one writes what it always wrote
        out["framework"] = spec.space.framework_preset
    return out


def describe_inputs(inputs: dict[str, Any]) -> str:
    """One line: model, tokens and global batch, each default named as such."""
    notes = {k: f" [{DEFAULT_NOTES[k]}]" if k in inputs["defaulted"] else "" for k in DEFAULT_NOTES}
    stack = f"; every plan on the {inputs['framework']} preset" if inputs.get("framework") else ""
    return (f"{inputs['model']} ({inputs['params_b']:.3g}B parameters, sequence {inputs['seq_len']}): "
            f"{count_short(inputs['tokens'])} tokens{notes['tokens']}, global batch {inputs['global_batch']} "
            f"sequences = {count_short(inputs['global_batch_tokens'])} tokens{notes['global_batch']}{stack}")


def design_rows(spec: SweepSpec, plan: SweepPlan, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One row per (design, GPU count): size, price and its source, plans, fastest and cheapest."""
    fitting = ranked(rows)
    overall = fitting[0] if fitting else None
    out = []
    for design, gpus in spec.points():
        key = f"{base_cluster(design).name}/{gpus}"
        cluster = sized_cluster(design, gpus, spec.price_of(design))
        mine = [r for r in fitting if f"{r['design']}/{r['gpus']}" == key]
        fastest, cheapest = (mine[0], min(mine, key=lambda r: (r[COST], r[TIME], r["id"]))) if mine else (None, None)
        out.append({
            "design": key.split("/")[0], "gpus": gpus, "nodes": cluster.nodes, "device": cluster.device.name,
            "hbm_gib": round(cluster.device.hbm_bytes / GIB, 3), "usd/gpu-h": cluster.price_per_gpu_hour_usd,
            "price_source": price_basis(design, spec.price_of(design)), "plans": len(mine),
            "fastest_days": fastest and fastest[TIME], "fastest_cost_usd": fastest and fastest[COST],
            "cheapest_cost_usd": cheapest and cheapest[COST], "cheapest_days": cheapest and cheapest[TIME],
            "fastest_plan": fastest and describe_plan(fastest), "why_none": plan.empty.get(key),
            "vs_fastest": _versus(fastest, overall)})
    return out


def _versus(fastest: Row | None, overall: Row | None) -> str | None:
    """How a design's fastest plan compares with the sweep's fastest: "fastest", "slower" (beyond
    the 80% bands, :func:`sim.explore.rank.distinguishable`) or "within the error band"."""
    if fastest is None or overall is None:
        return None
    if fastest is overall:
        return "fastest"
    return "slower" if distinguishable(overall, fastest) else "within the error band"


DESIGN_FORMATS = {"usd/gpu-h": usd, "fastest_cost_usd": usd, "cheapest_cost_usd": usd}
DESIGN_COLUMNS = ("design", "gpus", "device", "usd/gpu-h", "price_source", "plans", "fastest_days",
                  "vs_fastest", "fastest_cost_usd", "cheapest_cost_usd", "cheapest_days")


def shown_designs(designs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`design_rows` as printed (money as ``$707,300``, no plan: an em dash)."""
    rows = display_rows([{k: d[k] for k in DESIGN_COLUMNS} for d in designs], DESIGN_FORMATS)
    return [{k: ("—" if v is None else v) for k, v in r.items()} for r in rows]
