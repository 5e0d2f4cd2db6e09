"""Cells shared by the measured-vs-predicted busbw tables of docs/model/nccl.md."""

from __future__ import annotations

GiB = 2**30
MiB = 2**20


def size_label(size_bytes: int) -> str:
    """nccl-tests style size: whole GiB from 1 GiB on, else MiB."""
    return f"{size_bytes // GiB} GiB" if size_bytes >= GiB else f"{size_bytes // MiB} MiB"


def busbw_cells(cost, measured_GBps: float, miss: bool, digits: int) -> str:
    """'measured | predicted | error | algorithm/protocol |' for one collective cost (GB/s)."""
    flag = " (miss)" if miss else ""
    return (f"{measured_GBps:.{digits}f} | {cost.busbw_GBps:.{digits}f} | "
            f"{cost.busbw_GBps / measured_GBps - 1:+.0%}{flag} | {cost.algorithm}/{cost.protocol} |")
