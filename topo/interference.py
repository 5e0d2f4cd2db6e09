"""Compute slowed by a concurrent NCCL kernel: the SMs its CTAs hold and the HBM bandwidth it moves.

An NCCL collective is a CUDA kernel of one CTA per channel (``CollectiveCost.channels``); each CTA
holds an SM for the whole collective, so a GEMM launched beside it runs its waves on
``sm_count - channels`` SMs with the tile cuBLAS chose for the whole device
(:func:`topo.gemm_shape.gemm_math_s`). Its data also crosses the local HBM: per byte of bus
traffic the GPU writes what it receives and reads what it sends (2 bytes), and a reduction also
reads its own contribution (3 bytes). Memory-bound work shares what is left of the bandwidth.

    gemm slowdown   = max(math_s(SMs - ctas), memory_s x hbm slowdown) / max(math_s, memory_s)
    hbm slowdown    = B / max(B - comm_GBps, B x (1 - MAX_HBM_SHARE)),  B = hbm_GBps x hbm_efficiency
    comm_GBps       = busbw x HBM_BYTES_PER_BUS_BYTE[op]

Facts and sources:
- One CTA per channel; channels are what NCCL_MIN/MAX_NCHANNELS bound (NVIDIA/nccl docs, env
  variables); "the concurrent ncclAllGather kernel launches 24 blocks, preemptively occupying a few
  SMs" while a 132-block cuBLAS GEMM on a 132-SM H100 "nearly doubles" its time, MFU ~80% -> ~47%
  (NVIDIA developer forum, "Compute-Communication Overlap Causes Severe GEMM Performance
  Degradation because of Tail Effect"): the wave closed form says x2.
- Across GPT and LLaMA training layers on 4 A100s / H100s, overlapping communication slows compute
  by 18.9% on average and 40.0% at most ("Characterizing Compute-Communication
  Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power Implications",
  arXiv 2507.03114, abstract).
- HBM bytes per bus byte: NCCL's ring primitives (src/device/prims_simple.h, directRecv /
  directSend / recvReduceSend) land each received byte in the receiver's memory and read each
  sent byte from it; reduce steps also read the local input. RECALLED from the source layout,
  not measured: treat the HBM term as a lead (it only matters for memory-bound ops).
- MAX_HBM_SHARE 0.5: a modelling bound (two streams sharing a memory controller each keep at
  least half), not a measurement; it only caps the extreme case.
Units: GB/s, seconds; slowdowns are ratios >= 1.
"""

from __future__ import annotations

from core.errors import invalid, require_choice, require_nonnegative_int, require_number
from core.vocab import Collective
from topo.device import DeviceSpec
from topo.gemm_shape import GemmShape, gemm_math_s, gemm_memory_s, gemm_time_s

HBM_BYTES_PER_BUS_BYTE = {Collective.ALL_GATHER: 2.0, Collective.BROADCAST: 2.0, Collective.ALL_TO_ALL: 2.0, "p2p": 2.0,
                          Collective.REDUCE_SCATTER: 3.0, Collective.ALL_REDUCE: 3.0}
MAX_HBM_SHARE = 0.5


def comm_hbm_GBps(op: str, busbw_GBps: float) -> float:
    """Local HBM traffic (GB/s) of a collective running at ``busbw_GBps`` (nccl-tests busbw)."""
    require_choice("op", op, HBM_BYTES_PER_BUS_BYTE)
    require_number("busbw_GBps", busbw_GBps)
    return busbw_GBps * HBM_BYTES_PER_BUS_BYTE[op]


def free_sms(device: DeviceSpec, comm_ctas: int) -> int:
    """SMs left to compute while a collective's ``comm_ctas`` CTAs run (at least one)."""
    require_nonnegative_int("comm_ctas", comm_ctas)
    if device.sm_count < 1:
        raise invalid("sm_count", device.sm_count, f"device {device.name!r} needs sm_count >= 1")
    return max(1, device.sm_count - comm_ctas)


def hbm_slowdown(device: DeviceSpec, comm_GBps: float) -> float:
    """How much longer memory-bound work takes while a collective moves ``comm_GBps`` of HBM."""
    require_number("comm_GBps", comm_GBps)
    bandwidth = device.hbm_GBps * device.hbm_efficiency
    return bandwidth / max(bandwidth - comm_GBps, bandwidth * (1 - MAX_HBM_SHARE))


def gemm_slowdown(device: DeviceSpec, shape: GemmShape, dtype: str, comm_ctas: int,
                  comm_GBps: float = 0.0) -> float:
    """Ratio of a GEMM's time beside a collective (``comm_ctas`` CTAs, ``comm_GBps`` of HBM
    traffic) to its time alone (launch overhead excluded)."""
    math_s = gemm_math_s(device, shape, dtype, free_sms(device, comm_ctas))
    memory_s = gemm_memory_s(device, shape, dtype) * hbm_slowdown(device, comm_GBps)
    return max(math_s, memory_s) / gemm_time_s(device, shape, dtype)


def sm_share_slowdown(device: DeviceSpec, comm_ctas: int) -> float:
    """Slowdown of math-bound work with no known shape: SMs / free SMs (no wave quantisation)."""
    return device.sm_count / free_sms(device, comm_ctas)
