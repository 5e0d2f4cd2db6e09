"""The network FIFO window of multi-node Simple rings (topo/nccl_window.py), restated independently.

NCCL (v2.27.7) facts restated here:
    src/include/device.h            NCCL_STEPS = 8 FIFO slots per connection
    src/include/collectives.h       ring chunk = 4 steps (ALLGATHER/REDUCESCATTER/ALLREDUCE_CHUNKSTEPS),
                                    slice = 2 steps (SLICESTEPS): a ring step's data in 2 slices
    src/enqueue.cc                  one loop = channels x ranks x chunk bytes; (ranks - 1) steps per loop
    src/transport/net.cc            a receive is posted only for a slot the GPU released
                                    (posted < done + NCCL_STEPS), so 8 / 4 = 2 ring steps in flight
    src/graph/tuning.cc             Simple network step 14 us + 2 x network latency (data, flush);
                                    NVLink ring step 3.4 us; network operation overhead 1 us
so a ring step takes max(tau, (tau + rtt) / 2), rtt = 14 + 2 lat + 3.4 + lat + 1 (us).

Measured facts (nccl-tests busbw, GB/s), each with its tolerance:
    NVIDIA/nccl #1229 (H100, reduce-scatter, 4/8/16/32/64/128 nodes): 360, 345, 320, 300, 280, 260;
        the size is not stated: 8 GiB (nccl-tests' usual -e 8G) assumed; within 20%.
    NVIDIA/nccl #1218 (H100 RoCE, all-gather 2 GiB, 32 nodes, NCCL_MAX_NCHANNELS=16): 200; the
        window closes part of the gap (296 -> 260), the rest stays a named miss (single-QP RoCE
        flows, not modelled: docs/model/nccl.md).
"""

from __future__ import annotations

import pytest

import topo.nccl_window as nccl_window
from topo import CollectiveModel, get_cluster

US = 1e-6
GiB = 2**30
RS_1229 = {4: 360.0, 8: 345.0, 16: 320.0, 32: 300.0, 64: 280.0, 128: 260.0}
TOLERANCE_1229 = 0.20


def _model(nodes: int, preset: str = "dgx-h100") -> tuple[CollectiveModel, int]:
    spec = get_cluster(preset, nodes=nodes)
    return CollectiveModel(spec), spec.num_gpus


def _ring_time(model: CollectiveModel, n: int, size: float, op: str = "all_gather") -> float:
    return model.collective(op, size, range(n), algorithm="ring", protocol="Simple").time_s


def test_ring_step_is_window_bound_below_a_round_trip() -> None:
    model, n = _model(32)
    layout = model.layout(range(n))
    assert layout is not None
    lat = layout.net_latency_s
    rtt = (14.0 + 3.4 + 1.0) * US + 3 * lat
    # large sizes: one loop of 16 channels x 256 ranks x 2 MiB chunks = 8 GiB; above 2 x rtt of
    # data per step the ring is bandwidth-bound: T = L + S / B (fit L and B from two sizes)
    big, bigger = 4 * GiB, 8 * GiB
    t1, t2 = _ring_time(model, n, big), _ring_time(model, n, bigger)
    per_byte = (t2 - t1) / (bigger - big)
    latency = t1 - big * per_byte
    steps = n - 1
    assert big * per_byte / steps > rtt  # unbound there, as assumed
    size = 1 * GiB  # tau ~ 11 us < rtt ~ 30 us: window-bound
    tau = size * per_byte / steps
    assert tau < rtt
    expected = latency + steps * (tau + rtt) / 2
    assert _ring_time(model, n, size) == pytest.approx(expected, rel=1e-6)


def _without_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_window, "round_trip_s", lambda c: 0.0)  # stretch = max(1, 1/2) = 1


@pytest.mark.parametrize("nodes, op, size", [
    (1, "all_gather", 64 * 2**20), (1, "reduce_scatter", 2 * GiB), (1, "all_reduce", 8 * GiB),
    (4, "all_reduce", 8 * GiB), (32, "all_reduce", 8 * GiB), (128, "all_reduce", 8 * GiB),
    (128, "all_reduce", 512 * 2**20), (16, "reduce_scatter", 8 * GiB), (64, "all_gather", 64 * 2**20),
])
def test_unaffected_collectives(monkeypatch: pytest.MonkeyPatch, nodes: int, op: str, size: int) -> None:
    # one node (GPUs write into each other's buffers), all-reduce at scale (tree / NVLS tree), large
    # steps on few nodes, and LL/LL128 (chosen at 64 MiB on 512 ranks) keep their cost exactly
    model, n = _model(nodes)
    with_window = model.collective(op, size, range(n))
    _without_window(monkeypatch)
    without = CollectiveModel(get_cluster("dgx-h100", nodes=nodes)).collective(op, size, range(n))
    assert with_window == without


@pytest.mark.parametrize("nodes", sorted(RS_1229))
def test_reduce_scatter_busbw_declines_with_nodes_as_measured(nodes: int) -> None:
    model, n = _model(nodes)
    busbw = model.collective("reduce_scatter", 8 * GiB, range(n)).busbw_GBps
    assert busbw == pytest.approx(RS_1229[nodes], rel=TOLERANCE_1229)


def test_reduce_scatter_busbw_falls_monotonically_with_nodes() -> None:
    bws = [_model(nodes)[0].collective("reduce_scatter", 8 * GiB, range(8 * nodes)).busbw_GBps
           for nodes in sorted(RS_1229)]
    assert bws == sorted(bws, reverse=True)
    assert bws[-1] < 0.8 * bws[0]  # measured 260 / 360 = 0.72


def test_all_gather_2gib_on_32_nodes_moves_toward_the_measured_200(monkeypatch: pytest.MonkeyPatch) -> None:
    model, n = _model(32)
    busbw = model.collective("all_gather", 2 * GiB, range(n)).busbw_GBps
    _without_window(monkeypatch)
    before = CollectiveModel(get_cluster("dgx-h100", nodes=32)).collective(
        "all_gather", 2 * GiB, range(n)).busbw_GBps
    assert 200.0 < busbw < 0.9 * before  # 296 -> 260 GB/s; measured 200


@pytest.mark.xfail(strict=True, reason="NVIDIA/nccl #1218: 200 GB/s on RoCE with one QP per connection; "
                   "the model gives 260 (ECMP flow collisions are not modelled)")
def test_all_gather_2gib_on_32_nodes_within_20_percent() -> None:
    model, n = _model(32)
    busbw = model.collective("all_gather", 2 * GiB, range(n)).busbw_GBps
    assert busbw == pytest.approx(200.0, rel=0.20)
