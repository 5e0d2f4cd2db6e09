"""The timeline colours stay apart for colour-blind readers: CIEDE2000 between every two kinds that
share a row type, under normal vision and simulated deuteranopia, protanopia and tritanopia.

Facts: the colour-vision-deficiency matrices are Machado, Oliveira & Fernandes (2009), "A
physiologically-based model for simulation of color vision deficiency", IEEE TVCG 15(6), Table 1,
severity 1.0 (applied to linear RGB); CIEDE2000 is Sharma, Wu & Dalal (2005), "The CIEDE2000
color-difference formula: implementation notes", whose test pair 1 (50, 2.6772, -79.7751) vs
(50, 0, -82.7485) has the difference 2.0425.
"""

import itertools
import math

import numpy as np
import pytest

from sim.report.style import KIND_COLORS, chunk_color

MACHADO = {
    "deutan": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "protan": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "tritan": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
PIPELINE = ("fwd", "bwd", "bwd_input", "bwd_weight")
COMPUTE = (*PIPELINE, "optimizer", "other")
COMM = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "broadcast", "offload", "other")


def rgb(color: str) -> np.ndarray:
    """#rrggbb or rgb(r, g, b) as sRGB in [0, 1]."""
    if color.startswith("#"):
        return np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.array([float(v) for v in color[4:-1].split(",")]) / 255


def linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(srgb: np.ndarray, vision: str) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour as seen with ``vision`` (Machado's matrix on linear RGB)."""
    lin = linear(srgb)
    if vision != "normal":
        lin = np.clip(np.array(MACHADO[vision]) @ lin, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    f = np.cbrt(xyz / np.array([0.95047, 1.0, 1.08883]))
    f = np.where(xyz / np.array([0.95047, 1.0, 1.08883]) > 216 / 24389, f,
                 (24389 / 27 * xyz / np.array([0.95047, 1.0, 1.08883]) + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _mean_hue(h1: float, h2: float) -> float:
    if abs(h1 - h2) <= 180:
        return (h1 + h2) / 2
    return (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2


def ciede2000(lab1: np.ndarray, lab2: np.ndarray) -> float:
    """CIEDE2000 (kL = kC = kH = 1), as Sharma et al. (2005) write it."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p, h2p = math.degrees(math.atan2(b1, a1p)) % 360, math.degrees(math.atan2(b2, a2p)) % 360
    dh = h2p - h1p if abs(h2p - h1p) <= 180 else h2p - h1p - 360 * math.copysign(1, h2p - h1p)
    dh = 0.0 if c1p * c2p == 0 else dh
    d_hue = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    h_mean = h1p + h2p if c1p * c2p == 0 else _mean_hue(h1p, h2p)
    t = (1 - 0.17 * math.cos(math.radians(h_mean - 30)) + 0.24 * math.cos(math.radians(2 * h_mean))
         + 0.32 * math.cos(math.radians(3 * h_mean + 6)) - 0.20 * math.cos(math.radians(4 * h_mean - 63)))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cp_mean, 1 + 0.015 * cp_mean * t
    r_t = (-2 * math.sqrt(cp_mean**7 / (cp_mean**7 + 25**7))
           * math.sin(math.radians(60 * math.exp(-(((h_mean - 275) / 25) ** 2)))))
    dl, dc, dhh = (l2 - l1) / s_l, (c2p - c1p) / s_c, d_hue / s_h
    return math.sqrt(dl**2 + dc**2 + dhh**2 + r_t * dc * dhh)


def closest_pair(colors: dict[str, str]) -> tuple[float, str, str, str]:
    """The smallest CIEDE2000 between two of ``colors`` under any of the four visions."""
    return min((ciede2000(lab(rgb(c1), v), lab(rgb(c2), v)), v, n1, n2)
               for (n1, c1), (n2, c2) in itertools.combinations(colors.items(), 2)
               for v in ("normal", *MACHADO))


def test_ciede2000_matches_sharmas_test_pair():
    assert ciede2000(np.array([50, 2.6772, -79.7751]), np.array([50, 0, -82.7485])) == pytest.approx(2.0425, abs=1e-4)


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_compute_kinds_and_their_chunk_shades_stay_apart(chunks):
    colors = {f"{k} chunk {c}": chunk_color(k, c, chunks) for k in PIPELINE for c in range(chunks)}
    colors |= {k: KIND_COLORS[k] for k in COMPUTE if k not in PIPELINE}
    assert closest_pair(colors)[0] >= (12 if chunks < 3 else 7)  # 3 shades of one hue: lightness only


def test_communication_kinds_stay_apart():
    assert closest_pair({k: KIND_COLORS[k] for k in COMM})[0] >= 10


@pytest.mark.parametrize("chunks", [1, 2])
def test_every_kind_in_one_legend_stays_apart(chunks):
    """A report's legend lists compute kinds (each chunk's shade) beside communication kinds: they sit
    on different lanes but must not look alike in the legend (was: send 2.7 from bwd_weight chunk 0)."""
    colors = {f"{k} chunk {c}": chunk_color(k, c, chunks) for k in PIPELINE for c in range(chunks)}
    colors |= {k: KIND_COLORS[k] for k in (*COMPUTE, *COMM) if k not in PIPELINE}
    colors.pop("other")  # compute's and communication's 'other' share one grey, on different lanes
    pairs = [(ciede2000(lab(rgb(c1), "normal"), lab(rgb(c2), "normal")), n1, n2)
             for (n1, c1), (n2, c2) in itertools.combinations(colors.items(), 2)]
    assert min(pairs)[0] >= 9, min(pairs)


def test_explore_design_colours_stay_apart():
    from sim.explore.figures import PALETTE

    assert closest_pair({str(i): c for i, c in enumerate(PALETTE)})[0] >= 12


def test_run_strip_states_stay_apart():
    from sim.run.report import COLORS

    assert closest_pair(COLORS)[0] >= 14


def test_no_two_kinds_share_a_colour():
    assert len(set(KIND_COLORS.values())) == len(KIND_COLORS)
