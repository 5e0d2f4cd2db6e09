"""A seeded random plan (model, cluster, TP, PP, DP, schedule, ZeRO, framework, SP) for the
equality tests of the list engine's evaluators against its reference pass."""

from __future__ import annotations

import random
from typing import Any


def random_plan(rng: random.Random, nodes: int | None = None) -> dict[str, Any]:
    """One plan drawn from ``rng`` on 1, 2 or 4 nodes of 8 GPUs (``nodes`` to fix it)."""
    tp, pp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
    schedule = rng.choice(["1f1b", "gpipe", "interleaved", "zb-h1"]) if pp > 1 else "1f1b"
    nodes = rng.choice([1, 2, 4]) if nodes is None else nodes
    dp = max(1, nodes * 8 // (tp * pp))
    plan = {"model": rng.choice(["small", "llama3-8b"]), "cluster": rng.choice(["dgx-h100", "aws-p4d"]), "nodes": nodes,
            "tp": tp, "pp": pp, "dp": dp, "schedule": schedule, "global_batch": dp * pp * rng.choice([2, 3, 4]),
            "zero": rng.choice([0, 1, 2, 3]), "framework": rng.choice(["megatron", "torch"]),
            "sequence_parallel": tp > 1 and rng.random() < 0.5}
    if schedule == "interleaved":
        plan["vpp"] = 2
    return plan


def long_plan(rng: random.Random) -> dict[str, Any]:
    """One plan with a long run of micro-batches (64-128 per pipeline), so that the steady state
    extends it by many periods: 2-8 nodes, PP 2-8, every pipeline family the steady state
    extends uniformly, ZeRO 0-2, three frameworks, recompute, sometimes activation offload."""
    tp, pp = rng.choice([1, 2, 4]), rng.choice([2, 4, 8])
    nodes = rng.choice([2, 4, 8])
    dp = max(1, nodes * 8 // (tp * pp))
    schedule = rng.choice(["1f1b", "1f1b", "1f1b", "interleaved", "interleaved-megatron", "zb-h1", "zbv"])
    plan = {"model": rng.choice(["llama3-8b", "gpt3-1.7b", "gpt3-18b"]),
            "cluster": rng.choice(["dgx-h100", "aws-p4d", "dgx-a100"]), "nodes": nodes, "tp": tp, "pp": pp,
            "dp": dp, "schedule": schedule, "global_batch": dp * rng.choice([64, 96, 128]),
            "zero": rng.choice([0, 1, 2]), "framework": rng.choice(["megatron", "megatron", "deepspeed", "torch"]),
            "sequence_parallel": tp > 1 and rng.random() < 0.5, "recompute": rng.choice(["none", "full", "selective"])}
    if schedule in ("interleaved", "interleaved-megatron", "zbv"):
        plan["vpp"] = 2
    if rng.random() < 0.2:
        plan["offload_activations"] = True
    return plan


def wide_plan(rng: random.Random) -> dict[str, Any]:
    """One plan over every pipeline family on both runtimes: dense and MoE models (EP), CP,
    ZeRO 0-3, FP8 on Hopper/Blackwell, uneven stages, activation offload, 48-96 micro-batches
    per pipeline (the extension's equality sample against ``--exact``)."""
    tp, pp, cp = rng.choice([1, 2, 4]), rng.choice([2, 4, 8]), rng.choice([1, 1, 1, 2])
    nodes = rng.choice([2, 4, 8])
    cp = cp if tp * pp * cp <= nodes * 8 else 1
    dp = max(1, nodes * 8 // (tp * pp * cp))
    schedule = rng.choice(["1f1b", "1f1b", "interleaved", "interleaved-megatron", "zb-h1", "zbv", "gpipe",
                           "interleaved-zb", "dualpipev"])
    model = rng.choice(["llama3-8b", "gpt3-1.7b", "gpt3-18b", "mixtral-8x7b", "small"])
    cluster = rng.choice(["dgx-h100", "aws-p4d", "dgx-a100", "dgx-b200"])
    plan = {"model": model, "cluster": cluster, "nodes": nodes, "tp": tp, "pp": pp, "cp": cp, "dp": dp,
            "schedule": schedule, "global_batch": dp * rng.choice([48, 64, 96]), "microbatch_size": 1,
            "zero": rng.choice([0, 1, 2, 3]), "framework": rng.choice(["megatron", "megatron", "torch"]),
            "sequence_parallel": tp > 1 and rng.random() < 0.5, "recompute": rng.choice(["none", "full", "selective"])}
    if schedule in ("interleaved", "interleaved-megatron", "zbv", "interleaved-zb", "dualpipev"):
        plan["vpp"] = 2
    if model == "mixtral-8x7b" and rng.random() < 0.6:
        plan["ep"] = rng.choice([2, 4])
    if cluster in ("dgx-h100", "dgx-b200") and rng.random() < 0.3:
        plan["dtype"] = "fp8"
    if rng.random() < 0.2:
        plan["uneven_stages"] = True
    if rng.random() < 0.15:
        plan["offload_activations"] = True
    return plan
