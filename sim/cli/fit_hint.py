"""What to change when a simulated plan does not fit HBM: one line after ``simulate``'s tables.

A user who names a model and a cluster but no plan gets the default job's degrees (tp 4, pp 2,
ZeRO 0), which a large model may not fit; ``fits: no`` alone does not say what to do. The line
names the peak against the usable HBM, the largest parts at the peak, the settings that shrink
each of them (a rule per part, below), and the ``trainsim explore`` command that searches every
plan of that model and cluster for ones that fit:

- optimizer states (and fp32 gradients): ``--zero 1`` shards the optimizer states over the
  data-parallel ranks (``--zero 3`` also the parameters and gradients); with ZeRO-3 already on,
  more ranks to shard over or ``--offload optimizer``;
- activations: ``--recompute selective`` or ``full``, a smaller ``--microbatch-size``, more
  ``--tp`` (with ``--sequence-parallel``) or ``--cp``;
- parameters and gradients: more ``--tp`` or ``--pp``, or ``--zero 3``.
"""

from __future__ import annotations

from typing import Any

from schedules.model_presets import get_model
from topo.cluster_presets import get_cluster

PARTS = ("params", "grads", "optimizer", "activations")
SHOWN_PARTS = 2  # the largest parts named


def fit_hint(summary: dict[str, Any]) -> str | None:
    """The line for ``simulate``'s human output when the plan does not fit HBM (None when it does)."""
    timeline = summary.get("memory_timeline", {})
    if timeline.get("fits_hbm", True):
        return None
    at_peak = timeline.get("at_peak_gib") or summary.get("memory_gib") or {}
    plan = summary["config"]["plan"]
    largest = sorted((p for p in PARTS if at_peak.get(p)), key=lambda p: -at_peak[p])[:SHOWN_PARTS]
    parts = ", ".join(f"{p} {at_peak[p]:.1f}" for p in largest)
    levers = "; ".join(dict.fromkeys(_lever(p, plan) for p in largest))
    return (f"does not fit: peak {timeline['peak_gib']:.1f} GiB of {timeline['usable_hbm_gib']:.1f} usable per GPU "
            f"(largest: {parts} GiB); {levers}; or search every plan: {_explore_command(summary)}")


def _lever(part: str, plan: dict[str, Any]) -> str:
    """The settings that shrink ``part`` under ``plan`` (the module docstring's rules)."""
    zero, dp = int(plan["zero"]), int(plan["dp"])
    if part == "optimizer":
        if zero < 3 and dp > 1:
            return f"--zero {1 if zero == 0 else 3} shards the optimizer states over dp={dp}" + \
                   (" (--zero 3 also parameters and gradients)" if zero == 0 else " with parameters and gradients")
        return "more data-parallel ranks to shard over, or --offload optimizer"
    if part == "activations":
        if plan["recompute"] != "full":
            return "--recompute " + ("selective or full" if plan["recompute"] == "none" else "full") + \
                   " (or a smaller --microbatch-size, more --tp with --sequence-parallel, --cp)"
        return "a smaller --microbatch-size, more --tp with --sequence-parallel, or --cp"
    return "more --tp or --pp" + (", or --zero 3" if zero < 3 and dp > 1 else "")


def _explore_command(summary: dict[str, Any]) -> str:
    """``trainsim explore`` over the same model, cluster and GPU count (flags only where they are presets)."""
    config = summary["config"]
    words = ["trainsim explore"]
    model = config["model"]["name"]
    if _is_preset(get_model, model):
        words.append(f"--model {model}")
    cluster = config["cluster"]["name"]
    gpus = summary["world_size"]
    words.append(f"--cluster {cluster}:{gpus}" if _is_preset(get_cluster, cluster) else f"--gpus {gpus}")
    words.append("--out sweep/")
    return " ".join(words)


def _is_preset(lookup: Any, name: str) -> bool:
    try:
        lookup(name)
    except ValueError:
        return False
    return True
