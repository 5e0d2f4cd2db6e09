"""GEMM time by shape: tile and wave quantisation on the device's SMs, and the k-loop's fill.

A cuBLAS GEMM C[m, n] = A[m, k] B[k, n] cuts C into CTA tiles of tm x tn; each SM runs one tile at
a time, walking the k dimension in blocks of tk through a pipeline of ``stages`` shared-memory
buffers. So (NVIDIA, "Matrix Multiplication Background" user guide, DU-09799-001, ch. 3):

    tiles      = ceil(m / tm) x ceil(n / tn) x batch       tile quantisation: the last row and
                                                           column of tiles are partly padding
    waves      = ceil(tiles / sm_count)                    wave quantisation: 1.01 waves cost 2
    tile_s     = 2 tm tn (k + k_fill) / (peak / sm_count x e_sm)
    math_s     = waves x tile_s
    memory_s   = (m k + k n + m n) x batch x element bytes / (hbm_GBps x hbm_efficiency)
    time       = max(math_s, memory_s)                     (the kernel's launch and tail,
                                                           ``kernel_overhead_s``, is added by
                                                           :func:`topo.compute.compute_time_s`)

cuBLAS picks the tile per shape; the model takes the fastest of :data:`TILES`. ``k_fill`` =
(stages - 1) x tk: the k-blocks loaded before the first MMA, which no math hides. An FP8 GEMM
(A and B in FP8, C and D in BF16) walks k in blocks of 128 elements, as many bytes as a BF16
kernel's 64, so its fill is as long in time as the BF16 kernel's while its math is twice as fast,
and its memory roofline reads 1-byte operands but writes a 2-byte output.

Facts and sources:
- Tiles: 256x128, 128x256 and 128x128 are the CTA tiles of cuBLAS's BF16/FP16 kernels on Ampere
  and Hopper, as their names say (``ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn``,
  ``ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_tn``,
  ``..._128x128_ldg8_relu_f2f_stages_64x3_nn``; ``sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_
  tilesize128x128x64_...``, ``..._tilesize128x256x64_...``, as printed by nsys in public profiles).
  cuBLAS also has 128x64 and 64x64 kernels; the model leaves them out: it would give them the
  large tiles' per-SM rate, which they cannot reach (operand reuse tm tn / (tm + tn) is 43 for
  128x64 and 32 for 64x64, against 64 for 128x128 and 85 for 256x128), and with them the sweep
  below is over-predicted by up to 40% at 1024^3 (tests/topo/test_gemm_shape.py shows it).
- k_fill: stages_64x3 in the kernel names: tk = 64, 3 stages -> 128 (used for every arch). FP8:
  tk = 128 (NVIDIA/TransformerEngine issue #1391: TE's FP8 linears run
  ``sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_...`` where BF16 runs
  ``sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_...``; "e4m3bf16 means tensor
  A/B in fp8, C/D in bf16"), 3 stages -> 256.
- e_sm, the per-SM rate of a full wave: the device's GEMM efficiency for the dtype
  (:meth:`topo.device.DeviceSpec.gemm_efficiency_for`: a measurement at :data:`REFERENCE_SHAPE`,
  16384^3) divided by this model's own quantisation and fill factor at that shape, so the
  reference shape reproduces the measurement.
- sm_count: :mod:`topo.device_presets` (A100 108, H100 132, B200 148).
Checked against the Azure AI-benchmarking-guide cuBLASLt sweeps (A100 FP16, H100 FP8) and the
closed forms of both quantisations in tests/topo/test_gemm_shape.py.
Units: m, n, k, batch in elements; seconds; efficiencies are fractions of the dtype's peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache

from core.errors import invalid, require_positive_int
from topo.device import DeviceSpec

TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))
STAGES = 3  # cuBLAS's "stages_64x3" kernels
K_TILE = {"fp8": 128}  # k elements per block; every other dtype: 64 (module docstring)
K_FILL = (STAGES - 1) * 64  # (stages - 1) x tk of a 16-bit GEMM
REFERENCE_SHAPE = (16384, 16384, 16384)  # where presets' gemm_efficiency was measured
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
OUTPUT_BYTES = {"fp8": 2}  # an FP8 GEMM writes BF16 (C/D in bf16); the others their own dtype


@dataclass(frozen=True)
class GemmShape:
    """One (batched) GEMM: C[m, n] = A[m, k] B[k, n], ``batch`` times (elements)."""

    m: int
    n: int
    k: int
    batch: int = 1

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            require_positive_int(name, getattr(self, name))

    @property
    def flops(self) -> float:
        """2 m n k per product (multiply and add), times the batch."""
        return 2.0 * self.m * self.n * self.k * self.batch


def linear_gemms(tokens: int, in_features: int, out_features: int) -> tuple[GemmShape, ...]:
    """The three GEMMs of a linear layer y[tokens, out] = x[tokens, in] W[in, out]: forward,
    input gradient dx = dy W^T, weight gradient dW = x^T dy (its k is the token count)."""
    return (GemmShape(tokens, out_features, in_features),
            GemmShape(tokens, in_features, out_features),
            GemmShape(in_features, out_features, tokens))


def waves(tiles: int, sm_count: int) -> int:
    """Waves of one-CTA-per-SM tiles: ceil(tiles / SMs)."""
    return -(-tiles // sm_count)


def tile_count(shape: GemmShape, tile: tuple[int, int]) -> int:
    """CTA tiles covering C (padded to whole tiles), over the batch."""
    return math.ceil(shape.m / tile[0]) * math.ceil(shape.n / tile[1]) * shape.batch


def k_fill(dtype: str) -> int:
    """k elements loaded before a tile's first MMA: (stages - 1) x the dtype's k block."""
    return (STAGES - 1) * K_TILE.get(dtype, 64)


def quantised_fraction(shape: GemmShape, tile: tuple[int, int], sm_count: int, dtype: str = "bf16") -> float:
    """Useful share of the SM time a tile choice buys: real MACs over (waves x SMs x tile MACs),
    with the k fill counted as lost time."""
    slots = waves(tile_count(shape, tile), sm_count) * sm_count * tile[0] * tile[1]
    return shape.m * shape.n * shape.batch / slots * shape.k / (shape.k + k_fill(dtype))


@lru_cache(maxsize=1 << 16)
def best_tile(shape: GemmShape, sm_count: int) -> tuple[int, int]:
    """The tile of :data:`TILES` that runs ``shape`` fastest on ``sm_count`` SMs (cuBLAS's
    heuristic picks per shape and device, knowing nothing of other kernels on the SMs)."""
    return max(TILES, key=lambda tile: quantised_fraction(shape, tile, sm_count))


def best_fraction(shape: GemmShape, sm_count: int, dtype: str = "bf16") -> float:
    """:func:`quantised_fraction` of the :func:`best_tile`."""
    return quantised_fraction(shape, best_tile(shape, sm_count), sm_count, dtype)


def sm_efficiency(device: DeviceSpec, dtype: str = "bf16") -> float:
    """Per-SM rate of a full wave, as a fraction of the dtype's peak: the device's GEMM efficiency
    for ``dtype`` (measured at :data:`REFERENCE_SHAPE`) over the model's quantisation and fill at
    that shape, capped at 1."""
    return min(1.0, device.gemm_efficiency_for(dtype) / _reference_fraction(_sms(device), dtype))


@cache
def _reference_fraction(sm_count: int, dtype: str) -> float:
    return best_fraction(GemmShape(*REFERENCE_SHAPE), sm_count, dtype)


def gemm_math_s(device: DeviceSpec, shape: GemmShape, dtype: str, sm_count: int | None = None) -> float:
    """Seconds of tensor-core work of ``shape`` on ``sm_count`` SMs (default: all of them), with
    the tile chosen for the whole device (other kernels taking SMs do not change cuBLAS's pick)."""
    total = _sms(device)
    sms = total if sm_count is None else sm_count
    if isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= total:
        raise invalid("sm_count", sms, f"expected an integer in [1, {total}]")
    rate = device.peak_flops(dtype) * sm_efficiency(device, dtype) * sms / total
    return shape.flops / (rate * quantised_fraction(shape, best_tile(shape, total), sms, dtype))


def gemm_memory_s(device: DeviceSpec, shape: GemmShape, dtype: str) -> float:
    """Seconds to read A and B and write C once from HBM (the GEMM's memory roofline; an FP8
    GEMM's C is BF16, :data:`OUTPUT_BYTES`)."""
    operands = (shape.m * shape.k + shape.k * shape.n) * shape.batch * _element_bytes(dtype)
    output = shape.m * shape.n * shape.batch * OUTPUT_BYTES.get(dtype, _element_bytes(dtype))
    return (operands + output) / (device.hbm_GBps * 1e9 * device.hbm_efficiency)


@lru_cache(maxsize=1 << 16)
def gemm_time_s(device: DeviceSpec, shape: GemmShape, dtype: str, sm_count: int | None = None) -> float:
    """Seconds of one GEMM kernel without its launch overhead: max(math, memory)."""
    return max(gemm_math_s(device, shape, dtype, sm_count), gemm_memory_s(device, shape, dtype))


def gemm_shape_efficiency(device: DeviceSpec, shape: GemmShape, dtype: str) -> float:
    """Achieved fraction of the dtype peak for ``shape`` (launch overhead excluded): the value
    to use as a GEMM op's efficiency in :func:`topo.compute.compute_time_s`."""
    return shape.flops / (device.peak_flops(dtype) * gemm_time_s(device, shape, dtype))


def _sms(device: DeviceSpec) -> int:
    if device.sm_count < 1:
        raise invalid("sm_count", device.sm_count, f"device {device.name!r} needs sm_count >= 1 for GEMM shapes")
    return device.sm_count


def _element_bytes(dtype: str) -> int:
    if dtype not in ELEMENT_BYTES:
        raise invalid("dtype", dtype, "expected one of " + ", ".join(ELEMENT_BYTES))
    return ELEMENT_BYTES[dtype]
