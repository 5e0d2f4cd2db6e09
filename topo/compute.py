"""Compute time of one kernel: a roofline over the device's named efficiencies.

Units: flops in floating-point operations, bytes in bytes of HBM traffic, time in seconds.

    gemm:        t = overhead + max(flops / (peak[dtype] * gemm_efficiency),
                                    bytes / (hbm_GBps * 1e9 * hbm_efficiency))
    attention:   t = overhead + max(flops / (peak[dtype] * attention_efficiency), bytes term)
                 (callers pass FLOPs already discounted for causal masking)
    elementwise, optimizer: t = overhead + bytes / (hbm_GBps * 1e9 * hbm_efficiency)

"fixed" durations, collectives and p2p are not costed here (see :mod:`topo.collectives`).
"""

from __future__ import annotations

from topo.device import DeviceSpec
from topo.errors import invalid, require_choice

OP_CLASSES = ("gemm", "attention", "elementwise", "optimizer")


def compute_time_s(device: DeviceSpec, op_class: str, flops: float, bytes: float, dtype: str) -> float:
    """Seconds one kernel of ``op_class`` takes on ``device`` (see the module docstring)."""
    require_choice("op_class", op_class, OP_CLASSES)
    for name, value in (("flops", flops), ("bytes", bytes)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise invalid(name, value, "expected a number >= 0")
    peak = device.peak_flops(dtype)  # ValueError listing the device's dtypes
    memory_s = bytes / (device.hbm_GBps * 1e9 * device.hbm_efficiency)
    if op_class == "gemm":
        math_s = flops / (peak * device.gemm_efficiency)
    elif op_class == "attention":
        math_s = flops / (peak * device.attention_efficiency)
    else:
        math_s = 0.0
    return device.kernel_overhead_s + max(math_s, memory_s)
