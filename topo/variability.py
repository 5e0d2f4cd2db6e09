"""GPU-to-GPU speed variation: a coefficient of variation (CV) from a published measurement, for
the straggler model (``--jitter-cv``, :mod:`sim.stragglers`).

Fact: "8% (max 22%) average performance variation even though the GPU architecture and vendor SKU
are identical within each cluster, with outliers up to 1.5X slower than the median GPU", over
more than 90% of the GPUs of five clusters (Summit, Vortex, Frontera, Longhorn: V100; Corona:
MI60), kernels stressing compute (SGEMM), memory and the whole GPU (ResNet-50, BERT, LAMMPS,
PageRank). Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in
Large-Scale, Accelerator-Rich Systems", SC'22, arXiv 2208.11035 (abstract).

Reading (an assumption, stated): "performance variation" is the spread between the fastest and
slowest GPU of a cluster relative to the median, outliers aside. If speeds are normal with CV
sigma, the expected spread of n GPUs is sigma x E[range of n standard normals] = sigma x 2
E[max of n], so sigma = variation / (2 E[max of n]) (``cv_from_range``). With n between 400
(Longhorn's GPUs) and 27,648 (Summit's), 2 E[max] is 5.9 to 8.2 and the 8% spread gives a CV of
0.98% to 1.35% (tests/topo/test_variability.py). This is static variation between GPUs, not
step-to-step jitter; under synchronous training the slowest member paces every collective either
way, so the straggler model's delay cv x T x E[max of n] applies to both. Not found: a published
per-step compute CV across GPUs of an LLM training run (Llama 3, MegaScale and the ByteDance
straggler study report job-level slowdowns, not a per-GPU distribution).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from core.errors import invalid, require_number

SPREAD_MEAN = 0.08  # Sinha et al. SC'22: average fastest-to-slowest variation
SPREAD_MAX = 0.22  # the largest cluster/application average
CLUSTER_GPUS = (400, 27648)  # the GPU counts the spread was taken over (Longhorn .. Summit)


@cache
def _normal_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x on [-12, 12], the standard normal density and distribution function there."""
    x = np.linspace(-12.0, 12.0, 48001)
    pdf = np.exp(-0.5 * x**2) / math.sqrt(2.0 * math.pi)
    erf = np.fromiter(map(math.erf, (x / math.sqrt(2.0)).tolist()), float, x.size)  # np.vectorize took 2x as long
    cdf = 0.5 * (1.0 + erf)
    return x, pdf, cdf


@cache
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals] (0 for n = 1): the integral of
    x n phi(x) Phi(x)^(n-1) over x, by the trapezoidal rule on [-12, 12]."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise invalid("n", n, "expected an integer >= 1")
    if n == 1:
        return 0.0
    x, pdf, cdf = _normal_grid()
    return float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))


def cv_from_range(spread: float, expected_range_sigmas: float) -> float:
    """CV of per-GPU speed from a fastest-to-slowest ``spread`` (fraction of the median) over GPUs
    whose expected range is ``expected_range_sigmas`` standard deviations."""
    require_number("spread", spread)
    require_number("expected_range_sigmas", expected_range_sigmas, low=0.0, low_inclusive=False)
    return spread / expected_range_sigmas


MAX_SPEED_CV = 0.5  # a bound for input checks: a 50% CV would make many GPUs slower than zero

GPU_SPEED_CV = 0.0098
"""Per-GPU speed CV of the GPU presets: the published 8% average spread read over Summit's 27,648
GPUs, cv_from_range(SPREAD_MEAN, 2 E[max of 27,648]) to 4 digits, the lower (conservative) end of
the 0.98%..1.35% the fact allows (the derivation runs in tests/topo/test_variability.py rather
than at every import: E[max] integrates a 48,001-point grid, ~8 ms)."""


def slowest_gpu_factor(cv: float, gpus: int) -> float:
    """How much slower than the average GPU the slowest of ``gpus`` runs: 1 + cv x E[max of
    ``gpus`` standard normals]. Synchronous training waits for it at every collective and every
    pipeline hand-off, so a job's compute goes at its pace (static variation: the same GPU is
    the slowest every step, so the waits add up over the step rather than averaging out)."""
    require_number("cv", cv, low=0.0, high=MAX_SPEED_CV)
    return 1.0 + cv * expected_max_normal(max(1, int(gpus)))
