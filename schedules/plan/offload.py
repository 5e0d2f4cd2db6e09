"""The plan's offload: ZeRO-Offload/Infinity of the states and activation offload.

Attributes of :class:`Offloading`:
    offload: ZeRO-Offload/Infinity: "none", "optimizer" (fp32 master weights and Adam
        states on the host, Adam on the CPU; needs zero >= 1) or "params" (ZeRO-Infinity:
        also the bf16 parameters, fetched before their all-gather; needs zero = 3).
    offload_device: where offloaded states live: "cpu" (DRAM) or "nvme".
    offload_activations: copy each micro-batch's stored activations to CPU DRAM after its
        forward and back before its backward.
    activation_offload_unit: how they travel: "stage" (a micro-batch's activations of a
        stage after its forward, on a copy stream beside compute, prefetched back) or
        "layer" (DeepSpeed's ``checkpoint_in_cpu``: each layer's checkpoint copied to the
        host right after the layer's forward and back before its backward, synchronously
        on the compute stream: :meth:`schedules.work.ModelWork.layer_offload_ops`).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid
from core.settings import BOOLEAN, check_declared, choice, setting
from core.vocab import Offload, OffloadDevice

OFFLOAD_KINDS = tuple(Offload)
OFFLOAD_DEVICES = tuple(OffloadDevice)
ACTIVATION_OFFLOAD_UNITS = ("stage", "layer")


@dataclass(frozen=True, kw_only=True)
class Offloading:
    """What moves off the GPU and where to (see the module docstring)."""

    offload: str = setting("none", rule=choice(OFFLOAD_KINDS),
                           help="ZeRO-Offload optimizer states (zero>=1) or ZeRO-Infinity params too (zero=3)")
    offload_device: str = setting("cpu", rule=choice(OFFLOAD_DEVICES), help="where offloaded states live (default cpu)")
    offload_activations: bool = setting(False, rule=BOOLEAN,
                                        help="copy activations to CPU after forward, back before backward")
    activation_offload_unit: str = setting("stage", rule=choice(ACTIVATION_OFFLOAD_UNITS),
                                           help="with --offload-activations: a stage's activations per micro-batch on "
                                                "a copy stream (stage), or each layer's checkpoint synchronously "
                                                "(layer: DeepSpeed's CPU checkpointing)")

    def __post_init__(self) -> None:
        check_declared(self, invalid)

    @property
    def activation_copies(self) -> str:
        """How activations travel to the host: "none", "stage" or "layer"
        (``offload_activations`` with its ``activation_offload_unit``)."""
        return self.activation_offload_unit if self.offload_activations else "none"
