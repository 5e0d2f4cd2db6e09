"""Device presets, from component facts only (datasheets and microbenchmarks), never fit to step times.

Sources (see ../shared/hardware-facts.md beside the repository, section 2.1 for the tags):
- Peaks: NVIDIA datasheets as summarized in NVIDIA/dgxc-benchmarking (H100 989/1979, B200 2250/4500
  "peak theoretical"), Narayanan et al. 2021 (A100 312), stas00/ml-engineering compute tables.
  Dense peaks only. fp32/tf32 peaks and the L40S/RTX 4090/B200 entries not in hardware-facts are
  RECALLED from the NVIDIA datasheets / Ada whitepaper (treat as leads).
- gemm_efficiency: cuBLASLt 16384^3 (Azure/AI-benchmarking-guide): A100 FP16 256.5 of 312;
  H100 FP8 1377.3 of 1979; H200 FP8 1366.3 of 1979; GB200 FP8 2906.9 of 4900. Where only an FP8
  figure exists it is the proxy for BF16 too (stated per preset). These are sustained figures (the
  guide times after 10,000 warm-up iterations: seconds of back-to-back GEMMs at the power limit).
  H100 SXM BF16 under a minute of back-to-back 8192^3 GEMMs runs at ~730 TFLOP/s (cuBLASLt) or ~676
  (cuBLAS) (huggingface/gpu-fryer README @704ba85), 8.5-15% below short runs (797.5), and the FP8
  proxy prices that shape at 667: it stands for sustained BF16 (tests/topo/test_h100_bf16_gemm_sweep.py).
- attention_efficiency: FlashAttention-2, seq 8192, batch 2 (same source): A100 179.5, H100 327.9,
  H200 329.3, GB200 373.9 TFLOPS over the BF16/FP16 peak, converted to the simulator's FLOP count
  (:data:`FA2_BENCH_TO_SIM`: the benchmark's forward + backward rate counts 3.5 forwards, the
  simulator 3). FA2 is not tuned for Hopper/Blackwell, hence the low ratios; calibration (or
  FA3/cuDNN figures) should override them. These are unmasked rates; a causal op is slowed at
  pricing by the same benchmark's causal / non-causal ratio at its shape and GPU generation
  (:func:`schedules.attention_kernels.causal_rate`, from flash-attention's README plots), and a
  kernel shorter than 8k by the same plots' unmasked rate at its length over 8k's
  (:func:`schedules.attention_kernels.fa2_length_ratio`).
- hbm_efficiency: STREAM Triad (same source): A100 1.70 of 2.039 TB/s, H100 2.97 of 3.35,
  H200 4.15 of 4.8. Triad (2 reads + 1 write) is the closest STREAM kernel to optimizer and
  elementwise kernels.
- kernel_overhead_s: 4 us launch+tail per kernel (RECALLED typical CUDA figure; calibrate).
- collective_overhead_s: 11 us per NCCL call: NVIDIA's DGX H100 single-node all_reduce takes about
  13 us at 8 B (NVIDIA/dgxc-benchmarking nccl/README.md), of which the modeled NVLS path is two
  1 us switch hops. Used for every GPU preset (no other small-message figure is in the facts).
- speed_cv (GPUs): topo.variability.GPU_SPEED_CV, from the part-to-part variation measured by
  Sinha et al., SC'22 (the CPU process preset: 0, no such fact).
- sm_count: A100 108 SMs (NVIDIA "Matrix Multiplication Background" user guide, sec. 3.2: "The
  A100 GPU has 108 SMs"); H100/H200 SXM 132 (NVIDIA H100 whitepaper; also the NVIDIA developer
  forum thread "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of
  Tail Effect": "my H100 GPU, which has 132 SMs"); B200 148 (Chips and Cheese, "Nvidia's B200:
  Keeping the CUDA Juggernaut Rolling": 74 enabled SMs per die x 2; 18,944 CUDA cores / 128 per
  SM); L40S 142 and RTX 4090 128 (RECALLED, Ada whitepaper: 18,176 and 16,384 CUDA cores / 128).
Capacities are marketed GiB (nvidia-smi reports within ~1% of these).
"""

from __future__ import annotations

from typing import Any

from core.errors import unknown_name
from topo.device import DeviceSpec
from topo.strided_rate import STRIDED_STREAM_FRACTION
from topo.variability import GPU_SPEED_CV

GiB = 2**30
_KERNEL_OVERHEAD_S = 4e-6
# speed_cv: GPU-to-GPU speed variation within one SKU, 8% average fastest-to-slowest spread
# (Sinha et al., SC'22, arXiv 2208.11035) read as a CV (topo.variability.GPU_SPEED_CV).
# strided_efficiency: TensorIterator's non-vectorized kernel (topo.strided_rate: H100 measured; the rule elsewhere).
_GPU_COMMON: dict[str, Any] = dict(kernel_overhead_s=_KERNEL_OVERHEAD_S, collective_overhead_s=13e-6 - 2e-6,
                                   speed_cv=GPU_SPEED_CV, strided_efficiency=STRIDED_STREAM_FRACTION)

FA2_BENCH_FWD_BWD_FORWARDS = 3.5
"""Forwards' worth of FLOPs in the FlashAttention-2 forward + backward rate the presets' source
publishes. The Azure guide's ``Benchmarks/FlashAttention.py`` runs flash-attention's
``benchmarks/benchmark_flash_attention.py`` (batch 2, seq 8192, no causal mask) and reports its
``fwd + bwd`` TFLOP/s, which that script computes over ``flops(mode="fwd_bwd") = 3.5 f`` (f = 4 b
s^2 heads d, the forward; the backward counted as 2.5 f). The figures match the script's published
plots (flash-attention README, ``assets/flash2_h100_fwd_bwd_benchmark.png``: H100 head dim 128,
8k, 335; ``flash2_a100_fwd_bwd_benchmark.png``: A100 head dim 64, 8k, 175), and so do the same
lines' standard-attention (PyTorch) figures (Azure A100 46.0, plot 46; H100 145.1, plot 167 at
head dim 128 against 87 at 64), which places them in the script's ``fwd + bwd`` column."""
SIM_FWD_BWD_FORWARDS = 3.0
"""Forwards' worth of FLOPs the simulator charges one attention forward + backward: the backward
op carries twice the forward's (``schedules.layer_ops.attention_core_ops``, factor 2)."""
FA2_BENCH_TO_SIM = SIM_FWD_BWD_FORWARDS / FA2_BENCH_FWD_BWD_FORWARDS
"""Factor from a published FA2 rate to the rate over the simulator's FLOPs that reproduces the
measured kernel time (3 f / (r x 3 / 3.5) = 3.5 f / r)."""

# A100 SXM: Narayanan 2021 (312 BF16); HBM2e 2,039 GB/s (80GB), HBM2 1,555 GB/s (40GB, RECALLED).
# Efficiencies from the ND A100 v4 (80GB) microbenchmarks; the 40GB part uses them as a proxy.
_A100_EFF: dict[str, Any] = dict(gemm_efficiency=256.5 / 312, attention_efficiency=179.5 * FA2_BENCH_TO_SIM / 312,
                 hbm_efficiency=1.70 / 2.039, **_GPU_COMMON)
# CUDA compute capabilities (x10; NVIDIA CUDA GPUs list, RECALLED): A100 8.0, Ada 8.9, Hopper 9.0,
# Blackwell B200 10.0. They select NCCL's per-generation constants (topo/nccl_tuning.py).
_AMPERE, _ADA, _HOPPER, _BLACKWELL = 80, 89, 90, 100
_A100_PEAKS: dict[str, Any] = dict(peak_fp32_flops=19.5e12, peak_tf32_flops=156e12, peak_bf16_flops=312e12,
                   peak_fp16_flops=312e12, sm_count=108)

# H100/H200 SXM: 989 BF16 / 1979 FP8 dense (dgxc-benchmarking); fp32 67, tf32 494.7 (RECALLED).
HOPPER_SPLIT_ACCUMULATION = 1.15
"""Hopper FP8 GEMMs without fast accumulation run 1.1-1.2x slower ("enabling fast accumulation can
lead to a 1.1x to 1.2x speedup", pytorch/ao issue #2377, a maintainer confirming it trades
accuracy for speed); the midpoint. Blackwell has no such mode ("there is no fastAccuMode for
sm100", NVIDIA/TransformerEngine PR #2748 review): 1.0 there."""
_HOPPER_PEAKS: dict[str, Any] = dict(peak_fp32_flops=67e12, peak_tf32_flops=494.7e12, peak_bf16_flops=989e12,
                     peak_fp16_flops=989e12, peak_fp8_flops=1979e12, sm_count=132,
                     fp8_split_accumulation_slowdown=HOPPER_SPLIT_ACCUMULATION)

# H100 NVL (the same 132-SM die at a 350-400 W limit), dense peaks: BF16/FP16 835, FP8 1671
# TFLOPS, TF32 418 (NVIDIA H100 NVL datasheet: 1,671 / 3,341 / 835 with sparsity; RECALLED).
H100_NVL_PEAKS = {"peak_bf16_flops": 835e12, "peak_fp16_flops": 835e12, "peak_fp8_flops": 1671e12,
                  "peak_tf32_flops": 418e12, "peak_fp32_flops": 60e12}
H100_HBM2E_PEAK_FRACTION = 0.5
"""Where between the NVL and SXM peaks the lower-TDP HBM2e part's peak lies: torchtitan's doc
gives only the two bounds, so the middle (no further information). The part is an SXM board held
at 500 W (torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: "tuning it up to 700W
TDP can potentially provide further speedups"). No published tensor-core throughput of an H100
SXM under a 500 W limit was found (searched: NVIDIA datasheets, torchtitan docs and issues,
power-capping studies). Lead: Ujeniya, Hager, Wellein, Eitzinger, arXiv 2604.11391 (2026) cap the
same HBM2e part (94 GiB, 2.41 TB/s) from 200 to 700 W, with FP64 DGEMM (not BF16) throughput and SM
clocks; its figures were not readable here."""


H100_500W_GEMM_EFFICIENCY = {"bf16": 0.6413, "fp8": 0.7378}
"""GEMM efficiency (of the part's midpoint peaks, at the 16384^3 reference of the shape model)
reproducing GEMMs measured on Meta's 500 W H100 (geometric mean over the published shapes;
tests/topo/test_h100_500w_gemms.py): BF16 585.2, 575.1, 546.3 TFLOP/s (pytorch/FBGEMM PR #2546,
"H100 500W", 8192^3, 65536x8192x7168, 65536x3584x8192), 551-591 on four Llama-70B shapes
(pytorch-labs/float8_experimental PR #100, Sep 2023) and 554 on the Llama 3 8B feed-forward
(float8_experimental 0b60496, Jun 2024); FP8 (cuBLASLt tensorwise) 1070-1408 on the same four
shapes (PR #100) and 1063 on the feed-forward (0b60496)."""
H100_500W_TENSOR_RATE = 585.23 / 797.51
"""Tensor-core throughput of the 500 W part as a fraction of the 700 W part's: the same BF16 GEMM
(8192^3) at 585.23 TFLOP/s under 500 W (FBGEMM PR #2546) against 797.51 on an H100 80GB HBM3
(zzc0721/torch-performance-test-data issue #79; ml-engineering's MAMF 794.5 agrees). The power cap
lowers the SM clock for every tensor-core-bound kernel, so the FlashAttention-2 rate measured at
700 W is scaled by it."""


def _hbm2e_peaks() -> dict[str, Any]:
    """Dense peaks of the 500 W HBM2e H100: H100_HBM2E_PEAK_FRACTION of the way from NVL to SXM."""
    out: dict[str, Any] = dict(_HOPPER_PEAKS)
    for key, low in H100_NVL_PEAKS.items():
        out[key] = low + H100_HBM2E_PEAK_FRACTION * (_HOPPER_PEAKS[key] - low)
    return out


_PRESETS: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        DeviceSpec(name="a100-40gb", **_A100_PEAKS, hbm_bytes=40 * GiB, hbm_GBps=1555.0,
                   **_A100_EFF, compute_capability=_AMPERE),
        DeviceSpec(name="a100-80gb", **_A100_PEAKS, hbm_bytes=80 * GiB, hbm_GBps=2039.0,
                   **_A100_EFF, compute_capability=_AMPERE),
        # H100: BF16 GEMM efficiency proxied by the (sustained) FP8 cuBLASLt ratio; see the docstring.
        DeviceSpec(name="h100-sxm", **_HOPPER_PEAKS, hbm_bytes=80 * GiB, hbm_GBps=3350.0,
                   gemm_efficiency=1377.3 / 1979, attention_efficiency=327.9 * FA2_BENCH_TO_SIM / 989,
                   hbm_efficiency=2.97 / 3.35, **_GPU_COMMON, compute_capability=_HOPPER),
        # H100 SXM with HBM2e at a 500 W power limit (Meta's Grand Teton hosts; torchtitan's
        # benchmarks/llama3_h100_202412_torchtitan.md: "96GB HBM2e with 2.4 TB/sec peak memory
        # bandwidth", "the default 500W power limit", and "the actual peak TFLOPs number is between
        # SXM and NVL"). Dense peaks: the midpoint of those bounds, H100_HBM2E_PEAK_FRACTION. GEMM
        # efficiencies: measured on this part (H100_500W_GEMM_EFFICIENCY); attention slowed as its
        # BF16 GEMMs are (H100_500W_TENSOR_RATE); STREAM fraction: the HBM3 part's.
        DeviceSpec(name="h100-sxm-hbm2e", **_hbm2e_peaks(), hbm_bytes=96 * GiB, hbm_GBps=2400.0,
                   gemm_efficiency=H100_500W_GEMM_EFFICIENCY["bf16"],
                   fp8_gemm_efficiency=H100_500W_GEMM_EFFICIENCY["fp8"],
                   attention_efficiency=327.9 * FA2_BENCH_TO_SIM * H100_500W_TENSOR_RATE / _hbm2e_peaks()[
                       "peak_bf16_flops"] * 1e12,
                   hbm_efficiency=2.97 / 3.35, **_GPU_COMMON, compute_capability=_HOPPER),
        DeviceSpec(name="h200", **_HOPPER_PEAKS, hbm_bytes=141 * GiB, hbm_GBps=4800.0,
                   gemm_efficiency=1366.3 / 1979, attention_efficiency=329.3 * FA2_BENCH_TO_SIM / 989,
                   hbm_efficiency=4.15 / 4.8, **_GPU_COMMON, compute_capability=_HOPPER),
        # B200: 2250/4500 dense, 8 TB/s (dgxc-benchmarking, ml-eng); 180 GB per the dgxc recipe.
        # fp32 75 / tf32 1125 TFLOPS RECALLED (HGX B200 datasheet / 8). No B200 microbenchmarks:
        # GEMM and attention ratios are proxied by GB200 (same Blackwell die), HBM by H200's STREAM.
        DeviceSpec(name="b200", peak_fp32_flops=75e12, peak_tf32_flops=1125e12,
                   peak_bf16_flops=2250e12, peak_fp16_flops=2250e12, peak_fp8_flops=4500e12,
                   hbm_bytes=180 * GiB, hbm_GBps=8000.0, gemm_efficiency=2906.9 / 4900,
                   attention_efficiency=373.9 * FA2_BENCH_TO_SIM / 2450, hbm_efficiency=4.15 / 4.8,
                   **_GPU_COMMON, compute_capability=_BLACKWELL, sm_count=148),
        # L40S (RECALLED, NVIDIA L40S datasheet): fp32 91.6, tf32 183, bf16 362, fp8 733 dense;
        # 48 GB GDDR6 at 864 GB/s. No microbenchmarks in the facts: A100 ratios as a proxy.
        DeviceSpec(name="l40s", peak_fp32_flops=91.6e12, peak_tf32_flops=183e12,
                   peak_bf16_flops=362e12, peak_fp16_flops=362e12, peak_fp8_flops=733e12,
                   hbm_bytes=48 * GiB, hbm_GBps=864.0, **_A100_EFF, compute_capability=_ADA, sm_count=142),
        # RTX 4090 (RECALLED, Ada whitepaper): fp32 82.6; tensor tf32 82.6, bf16/fp16 165.2 and fp8
        # 330.3 dense with FP32 accumulate (GeForce runs FP32 accumulate at half rate); 24 GB
        # GDDR6X at 1,008 GB/s. A100 ratios as a proxy.
        DeviceSpec(name="rtx-4090", peak_fp32_flops=82.6e12, peak_tf32_flops=82.6e12,
                   peak_bf16_flops=165.2e12, peak_fp16_flops=165.2e12, peak_fp8_flops=330.3e12,
                   hbm_bytes=24 * GiB, hbm_GBps=1008.0, **_A100_EFF, compute_capability=_ADA, sm_count=128),
        # One CPU process of the trainer's CPU runs (ROUGH, to be fit by calibration): 2 cores x
        # 2.5 GHz x 32 FP32 FLOP/cycle (AVX2, 2 FMA ports) = 160 GFLOP/s; bf16 math is treated as
        # fp32 speed; "HBM" is the process's share of DRAM (8 GiB, 20 GB/s); 50 us per gloo call.
        DeviceSpec(name="cpu-host", peak_fp32_flops=160e9, peak_tf32_flops=160e9,
                   peak_bf16_flops=160e9, peak_fp16_flops=160e9, hbm_bytes=8 * GiB,
                   hbm_GBps=20.0, gemm_efficiency=0.5, attention_efficiency=0.25,
                   hbm_efficiency=0.5, kernel_overhead_s=20e-6, collective_overhead_s=50e-6),
    )
}


def device_presets() -> dict[str, DeviceSpec]:
    """All device presets by name (a copy; safe to mutate)."""
    return dict(_PRESETS)


def get_device(name: str) -> DeviceSpec:
    """Look a device preset up by name; the error lists the valid names."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("device", name, _PRESETS) from None
