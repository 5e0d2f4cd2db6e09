"""Sanity of the presets against the NCCL measurements in shared/hardware-facts.md.

The reference numbers below are copied from that file (section 1.2 and 1.3, with its sources);
the presets were set from component facts (line rates, NIC/NVLink efficiencies), never from these
end-to-end collective figures except where noted in topo/link_presets.py.
"""

from __future__ import annotations

import time

import pytest

from topo import CollectiveModel, get_cluster

GIB = 2**30


def busbw(cluster: str, nodes: int, size: float, algorithm: str = "auto") -> float:
    spec = get_cluster(cluster, nodes=nodes)
    return CollectiveModel(spec).collective("all_reduce", size, range(spec.num_gpus),
                                            algorithm=algorithm).busbw_GBps


def test_single_node_a100_ring_busbw() -> None:
    # ND A100 v4, 1 GB all_reduce busbw 228.10 GB/s (Azure AI-benchmarking-guide)
    assert busbw("dgx-a100", 1, 1e9, "ring") == pytest.approx(228.10, rel=0.15)


def test_single_node_h100_busbw() -> None:
    # ND H100 v5 (NVLS), 1 GB: 466.35 GB/s; ring: the maintainer's "effective 370GB/s"
    assert busbw("dgx-h100", 1, 1e9) == pytest.approx(466.35, rel=0.15)
    assert busbw("dgx-h100", 1, 8e9, "ring") == pytest.approx(370.0, rel=0.05)


def test_single_node_small_message_is_latency_bound() -> None:
    # ND A100 v4 at 1 MB: 36.22 GB/s (far below the 1 GB figure)
    assert busbw("dgx-a100", 1, 2**20) < 0.5 * busbw("dgx-a100", 1, 2**30)


def test_two_node_efa_busbw() -> None:
    # aws-samples awsome-distributed-training: 2 x p4de 76.79 GB/s, 2 x p5 436.95 GB/s at 1 GB
    assert busbw("aws-p4de", 2, GIB) == pytest.approx(76.79, rel=0.25)
    assert busbw("aws-p5", 2, GIB) == pytest.approx(436.95, rel=0.25)


@pytest.mark.slow
def test_16k_gpu_model_is_fast() -> None:
    spec = get_cluster("dgx-h100", nodes=2048)
    start = time.process_time()  # CPU time: other load on the machine does not count
    model = CollectiveModel(spec)
    dp = [tuple(range(local, spec.num_gpus, 8)) for local in range(8)]
    cost = model.collective("all_reduce", 1e9, dp[0], concurrent=dp)
    tp = [tuple(range(8 * n, 8 * n + 8)) for n in range(spec.nodes)]
    model.collective("all_reduce", 1e8, tp[0], concurrent=tp)
    model.collective("all_reduce", 1e9, range(spec.num_gpus))
    elapsed = time.process_time() - start
    # each DP group has one NDR rail (47 GB/s achievable, nccl-tests #290) per node
    assert 0.5 * 47.0 < cost.busbw_GBps <= 47.0
    assert elapsed < 60.0  # about 2-3 s in all on a shared 2-core machine
