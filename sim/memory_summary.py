"""Memory verdicts of a simulation: HBM from the memory timeline, CPU DRAM and NVMe when offloading.

HBM: the peak is the most HBM allocated at any instant of the step on any simulated rank (its
memory timeline, :mod:`sim.memory_timeline`); it is the one peak every output prints
(``peak_memory_gib``, ``memory_timeline.peak_gib``, the report's table and note). It is checked
against HBM minus
``HBM_RESERVE_FRACTION`` (CUDA context, NCCL buffers, allocator fragmentation). Host: every GPU of
a node keeps the same host share (symmetric ranks), so a node needs ``gpus_per_node`` times the
largest rank's host bytes — offloaded model states plus offloaded activations at their peak —
against DRAM minus ``HOST_RESERVE_FRACTION`` (operating system, pinned staging buffers) and the
NVMe capacity. ``reserved_gib`` estimates what the caching allocator reserves (its per-stream pools
each at its own peak, :mod:`sim.memory_pools`): compare it with ``torch.cuda.max_memory_reserved``.
"""

from __future__ import annotations

from typing import Any

from sim.memory import GIB
from sim.memory_pools import reserved_peak
from sim.simulate import SimulationResult

HBM_RESERVE_FRACTION = 0.05
HOST_RESERVE_FRACTION = 0.10


def usable_hbm_bytes(result: SimulationResult) -> float:
    """HBM a job may use per GPU after the reserve."""
    return result.job.cluster.device.hbm_bytes * (1 - HBM_RESERVE_FRACTION)


def timeline_peak(result: SimulationResult) -> tuple[int, float]:
    """(rank, bytes) of the highest HBM timeline peak; falls back to the static breakdown."""
    peaks = result.memory_peaks
    if not peaks:
        return result.peak_rank, result.memory[result.peak_rank].total
    rank = max(peaks, key=lambda r: (peaks[r].bytes, -r))
    return rank, peaks[rank].bytes


def host_bytes_per_node(result: SimulationResult) -> tuple[float, float]:
    """(DRAM, NVMe) bytes a node needs for offloaded states and activations."""
    job, mm = result.job, result.memory_model
    rank_pp = result.meta.rank_pp
    dram = nvme = 0.0
    for rank in result.memory:
        _, host = mm.state_bytes(rank_pp[rank])
        dram = max(dram, host.dram + result.host_activation_peak.get(rank, 0.0))
        nvme = max(nvme, host.nvme)
    gpus = job.cluster.gpus_per_node
    return dram * gpus, nvme * gpus


def memory_summary(result: SimulationResult) -> dict[str, Any]:
    """The ``memory_timeline`` object of ``simulate --json`` (GiB rounded to 1e-4)."""
    rank, peak = timeline_peak(result)
    host = result.job.cluster.host
    dram, nvme = host_bytes_per_node(result)
    out: dict[str, Any] = {"peak_gib": round(peak / GIB, 4), "rank": rank,
                           "reserved_gib": round(reserved_peak(result) / GIB, 4),
                           "usable_hbm_gib": round(usable_hbm_bytes(result) / GIB, 4),
                           "fits_hbm": peak <= usable_hbm_bytes(result)}
    if rank in result.memory_peaks:
        at = result.memory_peaks[rank]
        out["peak_time_s"] = round(at.time_s, 9)
        out["at_peak_gib"] = {k: round(v / GIB, 4) for k, v in at.at_peak.items()}
    out["host"] = {
        "dram_gib_per_node": round(dram / GIB, 4),
        "usable_dram_gib_per_node": round(host.dram_bytes * (1 - HOST_RESERVE_FRACTION) / GIB, 4),
        "fits_dram": dram <= host.dram_bytes * (1 - HOST_RESERVE_FRACTION),
        "nvme_gib_per_node": round(nvme / GIB, 4),
        "fits_nvme": nvme <= host.nvme_bytes,
        "host_reserve_fraction": HOST_RESERVE_FRACTION,
    }
    return out


def fits(result: SimulationResult) -> bool:
    """The job fits: HBM timeline peak, and host DRAM/NVMe when offloading."""
    return summary_fits(memory_summary(result))


def summary_fits(summary: dict[str, Any]) -> bool:
    """:func:`fits` from the job's :func:`memory_summary` already made."""
    return bool(summary["fits_hbm"] and summary["host"]["fits_dram"] and summary["host"]["fits_nvme"])
