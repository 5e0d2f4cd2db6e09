"""Per-device power by activity, a node baseline, and the sources of each figure (watts).

H100 SXM (8-GPU HGX/DGX node):
- ``gemm_w`` = 700 W: the H100 SXM's TDP (NVIDIA datasheet; Llama 3, arXiv 2407.21783 sec. 3.3.1:
  "700W TDP"); dense GEMMs run at the power cap.
- ``node_baseline_w`` = 2,880 W: the node's non-GPU power (CPUs, DRAM, NICs, NVSwitches, fans),
  derived as the highest node draw Latif et al. measured while training, 8.48 kW ("Empirical
  Measurements of AI Training Power Demand on a GPU-Accelerated Node", arXiv 2412.08602; 8.4 kW
  in the abstract, 18% below the 10.2 kW rating), minus 8 GPUs at their 700 W cap.
- ``idle_w`` = 80 W: measured idle of an H200 SXM (the same GH100 die), 80.3 W ("GPU Energy
  Benchmark", api.serialalice.pt, H200 ghost power). A secondary measurement.
- ``memory_w`` = 0.75 x TDP and ``comm_w`` = 0.45 x TDP: RECALLED, not read from a publication
  (memory-bound kernels keep HBM busy with few tensor-core cycles; NCCL kernels use a few SMs).
  They are checked only together, by the node's mean power in
  tests/sim/run/test_power.py (Newkirk et al. arXiv 2506.14551: compute-intensive training at
  "76% of the 10.2 kW" rating).
A100 SXM: TDP 400 W (NVIDIA A100 datasheet), the same shares; baseline and idle RECALLED.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Activity(str, Enum):
    """What a GPU is doing at an instant (the Timeline's spans decide)."""

    GEMM = "gemm"
    MEMORY = "memory"
    COMM = "comm"
    IDLE = "idle"


@dataclass(frozen=True, kw_only=True)
class PowerProfile:
    """Watts of one device by activity, and of its node besides the devices.

    Attributes:
        device: device preset name family ("h100", "a100").
        tdp_w: thermal design power (the TDP x GPU-hours upper bound uses it).
        gemm_w, memory_w, comm_w, idle_w: one device's draw while doing that (module docstring).
        node_baseline_w: a node's draw besides its devices.
        node_rated_w: the node's rated maximum (for the report; 0 when unknown).
    """

    device: str
    tdp_w: float
    gemm_w: float
    memory_w: float
    comm_w: float
    idle_w: float
    node_baseline_w: float
    node_rated_w: float = 0.0

    def watts(self, activity: Activity) -> float:
        """One device's draw while doing ``activity``."""
        return {Activity.GEMM: self.gemm_w, Activity.MEMORY: self.memory_w,
                Activity.COMM: self.comm_w, Activity.IDLE: self.idle_w}[activity]


H100_TDP_W = 700.0
H100_NODE_PEAK_W = 8480.0  # arXiv 2412.08602, highest measured draw of the 8 x H100 node training
H100_NODE_RATED_W = 10200.0  # ibid.: the manufacturer's rating
H100 = PowerProfile(device="h100", tdp_w=H100_TDP_W, gemm_w=H100_TDP_W, memory_w=0.75 * H100_TDP_W,
                    comm_w=0.45 * H100_TDP_W, idle_w=80.0,
                    node_baseline_w=H100_NODE_PEAK_W - 8 * H100_TDP_W, node_rated_w=H100_NODE_RATED_W)
A100_TDP_W = 400.0
A100 = PowerProfile(device="a100", tdp_w=A100_TDP_W, gemm_w=A100_TDP_W, memory_w=0.75 * A100_TDP_W,
                    comm_w=0.45 * A100_TDP_W, idle_w=50.0, node_baseline_w=2000.0)
PROFILES = (H100, A100)


def power_profile(device_name: str) -> PowerProfile | None:
    """The profile of a device preset (by family: "h100-sxm" -> H100), None when unknown."""
    return next((p for p in PROFILES if device_name.startswith(p.device)), None)
