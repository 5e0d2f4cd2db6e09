"""Predicted all-reduce bus bandwidth against published nccl-tests curves (hardware-facts 1.2, 1.3).

Every listed size >= 1 MiB must be within 15%. The measured values are public facts, copied here
with their sources (nccl-tests sizes: "16M" = 2**24 bytes). Each curve runs with the NCCL release
that measured it (the tuning constants differ between releases; topo/nccl_tuning.py). Sizes the
model misses are strict expected failures, with the reason (see docs/model/nccl.md).
"""

from __future__ import annotations

import pytest
from busbw_table import busbw_cells, size_label

from topo import CollectiveModel, get_cluster

MiB = 2**20
TOLERANCE = 0.15

# (cluster preset, nodes, NCCL version of the measurement, {size MiB: busbw GB/s}, source)
CURVES = {
    # Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md (NCCL 2.18.5, in-place)
    "a100": ("dgx-a100", 1, "2.18", {1: 36.22, 16: 109.22, 64: 166.63, 256: 213.87, 1024: 228.10,
                                     8192: 231.58}),
    # Azure/AI-benchmarking-guide, "Azure Results/ND_H100_v5_results.md" (NCCL 2.18.5, NVLS)
    "h100": ("dgx-h100", 1, "2.18", {1: 43.70, 16: 234.45, 64: 361.78, 256: 423.38, 1024: 466.35,
                                     8192: 478.87}),
    # Azure/AI-benchmarking-guide, Azure_Results/ND_H200_v5_results.md (NCCL 2.20.5, NVLS)
    "h200": ("hgx-h200", 1, "2.20", {1: 52.96, 16: 240.41, 64: 368.11, 256: 432.24, 1024: 467.58,
                                     8192: 479.98}),
    # aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests/README.md
    # (NCCL 2.27.7 + aws-ofi-nccl 1.16.3, out-of-place), 2 x p4de.24xlarge and 2 x p5.48xlarge
    "p4de": ("aws-p4de", 2, "2.27-aws", {16: 26.39, 128: 64.31, 512: 74.28, 1024: 76.79,
                                         2048: 78.33}),
    "p5": ("aws-p5", 2, "2.27-aws", {16: 105.52, 128: 289.16, 512: 393.34, 1024: 436.95,
                                     2048: 443.72, 8192: 479.28, 16384: 487.09}),
}

# Sizes an honest model still misses by more than 15% (docs/model/nccl.md explains each).
KNOWN_MISSES = {
    ("a100", 16): "NCCL picks ring LL128; measured 109 vs 169 GB/s: A100 LL128/Simple rings run "
                  "well below NCCL's own bandwidth and latency model at 4-128 MiB",
    ("a100", 64): "ring Simple: measured 167 vs 215 GB/s, same gap (effective latency ~190 us, "
                  "not NCCL's 56 us)",
    ("h200", 1): "NCCL 2.20 runs 1 MiB NVLS about 10 us faster than 2.18 on the same NVLink4 "
                 "fabric; no tuning constant differs",
    ("p5", 16): "tree LL128 across EFA: measured 90-116 GB/s algbw at 4-16 MiB vs 160 modeled",
}

POINTS = [(name, mib) for name, (_, _, _, curve, *_) in CURVES.items() for mib in curve]


def _predicted(name: str, mib: int) -> tuple[float, float]:
    cluster, nodes, version, curve = CURVES[name]
    spec = get_cluster(cluster, nodes=nodes).with_overrides({"nccl_version": version})
    cost = _model(spec).collective("all_reduce", mib * MiB, range(spec.num_gpus))
    return cost.busbw_GBps, curve[mib]


_MODELS: dict = {}


def _model(spec):  # one model (and cache) per cluster for all sizes
    if spec not in _MODELS:
        _MODELS[spec] = CollectiveModel(spec)
    return _MODELS[spec]


@pytest.mark.parametrize(("name", "mib"), [
    pytest.param(n, m, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[(n, m)]))
    if (n, m) in KNOWN_MISSES else (n, m) for n, m in POINTS])
def test_busbw_within_15_percent(name: str, mib: int) -> None:
    predicted, measured = _predicted(name, mib)
    assert predicted == pytest.approx(measured, rel=TOLERANCE)


def test_known_misses_are_few_and_named() -> None:
    assert len(KNOWN_MISSES) <= 4 and all((n, m) in POINTS for n, m in KNOWN_MISSES)


@pytest.mark.parametrize("name", sorted(CURVES))
def test_large_messages_within_10_percent(name: str) -> None:
    """Above 256 MiB the ramp is over: the link model alone must be close."""
    for mib in CURVES[name][3]:
        if mib >= 512:
            predicted, measured = _predicted(name, mib)
            assert predicted == pytest.approx(measured, rel=0.10), mib


def curve_table() -> str:
    """Markdown table of predicted vs measured busbw at every listed size (for docs/model/nccl.md)."""
    rows = ["| system (NCCL) | size | measured GB/s | predicted GB/s | error | algorithm/protocol |",
            "|---|---|---|---|---|---|"]
    for name, (cluster, nodes, version, curve) in CURVES.items():
        spec = get_cluster(cluster, nodes=nodes).with_overrides({"nccl_version": version})
        for mib, measured in curve.items():
            cost = _model(spec).collective("all_reduce", mib * MiB, range(spec.num_gpus))
            cells = busbw_cells(cost, measured, (name, mib) in KNOWN_MISSES, digits=1)
            rows.append(f"| {nodes} x {cluster} ({version}) | {size_label(mib * MiB)} | {cells}")
    return "\n".join(rows)


if __name__ == "__main__":
    print(curve_table())
