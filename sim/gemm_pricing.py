"""Prices of GEMMs beyond the device roofline: a matmul decomposed into chunk kernels (a TP
collective overlapped chunk by chunk) and the FP8 backward GEMMs' split accumulation."""

from __future__ import annotations

from core.taskgraph import Op
from core.vocab import GemmRole
from topo.device import DeviceSpec
from topo.gemm_shape import GemmShape, gemm_time_s

BACKWARD_ROLES = (GemmRole.DGRAD, GemmRole.WGRAD)


def decomposed_gemm_s(device: DeviceSpec, chunk: GemmShape, dtype: str, split: int = 1, streams: int = 1) -> float:
    """Seconds of a matmul run as ``split`` GEMM kernels of shape ``chunk`` each (a matmul a TP
    collective overlaps, cut into chunks by the stack: :data:`schedules.tp_overlap_gemms.TP_OVERLAP_GEMMS`),
    each kernel's launch overhead (``kernel_overhead_s``) included, on the shape model
    (:func:`topo.gemm_shape.gemm_time_s`):

    - ``split`` = 1: one kernel, overhead + T(chunk);
    - one stream: the kernels run back to back, ``split`` x (overhead + T(chunk)): each chunk pays
      its own wave and tile quantisation;
    - ``streams`` > 1: the stack issues consecutive chunks on different streams so that they run
      together, the next chunk's tiles filling the SMs the previous one's last wave leaves idle;
      the chunks' tiles then share waves as one batched GEMM, and a kernel's launch and tail
      hide under its neighbours as its idle SMs do: overhead + T(chunk with ``split`` x its
      batch) (each chunk still pays its own tile padding).
    """
    if split < 1 or streams < 1:
        raise ValueError(f"split={split}, streams={streams} is invalid: expected integers >= 1")
    kernels = 1 if streams > 1 else split  # back to back, or together as one batched shape
    return kernels * (device.kernel_overhead_s + gemm_time_s(device, wave_shape(chunk, split, streams), dtype))


def wave_shape(chunk: GemmShape, split: int = 1, streams: int = 1) -> GemmShape:
    """The GEMM whose waves a matmul of ``split`` kernels of shape ``chunk`` fills: one chunk, or,
    issued on several streams, the chunks together (``split`` x the batch); what
    :mod:`sim.interference` slows beside a collective, as :func:`decomposed_gemm_s` prices it."""
    if split == 1 or streams == 1:
        return chunk
    return GemmShape(chunk.m, chunk.n, chunk.k, chunk.batch * split)


def accumulation_slowdown(device: DeviceSpec, op: Op) -> float:
    """How much slower an FP8 input- or weight-gradient GEMM runs than the forward one: FP8
    training keeps fast accumulation for the forward only (torchao ``Float8LinearConfig``:
    ``use_fast_accum`` only in ``gemm_config_output``; TE recipes: ``use_split_accumulator`` False
    for fprop, True for dgrad and wgrad), and without it cuBLAS periodically promotes partial
    sums to FP32 (``CUBLASLT_MATMUL_DESC_FAST_ACCUM``), the device's
    ``fp8_split_accumulation_slowdown``."""
    if op.dtype != "fp8" or op.gemm_role not in BACKWARD_ROLES:
        return 1.0
    return device.fp8_split_accumulation_slowdown
