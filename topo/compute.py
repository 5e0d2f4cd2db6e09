"""Compute time of one kernel: a roofline over the device's named efficiencies.

Units: flops in floating-point operations, bytes in bytes of HBM traffic, time in seconds.

    gemm:        t = overhead + max(flops / (peak[dtype] * gemm_efficiency(flops)),
                                    bytes / (hbm_GBps * 1e9 * hbm_efficiency))
                 gemm_efficiency(flops): the device's size curve (log-linear interpolation of
                 gemm_curve_efficiency over gemm_curve_flops) if it has one, else gemm_efficiency
    attention:   t = overhead + max(flops / (peak[dtype] * attention_efficiency), bytes term)
                 (callers pass FLOPs already discounted for causal masking)
    elementwise: t = overhead + bytes term / elementwise_efficiency (bulk streaming over
                 parameters or gradients)
    activation:  t = overhead + bytes term / activation_efficiency (element-wise work on
                 activations: chains of small ops on a CPU)
    strided:     of a memory-bound op's bytes, ``strided_bytes`` (16-bit kernels with a broadcast
                 or strided operand, :mod:`topo.strided_rate`) move at strided_efficiency x the
                 streaming rate: they add strided_bytes x (1 / strided_efficiency - 1) / (hbm_GBps
                 x 1e9 x hbm_efficiency) to the bytes term
    optimizer:   t = overhead + bytes term + optimizer_overhead_s
    With a cache level (cache_bytes > 0), the bytes term is min(bytes, cache_bytes) / cache_GBps
    + the rest / (hbm_GBps * hbm_efficiency): small tensors stay in a CPU's caches, large ones
    stream from DRAM; :func:`memory_time_s` gives the two parts.

    alloc:       t = bytes / alloc_GBps (first touch of freshly allocated memory; 0 when
                 alloc_GBps is 0), see :func:`alloc_time_s`
"fixed" durations, collectives and p2p are not costed here (see :mod:`topo.collectives`).
"""

from __future__ import annotations

import math

from core.errors import invalid, require_choice
from core.vocab import COMPUTE_CLASSES, OpClass
from topo.device import DeviceSpec

OP_CLASSES = COMPUTE_CLASSES


def compute_time_s(device: DeviceSpec, op_class: str, flops: float, bytes: float, dtype: str,
                   strided_bytes: float = 0.0) -> float:
    """Seconds one kernel of ``op_class`` takes on ``device`` (see the module docstring)."""
    require_choice("op_class", op_class, OP_CLASSES)
    for name, value in (("flops", flops), ("bytes", bytes), ("strided_bytes", strided_bytes)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise invalid(name, value, "expected a number >= 0")
    peak = device.peak_flops(dtype)  # ValueError listing the device's dtypes
    memory_s = sum(memory_time_s(device, bytes)) + strided_extra_s(device, strided_bytes)
    if op_class == OpClass.GEMM:
        math_s = flops / (peak * gemm_efficiency(device, flops)) if flops > 0 else 0.0
    elif op_class == OpClass.ATTENTION:
        math_s = flops / (peak * device.attention_efficiency)
    else:
        math_s = 0.0
    if op_class == OpClass.ACTIVATION:
        memory_s /= device.activation_efficiency
    elif op_class == OpClass.ELEMENTWISE:
        memory_s /= device.elementwise_efficiency
    extra = device.optimizer_overhead_s if op_class == OpClass.OPTIMIZER else 0.0
    return device.kernel_overhead_s + extra + max(math_s, memory_s)


def strided_extra_s(device: DeviceSpec, strided_bytes: float) -> float:
    """Seconds ``strided_bytes`` take beyond streaming them: they move at ``strided_efficiency`` of
    the streaming rate (:mod:`topo.strided_rate`)."""
    if strided_bytes <= 0 or device.strided_efficiency >= 1.0:
        return 0.0
    stream_Bps = device.hbm_GBps * 1e9 * device.hbm_efficiency
    return strided_bytes * (1.0 / device.strided_efficiency - 1.0) / stream_Bps


def alloc_time_s(device: DeviceSpec, bytes: float) -> float:
    """Seconds of first-touch cost for ``bytes`` written into freshly allocated memory."""
    return bytes / (device.alloc_GBps * 1e9) if device.alloc_GBps > 0 and bytes > 0 else 0.0


def memory_time_s(device: DeviceSpec, bytes: float) -> tuple[float, float]:
    """(seconds in the cache level, seconds streaming from memory) to move ``bytes``."""
    cached = min(bytes, device.cache_bytes) if device.cache_bytes > 0 else 0.0
    cache_s = cached / (device.cache_GBps * 1e9) if cached > 0 else 0.0
    return cache_s, (bytes - cached) / (device.hbm_GBps * 1e9 * device.hbm_efficiency)


def dram_bound_s(device: DeviceSpec, op_class: str, flops: float, bytes: float, dtype: str) -> float:
    """Seconds of one op spent streaming from memory when the op is memory-bound, else 0 (the
    part that processes on one CPU host share through its memory bandwidth)."""
    cache_s, dram_s = memory_time_s(device, bytes)
    if op_class == OpClass.GEMM:
        math_s = flops / (device.peak_flops(dtype) * gemm_efficiency(device, flops)) if flops > 0 else 0.0
    elif op_class == OpClass.ATTENTION:
        math_s = flops / (device.peak_flops(dtype) * device.attention_efficiency)
    else:
        math_s = 0.0
    return dram_s if cache_s + dram_s >= math_s else 0.0


def gemm_efficiency(device: DeviceSpec, flops: float) -> float:
    """Achieved fraction of peak for one GEMM of ``flops`` (the device's size curve, if any)."""
    xs, ys = device.gemm_curve_flops, device.gemm_curve_efficiency
    if not xs or flops <= 0:
        return device.gemm_efficiency
    if flops <= xs[0]:
        return ys[0]
    if flops >= xs[-1]:
        return ys[-1]
    x = math.log(flops)
    i = next(k for k in range(1, len(xs)) if flops <= xs[k])
    x0, x1 = math.log(xs[i - 1]), math.log(xs[i])
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)
