"""Accelerator (or CPU) device specs: peak FLOP/s per dtype, HBM, and the efficiencies of the roofline.

Units: FLOP/s for peaks, bytes for capacity, GB/s (1e9 bytes/s) for bandwidth, seconds for overheads.
Efficiencies are fractions in (0, 1] of the matching peak; they are named fields so that a
calibration (a TOML hardware profile) or a user can override them with :meth:`DeviceSpec.with_overrides`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import (
    invalid,
    replace_checked,
    require_nonnegative_int,
    require_number,
    require_positive_int,
)
from topo.variability import MAX_SPEED_CV

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """One device (a GPU, or for CPU runs one CPU process).

    Attributes:
        name: preset name, e.g. "h100-sxm".
        peak_fp32_flops .. peak_fp8_flops: dense peak FLOP/s per dtype (sparse peaks are 2x and are
            never used); 0.0 means the device has no such math (fp8 on an A100).
        hbm_bytes: device memory capacity in bytes.
        hbm_GBps: device memory peak bandwidth in GB/s.
        gemm_efficiency: achieved fraction of the dtype peak for large GEMMs (cuBLASLt measurement).
        fp8_gemm_efficiency: the same for FP8 GEMMs (A and B in FP8, BF16 output), measured at
            the same reference shape; 0.0 = ``gemm_efficiency`` (no separate measurement).
        fp8_split_accumulation_slowdown: time factor of an FP8 GEMM without fast accumulation
            (partial sums promoted to FP32 periodically: the backward GEMMs of FP8 training)
            over one with it; 1.0 where the device has no fast-accumulation mode.
        attention_efficiency: achieved fraction of the dtype peak for fused (flash) attention.
        hbm_efficiency: achieved fraction of ``hbm_GBps`` for streaming kernels (STREAM-like).
        kernel_overhead_s: fixed cost added to every kernel (launch and tail), seconds.
        collective_overhead_s: fixed cost of a call (kernel launch and setup), seconds, for the
            calls NCCL's tuning model does not price: send/recv, all_to_all, and every collective
            outside NCCL's model (CPU processes); NCCL-priced collectives pay NCCL's base
            latency instead. Per-hop latencies come from the links.
        compute_capability: CUDA compute capability x 10 (80 A100, 89 Ada, 90 Hopper, 100
            Blackwell); selects NCCL's per-generation constants. 0 = not a CUDA GPU: collectives
            use the plain alpha-beta model (no NCCL protocols).
        gemm_curve_flops, gemm_curve_efficiency: optional GEMM efficiency as a function of size:
            efficiencies (fractions of the dtype peak) at increasing FLOP counts, interpolated
            linearly in log(FLOPs) and held constant beyond the ends; empty = ``gemm_efficiency``
            for every size (calibration fits the curve from a GEMM sweep).
        host_overhead_s: host (framework, Python, dispatch) time per compute op spent between
            kernels, seconds; drawn on the host lane before the op. Nonzero for CPU processes,
            where it is serial with the math; 0 where the host runs ahead of an accelerator.
        tp_overhead_s: extra time per compute op under tensor parallelism (the trainer's DTensor
            dispatch and redistribution inside the ops), seconds.
        tp_host_overhead_s: extra host time between ops under tensor parallelism, seconds.
        tp_comm_overhead_s: extra exposed time per tensor-parallel collective in training, seconds
            (beyond the collective's own cost: waiting on the asynchronous collective while its
            worker thread competes with compute for the cores, and the peers' skew).
        optimizer_overhead_s: extra time per optimizer op (one per parameter unit: a block, or a
            stage's embedding/head), seconds: per-tensor work of the foreach optimizer step.
        dtensor_optimizer_overhead_s: further time per optimizer op when the parameters are
            distributed tensors (the trainer's FSDP2/replicate or TP parameters), seconds.
        step_overhead_s: host time at the start of every training step (the trainer's data
            loading and the pipeline schedule's setup), seconds; drawn on the host lane.
        action_overhead_s: host time before every pipeline action (F, B or W of a micro-batch:
            the schedule's bookkeeping, posting its sends and receives), seconds; host lane.
        cache_bytes, cache_GBps: a cache level in front of the memory: the first ``cache_bytes``
            of a memory-bound op move at ``cache_GBps``, the rest at ``hbm_GBps`` x
            ``hbm_efficiency`` (CPU processes: L2/L3 vs DRAM; 0 = no such level).
        activation_efficiency: achieved fraction of that memory roofline for the element-wise
            work on activations (op class "activation": norms, activation functions, residual
            adds, softmax, embedding lookup and loss, and their gradients): 1 where they are
            streaming kernels (GPUs); far less for a CPU process running eager PyTorch, whose
            unfused op chains touch each element many times (calibration fits it from one-rank
            runs, :mod:`profiler.calibrate.op_class_fit`).
        elementwise_efficiency: the same for bulk element-wise ops over parameters or gradients
            (op class "elementwise": gradient accumulation, FSDP's copies, gradient scaling): 1
            on GPUs (streaming kernels); on a CPU process calibration fits it from the one-rank
            runs' ``AccumulateGrad`` time (the in-training rate, below the hot microbenchmark's).
        strided_efficiency: achieved fraction of the streaming rate (``hbm_GBps`` x ``hbm_efficiency``)
            for the 16-bit element-wise kernels with a broadcast or strided operand (PyTorch
            TensorIterator's non-vectorized ``elementwise_kernel``), the part of an op's bytes in
            ``Op.strided_bytes``: :data:`topo.strided_rate.STRIDED_STREAM_FRACTION` on GPUs; 1 =
            no such penalty (CPU processes).
        alloc_GBps: rate at which writing into freshly allocated memory runs slower than into
            reused memory, GB/s of fresh bytes: a CPU process gets large buffers from the OS
            (glibc malloc maps them) and pays a page fault and the kernel's zeroing per page on
            first touch; priced by op class "alloc" as fresh bytes / alloc_GBps, on top of the
            write itself. 0 = free (GPUs: the caching allocator reuses its blocks). Calibration
            measures it (an allocating add against the same add into an existing buffer).
        sm_count: streaming multiprocessors (CTAs of one wave of a one-CTA-per-SM kernel); sets
            GEMM wave quantisation (:mod:`topo.gemm_shape`) and the share of SMs a collective's
            CTAs take (:mod:`topo.interference`). 0 = not modelled (CPU processes).
        speed_cv: coefficient of variation of speed between devices of this model (static,
            part to part: clocks, thermals, silicon); a job's compute runs at its slowest
            device's pace (:func:`topo.variability.slowest_gpu_factor`). 0 = identical devices.
    """

    name: str
    peak_fp32_flops: float
    peak_tf32_flops: float = 0.0
    peak_bf16_flops: float = 0.0
    peak_fp16_flops: float = 0.0
    peak_fp8_flops: float = 0.0
    hbm_bytes: int
    hbm_GBps: float
    gemm_efficiency: float
    fp8_gemm_efficiency: float = 0.0
    fp8_split_accumulation_slowdown: float = 1.0
    attention_efficiency: float
    hbm_efficiency: float
    kernel_overhead_s: float = 0.0
    collective_overhead_s: float = 0.0
    compute_capability: int = 0
    gemm_curve_flops: tuple[float, ...] = ()
    gemm_curve_efficiency: tuple[float, ...] = ()
    host_overhead_s: float = 0.0
    tp_overhead_s: float = 0.0
    tp_host_overhead_s: float = 0.0
    tp_comm_overhead_s: float = 0.0
    optimizer_overhead_s: float = 0.0
    dtensor_optimizer_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    action_overhead_s: float = 0.0
    cache_bytes: float = 0.0
    cache_GBps: float = 0.0
    activation_efficiency: float = 1.0
    elementwise_efficiency: float = 1.0
    strided_efficiency: float = 1.0
    alloc_GBps: float = 0.0
    sm_count: int = 0
    speed_cv: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise invalid("name", self.name, "expected a non-empty string")
        require_number("peak_fp32_flops", self.peak_fp32_flops, low=0.0, low_inclusive=False)
        for dtype in DTYPES[1:]:
            require_number(f"peak_{dtype}_flops", getattr(self, f"peak_{dtype}_flops"))
        require_positive_int("hbm_bytes", self.hbm_bytes)
        require_number("hbm_GBps", self.hbm_GBps, low=0.0, low_inclusive=False)
        for name in ("gemm_efficiency", "attention_efficiency", "hbm_efficiency", "activation_efficiency",
                     "elementwise_efficiency", "strided_efficiency"):
            require_number(name, getattr(self, name), low=0.0, high=1.0, low_inclusive=False)
        require_number("fp8_gemm_efficiency", self.fp8_gemm_efficiency, high=1.0)
        require_number("fp8_split_accumulation_slowdown", self.fp8_split_accumulation_slowdown, low=1.0, high=4.0)
        require_number("kernel_overhead_s", self.kernel_overhead_s)
        require_number("collective_overhead_s", self.collective_overhead_s)
        require_nonnegative_int("compute_capability", self.compute_capability)
        require_nonnegative_int("sm_count", self.sm_count)
        for name in ("host_overhead_s", "tp_overhead_s", "tp_host_overhead_s", "tp_comm_overhead_s",
                     "optimizer_overhead_s", "dtensor_optimizer_overhead_s", "step_overhead_s",
                     "action_overhead_s", "cache_bytes",
                     "cache_GBps", "alloc_GBps"):
            require_number(name, getattr(self, name))
        require_number("speed_cv", self.speed_cv, high=MAX_SPEED_CV)
        self._check_gemm_curve()
        if self.cache_bytes > 0 and not self.cache_GBps > 0:
            raise invalid("cache_GBps", self.cache_GBps, "needs a bandwidth > 0 when cache_bytes > 0")

    def _check_gemm_curve(self) -> None:
        for name in ("gemm_curve_flops", "gemm_curve_efficiency"):
            if not isinstance(getattr(self, name), list | tuple):
                raise invalid(name, getattr(self, name), "expected a list of numbers")
        flops, eff = tuple(self.gemm_curve_flops), tuple(self.gemm_curve_efficiency)
        object.__setattr__(self, "gemm_curve_flops", flops)
        object.__setattr__(self, "gemm_curve_efficiency", eff)
        if len(flops) != len(eff):
            raise invalid("gemm_curve_efficiency", list(eff),
                          f"needs one efficiency per gemm_curve_flops entry ({len(flops)})")
        for i, (f, e) in enumerate(zip(flops, eff, strict=True)):
            require_number(f"gemm_curve_flops[{i}]", f, low=0.0, low_inclusive=False)
            require_number(f"gemm_curve_efficiency[{i}]", e, low=0.0, high=1.0, low_inclusive=False)
        if any(b <= a for a, b in zip(flops, flops[1:], strict=False)):
            raise invalid("gemm_curve_flops", list(flops), "expected strictly increasing FLOP counts")

    @property
    def nccl_arch(self) -> str | None:
        """NCCL's GPU generation for this device (volta..blackwell), or None without NCCL."""
        cc = self.compute_capability
        if cc < 70:
            return None
        return "blackwell" if cc >= 100 else "hopper" if cc >= 90 else "ampere" if cc >= 80 else "volta"

    def dtypes(self) -> tuple[str, ...]:
        """The dtypes this device has math for (peak > 0)."""
        return tuple(d for d in DTYPES if getattr(self, f"peak_{d}_flops") > 0.0)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; ValueError if the device has no such math."""
        if dtype not in self.dtypes():
            raise invalid("dtype", dtype, f"device {self.name!r} supports " + ", ".join(self.dtypes()))
        return float(getattr(self, f"peak_{dtype}_flops"))

    def gemm_efficiency_for(self, dtype: str) -> float:
        """Large-GEMM efficiency for ``dtype``: ``fp8_gemm_efficiency`` for fp8 when set, else
        ``gemm_efficiency``."""
        return self.fp8_gemm_efficiency if dtype == "fp8" and self.fp8_gemm_efficiency > 0 else self.gemm_efficiency

    def with_overrides(self, overrides: Mapping[str, Any]) -> DeviceSpec:
        """A copy with some fields replaced (validated); an unknown field name is a ValueError."""
        return replace_checked(self, overrides)  # type: ignore[no-any-return]
