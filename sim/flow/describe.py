"""What the summary and the report say about the network model that ran."""

from __future__ import annotations

from collections.abc import Sequence

FLOW_APPROXIMATION = (
    "flow network: DP/ZeRO collectives and pipeline sends run as the flows NCCL would use (ring "
    "channels, trees, NVLS, hierarchical phases) sharing every link max-min fairly, rates recomputed "
    "when a flow starts or ends; each op first waits the analytic model's latency (or the hardware "
    "profile's fit) and, uncontended, runs at its bandwidth; offload copies are flows through PCIe, "
    "the CPU socket and DRAM or NVMe; TP/CP collectives inside compute and CPU Adam stay analytic; "
    "fluid flows (no packets, queues or congestion control)"
)


def approximations(fidelity: str, base: Sequence[str]) -> list[str]:
    """``base`` (whose first line describes the analytic network) for the model that ran."""
    return [FLOW_APPROXIMATION, *base[1:]] if fidelity == "flow" else list(base)


def network_note(fidelity: str) -> str:
    """One sentence for the report: which network model ran."""
    if fidelity == "flow":
        return ("Network model: flow (--fidelity flow): concurrent transfers share links max-min fairly, "
                "so contention on NICs, NVLink, PCIe and oversubscribed fabric uplinks is modeled.")
    return ("Network model: analytic (--fidelity analytic): NCCL's latency/bandwidth model on the links each "
            "ring or tree uses; link contention between concurrent transfers is not modeled (use --fidelity flow).")
